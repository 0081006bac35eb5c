/* The C test suite of libwspool: every API function, its error paths,
 * ownership of `arg` (on_cancel counts), both shutdown modes,
 * help-while-waiting from C callbacks, fork, serial ordering and a stress
 * test that accounts for every task. Run by `make test-c` plain, under
 * ASan+UBSan, under TSan and under valgrind. Arguments select tests by
 * substring. */
#include "harness.h"

#include <sys/wait.h>

/* ------------------------------------------------------------ helpers ---- */

static wspool *make_bounded(uint32_t threads, uint32_t cap, int reject, uint32_t block_ms) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = threads;
    cfg.growth = WSPOOL_GROWTH_FIXED;
    cfg.queue_capacity = cap;
    cfg.reject = reject;
    cfg.block_timeout_ms = block_ms;
    wspool *p = NULL;
    OK(wspool_create(&cfg, &p));
    return p;
}

/* ------------------------------------------------- version and errors ---- */

static void test_version(void) {
    uint32_t v = wspool_version();
    CHECK_EQ(v, WSPOOL_VERSION_NUMBER);
    CHECK_EQ(v >> 16, WSPOOL_VERSION_MAJOR);
    CHECK_EQ((v >> 8) & 0xff, WSPOOL_VERSION_MINOR);
    CHECK_EQ(v & 0xff, WSPOOL_VERSION_PATCH);
}

static void test_strerror(void) {
    const int codes[] = {WSPOOL_OK, WSPOOL_EINVAL, WSPOOL_EREJECTED, WSPOOL_ESHUTDOWN,
                         WSPOOL_ETIMEDOUT, WSPOOL_ECANCELLED, WSPOOL_EBUSY, WSPOOL_ENOMEM,
                         WSPOOL_ESPAWN, WSPOOL_EFORKED, WSPOOL_EINTERNAL};
    const int n = (int)(sizeof codes / sizeof codes[0]);
    for (int i = 0; i < n; i++) {
        const char *s = wspool_strerror(codes[i]);
        CHECK(s != NULL && s[0] != '\0');
        CHECK(strcmp(s, "unknown status") != 0);
        for (int j = 0; j < i; j++) CHECK(strcmp(s, wspool_strerror(codes[j])) != 0);
    }
    CHECK(strcmp(wspool_strerror(12345), "unknown status") == 0);
    CHECK(strcmp(wspool_strerror(-999), "unknown status") == 0);
}

static void *thread_fresh_error(void *arg) {
    (void)arg;
    int fresh_empty = wspool_last_error()[0] == '\0';
    int rc = wspool_create(NULL, NULL); /* EINVAL: out is NULL */
    int mentions = last_error_mentions("out");
    return (void *)(intptr_t)(fresh_empty && rc == WSPOOL_EINVAL && mentions);
}

static void test_last_error_is_thread_local(void) {
    CHECK_EQ(wspool_submit(NULL, task_nop, NULL), WSPOOL_EINVAL);
    CHECK(last_error_mentions("wspool_submit"));
    CHECK(last_error_mentions("pool is NULL"));
    pthread_t th;
    void *res = NULL;
    pthread_create(&th, NULL, thread_fresh_error, NULL);
    pthread_join(th, &res);
    CHECK(res == (void *)1);
    /* the other thread's failure did not touch this thread's message */
    CHECK(last_error_mentions("wspool_submit"));
}

/* ------------------------------------------------------ configuration ---- */

static void test_config_init_defaults(void) {
    wspool_config cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    wspool_config_init(&cfg);
    CHECK_EQ(cfg.struct_size, sizeof cfg);
    CHECK(cfg.name == NULL);
    CHECK_EQ(cfg.min_threads, 0);
    CHECK_EQ(cfg.max_threads, 0);
    CHECK_EQ(cfg.queue_capacity, 0);
    CHECK_EQ(cfg.growth, WSPOOL_GROWTH_ADAPTIVE);
    CHECK_EQ(cfg.reject, WSPOOL_REJECT_ABORT);
    CHECK_EQ(cfg.keep_alive_ms, 10000);
    CHECK_EQ(cfg.spin_max_us, 500);
    CHECK(cfg.on_thread_start == NULL && cfg.on_thread_stop == NULL && cfg.hook_ctx == NULL);
    CHECK_EQ(cfg.block_timeout_ms, 0);

    /* the plain function (not the header's sized macro) fills the whole struct */
    wspool_config c2;
    memset(&c2, 0x5a, sizeof c2);
    (wspool_config_init)(&c2);
    CHECK_EQ(c2.struct_size, sizeof c2);
    CHECK_EQ(c2.block_timeout_ms, 0);

    (wspool_config_init)(NULL); /* ignored */
    CHECK_EQ(wspool_config_init_sized(NULL, sizeof cfg), WSPOOL_EINVAL);
    CHECK_EQ(wspool_config_init_sized(&cfg, WSPOOL_CONFIG_MIN_SIZE - 1), WSPOOL_EINVAL);
    CHECK(last_error_mentions("below the smallest layout"));
}

static void test_create_defaults_and_destroy(void) {
    wspool *p = NULL;
    OK(wspool_create(NULL, &p));
    CHECK(p != NULL);
    if (!p) return;
    wspool_stats s = get_stats(p);
    CHECK(s.threads >= 2);
    CHECK_EQ(s.submitted, 0);
    wspool_destroy(p);
    wspool_destroy(NULL); /* no-op */
}

static void expect_create_einval(wspool_config *cfg, const char *needle) {
    wspool *p = (wspool *)&p; /* must be reset to NULL */
    CHECK_EQ(wspool_create(cfg, &p), WSPOOL_EINVAL);
    CHECK(p == NULL);
    CHECK(last_error_mentions("wspool_create"));
    if (!last_error_mentions(needle)) {
        fprintf(stderr, "  expected \"%s\" in \"%s\"\n", needle, wspool_last_error());
        CHECK(last_error_mentions(needle));
    }
    if (p) wspool_destroy(p);
}

