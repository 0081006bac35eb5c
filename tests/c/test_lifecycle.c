/* Lifecycle and soundness of the C API (issue 9, items 6-8): a refused thread
 * is WSPOOL_ESPAWN, racing cancellers get one OK after on_cancel returned,
 * every submission kind takes the same options (serial and group tasks with
 * on_cancel and a handle), stack_size, thread_nice. (Shutdown races:
 * test_shutdown.c.)
 * Run by `make test-c` plain, under ASan+UBSan, under TSan and under
 * valgrind; arguments select tests by substring (tests that fork carry "fork"
 * in their name). */
#include "harness.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* ------------------------------------------------------- ESPAWN (6) ----- */

static void expect_espawn(const wspool_config *cfg) {
    wspool *p = (wspool *)&p; /* must be reset to NULL */
    CHECK_EQ(wspool_create(cfg, &p), WSPOOL_ESPAWN);
    CHECK(p == NULL);
    CHECK(last_error_mentions("wspool_create"));
    CHECK(last_error_mentions("thread"));
    if (p) wspool_destroy(p);
}

/* A stack the address space cannot hold: pthread_create fails for every worker. */
static void test_espawn_stack_too_big(void) {
    if (sizeof(size_t) < 8) return; /* 32-bit: such a size cannot be expressed */
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 2;
    cfg.stack_size = (size_t)1 << 50; /* 1 PiB, beyond a 47-bit user address space */
    expect_espawn(&cfg);
    printf("        stack_size 1 PiB: \"%s\"\n", wspool_last_error());
}

static void *noop_thread(void *a) { return a; }

/* Run in a forked child: RLIMIT_NPROC 1 refuses every new thread of this user
 * (root is exempt, so a root run drops to nobody first). Exit code 0 = pass,
 * 12 = the limit does not bite here (the test is then skipped), else failure. */
static int child_espawn_nproc(void) {
    struct rlimit rl = {1, 1};
    if (setrlimit(RLIMIT_NPROC, &rl) != 0) return 10;
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 11;
    pthread_t th;
    if (pthread_create(&th, NULL, noop_thread, NULL) == 0) {
        pthread_join(th, NULL);
        return 12;
    }
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 2;
    wspool *p = (wspool *)&p;
    int rc = wspool_create(&cfg, &p);
    fprintf(stderr, "        RLIMIT_NPROC 1: %d \"%s\"\n", rc, wspool_last_error());
    if (rc != WSPOOL_ESPAWN) return 1;
    if (p != NULL) return 2;
    if (!last_error_mentions("wspool_create") || !last_error_mentions("thread")) return 3;
    return 0;
}

static void test_espawn_fork_rlimit_nproc(void) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid < 0) return;
    if (pid == 0) {
        alarm(60); /* a hang in the child kills it (a failure), not the run */
        _exit(child_espawn_nproc());
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 12)
        printf("        skipped: RLIMIT_NPROC does not stop threads here (CAP_SYS_RESOURCE?)\n");
    else
        CHECK_EQ(code, 0);
}

/* --------------------------------------------------------- stack_size --- */

static atomic_long seen_stack;
static void task_stack_size(void *arg) {
    (void)arg;
    pthread_attr_t a;
    size_t sz = 0;
    if (wspool_current_index() >= 0 && pthread_getattr_np(pthread_self(), &a) == 0) {
        pthread_attr_getstacksize(&a, &sz);
        pthread_attr_destroy(&a);
    }
    atomic_store(&seen_stack, (long)sz);
}

/* Runs `fn` once on a worker of a pool created from `cfg`; 0 if the pool
   could not be created. */
static int run_on_new_pool(wspool_config *cfg, wspool_fn fn) {
    wspool *p = NULL;
    OK(wspool_create(cfg, &p));
    if (!p) return 0;
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, fn, NULL, NULL, &t));
    OK(wspool_task_wait(t, HANG_MS));
    wspool_task_release(t);
    wspool_destroy(p);
    return 1;
}

/* The stack size a worker of a pool created from `cfg` runs its tasks on. */
static long worker_stack(wspool_config *cfg) {
    atomic_store(&seen_stack, -1);
    return run_on_new_pool(cfg, task_stack_size) ? atomic_load(&seen_stack) : -1;
}

static void check_near(long seen, long want) {
    /* glibc reports the mapping it made: the size asked for, page-rounded,
       perhaps with the guard page */
    if (seen < want || seen > want + (1L << 20)) {
        fprintf(stderr, "  worker stack %ld bytes, wanted %ld\n", seen, want);
        CHECK(!"worker stack size");
    }
}

