/* Diagnosis through the C API (issue 26): waits that cannot succeed return
 * WSPOOL_EDEADLK instead of hanging (a task on its own handle, a group's task
 * on its group); wspool_dump's report and truncation rule; the stall
 * callback and wspool_stats.stalls. No check depends on timing: states are
 * set up with gates, and a wait that must end is bounded by MUST_MS (a hang
 * becomes a failure). A serial queue's task waiting on a task queued behind
 * it gets WSPOOL_EDEADLK too. Task labels (wspool_submit_opts.label) show
 * in the report. Run by `make test-c` in the same four passes as
 * test_wspool. */
#include "harness.h"

static void test_edeadlk_status(void) {
    CHECK(WSPOOL_EDEADLK < 0 && WSPOOL_EDEADLK != WSPOOL_EEXPIRED);
    CHECK(strstr(wspool_strerror(WSPOOL_EDEADLK), "deadlock") != NULL);
}

/* A task that waits, untimed, on its own handle. */
typedef struct {
    _Atomic(wspool_task *) self;
    atomic_int result; /* status of the untimed wait on itself */
    atomic_int timed;  /* status of a timed wait (0 ms) on itself */
    atomic_int done;
} selfwait_t;

static void task_waits_on_itself(void *a) {
    selfwait_t *s = a;
    wspool_task *t;
    while ((t = atomic_load(&s->self)) == NULL) sleep_ms(1);
    atomic_store(&s->timed, wspool_task_wait(t, 0));
    atomic_store(&s->result, wspool_task_wait(t, -1));
    atomic_store(&s->done, 1);
}

static void test_task_waiting_on_itself_gets_edeadlk(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    selfwait_t s;
    atomic_init(&s.self, NULL);
    atomic_init(&s.result, 0);
    atomic_init(&s.timed, 0);
    atomic_init(&s.done, 0);
    wspool_task *t = NULL;
    OK(wspool_submit_ex(p, task_waits_on_itself, &s, NULL, &t));
    atomic_store(&s.self, t);
    CHECK(wait_at_least(&s.done, 1));
    CHECK_EQ(atomic_load(&s.result), WSPOOL_EDEADLK);
    CHECK_EQ(atomic_load(&s.timed), WSPOOL_ETIMEDOUT); /* a timed wait is never refused */
    OK(wspool_task_wait(t, MUST_MS));                       /* from outside: it finished */
    wspool_task_release(t);
    wspool_destroy(p);
}

/* A group's task that waits, untimed, on its own group. */
typedef struct {
    _Atomic(wspool_group *) g;
    atomic_int result;
    atomic_int timed;
    atomic_int done;
} groupwait_t;

static void task_waits_on_its_group(void *a) {
    groupwait_t *s = a;
    wspool_group *g;
    while ((g = atomic_load(&s->g)) == NULL) sleep_ms(1);
    atomic_store(&s->timed, wspool_group_wait(g, 0));
    atomic_store(&s->result, wspool_group_wait(g, -1));
    atomic_store(&s->done, 1);
}

static void test_group_task_waiting_on_its_group_gets_edeadlk(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    groupwait_t s;
    atomic_init(&s.g, NULL);
    atomic_init(&s.result, 0);
    atomic_init(&s.timed, 0);
    atomic_init(&s.done, 0);
    wspool_group *g = NULL;
    OK(wspool_group_create(p, &g));
    OK(wspool_group_submit(g, task_waits_on_its_group, &s));
    atomic_store(&s.g, g);
    CHECK(wait_at_least(&s.done, 1));
    CHECK_EQ(atomic_load(&s.result), WSPOOL_EDEADLK);
    CHECK_EQ(atomic_load(&s.timed), WSPOOL_ETIMEDOUT);
    CHECK(strstr(wspool_strerror(atomic_load(&s.result)), "deadlock") != NULL);
    OK(wspool_group_wait(g, MUST_MS));
    wspool_group_destroy(g);
    wspool_destroy(p);
}

/* A serial queue's task that waits, untimed, on a task queued behind it on
 * the same queue: the queue would start that task only after this one. */
typedef struct {
    _Atomic(wspool_task *) behind;
    atomic_int result;
    atomic_int done;
} serialwait_t;

static void task_waits_on_the_next(void *a) {
    serialwait_t *s = a;
    wspool_task *t;
    while ((t = atomic_load(&s->behind)) == NULL) sleep_ms(1);
    atomic_store(&s->result, wspool_task_wait(t, -1));
    atomic_store(&s->done, 1);
}

static void test_serial_task_waiting_on_the_next_gets_edeadlk(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    wspool_serial *q = NULL;
    OK(wspool_serial_create(p, &q));
    serialwait_t s;
    atomic_init(&s.behind, NULL);
    atomic_init(&s.result, 0);
    atomic_init(&s.done, 0);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.serial = q;
    wspool_task *first = NULL, *next = NULL;
    OK(wspool_submit_ex(p, task_waits_on_the_next, &s, &o, &first));
    OK(wspool_submit_ex(p, task_nop, NULL, &o, &next));
    atomic_store(&s.behind, next);
    CHECK(wait_at_least(&s.done, 1));
    CHECK_EQ(atomic_load(&s.result), WSPOOL_EDEADLK);
    OK(wspool_task_wait(first, MUST_MS));
    OK(wspool_task_wait(next, MUST_MS));
    wspool_task_release(first);
    wspool_task_release(next);
    wspool_serial_destroy(q);
    wspool_destroy(p);
}