static void test_create_bad_values(void) {
    CHECK_EQ(wspool_create(NULL, NULL), WSPOOL_EINVAL);
    wspool_config cfg;

    wspool_config_init(&cfg); cfg.struct_size = 0;
    expect_create_einval(&cfg, "struct_size is 0");
    wspool_config_init(&cfg); cfg.struct_size = WSPOOL_CONFIG_MIN_SIZE - 8;
    expect_create_einval(&cfg, "below the smallest layout");
    wspool_config_init(&cfg); cfg.struct_size = WSPOOL_CONFIG_MIN_SIZE - 8;
    expect_create_einval(&cfg, "call wspool_config_init first"); /* an undersized struct names its _init */
    wspool_config_init(&cfg); cfg.growth = 99;
    expect_create_einval(&cfg, "growth");
    wspool_config_init(&cfg); cfg.reject = -1;
    expect_create_einval(&cfg, "reject");
    wspool_config_init(&cfg); cfg.min_threads = 8; cfg.max_threads = 4;
    expect_create_einval(&cfg, "below min_threads");
    wspool_config_init(&cfg); cfg.name = "bad\xff\xfe";
    expect_create_einval(&cfg, "UTF-8");
    wspool_config_init(&cfg); cfg.spin_max_us = 200000;
    expect_create_einval(&cfg, "spin_max_us");
    wspool_config_init(&cfg); cfg.growth = WSPOOL_GROWTH_QUEUE_FIRST;
    expect_create_einval(&cfg, "queue_capacity");
    wspool_config_init(&cfg); cfg.min_threads = 100000;
    expect_create_einval(&cfg, "min_threads");
}

/* A caller built against the first, shorter layout: the library must not
 * read past its struct_size (ASan/valgrind watch the heap block's end). */
static void test_config_older_and_newer_layouts(void) {
    wspool_config *old = malloc(WSPOOL_CONFIG_MIN_SIZE);
    CHECK(old != NULL);
    if (!old) return;
    OK(wspool_config_init_sized(old, WSPOOL_CONFIG_MIN_SIZE));
    CHECK_EQ(old->struct_size, WSPOOL_CONFIG_MIN_SIZE);
    old->min_threads = 2;
    old->reject = WSPOOL_REJECT_BLOCK; /* block_timeout_ms is beyond its size: forever */
    wspool *p = NULL;
    OK(wspool_create(old, &p));
    free(old);
    atomic_long n = 0;
    OK(wspool_submit(p, task_inc, &n));
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), 1);

    /* a newer caller: a bigger struct with unknown trailing fields is accepted */
    struct {
        wspool_config cfg;
        unsigned char future[64];
    } big;
    memset(&big, 0xab, sizeof big);
    wspool_config_init(&big.cfg);
    big.cfg.struct_size = sizeof big;
    big.cfg.min_threads = 2;
    p = NULL;
    OK(wspool_create(&big.cfg, &p));
    wspool_destroy(p);

    /* submit options of the first layout, in an exactly-sized heap block */
    wspool_submit_opts *o = malloc(WSPOOL_SUBMIT_OPTS_MIN_SIZE);
    OK(wspool_submit_opts_init_sized(o, WSPOOL_SUBMIT_OPTS_MIN_SIZE));
    p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_task *t = NULL;
    n = 0;
    OK(wspool_submit_ex(p, task_inc, &n, o, &t));
    OK(wspool_task_wait(t, MUST_MS));
    wspool_task_release(t);
    free(o);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), 1);
}

/* --------------------------------------------------------- hooks, name --- */

typedef struct {
    atomic_int starts, stops, index_mismatch, bad_ctx;
} hook_ctx_t;
static hook_ctx_t *g_hook_ctx;
static void on_start(void *ctx, uint32_t index) {
    hook_ctx_t *h = ctx;
    if (h != g_hook_ctx) atomic_fetch_add(&h->bad_ctx, 1);
    if ((int)index != wspool_current_index()) atomic_fetch_add(&h->index_mismatch, 1);
    atomic_fetch_add(&h->starts, 1);
}
static void on_stop(void *ctx, uint32_t index) {
    (void)index;
    atomic_fetch_add(&((hook_ctx_t *)ctx)->stops, 1);
}

static atomic_int name_ok, name_seen;
static void task_check_name(void *arg) {
    (void)arg;
    char buf[64] = {0};
    pthread_getname_np(pthread_self(), buf, sizeof buf);
    atomic_fetch_add(&name_seen, 1);
    if (strncmp(buf, "ctest", 5) == 0) atomic_fetch_add(&name_ok, 1);
    else fprintf(stderr, "  worker thread name is \"%s\"\n", buf);
}

static void test_name_copied_and_thread_hooks(void) {
    static hook_ctx_t h;
    memset(&h, 0, sizeof h);
    g_hook_ctx = &h;
    char name[16];
    strcpy(name, "ctest");
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.name = name;
    cfg.min_threads = 3;
    cfg.on_thread_start = on_start;
    cfg.on_thread_stop = on_stop;
    cfg.hook_ctx = &h;
    wspool *p = NULL;
    OK(wspool_create(&cfg, &p));
    strcpy(name, "XXXXXXXX"); /* the pool copied it */
    atomic_store(&name_ok, 0);
    atomic_store(&name_seen, 0);
    wspool_group *g = NULL;
    OK(wspool_group_create(p, &g));
    for (int i = 0; i < 16; i++) OK(wspool_group_submit(g, task_check_name, NULL));
    OK(wspool_group_wait(g, MUST_MS));
    wspool_group_destroy(g);
    CHECK_EQ(atomic_load(&name_seen), 16);
    CHECK_EQ(atomic_load(&name_ok), 16);
    wspool_destroy(p); /* joins: every started thread ran both hooks */
    CHECK(atomic_load(&h.starts) >= 3);
    CHECK_EQ(atomic_load(&h.stops), atomic_load(&h.starts));
    CHECK_EQ(atomic_load(&h.index_mismatch), 0);
    CHECK_EQ(atomic_load(&h.bad_ctx), 0);
}

/* ----------------------------------------------------------- submission -- */

static atomic_int index_bad;
static void task_check_index(void *arg) {
    int threads = *(int *)arg;
    int i = wspool_current_index();
    if (i < 0 || i >= threads + 64) atomic_fetch_add(&index_bad, 1);
}

static void test_submit_and_current_index(void) {
    CHECK_EQ(wspool_current_index(), -1);
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    CHECK_EQ(wspool_submit(NULL, task_nop, NULL), WSPOOL_EINVAL);
    CHECK_EQ(wspool_submit(p, NULL, NULL), WSPOOL_EINVAL);
    CHECK(last_error_mentions("fn is NULL"));
    atomic_long n = 0;
    int total = scaled(10000);
    for (int i = 0; i < total; i++) OK(wspool_submit(p, task_inc, &n));
    int threads = 2;
    atomic_store(&index_bad, 0);
    for (int i = 0; i < 100; i++) OK(wspool_submit(p, task_check_index, &threads));
    wspool_destroy(p); /* drains */
    CHECK_EQ(atomic_load(&n), total);
    CHECK_EQ(atomic_load(&index_bad), 0);
}

