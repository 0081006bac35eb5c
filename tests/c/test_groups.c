/* Groups placed in caller memory (wspool_group_init / wspool_group_fini):
 * argument checks, fini racing running and finishing tasks (heap storage,
 * freed right after fini: ASan and valgrind report any later touch), nested
 * stack groups on pool threads, shutdown with pending tasks (on_cancel
 * exactly once), groups outliving their pool (placed on or off it),
 * concurrent waiters, fork; and a created group destroyed with tasks
 * pending (LeakSanitizer and valgrind report a leak). */
#include "harness.h"

#include <sys/wait.h>

/* ------------------------------------------------------------ arguments --- */

static void test_init_fini_arguments(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_group_storage gs;
    wspool_group *g = (wspool_group *)&g;
    CHECK_EQ(wspool_group_init(NULL, p, &g), WSPOOL_EINVAL);
    CHECK(g == NULL);
    CHECK_EQ(wspool_group_init(&gs, NULL, &g), WSPOOL_EINVAL);
    CHECK_EQ(wspool_group_init(&gs, p, NULL), WSPOOL_EINVAL);
    CHECK_EQ(wspool_group_fini(NULL), WSPOOL_EINVAL);

    OK(wspool_group_init(&gs, p, &g));
    CHECK(g == (wspool_group *)&gs); /* the handle is the storage */
    OK(wspool_group_wait(g, 0));     /* empty */
    atomic_long n = 0;
    for (int i = 0; i < 100; i++) OK(wspool_group_submit(g, task_inc, &n));
    OK(wspool_group_wait(g, -1));
    CHECK_EQ(atomic_load(&n), 100);
    /* destroy is for created groups: it refuses a placed one and leaves it usable */
    wspool_group_destroy(g);
    CHECK(last_error_mentions("wspool_group_fini"));
    OK(wspool_group_submit(g, task_inc, &n));
    OK(wspool_group_fini(g));
    CHECK_EQ(atomic_load(&n), 101);

    /* fini is for placed groups: it refuses a created one */
    wspool_group *hg = NULL;
    OK(wspool_group_create(p, &hg));
    CHECK_EQ(wspool_group_fini(hg), WSPOOL_EINVAL);
    CHECK(last_error_mentions("wspool_group_destroy"));
    wspool_group_destroy(hg);

    /* a placed group works with wspool_submit_ex's opts.group and on_cancel */
    OK(wspool_group_init(&gs, p, &g));
    slot_t slot = {0, 0};
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.group = g;
    o.on_cancel = slot_cancel;
    OK(wspool_submit_ex(p, slot_run, &slot, &o, NULL));
    OK(wspool_group_fini(g));
    CHECK_EQ(atomic_load(&slot.ran), 1);
    CHECK_EQ(atomic_load(&slot.cancelled), 0);
    wspool_destroy(p);
}

/* -------------------------------------------- fini racing running tasks --- */