static void test_stack_size(void) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    CHECK_EQ(cfg.stack_size, 0);
    cfg.min_threads = 2;
    if (!getenv("RUST_MIN_STACK")) check_near(worker_stack(&cfg), 2L << 20); /* default: 2 MiB */
    cfg.stack_size = 8u << 20;
    check_near(worker_stack(&cfg), 8L << 20);
    cfg.stack_size = WSPOOL_STACK_SIZE_MIN;
#ifndef __SANITIZE_THREAD__ /* TSan's pthread_create raises small stacks to its own minimum */
    check_near(worker_stack(&cfg), WSPOOL_STACK_SIZE_MIN);
#endif

    wspool *p = (wspool *)&p;
    cfg.stack_size = WSPOOL_STACK_SIZE_MIN - 1;
    CHECK_EQ(wspool_create(&cfg, &p), WSPOOL_EINVAL);
    CHECK(p == NULL);
    CHECK(last_error_mentions("stack_size"));

    /* a caller built before stack_size (its struct ends at block_timeout_ms),
       in an exactly-sized heap block: stack_size is never read, the default holds */
    size_t old_size = offsetof(wspool_config, block_timeout_ms) + sizeof(uint32_t);
    wspool_config *old = malloc(old_size);
    OK(wspool_config_init_sized(old, old_size));
    CHECK_EQ(old->struct_size, old_size);
    old->min_threads = 2;
    if (!getenv("RUST_MIN_STACK")) check_near(worker_stack(old), 2L << 20);
    free(old);
}

/* -------------------------------------------------------- thread_nice --- */

static atomic_int seen_nice;
static void task_nice(void *arg) {
    (void)arg;
    errno = 0;
    int n = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    atomic_store(&seen_nice, errno ? -100 : n);
}

/* The nice value a worker of a pool created from `cfg` runs its tasks at. */
static int worker_nice(wspool_config *cfg) {
    atomic_store(&seen_nice, -100);
    return run_on_new_pool(cfg, task_nice) ? atomic_load(&seen_nice) : -100;
}

static void test_thread_nice(void) {
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    CHECK_EQ(errno, 0);
    wspool_config cfg;
    wspool_config_init(&cfg);
    CHECK_EQ(cfg.thread_nice, 0);
    cfg.min_threads = 2;
    CHECK_EQ(worker_nice(&cfg), base);
    cfg.thread_nice = 3;
    CHECK_EQ(worker_nice(&cfg), base + 3 > 19 ? 19 : base + 3);

    wspool *p = (wspool *)&p;
    cfg.thread_nice = 20;
    CHECK_EQ(wspool_create(&cfg, &p), WSPOOL_EINVAL);
    CHECK(p == NULL);
    CHECK(last_error_mentions("thread_nice"));

    /* a caller built before thread_nice (its struct ends at stack_size), in
       an exactly-sized heap block: thread_nice is never read */
    size_t old_size = offsetof(wspool_config, stack_size) + sizeof(size_t);
    wspool_config *old = malloc(old_size);
    OK(wspool_config_init_sized(old, old_size));
    old->min_threads = 2;
    CHECK_EQ(worker_nice(old), base);
    free(old);
}

/* ---------------------------------------------- cancellation race (7) --- */

/* The arg of a task whose on_cancel is slow: whoever gets WSPOOL_OK from
 * wspool_task_cancel frees it (the pattern the header allows), so a second
 * OK would be a double free under ASan, and an OK before on_cancel returned
 * a use-after-free and a TSan race on `written`. */
typedef struct {
    int written;
} slow_arg_t;
static atomic_int slow_entered, slow_returned;
static void slow_on_cancel(void *a) {
    atomic_fetch_add(&slow_entered, 1);
    sleep_ms(2);
    ((slow_arg_t *)a)->written = 1;
    atomic_fetch_add(&slow_returned, 1);
}
static void never_runs(void *a) {
    (void)a;
    CHECK(!"a cancelled task ran");
}

enum { RACERS = 4 };
typedef struct {
    wspool_task *task;
    slow_arg_t *arg;
    pthread_barrier_t *start;
    int rc;
} racer_t;
static void *racer(void *a) {
    racer_t *r = a;
    pthread_barrier_wait(r->start);
    r->rc = wspool_task_cancel(r->task);
    if (r->rc == WSPOOL_OK) {
        CHECK_EQ(atomic_load(&slow_returned), 1); /* on_cancel already returned */
        CHECK_EQ(r->arg->written, 1);
        free(r->arg);
    }
    return NULL;
}