static void test_submit_ex_options(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_long n = 0;
    wspool_task *t = (wspool_task *)&t;
    /* opts NULL, out_task NULL */
    OK(wspool_submit_ex(p, task_inc, &n, NULL, NULL));
    /* a handle */
    OK(wspool_submit_ex(p, task_inc, &n, NULL, &t));
    CHECK(t != NULL);
    OK(wspool_task_wait(t, -1));
    CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_DONE);
    wspool_task_release(t);

    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    CHECK_EQ(o.struct_size, sizeof o);
    CHECK_EQ(o.flags, 0);
    CHECK(o.group == NULL && o.on_cancel == NULL);
    (wspool_submit_opts_init)(NULL); /* ignored */
    CHECK_EQ(wspool_submit_opts_init_sized(&o, 8), WSPOOL_EINVAL);

    o.flags = WSPOOL_SUBMIT_GLOBAL;
    OK(wspool_submit_ex(p, task_inc, &n, &o, NULL));

    t = (wspool_task *)&t;
    o.flags = 0x80;
    CHECK_EQ(wspool_submit_ex(p, task_inc, &n, &o, &t), WSPOOL_EINVAL);
    CHECK(t == NULL);
    CHECK(last_error_mentions("flags"));
    wspool_submit_opts_init(&o);
    o.struct_size = 0;
    CHECK_EQ(wspool_submit_ex(p, task_inc, &n, &o, NULL), WSPOOL_EINVAL);
    o.struct_size = 16;
    CHECK_EQ(wspool_submit_ex(p, task_inc, &n, &o, NULL), WSPOOL_EINVAL);
    wspool_submit_opts_init(&o);
    CHECK_EQ(wspool_submit_ex(NULL, task_inc, &n, &o, NULL), WSPOOL_EINVAL);
    CHECK_EQ(wspool_submit_ex(p, NULL, &n, &o, NULL), WSPOOL_EINVAL);

    /* a group of another pool is refused */
    wspool *other = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_group *og = NULL;
    OK(wspool_group_create(other, &og));
    o.group = og;
    CHECK_EQ(wspool_submit_ex(p, task_inc, &n, &o, NULL), WSPOOL_EINVAL);
    CHECK(last_error_mentions("another pool"));
    /* and accepted on its own pool */
    OK(wspool_submit_ex(other, task_inc, &n, &o, NULL));
    OK(wspool_group_wait(og, MUST_MS));
    wspool_group_destroy(og);
    wspool_destroy(other);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), 4);
}

/* --------------------------------------------------------------- tasks --- */

static void test_task_wait_cancel_state(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    gate_t g;
    gate_init(&g);
    /* two gate tasks, one with a handle so RUNNING can be observed */
    wspool_task *running = NULL;
    OK(wspool_submit_ex(p, task_gate, &g, NULL, &running));
    OK(wspool_submit(p, task_gate, &g));
    CHECK(wait_at_least(&g.inside, 2));
    CHECK_EQ(wspool_task_state(running), WSPOOL_TASK_RUNNING);
    CHECK_EQ(wspool_task_cancel(running), WSPOOL_EBUSY);
    CHECK_EQ(wspool_task_wait(running, 0), WSPOOL_ETIMEDOUT);

    slot_t s = {0, 0};
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = slot_cancel;
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, slot_run, &s, &o, &t));
    CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_PENDING);
    CHECK_EQ(wspool_task_wait(t, 0), WSPOOL_ETIMEDOUT);  /* poll */
    CHECK_EQ(wspool_task_wait(t, 20), WSPOOL_ETIMEDOUT); /* short wait; task untouched */
    CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_PENDING);
    CHECK_EQ(wspool_task_wait(t, -2), WSPOOL_EINVAL);
    CHECK(last_error_mentions("timeout_ms"));
    OK(wspool_task_cancel(t));
    CHECK_EQ(atomic_load(&s.cancelled), 1); /* on_cancel ran inside cancel */
    /* a second cancel: already cancelled (not OK: OK means "you cancelled it"), no second on_cancel */
    CHECK_EQ(wspool_task_cancel(t), WSPOOL_ECANCELLED);
    CHECK(last_error_mentions("already cancelled"));
    CHECK_EQ(atomic_load(&s.cancelled), 1);
    CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_CANCELLED);
    CHECK_EQ(wspool_task_wait(t, -1), WSPOOL_ECANCELLED);

    gate_open(&g);
    OK(wspool_task_wait(running, -1));
    CHECK_EQ(wspool_task_state(running), WSPOOL_TASK_DONE);
    CHECK_EQ(wspool_task_cancel(running), WSPOOL_EBUSY);
    wspool_task_release(running);
    wspool_task_release(t);
    wspool_task_release(NULL);

    CHECK_EQ(wspool_task_wait(NULL, 0), WSPOOL_EINVAL);
    CHECK_EQ(wspool_task_cancel(NULL), WSPOOL_EINVAL);
    CHECK_EQ(wspool_task_state(NULL), WSPOOL_EINVAL);
    CHECK(last_error_mentions("task is NULL"));
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&s.ran), 0);
    CHECK_EQ(atomic_load(&s.cancelled), 1);
    gate_destroy(&g);
}

static void test_release_detaches(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_long n = 0;
    for (int i = 0; i < 100; i++) {
        wspool_task *t = NULL;
        OK(wspool_submit_ex(p, task_inc, &n, NULL, &t));
        wspool_task_release(t); /* the task still runs */
    }
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), 100);
}

/* ------------------------------------------------------------ shutdown --- */

static void test_shutdown_drain(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_long n = 0;
    int total = scaled(5000);
    for (int i = 0; i < total; i++) OK(wspool_submit(p, task_inc, &n));
    CHECK_EQ(wspool_shutdown(p, 7, -1), WSPOOL_EINVAL);
    CHECK_EQ(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -5), WSPOOL_EINVAL);
    CHECK_EQ(wspool_shutdown(NULL, WSPOOL_SHUTDOWN_DRAIN, -1), WSPOOL_EINVAL);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -1));
    CHECK_EQ(atomic_load(&n), total);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -1)); /* idempotent */
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, 0));

    /* refused after shutdown: the caller keeps arg, on_cancel is not called */
    slot_t s = {0, 0};
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = slot_cancel;
    wspool_task *t = (wspool_task *)&t;
    CHECK_EQ(wspool_submit(p, slot_run, &s), WSPOOL_ESHUTDOWN);
    CHECK_EQ(wspool_submit_ex(p, slot_run, &s, &o, &t), WSPOOL_ESHUTDOWN);
    CHECK(t == NULL);
    CHECK(last_error_mentions("shut down"));
    int a = 0, b = 0;
    CHECK_EQ(wspool_join(p, task_nop, &a, task_nop, &b), WSPOOL_ESHUTDOWN);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&s.ran) + atomic_load(&s.cancelled), 0);
}

