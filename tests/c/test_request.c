/* Per-request control through the C API (issue 29): deadlines and lanes.
 *
 * Deadlines, `wspool_submit_opts.deadline_ns`:
 * A task not started by its deadline never runs: its on_cancel is called
 * exactly once with wspool_cancel_reason() == WSPOOL_TASK_EXPIRED, its handle
 * says WSPOOL_TASK_EXPIRED / WSPOOL_EEXPIRED, a completion queue's done gets
 * WSPOOL_CQ_EXPIRED, and wspool_stats.expired counts it. No check depends on
 * timing: a task meant to expire gets a deadline already past (or one that
 * passes while the only worker is held by a gate), one meant to run a
 * deadline an hour away.
 *
 * Lanes, `wspool_lane_create(pool, n, &s)`: a serial queue running up to n
 * of its tasks at once; the bound is checked as a maximum, never a time.
 *
 * Priorities, `wspool_submit_opts.priority` and a lane's priority: the order
 * a single worker, held by a gate while the work is queued, takes it in.
 * Run by `make test-c` in the same four passes as test_wspool. */
#include "harness.h"

#define HOUR_NS (3600ull * 1000000000ull)

/* An accounted task that also records how its on_cancel was told it ended. */
typedef struct {
    atomic_int ran;
    atomic_int cancelled;
    atomic_int expired; /* on_cancel calls that saw WSPOOL_TASK_EXPIRED */
} dslot_t;
static void dslot_run(void *a) { atomic_fetch_add(&((dslot_t *)a)->ran, 1); }
static void dslot_cancel(void *a) {
    dslot_t *s = a;
    if (wspool_cancel_reason() == WSPOOL_TASK_EXPIRED)
        atomic_fetch_add(&s->expired, 1);
    else
        atomic_fetch_add(&s->cancelled, 1);
}

static uint64_t past(void) { return wspool_now_ns(); }
static uint64_t far(void) { return wspool_now_ns() + HOUR_NS; }

static wspool *held_single(gate_t *g) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    gate_init(g);
    hold_workers(p, g, 1);
    return p;
}

static void test_constants_and_clock(void) {
    CHECK(WSPOOL_EEXPIRED < 0 && WSPOOL_EEXPIRED != WSPOOL_ECANCELLED);
    CHECK(strstr(wspool_strerror(WSPOOL_EEXPIRED), "deadline") != NULL);
    CHECK(WSPOOL_TASK_EXPIRED != WSPOOL_TASK_CANCELLED);
    CHECK(WSPOOL_CQ_EXPIRED != WSPOOL_CQ_CANCELLED);
    /* the library's clock is CLOCK_MONOTONIC */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t mine = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t lib = wspool_now_ns();
    CHECK(lib >= mine);
    CHECK(lib - mine < 60ull * 1000000000ull);
    /* outside any on_cancel the answer is "cancelled" */
    CHECK_EQ(wspool_cancel_reason(), WSPOOL_TASK_CANCELLED);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    CHECK_EQ(o.deadline_ns, 0);
    CHECK_EQ(o.priority, WSPOOL_PRIORITY_NORMAL);
}

static void test_submit_ex_deadlines(void) {
    gate_t g;
    wspool *p = held_single(&g);
    dslot_t s = {0, 0, 0};
    wspool_group *grp = NULL;
    OK(wspool_group_create(p, &grp));
    for (int i = 0; i < 10; i++) {
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.on_cancel = dslot_cancel;
        o.group = grp;
        o.deadline_ns = i % 2 ? far() : past();
        OK(wspool_submit_ex(p, dslot_run, &s, &o, NULL));
    }
    gate_open(&g);
    OK(wspool_group_wait(grp, -1));
    CHECK_EQ(atomic_load(&s.ran), 5);
    CHECK_EQ(atomic_load(&s.expired), 5);
    CHECK_EQ(atomic_load(&s.cancelled), 0);
    wspool_stats st = get_stats(p);
    CHECK_EQ(st.expired, 5);
    CHECK_EQ(st.cancelled, 0);
    CHECK_EQ(st.completed, 6); /* the gate task and the five that ran */
    char buf[8192];
    CHECK(wspool_stats_openmetrics(p, buf, sizeof buf) > 0);
    CHECK(strstr(buf, "\nwspool_expired_tasks_total 5\n") != NULL);
    wspool_group_destroy(grp);
    wspool_destroy(p);
    gate_destroy(&g);
}