typedef struct {
    atomic_int *done;
    int sleep_us;
} slow_t;
static void slow_task(void *arg) {
    slow_t *s = arg;
    if (s->sleep_us) {
        struct timespec ts = {0, s->sleep_us * 1000L};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(s->done, 1);
}

/* Storage on the heap, fini without a wait first, then the storage is
 * poisoned and freed at once: a task, or the last task's wake-up, touching
 * it after fini is a use-after-free for ASan and valgrind, and reads
 * poison otherwise. */
static void place_submit_fini(wspool *p, int tasks, int sleep_us, atomic_int *done) {
    wspool_group_storage *gs = malloc(sizeof *gs);
    wspool_group *g = NULL;
    OK(wspool_group_init(gs, p, &g));
    slow_t s = {done, sleep_us};
    for (int i = 0; i < tasks; i++) OK(wspool_group_submit(g, slow_task, &s));
    OK(wspool_group_fini(g));
    memset(gs, 0xA5, sizeof *gs);
    free(gs);
}

static void test_fini_races_running_tasks(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_int done = 0;
    int rounds = scaled(400), expected = 0;
    for (int r = 0; r < rounds; r++) {
        int tasks = 1 + r % 4;
        place_submit_fini(p, tasks, r % 3 == 0 ? 200 : 0, &done);
        expected += tasks;
        CHECK_EQ(atomic_load(&done), expected); /* fini returned after every task */
    }
    wspool_destroy(p);
}

/* The same from pool threads: the group is placed by a task, which
 * finalises it before returning. */
typedef struct {
    wspool *pool;
    atomic_int *done;
    int round;
} placer_t;
static void placer_task(void *arg) {
    placer_t *pl = arg;
    place_submit_fini(pl->pool, 1 + pl->round % 3, pl->round % 5 == 0 ? 100 : 0, pl->done);
}

static void test_fini_on_pool_threads(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    atomic_int done = 0;
    int rounds = scaled(200), expected = 0;
    placer_t *pls = calloc((size_t)rounds, sizeof *pls);
    wspool_group_storage outer_s;
    wspool_group *outer = NULL;
    OK(wspool_group_init(&outer_s, p, &outer));
    for (int r = 0; r < rounds; r++) {
        pls[r] = (placer_t){p, &done, r};
        expected += 1 + r % 3;
        OK(wspool_group_submit(outer, placer_task, &pls[r]));
    }
    OK(wspool_group_fini(outer));
    CHECK_EQ(atomic_load(&done), expected);
    free(pls);
    wspool_destroy(p);
}

/* ------------------------------------------------ nested stack groups --- */

typedef struct {
    wspool *pool;
    int n;
    long r;
} fib_t;
static void fib_task(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    fib_t a = {f->pool, f->n - 1, 0}, b = {f->pool, f->n - 2, 0};
    wspool_group_storage gs;
    wspool_group *g = NULL;
    OK(wspool_group_init(&gs, f->pool, &g));
    OK(wspool_group_submit(g, fib_task, &b));
    fib_task(&a);
    OK(wspool_group_wait(g, -1)); /* on a worker: helps */
    OK(wspool_group_fini(g));
    f->r = a.r + b.r;
}

static void test_nested_stack_groups(void) {
    /* FIXED 2 threads: only helping waits let this finish */
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    fib_t f = {p, 18, 0};
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, fib_task, &f, NULL, &t));
    OK(wspool_task_wait(t, MUST_MS));
    wspool_task_release(t);
    CHECK_EQ(f.r, 2584);
    /* from a foreign thread too */
    fib_t f2 = {p, 14, 0};
    fib_task(&f2);
    CHECK_EQ(f2.r, 377);
    wspool_destroy(p);
}

/* --------------------------------------------- shutdown, pool lifetime --- */

static void test_cancel_with_pending_placed_group_tasks(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    gate_t gate;
    gate_init(&gate);
    hold_workers(p, &gate, 1);
    wspool_group_storage gs;
    wspool_group *g = NULL;
    OK(wspool_group_init(&gs, p, &g));
    enum { N = 20 };
    slot_t slots[N];
    memset(slots, 0, sizeof slots);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.group = g;
    o.on_cancel = slot_cancel;
    for (int i = 0; i < N; i++) OK(wspool_submit_ex(p, slot_run, &slots[i], &o, NULL));
    CHECK_EQ(wspool_group_wait(g, 0), WSPOOL_ETIMEDOUT);
    /* the worker is held: CANCEL drops the queued tasks (and times out on the held one) */
    CHECK_EQ(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, 50), WSPOOL_ETIMEDOUT);
    OK(wspool_group_wait(g, MUST_MS));
    for (int i = 0; i < N; i++) {
        CHECK_EQ(atomic_load(&slots[i].ran) + atomic_load(&slots[i].cancelled), 1);
        CHECK_EQ(atomic_load(&slots[i].cancelled), 1);
    }
    CHECK_EQ(wspool_group_submit(g, task_nop, NULL), WSPOOL_ESHUTDOWN);
    OK(wspool_group_fini(g));
    gate_open(&gate);
    wspool_destroy(p);
    gate_destroy(&gate);
}

/* fini waits for a held task; the bounded wait runs on a background thread */
typedef struct {
    wspool_group *g;
    int rc;
} fini_call_t;
static void *fini_bg(void *a) {
    fini_call_t *c = a;
    c->rc = wspool_group_fini(c->g);
    return NULL;
}