static void test_shutdown_cancel_and_timeout(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 2);
    enum { N = 200 };
    static slot_t slots[N];
    memset(slots, 0, sizeof slots);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = slot_cancel;
    for (int i = 0; i < N; i++) OK(wspool_submit_ex(p, slot_run, &slots[i], &o, NULL));
    /* the workers are held: a zero timeout cannot finish */
    CHECK_EQ(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, 0), WSPOOL_ETIMEDOUT);
    CHECK_EQ(wspool_submit(p, task_nop, NULL), WSPOOL_ESHUTDOWN);
    gate_open(&g);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, -1));
    int ran = 0, cancelled = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        int r = atomic_load(&slots[i].ran), c = atomic_load(&slots[i].cancelled);
        ran += r;
        cancelled += c;
        if (r + c != 1) bad++;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(ran + cancelled, N);
    CHECK_EQ(cancelled, N); /* none could start before the cancel */
    wspool_stats st = get_stats(p);
    CHECK_EQ(st.cancelled, N);
    wspool_destroy(p);
    gate_destroy(&g);
}

static void test_destroy_drains_owned_args(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_store(&owned_ran, 0);
    atomic_store(&owned_cancelled, 0);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = owned_cancel;
    int total = scaled(2000);
    for (int i = 0; i < total; i++) OK(wspool_submit_ex(p, owned_run, malloc(32), &o, NULL));
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&owned_ran), total);
    CHECK_EQ(atomic_load(&owned_cancelled), 0);
}

/* Handles outlive their pool: submissions fail, waits answer. */
static void test_handles_outlive_pool(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_group *g = NULL;
    wspool_serial *s = NULL;
    wspool_task *t = NULL;
    atomic_long n = 0;
    OK(wspool_group_create(p, &g));
    OK(wspool_serial_create(p, &s));
    OK(wspool_submit_ex(p, task_inc, &n, NULL, &t));
    OK(wspool_group_submit(g, task_inc, &n));
    OK(wspool_serial_submit(s, task_inc, &n));
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), 3);
    CHECK_EQ(wspool_group_submit(g, task_inc, &n), WSPOOL_ESHUTDOWN);
    CHECK_EQ(wspool_serial_submit(s, task_inc, &n), WSPOOL_ESHUTDOWN);
    OK(wspool_group_wait(g, 0));
    OK(wspool_task_wait(t, 0));
    CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_DONE);
    wspool_task_release(t);
    wspool_group_destroy(g);
    wspool_serial_destroy(s);
    CHECK_EQ(atomic_load(&n), 3);
}

/* ----------------------------------------------------------- rejection --- */

static void test_reject_abort_keeps_arg(void) {
    wspool *p = make_bounded(2, 4, WSPOOL_REJECT_ABORT, 0);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 2);
    atomic_store(&owned_ran, 0);
    atomic_store(&owned_cancelled, 0);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = owned_cancel;
    int accepted = 0, rejected = 0;
    for (int i = 0; i < 1000 && rejected < 3; i++) {
        void *arg = malloc(16);
        int rc = wspool_submit_ex(p, owned_run, arg, &o, NULL);
        if (rc == WSPOOL_OK) accepted++;
        else {
            CHECK_EQ(rc, WSPOOL_EREJECTED);
            CHECK(last_error_mentions("full"));
            free(arg); /* still ours: a double free would be caught */
            rejected++;
        }
    }
    CHECK_EQ(rejected, 3);
    CHECK(accepted >= 1 && accepted <= 4);
    wspool_stats st = get_stats(p);
    CHECK_EQ(st.rejected, 3);
    gate_open(&g);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&owned_ran), accepted);
    CHECK_EQ(atomic_load(&owned_cancelled), 0);
    gate_destroy(&g);
}

static pthread_t g_caller;
static atomic_int ran_on_caller, ran_elsewhere;
static void task_where(void *arg) {
    (void)arg;
    if (pthread_equal(pthread_self(), g_caller) && wspool_current_index() == -1)
        atomic_fetch_add(&ran_on_caller, 1);
    else
        atomic_fetch_add(&ran_elsewhere, 1);
}

static void test_reject_caller_runs(void) {
    wspool *p = make_bounded(2, 2, WSPOOL_REJECT_CALLER_RUNS, 0);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 2);
    g_caller = pthread_self();
    atomic_store(&ran_on_caller, 0);
    atomic_store(&ran_elsewhere, 0);
    for (int i = 0; i < 10; i++) OK(wspool_submit(p, task_where, NULL));
    CHECK(atomic_load(&ran_on_caller) >= 8); /* at most 2 fit in the queue */
    gate_open(&g);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&ran_on_caller) + atomic_load(&ran_elsewhere), 10);
    gate_destroy(&g);
}

static void test_reject_discard_oldest(void) {
    wspool *p = make_bounded(2, 2, WSPOOL_REJECT_DISCARD_OLDEST, 0);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 2);
    enum { N = 6 };
    slot_t slots[N];
    memset(slots, 0, sizeof slots);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = slot_cancel;
    for (int i = 0; i < N; i++) OK(wspool_submit_ex(p, slot_run, &slots[i], &o, NULL));
    /* 6 accepted into a queue of 2: the oldest 4 were dropped, each on_cancel once */
    for (int i = 0; i < N - 2; i++) CHECK_EQ(atomic_load(&slots[i].cancelled), 1);
    gate_open(&g);
    wspool_destroy(p);
    for (int i = 0; i < N; i++) CHECK_EQ(atomic_load(&slots[i].ran) + atomic_load(&slots[i].cancelled), 1);
    CHECK_EQ(atomic_load(&slots[N - 1].ran), 1);
    CHECK_EQ(atomic_load(&slots[N - 2].ran), 1);
    gate_destroy(&g);
}

typedef struct {
    gate_t *gate;
    atomic_int opened;
} opener_t;
static void *open_later(void *arg) {
    opener_t *o = arg;
    sleep_ms(50);
    atomic_store(&o->opened, 1);
    gate_open(o->gate);
    return NULL;
}

static void test_reject_block(void) {
    /* with a timeout: waits, then refuses; the caller keeps arg */
    wspool *p = make_bounded(2, 1, WSPOOL_REJECT_BLOCK, 30);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 2);
    slot_t s = {0, 0};
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = slot_cancel;
    int rc = WSPOOL_OK;
    int accepted = 0;
    for (int i = 0; i < 10 && rc == WSPOOL_OK; i++) {
        rc = wspool_submit_ex(p, slot_run, &s, &o, NULL);
        if (rc == WSPOOL_OK) accepted++;
    }
    CHECK_EQ(rc, WSPOOL_EREJECTED);
    gate_open(&g);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&s.ran), accepted);
    CHECK_EQ(atomic_load(&s.cancelled), 0);
    gate_destroy(&g);

    /* without a timeout: the submission returns once room was made */
    p = make_bounded(2, 1, WSPOOL_REJECT_BLOCK, 0);
    gate_init(&g);
    hold_workers(p, &g, 2);
    atomic_long n = 0;
    OK(wspool_submit(p, task_inc, &n)); /* fills the queue */
    opener_t op = {&g, 0};
    pthread_t th;
    pthread_create(&th, NULL, open_later, &op);
    OK(wspool_submit(p, task_inc, &n)); /* blocks until the gate opens */
    CHECK_EQ(atomic_load(&op.opened), 1);
    pthread_join(th, NULL);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), 2);
    gate_destroy(&g);
}