static void test_dump_report_and_truncation(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 1);
    for (int i = 0; i < 3; i++) OK(wspool_submit(p, task_nop, NULL));
    size_t needed = 0;
    /* size query */
    OK(wspool_dump(p, NULL, 0, &needed));
    CHECK(needed > 1);
    size_t cap = needed + 4096;
    char *buf = malloc(cap);
    OK(wspool_dump(p, buf, cap, &needed));
    CHECK(needed <= cap && strlen(buf) + 1 == needed);
    CHECK(strstr(buf, "running a task") != NULL);
    CHECK(strstr(buf, "global: 3 queued") != NULL);
    if (!strstr(buf, "global: 3 queued")) fprintf(stderr, "%s", buf);
    /* truncated: whole lines only, NUL-terminated, needed says how much */
    char small[48];
    memset(small, 'x', sizeof small);
    OK(wspool_dump(p, small, sizeof small, &needed));
    CHECK(needed > sizeof small);
    size_t n = strlen(small);
    CHECK(n < sizeof small);
    CHECK(n == 0 || small[n - 1] == '\n');
    CHECK(strncmp(buf, small, n) == 0);
    /* a buffer of one byte holds the NUL only */
    char one = 'x';
    OK(wspool_dump(p, &one, 1, NULL));
    CHECK_EQ(one, 0);
    CHECK_EQ(wspool_dump(NULL, buf, cap, NULL), WSPOOL_EINVAL);
    CHECK_EQ(wspool_dump(p, NULL, 8, NULL), WSPOOL_EINVAL);
    gate_open(&g);
    free(buf);
    wspool_destroy(p);
    gate_destroy(&g);
}

/* Task labels (wspool_submit_opts.label): four held tasks, one labelled from
 * a buffer overwritten right after the submission (the pool copied it), one
 * labelled with invalid UTF-8 (replaced, not refused), one unlabelled, and
 * one whose caller's struct ends before `label` (an older layout: the field
 * is never read). The report names the first two only. */
static void test_dump_shows_task_labels(void) {
    wspool *p = make_pool(4, 4, WSPOOL_GROWTH_FIXED);
    gate_t g;
    gate_init(&g);
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    char name[32];
    strcpy(name, "parse_request");
    o.label = name;
    OK(wspool_submit_ex(p, task_gate, &g, &o, NULL));
    memset(name, 'x', sizeof name - 1); /* the pool must not read it later */
    o.label = "bad\xff utf8";
    OK(wspool_submit_ex(p, task_gate, &g, &o, NULL));
    OK(wspool_submit(p, task_gate, &g));
    o.label = "never read";
    o.struct_size = offsetof(wspool_submit_opts, label);
    OK(wspool_submit_ex(p, task_gate, &g, &o, NULL));
    CHECK(wait_at_least(&g.inside, 4));
    char buf[8192];
    int seen = 0;
    for (long waited = 0; waited < MUST_MS && !seen; waited++) {
        OK(wspool_dump(p, buf, sizeof buf, NULL));
        seen = strstr(buf, "running \"parse_request\"") != NULL &&
               strstr(buf, "running \"bad\xef\xbf\xbd utf8\"") != NULL;
        if (!seen) sleep_ms(1);
    }
    if (!seen) fprintf(stderr, "%s", buf);
    CHECK(seen);
    CHECK(strstr(buf, "running a task") != NULL); /* the unlabelled ones */
    CHECK(strstr(buf, "never read") == NULL);
    CHECK(strstr(buf, "xxxx") == NULL);
    gate_open(&g);
    wspool_destroy(p);
    gate_destroy(&g);
}

typedef struct {
    atomic_int reports;
    atomic_int mentions_queue; /* the report named the queued task */
} stall_seen_t;

static void on_stall(void *ctx, const char *report) {
    stall_seen_t *s = ctx;
    if (strstr(report, "global: 1 queued") != NULL) atomic_fetch_add(&s->mentions_queue, 1);
    atomic_fetch_add(&s->reports, 1);
}

/* A FIXED pool (no monitor of its own) whose only worker is held while a
 * task is queued: the handler gets a report naming the queue, and the
 * episode is counted. That it is reported once per episode, and not for a
 * backlog that moves, is checked on a simulated clock by the Rust tests
 * (core/src/dump.rs). */
static void test_stall_handler_reports_and_counts(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    stall_seen_t s;
    atomic_init(&s.reports, 0);
    atomic_init(&s.mentions_queue, 0);
    CHECK_EQ(wspool_set_stall_handler(NULL, 10, on_stall, &s), WSPOOL_EINVAL);
    OK(wspool_set_stall_handler(p, 10, on_stall, &s));
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 1);
    OK(wspool_submit(p, task_nop, NULL));
    CHECK(wait_at_least(&s.reports, 1));
    CHECK(atomic_load(&s.mentions_queue) >= 1);
    CHECK(get_stats(p).stalls >= 1);
    gate_open(&g);
    wspool_destroy(p);
    gate_destroy(&g);
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"edeadlk_status", test_edeadlk_status},
        {"task_waiting_on_itself_gets_edeadlk", test_task_waiting_on_itself_gets_edeadlk},
        {"group_task_waiting_on_its_group_gets_edeadlk", test_group_task_waiting_on_its_group_gets_edeadlk},
        {"serial_task_waiting_on_the_next_gets_edeadlk", test_serial_task_waiting_on_the_next_gets_edeadlk},
        {"dump_report_and_truncation", test_dump_report_and_truncation},
        {"dump_shows_task_labels", test_dump_shows_task_labels},
        {"stall_handler_reports_and_counts", test_stall_handler_reports_and_counts},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
