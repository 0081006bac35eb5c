/* The C API's misuse and edge paths that must not crash, hang or lie (issue 38):
 *   - fork() while other threads take snapshots: a pool created in the child works (no
 *     process-wide lock of the library may be inherited held; the label table had one);
 *   - a task that destroys its own pool while its submitter is still inside the submit call
 *     (nothing may read the pool after publishing: ASan sees a read of the freed handle);
 *   - wspool_shutdown(DRAIN, -1) from one of the pool's own tasks: never WSPOOL_OK while
 *     accepted work has not run (it returns WSPOOL_EDEADLK: it cannot wait for itself);
 *   - versioned structs never initialised (stack garbage in struct_size): WSPOOL_EINVAL naming
 *     the _init function, never a crash.
 * Run plain, under ASan+UBSan (the use-after-free), TSan and valgrind (the fork test: plain and
 * valgrind only, see below). */
#include "harness.h"

/* The fork test cannot run under a sanitizer: TSan cannot follow the threads a forked child
 * starts, and GCC's ASan allocator takes its own locks without fork handlers, so a child forked
 * while another thread allocates can hang in malloc (seen: 2 children of 200, in ASan's
 * SizeClassAllocator64 mutex, whatever this library does). It runs plain and under valgrind. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

/* ------------------------------------------------------- fork + labels --- */

static atomic_int fork_stop;

/* Takes snapshots of the pool without pause until told to stop. */
__attribute__((unused)) static void *snapshot_loop(void *arg) {
    wspool *p = arg;
    char buf[4096];
    while (!atomic_load(&fork_stop)) OK(wspool_dump(p, buf, sizeof buf, NULL));
    return NULL;
}

static atomic_int child_ran;
static void child_task(void *arg) {
    (void)arg;
    atomic_fetch_add(&child_ran, 1);
}

/* In the child: a new pool, a task under a label the process has never seen (so it is added to
 * the table), its wait and a snapshot (which reads the table). SIGALRM is the watchdog: a hang
 * kills the child, which the parent reports. */
__attribute__((unused)) static int fork_child(int i) {
    alarm(30);
    wspool *p = NULL;
    if (wspool_create(NULL, &p) != WSPOOL_OK) return 1;
    char label[64];
    snprintf(label, sizeof label, "fork-child-%d", i);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.label = label;
    wspool_task *t = NULL;
    int bad = 0;
    bad += wspool_submit_ex(p, child_task, NULL, &o, &t) != WSPOOL_OK;
    if (t) {
        bad += wspool_task_wait(t, -1) != WSPOOL_OK;
        wspool_task_release(t);
    }
    char buf[4096];
    bad += wspool_dump(p, buf, sizeof buf, NULL) != WSPOOL_OK;
    wspool_destroy(p);
    bad += atomic_load(&child_ran) != 1;
    return bad;
}

/* Issue 38.2: the label table's process-wide mutex, taken by every snapshot, was inherited
 * locked by a child forked while a snapshot held it; the child's first new label hung. */
static void test_fork_while_snapshotting(void) {
#ifdef UNDER_SANITIZER
    printf("  (skipped under a sanitizer: see the top of the file)\n");
    return;
#else
    atomic_store(&fork_stop, 0);
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    /* Labelled tasks held inside the pool: every snapshot looks their label up in the table. */
    gate_t g;
    gate_init(&g);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.label = "parent-held";
    for (int i = 0; i < 2; i++) OK(wspool_submit_ex(p, task_gate, &g, &o, NULL));
    CHECK(wait_at_least(&g.inside, 2));
    pthread_t snap[2];
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&snap[i], NULL, snapshot_loop, p), 0);
    int forks = scaled(100), hung = 0, failed = 0;
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid == 0) _exit(fork_child(i));
        CHECK(pid > 0);
        if (pid < 0) break;
        int status = 0;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status)) hung++;
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    atomic_store(&fork_stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(snap[i], NULL);
    gate_open(&g);
    wspool_destroy(p);
    gate_destroy(&g);
    if (hung || failed)
        fprintf(stderr, "  %d of %d children killed by the watchdog (hung), %d failed\n", hung, forks, failed);
    CHECK_EQ(hung, 0);
    CHECK_EQ(failed, 0);
#endif
}