/* ------------------------------------------------------------ fork-join -- */

typedef struct {
    wspool *pool;
    int n;
    long result;
} fib_t;
static void fib_task(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->result = f->n;
        return;
    }
    fib_t a = {f->pool, f->n - 1, 0}, b = {f->pool, f->n - 2, 0};
    int rc = wspool_join(f->pool, fib_task, &a, fib_task, &b);
    CHECK_EQ(rc, WSPOOL_OK);
    f->result = a.result + b.result;
}

static void test_join(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_long x = 0, y = 0;
    OK(wspool_join(p, task_inc, &x, task_inc, &y)); /* from a foreign thread */
    CHECK_EQ(atomic_load(&x), 1);
    CHECK_EQ(atomic_load(&y), 1);
    CHECK_EQ(wspool_join(NULL, task_inc, &x, task_inc, &y), WSPOOL_EINVAL);
    CHECK_EQ(wspool_join(p, NULL, &x, task_inc, &y), WSPOOL_EINVAL);
    CHECK_EQ(wspool_join(p, task_inc, &x, NULL, &y), WSPOOL_EINVAL);
    CHECK_EQ(atomic_load(&x) + atomic_load(&y), 2);

    /* recursive joins inside a task (fork-join on the pool) */
    int n = test_scale() < 0.5 ? 16 : 20;
    long expect[] = {0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597, 2584, 4181, 6765};
    fib_t root = {p, n, 0};
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, fib_task, &root, NULL, &t));
    OK(wspool_task_wait(t, MUST_MS));
    wspool_task_release(t);
    CHECK_EQ(root.result, expect[n]);
    /* the same from the foreign thread */
    fib_t r2 = {p, 12, 0};
    fib_task(&r2);
    CHECK_EQ(r2.result, 144);
    wspool_destroy(p);
}

/* ----------------------------------------------------- groups, helping --- */

static void test_group(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_group *g = (wspool_group *)&g;
    CHECK_EQ(wspool_group_create(NULL, &g), WSPOOL_EINVAL);
    CHECK(g == NULL);
    CHECK_EQ(wspool_group_create(p, NULL), WSPOOL_EINVAL);
    OK(wspool_group_create(p, &g));
    OK(wspool_group_wait(g, 0)); /* empty */
    atomic_long n = 0;
    int total = scaled(5000);
    for (int i = 0; i < total; i++) OK(wspool_group_submit(g, task_inc, &n));
    OK(wspool_group_wait(g, -1));
    CHECK_EQ(atomic_load(&n), total);
    CHECK_EQ(wspool_group_submit(NULL, task_inc, &n), WSPOOL_EINVAL);
    CHECK_EQ(wspool_group_submit(g, NULL, &n), WSPOOL_EINVAL);
    CHECK_EQ(wspool_group_wait(NULL, 0), WSPOOL_EINVAL);
    CHECK_EQ(wspool_group_wait(g, -3), WSPOOL_EINVAL);

    /* a held task: the wait times out and leaves it alone */
    gate_t gate;
    gate_init(&gate);
    OK(wspool_group_submit(g, task_gate, &gate));
    CHECK(wait_at_least(&gate.inside, 1));
    CHECK_EQ(wspool_group_wait(g, 0), WSPOOL_ETIMEDOUT);
    CHECK_EQ(wspool_group_wait(g, 10), WSPOOL_ETIMEDOUT);
    /* destroy with tasks pending: they still run, the group is freed after */
    for (int i = 0; i < 10; i++) OK(wspool_group_submit(g, task_inc, &n));
    wspool_group_destroy(g);
    wspool_group_destroy(NULL);
    gate_open(&gate);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), total + 10);
    gate_destroy(&gate);
}

typedef struct tree {
    wspool *pool;
    int depth;
    atomic_long *count;
} tree_t;
static void tree_task(void *arg) {
    tree_t *t = arg;
    atomic_fetch_add(t->count, 1);
    if (t->depth == 0) return;
    wspool_group *g = NULL;
    OK(wspool_group_create(t->pool, &g));
    tree_t kids[2] = {{t->pool, t->depth - 1, t->count}, {t->pool, t->depth - 1, t->count}};
    OK(wspool_group_submit(g, tree_task, &kids[0]));
    OK(wspool_group_submit(g, tree_task, &kids[1]));
    OK(wspool_group_wait(g, -1)); /* on a worker: helps */
    wspool_group_destroy(g);
}

typedef struct {
    wspool *pool;
    int depth;
    atomic_long *count;
} chain_t;
static void chain_task(void *arg) {
    chain_t *c = arg;
    atomic_fetch_add(c->count, 1);
    if (c->depth == 0) return;
    chain_t next = {c->pool, c->depth - 1, c->count};
    wspool_task *t = NULL;
    OK(wspool_submit_ex(c->pool, chain_task, &next, NULL, &t));
    OK(wspool_task_wait(t, -1)); /* on a worker: helps */
    wspool_task_release(t);
}

/* Waiting inside tasks on a 2-thread FIXED pool (no growth possible): only
 * help-while-waiting lets these finish. */
static void test_help_while_waiting(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_long count = 0;
    int depth = test_scale() < 0.5 ? 7 : 10;
    tree_t root = {p, depth, &count};
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, tree_task, &root, NULL, &t));
    OK(wspool_task_wait(t, MUST_MS));
    wspool_task_release(t);
    CHECK_EQ(atomic_load(&count), (1L << (depth + 1)) - 1);

    atomic_long c2 = 0;
    chain_t chains[4];
    wspool_task *ts[4];
    for (int i = 0; i < 4; i++) {
        chains[i] = (chain_t){p, 64, &c2};
        OK(wspool_submit_ex(p, chain_task, &chains[i], NULL, &ts[i]));
    }
    for (int i = 0; i < 4; i++) {
        OK(wspool_task_wait(ts[i], MUST_MS));
        wspool_task_release(ts[i]);
    }
    CHECK_EQ(atomic_load(&c2), 4 * 65);
    wspool_stats st = get_stats(p);
    CHECK_EQ(st.threads, 2);
    wspool_destroy(p);
}

/* ------------------------------------------------------- serial queues --- */