static void test_fini_waits_for_a_held_task(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    gate_t gate;
    gate_init(&gate);
    wspool_group_storage *gs = malloc(sizeof *gs);
    wspool_group *g = NULL;
    OK(wspool_group_init(gs, p, &g));
    OK(wspool_group_submit(g, task_gate, &gate));
    CHECK(wait_at_least(&gate.inside, 1));
    fini_call_t c = {g, -100};
    bg_t bg;
    bg_start(&bg, fini_bg, &c);
    sleep_ms(20);
    CHECK(!atomic_load(&bg.done)); /* still waiting for the held task */
    gate_open(&gate);
    CHECK(bg_wait(&bg, MUST_MS));
    CHECK_EQ(c.rc, WSPOOL_OK);
    free(gs);
    wspool_destroy(p);
    gate_destroy(&gate);
}

static void test_placed_group_outlives_its_pool(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    wspool_group_storage gs;
    wspool_group *g = NULL;
    OK(wspool_group_init(&gs, p, &g)); /* off the pool: keeps its internals alive */
    atomic_long n = 0;
    for (int i = 0; i < 10; i++) OK(wspool_group_submit(g, task_inc, &n));
    wspool_destroy(p); /* drains */
    CHECK_EQ(atomic_load(&n), 10);
    CHECK_EQ(wspool_group_submit(g, task_inc, &n), WSPOOL_ESHUTDOWN);
    OK(wspool_group_wait(g, 0));
    OK(wspool_group_fini(g));
}

/* A pool destroyed while its tasks are inside placed groups: the tasks
 * finalise their groups before returning, and destroy drains them. */
static void test_destroy_while_tasks_use_placed_groups(void) {
    int rounds = scaled(20);
    for (int r = 0; r < rounds; r++) {
        wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
        atomic_int done = 0;
        placer_t pls[8];
        for (int i = 0; i < 8; i++) {
            pls[i] = (placer_t){p, &done, i + r};
            OK(wspool_submit(p, placer_task, &pls[i]));
        }
        wspool_destroy(p);
        int expected = 0;
        for (int i = 0; i < 8; i++) expected += 1 + (i + r) % 3;
        CHECK_EQ(atomic_load(&done), expected);
    }
}

/* A group placed by a task that returns without finalising it: it keeps
 * what it needs of the pool alive, past the pool's destroy (issue 30, item
 * 7: before, wspool_group_submit here read the freed pool; ASan and valgrind
 * reported it). Finalised after the destroy, and, for a second group, on a
 * foreign thread while the pool still runs. */
typedef struct {
    wspool *pool;
    wspool_group_storage *gs;
    wspool_group *g;
    atomic_long *n;
} placer_returns_t;
static void place_and_return(void *arg) {
    placer_returns_t *a = arg;
    OK(wspool_group_init(a->gs, a->pool, &a->g));
    for (int i = 0; i < 3; i++) OK(wspool_group_submit(a->g, task_inc, a->n));
}

static void test_placed_on_a_pool_thread_outlives_its_task_and_pool(void) {
    int rounds = scaled(10);
    for (int r = 0; r < rounds; r++) {
        wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
        /* heap storage: ASan and valgrind see any touch after fini */
        wspool_group_storage *gs = malloc(2 * sizeof *gs);
        atomic_long n = 0;
        placer_returns_t a[2] = {{p, &gs[0], NULL, &n}, {p, &gs[1], NULL, &n}};
        for (int i = 0; i < 2; i++) {
            wspool_task *t = NULL;
            OK(wspool_submit_ex(p, place_and_return, &a[i], NULL, &t));
            OK(wspool_task_wait(t, -1));
            wspool_task_release(t);
        }
        OK(wspool_group_fini(a[1].g)); /* off the pool, the pool alive */
        wspool_destroy(p);              /* drains, joins the placing threads */
        CHECK_EQ(atomic_load(&n), 6);
        CHECK_EQ(wspool_group_submit(a[0].g, task_inc, &n), WSPOOL_ESHUTDOWN);
        OK(wspool_group_wait(a[0].g, 0));
        OK(wspool_group_fini(a[0].g));
        memset(gs, 0xA5, 2 * sizeof *gs);
        free(gs);
    }
}

/* A created group destroyed while its tasks are pending is freed by the
 * last of them (issue 30, item 4: before, it leaked, and kept every buffer
 * of the pool allocated; LeakSanitizer and valgrind reported it). */