/* ------------------------------------------- a task destroys its own pool --- */

/* The library is not built with ASan, so its reads of freed memory are not reported; with
 * freed memory filled (ASan otherwise keeps it intact in quarantine), such a read sees garbage,
 * as it would without ASan (glibc's free reuses the first bytes at once). */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_free_fill_size=4096"; }
#endif

static void destroy_own_pool(void *arg) { wspool_destroy((wspool *)arg); }

typedef struct {
    wspool *pool;
    atomic_int ran;
} join_ctx;
static void join_noop(void *arg) { (void)arg; }
static void join_destroy(void *arg) { wspool_destroy(((join_ctx *)arg)->pool); }

/* From a pool thread: the submitted task may be stolen and destroy the pool before this
 * submission returns (the call then holds the submitting thread's own handle). */
static atomic_int inner_submit_failed, destroyers_returned;
static void submit_destroyer(void *arg) {
    wspool *p = arg;
    if (wspool_submit(p, destroy_own_pool, p) != WSPOOL_OK) atomic_fetch_add(&inner_submit_failed, 1);
    atomic_fetch_add(&destroyers_returned, 1);
}

/* Issue 38.4a: wspool_submit_ex read the pool after publishing the task, which may have run and
 * destroyed the pool by then: ASan reports the read of the freed handle, and without ASan the
 * task handle carried a garbage fork generation (wspool_task_wait said WSPOOL_EFORKED in a
 * program that never forked). Each round races the submitter's return against the destroy; the
 * other submit entry points are raced the same way. */
static void test_task_destroys_its_own_pool(void) {
    int rounds = scaled(200), bad_wait = 0;
    for (int i = 0; i < rounds; i++) {
        wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
        wspool_task *t = NULL;
        OK(wspool_submit_ex(p, destroy_own_pool, p, NULL, &t));
        if (t) {
            int st = wspool_task_wait(t, -1);
            if (st != WSPOOL_OK) {
                bad_wait++;
                fprintf(stderr, "  round %d: wspool_task_wait = %d (%s)\n", i, st, wspool_strerror(st));
            }
            wspool_task_release(t);
        }
    }
    CHECK_EQ(bad_wait, 0);
    for (int i = 0; i < rounds; i++) {
        wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
        OK(wspool_submit(p, destroy_own_pool, p));
    }
    for (int i = 0; i < rounds; i++) {
        wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
        OK(wspool_submit(p, submit_destroyer, p));
    }
    for (int i = 0; i < rounds; i++) {
        wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
        wspool_batch_item items[2] = {{task_nop, NULL}, {destroy_own_pool, p}};
        size_t accepted = 0;
        OK(wspool_submit_batch(p, items, 2, NULL, &accepted));
        CHECK_EQ(accepted, 2);
    }
    for (int i = 0; i < rounds; i++) {
        join_ctx c = {make_pool(2, 2, WSPOOL_GROWTH_FIXED), 0};
        OK(wspool_join(c.pool, join_noop, &c, join_destroy, &c));
    }
    /* The destroyed pools' threads exit on their own (a thread cannot join itself); a fresh
       pool still works beside them. */
    while (atomic_load(&destroyers_returned) < rounds) sched_yield(); /* the harness's watchdog bounds it */
    CHECK_EQ(atomic_load(&inner_submit_failed), 0);
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_long n = 0;
    OK(wspool_submit(p, task_inc, &n));
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -1));
    CHECK_EQ(atomic_load(&n), 1);
    wspool_destroy(p);
}

typedef struct {
    wspool *pool;
    gate_t *held;
} destroy_ctx;
static void open_then_destroy(void *arg) {
    destroy_ctx *c = arg;
    gate_open(c->held);
    wspool_destroy(c->pool);
}

/* The same, deterministic: with the queue full and WSPOOL_REJECT_CALLER_RUNS the task runs on
 * the submitting thread inside wspool_submit_ex, so the pool is destroyed (drained, joined,
 * freed) before the call goes on. Before the fix, the call then read the freed handle: its task
 * handle said WSPOOL_EFORKED on every run. */