typedef struct {
    int next;           /* written by the queue's tasks only: TSan checks they never overlap */
    atomic_int running; /* tasks of this queue running now */
    atomic_int overlap; /* times two ran at once */
    atomic_int out_of_order;
} key_state_t;
typedef struct {
    key_state_t *key;
    int seq;
} serial_item_t;
static void serial_task(void *arg) {
    serial_item_t *it = arg;
    key_state_t *k = it->key;
    if (atomic_fetch_add(&k->running, 1) != 0) atomic_fetch_add(&k->overlap, 1);
    if (k->next != it->seq) atomic_fetch_add(&k->out_of_order, 1);
    k->next = it->seq + 1;
    for (volatile int i = 0; i < 50; i++) {
    }
    atomic_fetch_sub(&k->running, 1);
}

static void test_serial_order(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    enum { KEYS = 4 };
    int per_key = scaled(2000);
    wspool_serial *qs[KEYS];
    key_state_t keys[KEYS];
    memset(keys, 0, sizeof keys);
    serial_item_t *items = calloc((size_t)KEYS * per_key, sizeof *items);
    for (int k = 0; k < KEYS; k++) OK(wspool_serial_create(p, &qs[k]));
    for (int i = 0; i < per_key; i++)
        for (int k = 0; k < KEYS; k++) {
            serial_item_t *it = &items[k * per_key + i];
            it->key = &keys[k];
            it->seq = i;
            OK(wspool_serial_submit(qs[k], serial_task, it));
        }
    /* destroy the queues with tasks pending: they still run, in order */
    for (int k = 0; k < KEYS; k++) wspool_serial_destroy(qs[k]);
    wspool_serial_destroy(NULL);
    wspool_destroy(p);
    for (int k = 0; k < KEYS; k++) {
        CHECK_EQ(keys[k].next, per_key);
        CHECK_EQ(atomic_load(&keys[k].overlap), 0);
        CHECK_EQ(atomic_load(&keys[k].out_of_order), 0);
    }
    wspool_serial *s = (wspool_serial *)&s;
    CHECK_EQ(wspool_serial_create(NULL, &s), WSPOOL_EINVAL);
    CHECK(s == NULL);
    CHECK_EQ(wspool_serial_submit(NULL, task_nop, NULL), WSPOOL_EINVAL);
    free(items);
}

/* ----------------------------------------------------- blocking regions -- */

static void task_blocking_gate(void *arg) {
    wspool_blocking_begin();
    wspool_blocking_begin(); /* nests */
    gate_pass((gate_t *)arg);
    wspool_blocking_end();
    wspool_blocking_end();
}

static void test_blocking_regions(void) {
    /* off the pool: no-ops, an unmatched end is ignored */
    wspool_blocking_begin();
    wspool_blocking_end();
    wspool_blocking_end();

    wspool *p = make_pool(2, 8, WSPOOL_GROWTH_ADAPTIVE);
    gate_t g;
    gate_init(&g);
    OK(wspool_submit(p, task_blocking_gate, &g));
    OK(wspool_submit(p, task_blocking_gate, &g));
    CHECK(wait_at_least(&g.inside, 2));
    wspool_stats st = get_stats(p);
    CHECK_EQ(st.blocked_threads, 2);
    /* both workers are blocked: the pool lent threads, so this still runs */
    atomic_long n = 0;
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, task_inc, &n, NULL, &t));
    OK(wspool_task_wait(t, MUST_MS));
    wspool_task_release(t);
    CHECK_EQ(atomic_load(&n), 1);
    st = get_stats(p);
    CHECK(st.threads >= 3);
    gate_open(&g);
    wspool_destroy(p);
    gate_destroy(&g);
}

/* -------------------------------------------------------------- stats ---- */

static void test_stats(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_long n = 0;
    wspool_group *g = NULL;
    OK(wspool_group_create(p, &g));
    for (int i = 0; i < 1000; i++) OK(wspool_group_submit(g, task_inc, &n));
    OK(wspool_group_wait(g, -1));
    wspool_group_destroy(g);

    /* a task is counted before its group is signalled: no polling needed */
    wspool_stats s;
    memset(&s, 0xee, sizeof s);
    s.struct_size = sizeof s;
    OK(wspool_stats_get(p, &s));
    CHECK_EQ(s.struct_size, sizeof s);
    CHECK_EQ(s.threads, 2);
    CHECK_EQ(s.submitted, 1000);
    CHECK_EQ(s.completed, 1000);
    CHECK_EQ(s.rejected, 0);
    CHECK_EQ(s.cancelled, 0);
    CHECK_EQ(s.panicked, 0);
    CHECK(s.local_pops + s.global_pops + s.steals >= 1000);
    CHECK(s.peak_threads >= 2);
    CHECK_EQ(s.spawn_failures, 0);

    /* the first layout, in an exactly-sized heap block: nothing written past it */
    wspool_stats *old = malloc(WSPOOL_STATS_MIN_SIZE);
    memset(old, 0, WSPOOL_STATS_MIN_SIZE);
    old->struct_size = WSPOOL_STATS_MIN_SIZE;
    OK(wspool_stats_get(p, old));
    CHECK_EQ(old->struct_size, WSPOOL_STATS_MIN_SIZE);
    CHECK(old->completed >= 1000);
    free(old);

    s.struct_size = 0;
    CHECK_EQ(wspool_stats_get(p, &s), WSPOOL_EINVAL);
    s.struct_size = WSPOOL_STATS_MIN_SIZE - 8;
    CHECK_EQ(wspool_stats_get(p, &s), WSPOOL_EINVAL);
    CHECK(last_error_mentions("struct_size"));
    CHECK_EQ(wspool_stats_get(NULL, &s), WSPOOL_EINVAL);
    CHECK_EQ(wspool_stats_get(p, NULL), WSPOOL_EINVAL);
    wspool_destroy(p);
}

/* Stats read after a wait returned include what it waited for: every round's
 * count is exact right after the wait (before the fix, 1 round in 6 read 63
 * after a 64-task group wait: completion was counted after the signal). */