static void test_cancel_race_one_ok(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 2); /* the raced task stays pending */
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = slow_on_cancel;
    int bad_rounds = 0;
    for (int round = 0; round < 50; round++) {
        atomic_store(&slow_entered, 0);
        atomic_store(&slow_returned, 0);
        slow_arg_t *arg = calloc(1, sizeof *arg);
        wspool_task *t = NULL;
        OK(wspool_submit_ex(p, never_runs, arg, &o, &t));
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, RACERS);
        racer_t rs[RACERS];
        pthread_t th[RACERS];
        for (int i = 0; i < RACERS; i++) {
            rs[i] = (racer_t){t, arg, &start, 99};
            pthread_create(&th[i], NULL, racer, &rs[i]);
        }
        int ok = 0, cancelled = 0;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            ok += rs[i].rc == WSPOOL_OK;
            cancelled += rs[i].rc == WSPOOL_ECANCELLED;
        }
        pthread_barrier_destroy(&start);
        if (ok != 1 || cancelled != RACERS - 1) bad_rounds++;
        CHECK_EQ(ok, 1);
        CHECK_EQ(cancelled, RACERS - 1);
        CHECK_EQ(atomic_load(&slow_entered), 1);
        CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_CANCELLED);
        CHECK_EQ(wspool_task_wait(t, 0), WSPOOL_ECANCELLED);
        wspool_task_release(t);
    }
    if (bad_rounds) fprintf(stderr, "  %d of 50 rounds broke the one-OK rule\n", bad_rounds);
    gate_open(&g);
    wspool_destroy(p);
    gate_destroy(&g);
}

/* ------------------------------------- one set of options for all (8) --- */

typedef struct {
    atomic_int next; /* the sequence number expected to run next */
    atomic_int running;
    atomic_int overlap, out_of_order;
} order_t;
typedef struct {
    order_t *order;
    int seq;
    slot_t slot;
} seq_item_t;
static void seq_run(void *a) {
    seq_item_t *it = a;
    if (atomic_fetch_add(&it->order->running, 1) != 0) atomic_fetch_add(&it->order->overlap, 1);
    if (atomic_load(&it->order->next) > it->seq) atomic_fetch_add(&it->order->out_of_order, 1);
    atomic_store(&it->order->next, it->seq + 1);
    atomic_fetch_sub(&it->order->running, 1);
    slot_run(&it->slot);
}
static void seq_cancel(void *a) { slot_cancel(&((seq_item_t *)a)->slot); }
static void gate_then_run(void *a) {
    gate_pass((gate_t *)a);
}

static void test_submit_opts_serial_and_group(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_serial *s = NULL;
    wspool_group *g = NULL;
    OK(wspool_serial_create(p, &s));
    OK(wspool_group_create(p, &g));
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    CHECK(o.serial == NULL);

    /* a serial task held at a gate; the ones behind it wait their turn */
    gate_t gate;
    gate_init(&gate);
    o.serial = s;
    wspool_task *held = NULL;
    OK(wspool_submit_ex(p, gate_then_run, &gate, &o, &held));
    CHECK(wait_at_least(&gate.inside, 1));

    enum { N = 40 };
    order_t ord;
    memset(&ord, 0, sizeof ord);
    seq_item_t items[N];
    wspool_task *ts[N];
    o.on_cancel = seq_cancel;
    o.group = g; /* serial and counted in the group */
    for (int i = 0; i < N; i++) {
        items[i] = (seq_item_t){&ord, i, {0, 0}};
        ts[i] = NULL;
        o.flags = i % 2 ? WSPOOL_SUBMIT_GLOBAL : 0; /* accepted, changes nothing for serial */
        OK(wspool_submit_ex(p, seq_run, &items[i], &o, &ts[i]));
        CHECK(ts[i] != NULL);
    }
    /* pending serial tasks can be cancelled through their handle: on_cancel, once */
    for (int i = 0; i < N; i += 4) {
        OK(wspool_task_cancel(ts[i]));
        CHECK_EQ(atomic_load(&items[i].slot.cancelled), 1);
        CHECK_EQ(wspool_task_cancel(ts[i]), WSPOOL_ECANCELLED);
    }
    CHECK_EQ(wspool_group_wait(g, 0), WSPOOL_ETIMEDOUT);
    gate_open(&gate);
    OK(wspool_task_wait(held, HANG_MS));
    OK(wspool_group_wait(g, HANG_MS));
    for (int i = 0; i < N; i++) {
        int cancelled = i % 4 == 0;
        CHECK_EQ(wspool_task_wait(ts[i], HANG_MS), cancelled ? WSPOOL_ECANCELLED : WSPOOL_OK);
        CHECK_EQ(wspool_task_state(ts[i]), cancelled ? WSPOOL_TASK_CANCELLED : WSPOOL_TASK_DONE);
        CHECK_EQ(atomic_load(&items[i].slot.ran), !cancelled);
        CHECK_EQ(atomic_load(&items[i].slot.cancelled), cancelled);
        wspool_task_release(ts[i]);
    }
    wspool_task_release(held);
    CHECK_EQ(atomic_load(&ord.overlap), 0);
    CHECK_EQ(atomic_load(&ord.out_of_order), 0);
    CHECK_EQ(atomic_load(&ord.next), N); /* the last one (not cancelled: 39 % 4 != 0) ran last */

    /* a serial queue or group of another pool is refused: the caller keeps arg */
    wspool *other = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_serial *os = NULL;
    wspool_group *og = NULL;
    OK(wspool_serial_create(other, &os));
    OK(wspool_group_create(other, &og));
    slot_t refused = {0, 0};
    wspool_task *t = (wspool_task *)&t;
    wspool_submit_opts_init(&o);
    o.on_cancel = slot_cancel;
    o.serial = os;
    CHECK_EQ(wspool_submit_ex(p, slot_run, &refused, &o, &t), WSPOOL_EINVAL);
    CHECK(t == NULL);
    CHECK(last_error_mentions("another pool"));
    o.serial = s;
    o.group = og;
    CHECK_EQ(wspool_submit_ex(p, slot_run, &refused, &o, NULL), WSPOOL_EINVAL);
    CHECK(last_error_mentions("another pool"));
    /* both of `other`: accepted there */
    o.serial = os;
    slot_t there = {0, 0};
    OK(wspool_submit_ex(other, slot_run, &there, &o, NULL));
    OK(wspool_group_wait(og, HANG_MS));
    CHECK_EQ(atomic_load(&there.ran), 1);
    wspool_serial_destroy(os);
    wspool_group_destroy(og);
    wspool_destroy(other);

    /* a caller built against the first layout (no serial field), in an
       exactly-sized heap block: the library reads no byte past it */
    wspool_submit_opts *old = malloc(WSPOOL_SUBMIT_OPTS_MIN_SIZE);
    OK(wspool_submit_opts_init_sized(old, WSPOOL_SUBMIT_OPTS_MIN_SIZE));
    old->on_cancel = slot_cancel;
    old->group = g;
    slot_t viaold = {0, 0};
    OK(wspool_submit_ex(p, slot_run, &viaold, old, NULL));
    OK(wspool_group_wait(g, HANG_MS));
    CHECK_EQ(atomic_load(&viaold.ran), 1);
    free(old);

    wspool_serial_destroy(s);
    wspool_group_destroy(g);
    wspool_destroy(p);
    CHECK_EQ(atomic_load(&refused.ran) + atomic_load(&refused.cancelled), 0);
    gate_destroy(&gate);
}