static void test_task_handle_expires(void) {
    gate_t g;
    wspool *p = held_single(&g);
    dslot_t s = {0, 0, 0};
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = dslot_cancel;
    o.deadline_ns = wspool_now_ns() + 20 * 1000000ull;
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, dslot_run, &s, &o, &t));
    CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_PENDING);
    /* the only worker stays held: the waiter itself expires the task at its deadline */
    CHECK_EQ(wspool_task_wait(t, -1), WSPOOL_EEXPIRED);
    CHECK_EQ(wspool_task_state(t), WSPOOL_TASK_EXPIRED);
    CHECK_EQ(atomic_load(&s.expired), 1);
    CHECK_EQ(wspool_task_cancel(t), WSPOOL_EEXPIRED);
    CHECK_EQ(atomic_load(&s.expired) + atomic_load(&s.cancelled), 1); /* on_cancel exactly once */
    /* a cancel before the pop is a cancellation, even past the deadline */
    dslot_t c = {0, 0, 0};
    o.deadline_ns = past();
    wspool_task *t2 = NULL;
    OK(wspool_submit_ex(p, dslot_run, &c, &o, &t2));
    OK(wspool_task_cancel(t2));
    CHECK_EQ(atomic_load(&c.cancelled), 1);
    CHECK_EQ(atomic_load(&c.expired), 0);
    CHECK_EQ(wspool_task_wait(t2, -1), WSPOOL_ECANCELLED);
    gate_open(&g);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -1));
    wspool_stats st = get_stats(p);
    CHECK_EQ(st.expired, 1);
    CHECK_EQ(st.cancelled, 1);
    CHECK_EQ(atomic_load(&s.ran) + atomic_load(&c.ran), 0);
    wspool_task_release(t);
    wspool_task_release(t2);
    wspool_destroy(p);
    gate_destroy(&g);
}

static void test_serial_deadlines(void) {
    gate_t g;
    wspool *p = held_single(&g);
    wspool_serial *q = NULL;
    OK(wspool_serial_create(p, &q));
    dslot_t s[6];
    wspool_task *t[6];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 6; i++) {
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.on_cancel = dslot_cancel;
        o.serial = q;
        o.deadline_ns = i % 3 == 1 ? past() : far();
        OK(wspool_submit_ex(p, dslot_run, &s[i], &o, &t[i]));
    }
    gate_open(&g);
    for (int i = 0; i < 6; i++) {
        int want = i % 3 == 1 ? WSPOOL_EEXPIRED : WSPOOL_OK;
        CHECK_EQ(wspool_task_wait(t[i], MUST_MS), want);
        CHECK_EQ(atomic_load(&s[i].ran) + atomic_load(&s[i].expired) + atomic_load(&s[i].cancelled), 1);
        CHECK_EQ(atomic_load(&s[i].expired), i % 3 == 1);
        wspool_task_release(t[i]);
    }
    CHECK_EQ(get_stats(p).expired, 2);
    wspool_serial_destroy(q);
    wspool_destroy(p);
    gate_destroy(&g);
}

/* ---- completion queues ------------------------------------------------ */

typedef struct {
    atomic_int ran;
    int status; /* the done callback's, -1 until then */
} citem_t;
static void citem_work(void *a) { atomic_fetch_add(&((citem_t *)a)->ran, 1); }
static void citem_done(void *a, int status) { ((citem_t *)a)->status = status; }