static void test_stats_after_wait(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_serial *q = NULL;
    OK(wspool_serial_create(p, &q));
    atomic_long n = 0;
    int short_rounds = 0;
    int rounds = scaled(300);
    for (int round = 0; round < rounds; round++) {
        uint64_t before = get_stats(p).completed;
        wspool_group *g = NULL;
        OK(wspool_group_create(p, &g));
        for (int i = 0; i < 64; i++) OK(wspool_group_submit(g, task_inc, &n));
        OK(wspool_group_wait(g, -1));
        wspool_group_destroy(g);
        uint64_t after_group = get_stats(p).completed;

        wspool_task *t = NULL;
        OK(wspool_submit_ex(p, task_inc, &n, NULL, &t));
        OK(wspool_task_wait(t, -1));
        wspool_task_release(t);
        uint64_t after_task = get_stats(p).completed;

        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.serial = q;
        for (int i = 0; i < 7; i++) OK(wspool_serial_submit(q, task_inc, &n));
        OK(wspool_submit_ex(p, task_inc, &n, &o, &t));
        OK(wspool_task_wait(t, -1));
        wspool_task_release(t);
        uint64_t after_serial = get_stats(p).completed;
        if (after_group - before != 64 || after_task - after_group != 1 || after_serial - after_task != 8) {
            if (short_rounds++ < 5)
                fprintf(stderr, "  round %d: counted %llu of 64 (group), %llu of 1 (task), %llu of 8 (serial)\n",
                        round, (unsigned long long)(after_group - before),
                        (unsigned long long)(after_task - after_group),
                        (unsigned long long)(after_serial - after_task));
        }
    }
    CHECK_EQ(short_rounds, 0);
    CHECK_EQ(atomic_load(&n), (long)rounds * 73);
    wspool_serial_destroy(q);
    wspool_destroy(p);
}

/* wspool_stats_init fills struct_size (and zeroes the rest); without it the
 * message names it. */
static void test_stats_init(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_stats s;
    memset(&s, 0xee, sizeof s);
    wspool_stats_init(&s);
    CHECK_EQ(s.struct_size, sizeof s);
    CHECK_EQ(s.completed, 0);
    CHECK_EQ(s.spawn_failures, 0);
    OK(wspool_stats_get(p, &s));
    CHECK_EQ(s.threads, 2);

    /* an older, shorter layout: nothing written past its size */
    unsigned char *old = malloc(WSPOOL_STATS_MIN_SIZE + 8);
    memset(old, 0xee, WSPOOL_STATS_MIN_SIZE + 8);
    OK(wspool_stats_init_sized((wspool_stats *)old, WSPOOL_STATS_MIN_SIZE));
    CHECK_EQ(((wspool_stats *)old)->struct_size, WSPOOL_STATS_MIN_SIZE);
    CHECK_EQ(old[WSPOOL_STATS_MIN_SIZE], 0xee);
    OK(wspool_stats_get(p, (wspool_stats *)old));
    free(old);

    CHECK_EQ(wspool_stats_init_sized(NULL, sizeof s), WSPOOL_EINVAL);
    CHECK_EQ(wspool_stats_init_sized(&s, WSPOOL_STATS_MIN_SIZE - 8), WSPOOL_EINVAL);
    (wspool_stats_init)(NULL); /* the exported function (not the macro): NULL is ignored */
    CHECK(last_error_mentions("NULL"));

    memset(&s, 0, sizeof s);
    CHECK_EQ(wspool_stats_get(p, &s), WSPOOL_EINVAL);
    CHECK(last_error_mentions("wspool_stats_init"));
    wspool_destroy(p);
}

/* ---------------------------------------------------------------- fork --- */

static int child_checks(wspool *p, wspool_group *g, wspool_serial *s, wspool_task *t) {
    int bad = 0;
#define CHILD_EXPECT(call, code)                                                    \
    do {                                                                            \
        int rc_ = (call);                                                           \
        if (rc_ != (code)) {                                                        \
            fprintf(stderr, "  child: %s = %d, expected %d\n", #call, rc_, code);    \
            bad++;                                                                  \
        }                                                                           \
    } while (0)
    atomic_long n = 0;
    wspool_stats st;
    st.struct_size = sizeof st;
    wspool_group *g2 = NULL;
    wspool_serial *s2 = NULL;
    wspool_task *t2 = NULL;
    CHILD_EXPECT(wspool_submit(p, task_inc, &n), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_submit_ex(p, task_inc, &n, NULL, &t2), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_join(p, task_inc, &n, task_inc, &n), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_stats_get(p, &st), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_group_create(p, &g2), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_serial_create(p, &s2), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_group_submit(g, task_inc, &n), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_group_wait(g, -1), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_serial_submit(s, task_inc, &n), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_task_wait(t, -1), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_task_cancel(t), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_task_state(t), WSPOOL_EFORKED);
    CHILD_EXPECT(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -1), WSPOOL_EFORKED);
    if (!strstr(wspool_last_error(), "fork")) bad++;
    CHILD_EXPECT(wspool_current_index(), -1);
    wspool_blocking_begin();
    wspool_blocking_end();
    /* releasing inherited objects returns without touching the parent's threads */
    wspool_task_release(t);
    wspool_serial_destroy(s);
    wspool_group_destroy(g);
    wspool_destroy(p);
    if (n != 0) bad++;

#ifdef __SANITIZE_THREAD__
    /* TSan cannot follow a multi-threaded parent's child that starts threads
       ("dup thread with used id"): the plain, ASan and valgrind runs cover it. */
    return bad;
#endif
    /* a pool created in the child works */
    wspool *c = NULL;
    CHILD_EXPECT(wspool_create(NULL, &c), WSPOOL_OK);
    if (c) {
        wspool_group *cg = NULL;
        CHILD_EXPECT(wspool_group_create(c, &cg), WSPOOL_OK);
        for (int i = 0; i < 100; i++) CHILD_EXPECT(wspool_group_submit(cg, task_inc, &n), WSPOOL_OK);
        CHILD_EXPECT(wspool_group_wait(cg, MUST_MS), WSPOOL_OK);
        wspool_group_destroy(cg);
        wspool_destroy(c);
        if (n != 100) bad++;
    }
    return bad;
}

static void test_fork(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_group *g = NULL;
    wspool_serial *s = NULL;
    wspool_task *t = NULL;
    atomic_long n = 0;
    OK(wspool_group_create(p, &g));
    OK(wspool_serial_create(p, &s));
    gate_t gate;
    gate_init(&gate);
    /* fork while a worker is busy and a task is pending */
    OK(wspool_submit(p, task_gate, &gate));
    OK(wspool_submit_ex(p, task_inc, &n, NULL, &t));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60); /* a hang in the child fails the test instead of blocking it */
        int bad = child_checks(p, g, s, t);
        _exit(bad > 100 ? 100 : bad);
    }
    expect_child_passed(pid);
    /* the parent's pool is unaffected */
    gate_open(&gate);
    OK(wspool_group_submit(g, task_inc, &n));
    OK(wspool_group_wait(g, MUST_MS));
    OK(wspool_task_wait(t, MUST_MS));
    wspool_task_release(t);
    wspool_serial_destroy(s);
    wspool_group_destroy(g);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&n), 2);
    gate_destroy(&gate);
}

/* -------------------------------------------------------------- stress --- */