/* Serial and group tasks dropped by shutdown CANCEL: each on_cancel exactly
 * once (heap args: a leak or double free shows under ASan/valgrind). */
static void test_cancel_shutdown_serial_and_group(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    gate_t gate;
    gate_init(&gate);
    hold_workers(p, &gate, 2);
    wspool_serial *s = NULL;
    wspool_group *g = NULL;
    OK(wspool_serial_create(p, &s));
    OK(wspool_group_create(p, &g));
    atomic_store(&owned_ran, 0);
    atomic_store(&owned_cancelled, 0);
    enum { K = 50 };
    wspool_submit_opts o;
    for (int i = 0; i < 3 * K; i++) {
        wspool_submit_opts_init(&o);
        o.on_cancel = owned_cancel;
        if (i % 3 != 1) o.serial = s; /* 0: serial, 1: group, 2: both */
        if (i % 3 != 0) o.group = g;
        OK(wspool_submit_ex(p, owned_run, malloc(16), &o, NULL));
    }
    /* the workers are held: the cancel cannot finish yet */
    CHECK_EQ(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, 0), WSPOOL_ETIMEDOUT);
    gate_open(&gate);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, -1));
    CHECK_EQ(atomic_load(&owned_cancelled), 3 * K); /* none could start before the cancel */
    CHECK_EQ(atomic_load(&owned_ran), 0);
    OK(wspool_group_wait(g, 0));
    wspool_stats st = get_stats(p);
    CHECK_EQ(st.submitted, 3 * K + 2);
    CHECK_EQ(st.cancelled, 3 * K);
    CHECK_EQ(st.completed, 2); /* the two gate tasks, none of the cancelled */
    wspool_serial_destroy(s);
    wspool_group_destroy(g);
    wspool_destroy(p);
    gate_destroy(&gate);
}

/* ---------------------------------------------------------------- main --- */

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"espawn_stack_too_big", test_espawn_stack_too_big},
        {"espawn_fork_rlimit_nproc", test_espawn_fork_rlimit_nproc},
        {"stack_size", test_stack_size},
        {"thread_nice", test_thread_nice},
        {"cancel_race_one_ok", test_cancel_race_one_ok},
        {"submit_opts_serial_and_group", test_submit_opts_serial_and_group},
        {"cancel_shutdown_serial_and_group", test_cancel_shutdown_serial_and_group},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