static void test_cq_reports_expired(void) {
    gate_t g;
    wspool *p = held_single(&g);
    wspool_cq *cq = NULL;
    OK(wspool_cq_create(p, NULL, &cq));
    citem_t it[4];
    for (int i = 0; i < 4; i++) {
        atomic_init(&it[i].ran, 0);
        it[i].status = -1;
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.deadline_ns = i % 2 ? far() : past();
        OK(wspool_cq_submit_ex(cq, citem_work, citem_done, &it[i], &o));
    }
    /* on_cancel has no meaning for a queue whose done reports every ending */
    wspool_submit_opts bad;
    wspool_submit_opts_init(&bad);
    bad.on_cancel = dslot_cancel;
    CHECK_EQ(wspool_cq_submit_ex(cq, citem_work, citem_done, &it[0], &bad), WSPOOL_EINVAL);
    CHECK(last_error_mentions("on_cancel"));
    /* NULL opts = defaults */
    citem_t plain = {0, -1};
    OK(wspool_cq_submit_ex(cq, citem_work, citem_done, &plain, NULL));
    gate_open(&g);
    int got = 0;
    for (long waited = 0; got < 5 && waited < MUST_MS; waited++) {
        int n = wspool_cq_drain(cq, 64);
        CHECK(n >= 0);
        got += n;
        if (got < 5) sleep_ms(1);
    }
    CHECK_EQ(got, 5);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(it[i].status, i % 2 ? WSPOOL_CQ_RAN : WSPOOL_CQ_EXPIRED);
        CHECK_EQ(atomic_load(&it[i].ran), i % 2);
    }
    CHECK_EQ(plain.status, WSPOOL_CQ_RAN);
    CHECK_EQ(get_stats(p).expired, 2);
    OK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_DRAIN, -1));
    wspool_destroy(p);
    gate_destroy(&g);
}

/* A program built before deadlines (struct_size without deadline_ns) gets no deadline. */
static void test_older_opts_layout_has_no_deadline(void) {
    gate_t g;
    wspool *p = held_single(&g);
    dslot_t s = {0, 0, 0};
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = dslot_cancel;
    o.deadline_ns = past(); /* beyond the struct_size below: never read */
    o.struct_size = offsetof(wspool_submit_opts, deadline_ns);
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, dslot_run, &s, &o, &t));
    gate_open(&g);
    OK(wspool_task_wait(t, -1));
    CHECK_EQ(atomic_load(&s.ran), 1);
    CHECK_EQ(atomic_load(&s.expired), 0);
    wspool_task_release(t);
    /* and an older stats layout is not written past */
    wspool_stats st;
    memset(&st, 0xab, sizeof st);
    OK(wspool_stats_init_sized(&st, offsetof(wspool_stats, expired)));
    OK(wspool_stats_get(p, &st));
    CHECK_EQ(st.expired, 0xababababababababull);
    wspool_destroy(p);
    gate_destroy(&g);
}

/* ---- lanes -------------------------------------------------------------- */

typedef struct {
    gate_t *gate;
    atomic_int now, max, done;
} occ_t;
static void occ_task(void *a) {
    occ_t *o = a;
    int now = atomic_fetch_add(&o->now, 1) + 1;
    int seen = atomic_load(&o->max);
    while (now > seen && !atomic_compare_exchange_weak(&o->max, &seen, now)) {
    }
    wspool_blocking_begin();
    gate_pass(o->gate);
    wspool_blocking_end();
    atomic_fetch_sub(&o->now, 1);
    atomic_fetch_add(&o->done, 1);
}