static void test_caller_runs_task_destroys_its_own_pool(void) {
    for (int round = 0; round < 3; round++) {
        wspool_config cfg;
        wspool_config_init(&cfg);
        cfg.min_threads = 1;
        cfg.max_threads = 1;
        cfg.growth = WSPOOL_GROWTH_FIXED;
        cfg.queue_capacity = 1;
        cfg.reject = WSPOOL_REJECT_CALLER_RUNS;
        wspool *p = NULL;
        OK(wspool_create(&cfg, &p));
        gate_t g;
        gate_init(&g);
        atomic_long queued_ran = 0;
        OK(wspool_submit(p, task_gate, &g)); /* holds the only worker */
        CHECK(wait_at_least(&g.inside, 1));
        OK(wspool_submit(p, task_inc, &queued_ran)); /* fills the queue */
        destroy_ctx c = {p, &g};
        wspool_task *t = NULL;
        OK(wspool_submit_ex(p, open_then_destroy, &c, NULL, &t)); /* runs here, destroys p */
        CHECK(t != NULL);
        if (t) {
            CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_DONE);
            CHECK_EQ(wspool_task_wait(t, -1), WSPOOL_OK);
            wspool_task_release(t);
        }
        CHECK_EQ(atomic_load(&queued_ran), 1); /* the destroy drained it */
        gate_destroy(&g);
    }
}

/* --------------------------------------------- shutdown from a pool task --- */

enum { QUEUED = 19 };
typedef struct {
    wspool *pool;
    gate_t *all_queued;
    slot_t *slots;
    int done_at_return;
    int mode;
    int status;
    char message[512];
} shutter_ctx;

static void shutdown_from_task(void *arg) {
    shutter_ctx *c = arg;
    gate_pass(c->all_queued);
    c->status = wspool_shutdown(c->pool, c->mode, -1);
    for (int i = 0; i < QUEUED; i++) c->done_at_return += atomic_load(&c->slots[i].ran) + atomic_load(&c->slots[i].cancelled);
    snprintf(c->message, sizeof c->message, "%s", wspool_last_error());
}

/* Issue 38.4b: wspool_shutdown(pool, DRAIN, -1) from a task returned WSPOOL_OK with 1 of 20
 * accepted tasks run. One worker runs the shutting task while 19 more are queued behind it:
 * OK would promise all of them ran, which cannot be (the shutting task itself is still
 * running), so the call must say it could not wait for itself; the queued tasks still run, and a
 * shutdown from outside then closes the pool. Both modes. */
static void test_shutdown_from_its_own_task(void) {
    for (int mode = WSPOOL_SHUTDOWN_DRAIN; mode <= WSPOOL_SHUTDOWN_CANCEL; mode++) {
        wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
        gate_t g;
        gate_init(&g);
        slot_t slots[QUEUED];
        memset(slots, 0, sizeof slots);
        shutter_ctx c = {p, &g, slots, 0, mode, 1, ""};
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.on_cancel = slot_cancel;
        OK(wspool_submit(p, shutdown_from_task, &c));
        CHECK(wait_at_least(&g.inside, 1));
        for (int i = 0; i < QUEUED; i++) OK(wspool_submit_ex(p, slot_run, &slots[i], &o, NULL));
        gate_open(&g);
        OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -1)); /* from outside: a closing point */
        CHECK_EQ(c.status, WSPOOL_EDEADLK);
        if (c.status == WSPOOL_OK)
            fprintf(stderr, "  mode %d: WSPOOL_OK with %d of %d queued tasks ended\n", mode, c.done_at_return, QUEUED);
        CHECK(strstr(c.message, "wspool_shutdown") != NULL);
        CHECK(strstr(c.message, "own tasks") != NULL);
        int done = 0;
        for (int i = 0; i < QUEUED; i++) {
            int r = atomic_load(&slots[i].ran), x = atomic_load(&slots[i].cancelled);
            CHECK_EQ(r + x, 1);
            done += r + x;
            if (mode == WSPOOL_SHUTDOWN_DRAIN) CHECK_EQ(r, 1);
        }
        CHECK_EQ(done, QUEUED);
        CHECK_EQ(wspool_submit(p, task_nop, NULL), WSPOOL_ESHUTDOWN);
        wspool_destroy(p);
        gate_destroy(&g);
    }
}

/* ------------------------------------------------ uninitialised structs --- */