static void test_created_group_destroyed_while_pending(void) {
    int rounds = scaled(10);
    for (int r = 0; r < rounds; r++) {
        wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
        gate_t gate;
        gate_init(&gate);
        atomic_long n = 0;
        wspool_group *g = NULL;
        OK(wspool_group_create(p, &g));
        OK(wspool_group_submit(g, task_gate, &gate));
        OK(wspool_group_submit(g, task_inc, &n));
        CHECK(wait_at_least(&gate.inside, 1));
        wspool_group_destroy(g); /* both tasks pending */
        gate_open(&gate);
        wspool_destroy(p); /* drains: the last task frees the group */
        CHECK_EQ(atomic_load(&n), 1);
        gate_destroy(&gate);
    }
}

/* ------------------------------------------------- concurrent waiters --- */

typedef struct {
    wspool_group *g;
    int rc;
} wait_call_t;
static void *wait_bg(void *a) {
    wait_call_t *w = a;
    w->rc = wspool_group_wait(w->g, -1);
    return NULL;
}

static void test_sleeping_waiters_are_woken(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    int rounds = scaled(100);
    for (int r = 0; r < rounds; r++) {
        wspool_group_storage gs;
        wspool_group *g = NULL;
        OK(wspool_group_init(&gs, p, &g));
        atomic_int done = 0;
        /* outlasts the waiters' spin: they sleep, and the emptying wakes them */
        slow_t s = {&done, 100 + (r % 5) * 60};
        OK(wspool_group_submit(g, slow_task, &s));
        wait_call_t w[3];
        bg_t bg[3];
        for (int i = 0; i < 3; i++) {
            w[i] = (wait_call_t){g, -100};
            bg_start(&bg[i], wait_bg, &w[i]);
        }
        for (int i = 0; i < 3; i++) {
            CHECK(bg_wait(&bg[i], MUST_MS));
            CHECK_EQ(w[i].rc, WSPOOL_OK);
        }
        CHECK_EQ(atomic_load(&done), 1);
        OK(wspool_group_fini(g));
    }
    wspool_destroy(p);
}

/* ----------------------------------------------------------------- fork --- */

/* A group placed before fork(): in the child every call on it is
 * WSPOOL_EFORKED and fini leaves the storage alone (nothing runs its task
 * there). The parent is unaffected. (No pool is created in the child:
 * TSan cannot follow threads started after fork.) */
static void test_fork(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_group_storage gs;
    wspool_group *g = NULL;
    OK(wspool_group_init(&gs, p, &g));
    gate_t gate;
    gate_init(&gate);
    OK(wspool_group_submit(g, task_gate, &gate)); /* pending across the fork */
    CHECK(wait_at_least(&gate.inside, 1));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60); /* a hang in the child fails the test instead of blocking it */
        int bad = 0;
        atomic_long n = 0;
        bad += wspool_group_submit(g, task_inc, &n) != WSPOOL_EFORKED;
        bad += wspool_group_wait(g, 0) != WSPOOL_EFORKED;
        bad += wspool_group_fini(g) != WSPOOL_EFORKED;
        _exit(bad > 100 ? 100 : bad);
    }
    expect_child_passed(pid);
    gate_open(&gate);
    OK(wspool_group_fini(g));
    wspool_destroy(p);
    gate_destroy(&gate);
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"init_fini_arguments", test_init_fini_arguments},
        {"fini_races_running_tasks", test_fini_races_running_tasks},
        {"fini_on_pool_threads", test_fini_on_pool_threads},
        {"nested_stack_groups", test_nested_stack_groups},
        {"cancel_with_pending_placed_group_tasks", test_cancel_with_pending_placed_group_tasks},
        {"fini_waits_for_a_held_task", test_fini_waits_for_a_held_task},
        {"placed_group_outlives_its_pool", test_placed_group_outlives_its_pool},
        {"destroy_while_tasks_use_placed_groups", test_destroy_while_tasks_use_placed_groups},
        {"placed_on_a_pool_thread_outlives_its_task_and_pool", test_placed_on_a_pool_thread_outlives_its_task_and_pool},
        {"created_group_destroyed_while_pending", test_created_group_destroyed_while_pending},
        {"sleeping_waiters_are_woken", test_sleeping_waiters_are_woken},
        {"fork", test_fork},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