static void test_lane_limit(void) {
    wspool *p = make_pool(2, 32, WSPOOL_GROWTH_ADAPTIVE);
    wspool_serial *lane = NULL;
    CHECK_EQ(wspool_lane_create(p, 0, WSPOOL_PRIORITY_NORMAL, &lane), WSPOOL_EINVAL);
    CHECK(lane == NULL);
    CHECK(last_error_mentions("limit"));
    CHECK_EQ(wspool_lane_create(NULL, 2, WSPOOL_PRIORITY_NORMAL, &lane), WSPOOL_EINVAL);
    CHECK_EQ(wspool_lane_create(p, 2, WSPOOL_PRIORITY_NORMAL, NULL), WSPOOL_EINVAL);
    CHECK_EQ(wspool_lane_create(p, 2, 7, &lane), WSPOOL_EINVAL);
    CHECK(last_error_mentions("priority"));
    OK(wspool_lane_create(p, 2, WSPOOL_PRIORITY_NORMAL, &lane));
    gate_t g;
    gate_init(&g);
    occ_t o = {&g, 0, 0, 0};
    for (int i = 0; i < 12; i++) {
        if (i % 2)
            OK(wspool_serial_submit(lane, occ_task, &o));
        else {
            wspool_submit_opts so;
            wspool_submit_opts_init(&so);
            so.serial = lane;
            OK(wspool_submit_ex(p, occ_task, &o, &so, NULL));
        }
    }
    CHECK(wait_at_least(&g.inside, 2));
    /* the pool lends threads to the blocked lane tasks; other work still runs */
    atomic_long n = 0;
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, task_inc, &n, NULL, &t));
    OK(wspool_task_wait(t, MUST_MS));
    wspool_task_release(t);
    CHECK_EQ(atomic_load(&n), 1);
    CHECK_EQ(atomic_load(&o.now), 2);
    gate_open(&g);
    CHECK(wait_at_least(&o.done, 12));
    CHECK_EQ(atomic_load(&o.max), 2); /* blocking inside the lane counts against the lane */
    wspool_serial_destroy(lane);
    wspool_destroy(p);
    gate_destroy(&g);
}

static void test_lane_cancel_shutdown(void) {
    gate_t g;
    wspool *p = held_single(&g);
    wspool_serial *lane = NULL;
    OK(wspool_lane_create(p, 3, WSPOOL_PRIORITY_LOW, &lane));
    dslot_t s = {0, 0, 0};
    for (int i = 0; i < 20; i++) {
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.serial = lane;
        o.on_cancel = dslot_cancel;
        o.deadline_ns = i % 4 == 0 ? past() : 0;
        OK(wspool_submit_ex(p, dslot_run, &s, &o, NULL));
    }
    wspool_serial_destroy(lane); /* pending tasks stay */
    gate_open(&g);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, -1));
    /* every task ended exactly once: ran, cancelled, or expired */
    CHECK_EQ(atomic_load(&s.ran) + atomic_load(&s.cancelled) + atomic_load(&s.expired), 20);
    CHECK(atomic_load(&s.expired) <= 5);
    wspool_destroy(p);
    gate_destroy(&g);
}

/* ---- priorities --------------------------------------------------------- */

typedef struct {
    pthread_mutex_t m;
    char log[256];
    size_t n;
} order_t;
typedef struct {
    order_t *o;
    char tag;
} otask_t;
static void otask_run(void *a) {
    otask_t *t = a;
    pthread_mutex_lock(&t->o->m);
    if (t->o->n + 1 < sizeof t->o->log) t->o->log[t->o->n++] = t->tag;
    pthread_mutex_unlock(&t->o->m);
}