/* What a struct never given to its _init function may hold in struct_size: stack garbage. */
static const size_t garbage[] = {
    (size_t)0xa5a5a5a5a5a5a5a5ull, SIZE_MAX, (size_t)0x00007ffc12345678ull, 4097, 1u << 20,
};

/* Fills `n` bytes at `p` with a garbage pattern and `size` in the leading struct_size. */
static void fill_garbage(void *p, size_t n, size_t size) {
    memset(p, 0xa5, n);
    memcpy(p, &size, sizeof size);
}

/* Issue 38.4c: a wspool_config never initialised crashed wspool_create (SIGSEGV: the garbage
 * size made it read every field, the name pointer included). Every versioned struct refuses
 * such a size with WSPOOL_EINVAL and names its _init function. */
static void test_uninitialised_structs(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        size_t g = garbage[i];
        wspool_config cfg;
        fill_garbage(&cfg, sizeof cfg, g);
        wspool *q = (wspool *)&cfg;
        CHECK_EQ(wspool_create(&cfg, &q), WSPOOL_EINVAL);
        CHECK(q == NULL);
        CHECK(last_error_mentions("wspool_config_init"));

        wspool_submit_opts o;
        fill_garbage(&o, sizeof o, g);
        wspool_task *t = NULL;
        CHECK_EQ(wspool_submit_ex(p, task_nop, NULL, &o, &t), WSPOOL_EINVAL);
        CHECK(t == NULL);
        CHECK(last_error_mentions("wspool_submit_opts_init"));
        size_t accepted = 1;
        wspool_batch_item item = {task_nop, NULL};
        CHECK_EQ(wspool_submit_batch(p, &item, 1, &o, &accepted), WSPOOL_EINVAL);
        CHECK_EQ(accepted, 0);
        CHECK(last_error_mentions("wspool_submit_opts_init"));

        wspool_stats s;
        fill_garbage(&s, sizeof s, g);
        CHECK_EQ(wspool_stats_get(p, &s), WSPOOL_EINVAL);
        CHECK(last_error_mentions("wspool_stats_init"));

        wspool_cq_opts co;
        fill_garbage(&co, sizeof co, g);
        wspool_cq *cq = NULL;
        CHECK_EQ(wspool_cq_create(p, &co, &cq), WSPOOL_EINVAL);
        CHECK(cq == NULL);
        CHECK(last_error_mentions("wspool_cq_opts_init"));

        /* The _init_sized functions take no such size either (they would set it). */
        CHECK_EQ(wspool_config_init_sized(&cfg, g), WSPOOL_EINVAL);
        CHECK(last_error_mentions("wspool_config_init"));
        CHECK_EQ(wspool_submit_opts_init_sized(&o, g), WSPOOL_EINVAL);
        CHECK(last_error_mentions("wspool_submit_opts_init"));
        CHECK_EQ(wspool_stats_init_sized(&s, g), WSPOOL_EINVAL);
        CHECK(last_error_mentions("wspool_stats_init"));
        CHECK_EQ(wspool_cq_opts_init_sized(&co, g), WSPOOL_EINVAL);
        CHECK(last_error_mentions("wspool_cq_opts_init"));
    }
    /* The bound itself is a size the library takes (a caller built against a much newer,
       larger struct keeps working). */
    static unsigned char big[WSPOOL_STRUCT_SIZE_MAX] __attribute__((aligned(16)));
    memset(big, 0, sizeof big);
    wspool_config *cfg = (wspool_config *)big;
    OK(wspool_config_init_sized(cfg, WSPOOL_STRUCT_SIZE_MAX));
    CHECK_EQ(cfg->struct_size, WSPOOL_STRUCT_SIZE_MAX);
    cfg->min_threads = 1;
    wspool *q = NULL;
    OK(wspool_create(cfg, &q));
    wspool_destroy(q);
    wspool_destroy(p);
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"fork_while_snapshotting", test_fork_while_snapshotting},
        {"task_destroys_its_own_pool", test_task_destroys_its_own_pool},
        {"caller_runs_task_destroys_its_own_pool", test_caller_runs_task_destroys_its_own_pool},
        {"shutdown_from_its_own_task", test_shutdown_from_its_own_task},
        {"uninitialised_structs", test_uninitialised_structs},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