typedef struct {
    wspool *pool;
    wspool_group *group;
    slot_t *slots;
    unsigned char *accepted;
    unsigned char *cancel_ok; /* wspool_task_cancel returned OK for this slot */
    int base, count;
    atomic_int *stop; /* set once the pool is shut down */
} producer_t;

static void busy_run(void *a) {
    slot_t *s = a;
    for (volatile int i = 0; i < 100; i++) {
    }
    slot_run(s);
}

static void *producer(void *arg) {
    producer_t *pr = arg;
    wspool_submit_opts o;
    for (int i = 0; i < pr->count; i++) {
        int idx = pr->base + i;
        slot_t *s = &pr->slots[idx];
        wspool_submit_opts_init(&o);
        o.on_cancel = slot_cancel;
        wspool_task *t = NULL;
        int rc;
        switch (i % 8) {
        case 0: o.flags = WSPOOL_SUBMIT_GLOBAL; rc = wspool_submit_ex(pr->pool, busy_run, s, &o, NULL); break;
        case 1: o.group = pr->group; rc = wspool_submit_ex(pr->pool, busy_run, s, &o, NULL); break;
        case 2:
            rc = wspool_submit_ex(pr->pool, busy_run, s, &o, &t);
            if (rc == WSPOOL_OK) {
                if (i % 16 == 2) {
                    int c = wspool_task_cancel(t);
                    if (c == WSPOOL_OK) pr->cancel_ok[idx] = 1;
                    else if (c != WSPOOL_ECANCELLED) CHECK_EQ(c, WSPOOL_EBUSY); /* ECANCELLED: by shutdown */
                }
                wspool_task_release(t);
            }
            break;
        default: rc = wspool_submit_ex(pr->pool, busy_run, s, &o, NULL); break;
        }
        /* 2: accepted, and the submit returned before shutdown began */
        if (rc == WSPOOL_OK) pr->accepted[idx] = atomic_load(pr->stop) ? 1 : 2;
        else {
            CHECK_EQ(rc, WSPOOL_ESHUTDOWN);
            CHECK(atomic_load(pr->stop));
        }
    }
    return NULL;
}

/* Producers race a pool; `mode` < 0: drain at the end; otherwise shut down
 * with that mode while they submit. Every accepted task runs or is cancelled
 * exactly once; every refused one neither. */
static void stress_round(int mode) {
    enum { P = 4 };
    int per = scaled(25000);
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 2;
    cfg.max_threads = 4;
    wspool *p = NULL;
    OK(wspool_create(&cfg, &p));
    wspool_group *g = NULL;
    OK(wspool_group_create(p, &g));
    slot_t *slots = calloc((size_t)P * per, sizeof *slots);
    unsigned char *accepted = calloc((size_t)P * per, 1);
    unsigned char *cancel_ok = calloc((size_t)P * per, 1);
    atomic_int stop = 0;
    producer_t prs[P];
    pthread_t th[P];
    for (int i = 0; i < P; i++) {
        prs[i] = (producer_t){p, g, slots, accepted, cancel_ok, i * per, per, &stop};
        pthread_create(&th[i], NULL, producer, &prs[i]);
    }
    if (mode >= 0) {
        sleep_ms(5);
        atomic_store(&stop, 1);
        OK(wspool_shutdown(p, mode, -1));
    }
    for (int i = 0; i < P; i++) pthread_join(th[i], NULL);
    if (mode < 0) OK(wspool_group_wait(g, MUST_MS));
    atomic_store(&stop, 1);
    wspool_stats st = get_stats(p);
    wspool_group_destroy(g);
    wspool_destroy(p);
    long acc = 0, ran = 0, canc = 0, bad = 0, explicit_canc = 0, drained_bad = 0;
    for (int i = 0; i < P * per; i++) {
        int r = atomic_load(&slots[i].ran), c = atomic_load(&slots[i].cancelled);
        acc += accepted[i] != 0;
        explicit_canc += cancel_ok[i];
        if (cancel_ok[i] && c != 1) bad++;
        ran += r;
        canc += c;
        if (r + c != (accepted[i] != 0)) bad++;
        /* DRAIN runs whatever was accepted before it began (a submission racing
           the shutdown may be cancelled instead, with its on_cancel) */
        if (mode != WSPOOL_SHUTDOWN_CANCEL && accepted[i] == 2 && !cancel_ok[i] && r != 1) drained_bad++;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(ran + canc, acc);
    CHECK_EQ((long long)st.submitted, acc);
    if (mode < 0) CHECK_EQ(acc, (long)P * per);
    CHECK_EQ(drained_bad, 0);
    if (mode < 0) CHECK_EQ(canc, explicit_canc); /* no shutdown: only explicit cancels */
    printf("        stress(mode %d): %ld accepted, %ld ran, %ld cancelled\n", mode, acc, ran, canc);
    free(slots);
    free(accepted);
    free(cancel_ok);
}

static void test_stress_every_task_accounted(void) {
    stress_round(-1);
    stress_round(WSPOOL_SHUTDOWN_DRAIN);
    stress_round(WSPOOL_SHUTDOWN_CANCEL);
}

/* ---------------------------------------------------------------- main --- */

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"version", test_version},
        {"strerror", test_strerror},
        {"last_error_is_thread_local", test_last_error_is_thread_local},
        {"config_init_defaults", test_config_init_defaults},
        {"create_defaults_and_destroy", test_create_defaults_and_destroy},
        {"create_bad_values", test_create_bad_values},
        {"config_older_and_newer_layouts", test_config_older_and_newer_layouts},
        {"name_copied_and_thread_hooks", test_name_copied_and_thread_hooks},
        {"submit_and_current_index", test_submit_and_current_index},
        {"submit_ex_options", test_submit_ex_options},
        {"task_wait_cancel_state", test_task_wait_cancel_state},
        {"release_detaches", test_release_detaches},
        {"shutdown_drain", test_shutdown_drain},
        {"shutdown_cancel_and_timeout", test_shutdown_cancel_and_timeout},
        {"destroy_drains_owned_args", test_destroy_drains_owned_args},
        {"handles_outlive_pool", test_handles_outlive_pool},
        {"reject_abort_keeps_arg", test_reject_abort_keeps_arg},
        {"reject_caller_runs", test_reject_caller_runs},
        {"reject_discard_oldest", test_reject_discard_oldest},
        {"reject_block", test_reject_block},
        {"join", test_join},
        {"group", test_group},
        {"help_while_waiting", test_help_while_waiting},
        {"serial_order", test_serial_order},
        {"blocking_regions", test_blocking_regions},
        {"stats", test_stats},
        {"stats_after_wait", test_stats_after_wait},
        {"stats_init", test_stats_init},
        {"fork", test_fork},
        {"stress_every_task_accounted", test_stress_every_task_accounted},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