static void test_priorities_order(void) {
    gate_t g;
    wspool *p = held_single(&g);
    order_t o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.m, NULL);
    wspool_group *grp = NULL;
    OK(wspool_group_create(p, &grp));
    wspool_serial *lane = NULL;
    OK(wspool_lane_create(p, 1, WSPOOL_PRIORITY_HIGH, &lane));
    /* queued in this order: low, 3 normal, 2 high, 1 task of a high lane */
    otask_t t[7] = {{&o, 'l'}, {&o, 'n'}, {&o, 'n'}, {&o, 'n'}, {&o, 'H'}, {&o, 'H'}, {&o, 'L'}};
    int prio[7] = {WSPOOL_PRIORITY_LOW, 0, 0, 0, WSPOOL_PRIORITY_HIGH, WSPOOL_PRIORITY_HIGH, 0};
    for (int i = 0; i < 7; i++) {
        wspool_submit_opts so;
        wspool_submit_opts_init(&so);
        so.group = grp;
        so.priority = prio[i];
        if (i == 6) so.serial = lane;
        OK(wspool_submit_ex(p, otask_run, &t[i], &so, NULL));
    }
    wspool_submit_opts bad;
    wspool_submit_opts_init(&bad);
    bad.priority = 2;
    CHECK_EQ(wspool_submit_ex(p, otask_run, &t[0], &bad, NULL), WSPOOL_EINVAL);
    CHECK(last_error_mentions("priority"));
    gate_open(&g);
    OK(wspool_group_wait(grp, -1));
    /* high work first (the lane's turn is high too), then normal, the low task last: it stepped
     * back behind the normal work that was queued */
    CHECK(strcmp(o.log, "HHLnnnl") == 0);
    if (strcmp(o.log, "HHLnnnl") != 0) fprintf(stderr, "  order: %s\n", o.log);
    wspool_serial_destroy(lane);
    wspool_group_destroy(grp);
    wspool_destroy(p);
    pthread_mutex_destroy(&o.m);
    gate_destroy(&g);
}

/* Low tasks queued first, then normal ones: each Low task is behind exactly the normal work
 * queued before it (none here) and lets at most WSPOOL_PRIORITY_LOW_MAX_OVERTAKES later tasks
 * start first, so all five normal tasks run before any Low one. */
static void test_low_queued_first_runs_after_later_normal(void) {
    gate_t g;
    wspool *p = held_single(&g);
    order_t o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.m, NULL);
    wspool_group *grp = NULL;
    OK(wspool_group_create(p, &grp));
    otask_t t[8] = {{&o, 'l'}, {&o, 'l'}, {&o, 'l'}, {&o, 'n'}, {&o, 'n'}, {&o, 'n'}, {&o, 'n'}, {&o, 'n'}};
    for (int i = 0; i < 8; i++) {
        wspool_submit_opts so;
        wspool_submit_opts_init(&so);
        so.group = grp;
        so.priority = i < 3 ? WSPOOL_PRIORITY_LOW : WSPOOL_PRIORITY_NORMAL;
        OK(wspool_submit_ex(p, otask_run, &t[i], &so, NULL));
    }
    CHECK(WSPOOL_PRIORITY_LOW_MAX_OVERTAKES == WSPOOL_PRIORITY_LOW_DEFERS * WSPOOL_PRIORITY_HIGH_BURST);
    gate_open(&g);
    OK(wspool_group_wait(grp, -1));
    CHECK(strcmp(o.log, "nnnnnlll") == 0);
    if (strcmp(o.log, "nnnnnlll") != 0) fprintf(stderr, "  order: %s\n", o.log);
    wspool_group_destroy(grp);
    wspool_destroy(p);
    pthread_mutex_destroy(&o.m);
    gate_destroy(&g);
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"constants_and_clock", test_constants_and_clock},
        {"submit_ex_deadlines", test_submit_ex_deadlines},
        {"task_handle_expires", test_task_handle_expires},
        {"serial_deadlines", test_serial_deadlines},
        {"cq_reports_expired", test_cq_reports_expired},
        {"older_opts_layout_has_no_deadline", test_older_opts_layout_has_no_deadline},
        {"lane_limit", test_lane_limit},
        {"lane_cancel_shutdown", test_lane_cancel_shutdown},
        {"priorities_order", test_priorities_order},
        {"low_queued_first_runs_after_later_normal", test_low_queued_first_runs_after_later_normal},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
