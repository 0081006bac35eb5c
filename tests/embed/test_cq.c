/*
 * tests/embed/test_cq.c: the C completion-queue API (wspool_cq_*), the
 * overload flag and the OpenMetrics export. Every test counts done calls
 * per submission: each accepted one must see exactly one, whatever ends it
 * (ran, pool shutdown CANCEL, wspool_cq_close CANCEL). Built plain and with
 * ASan+UBSan+LSan by mk/embed.mk; alarm() is the hang guard.
 */
#define _GNU_SOURCE
#include <libwspool.h>

#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures;
#define CHECK(c)                                                                                  \
    do {                                                                                          \
        if (!(c)) {                                                                               \
            fprintf(stderr, "FAIL %s:%d: %s (%s)\n", __FILE__, __LINE__, #c, wspool_last_error()); \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)

typedef struct req {
    int id;
    atomic_int done_calls;
    int status;
    int order; /* position among drained completions */
    atomic_int ran;
} req;

static int drained_seq;
static atomic_int gate_open, gate_entered;

static void work_plain(void *arg) { atomic_fetch_add(&((req *)arg)->ran, 1); }

static void work_gated(void *arg)
{
    atomic_store(&gate_entered, 1);
    while (!atomic_load(&gate_open))
        usleep(100);
    work_plain(arg);
}

static void work_sleep_2ms(void *arg)
{
    usleep(2000);
    work_plain(arg);
}

static void on_done(void *arg, int status)
{
    req *r = arg;
    atomic_fetch_add(&r->done_calls, 1);
    r->status = status;
    r->order = drained_seq++;
}

static wspool *make_pool(unsigned threads, int fixed)
{
    wspool_config c;
    wspool_config_init(&c);
    c.min_threads = threads;
    if (fixed) {
        c.max_threads = threads;
        c.growth = WSPOOL_GROWTH_FIXED;
    }
    wspool *p = NULL;
    if (wspool_create(&c, &p) != WSPOOL_OK) {
        fprintf(stderr, "wspool_create: %s\n", wspool_last_error());
        exit(1);
    }
    return p;
}

static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

/* Whether the fd turns unreadable by itself within a generous guard: a drain
 * that raced a worker's wake-up leaves a brief stale readiness, which that
 * worker clears right after its write. */
static int unreadable_soon(int fd)
{
    for (int i = 0; i < 10000 && readable(fd, 0); i++)
        usleep(1000);
    return !readable(fd, 0);
}

/* Drains until `want` done calls happened in total, polling the fd. */
static int drain_until(wspool_cq *cq, int want)
{
    int got = 0;
    for (int spins = 0; got < want && spins < 30000; spins++) {
        int fd = wspool_cq_fd(cq);
        if (fd >= 0)
            readable(fd, 10);
        else
            usleep(1000);
        int n = wspool_cq_drain(cq, 0);
        CHECK(n >= 0);
        got += n;
    }
    return got;
}

static void wait_gate_entered(void)
{
    for (int i = 0; i < 30000 && !atomic_load(&gate_entered); i++)
        usleep(1000);
}

static void test_basic_fd_order_and_level(void)
{
    enum { N = 2000 };
    wspool *p = make_pool(2, 0);
    wspool_cq *cq = NULL;
    CHECK(wspool_cq_create(p, NULL, &cq) == WSPOOL_OK);
    int fd = wspool_cq_fd(cq);
    CHECK(fd >= 0);
    CHECK(!readable(fd, 0));
    req *rs = calloc(N, sizeof *rs);
    for (int i = 0; i < N; i++)
        CHECK(wspool_cq_submit(cq, work_plain, on_done, &rs[i]) == WSPOOL_OK);
    CHECK(wspool_cq_pending(cq) > 0);
    drained_seq = 0;
    CHECK(drain_until(cq, N) == N);
    for (int i = 0; i < N; i++) {
        CHECK(atomic_load(&rs[i].done_calls) == 1);
        CHECK(rs[i].status == WSPOOL_CQ_RAN);
        CHECK(atomic_load(&rs[i].ran) == 1);
    }
    CHECK(wspool_cq_pending(cq) == 0);
    CHECK(unreadable_soon(fd)); /* drain cleared it (or the last waker did) */
    CHECK(wspool_cq_submit(cq, NULL, on_done, &rs[0]) == WSPOOL_EINVAL);
    CHECK(wspool_cq_submit(cq, work_plain, NULL, &rs[0]) == WSPOOL_EINVAL);
    CHECK(wspool_cq_close(cq, 7, -1) == WSPOOL_EINVAL);
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_DRAIN, -1) == WSPOOL_OK);
    wspool_destroy(p);
    free(rs);
}

static void test_bounded_drain_keeps_fd_readable(void)
{
    enum { N = 40 };
    wspool *p = make_pool(1, 1);
    wspool_cq *cq = NULL;
    CHECK(wspool_cq_create(p, NULL, &cq) == WSPOOL_OK);
    req rs[N];
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < N; i++)
        CHECK(wspool_cq_submit(cq, work_plain, on_done, &rs[i]) == WSPOOL_OK);
    for (int i = 0; i < 30000; i++) {
        int all = 1;
        for (int k = 0; k < N; k++)
            all &= atomic_load(&rs[k].ran) == 1;
        if (all)
            break;
        usleep(1000);
    }
    usleep(2000); /* the last one's completion follows its work */
    CHECK(readable(wspool_cq_fd(cq), 1000));
    CHECK(wspool_cq_drain(cq, 10) == 10);
    CHECK(readable(wspool_cq_fd(cq), 0)); /* level: 30 left */
    CHECK(wspool_cq_drain(cq, 0) == 30);
    CHECK(!readable(wspool_cq_fd(cq), 0));
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_DRAIN, 30000) == WSPOOL_OK);
    wspool_destroy(p);
}

/* A pool shutdown CANCEL while the only worker is busy: the queued ones come
 * back CANCELLED, every done exactly once, then the pool is gone. */
static void test_pool_cancel_shutdown_exactly_once(void)
{
    enum { N = 500 };
    wspool *p = make_pool(1, 1);
    wspool_cq *cq = NULL;
    CHECK(wspool_cq_create(p, NULL, &cq) == WSPOOL_OK);
    req *rs = calloc(N, sizeof *rs);
    atomic_store(&gate_open, 0);
    atomic_store(&gate_entered, 0);
    CHECK(wspool_cq_submit(cq, work_gated, on_done, &rs[0]) == WSPOOL_OK);
    wait_gate_entered();
    for (int i = 1; i < N; i++)
        CHECK(wspool_cq_submit(cq, work_plain, on_done, &rs[i]) == WSPOOL_OK);
    CHECK(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, 0) == WSPOOL_ETIMEDOUT);
    atomic_store(&gate_open, 1);
    CHECK(wspool_shutdown(p, WSPOOL_SHUTDOWN_CANCEL, -1) == WSPOOL_OK);
    CHECK(wspool_cq_submit(cq, work_plain, on_done, &rs[0]) == WSPOOL_ESHUTDOWN);
    CHECK(drain_until(cq, N) == N);
    int cancelled = 0;
    for (int i = 0; i < N; i++) {
        CHECK(atomic_load(&rs[i].done_calls) == 1);
        cancelled += rs[i].status == WSPOOL_CQ_CANCELLED;
        CHECK(atomic_load(&rs[i].ran) == (rs[i].status == WSPOOL_CQ_RAN));
    }
    CHECK(rs[0].status == WSPOOL_CQ_RAN);
    CHECK(cancelled == N - 1);
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_DRAIN, -1) == WSPOOL_OK);
    wspool_destroy(p);
    free(rs);
}

/* wspool_cq_close CANCEL: the queue's unstarted work is skipped, every done
 * runs inside the close, and the pool keeps working for others. */
static void test_close_cancel_exactly_once(void)
{
    enum { N = 300 };
    wspool *p = make_pool(1, 1);
    wspool_cq *cq = NULL;
    CHECK(wspool_cq_create(p, NULL, &cq) == WSPOOL_OK);
    req *rs = calloc(N, sizeof *rs);
    atomic_store(&gate_open, 0);
    atomic_store(&gate_entered, 0);
    CHECK(wspool_cq_submit(cq, work_gated, on_done, &rs[0]) == WSPOOL_OK);
    wait_gate_entered();
    for (int i = 1; i < N; i++)
        CHECK(wspool_cq_submit(cq, work_plain, on_done, &rs[i]) == WSPOOL_OK);
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_CANCEL, 0) == WSPOOL_ETIMEDOUT); /* the gated one runs */
    atomic_store(&gate_open, 1);
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_CANCEL, 30000) == WSPOOL_OK);
    for (int i = 0; i < N; i++) {
        CHECK(atomic_load(&rs[i].done_calls) == 1);
        CHECK(rs[i].status == (i == 0 ? WSPOOL_CQ_RAN : WSPOOL_CQ_CANCELLED));
        CHECK(atomic_load(&rs[i].ran) == (i == 0));
    }
    wspool_destroy(p);
    free(rs);
}

/* wspool_cq_submit_task: a queued submission cancelled through its handle
 * never runs, and its done (CANCELLED) comes at the next drain while the
 * only worker is still held; one that ran cannot be cancelled (EBUSY). Bad
 * input loses nothing: a NULL out_task is EINVAL and nothing was accepted. */
static void test_cancel_through_task_handle(void)
{
    wspool *p = make_pool(1, 1);
    wspool_cq *cq = NULL;
    CHECK(wspool_cq_create(p, NULL, &cq) == WSPOOL_OK);
    req rs[4] = {{.id = 0}};
    atomic_store(&gate_open, 0);
    atomic_store(&gate_entered, 0);
    wspool_task *held = NULL, *queued = NULL, *ran = NULL;
    CHECK(wspool_cq_submit_task(cq, work_gated, on_done, &rs[0], NULL, &held) == WSPOOL_OK && held);
    wait_gate_entered();
    CHECK(wspool_cq_submit_task(cq, work_plain, on_done, &rs[1], NULL, &queued) == WSPOOL_OK && queued);
    CHECK(wspool_task_state(queued) == WSPOOL_TASK_PENDING);
    CHECK(wspool_task_cancel(queued) == WSPOOL_OK);
    CHECK(wspool_task_cancel(queued) == WSPOOL_ECANCELLED);
    CHECK(wspool_task_state(queued) == WSPOOL_TASK_CANCELLED);
    CHECK(drain_until(cq, 1) == 1); /* the worker is still held: the cancel itself completed it */
    CHECK(atomic_load(&rs[1].done_calls) == 1 && rs[1].status == WSPOOL_CQ_CANCELLED);
    CHECK(wspool_task_cancel(held) == WSPOOL_EBUSY);
    CHECK(wspool_cq_submit_task(cq, work_plain, on_done, &rs[3], NULL, NULL) == WSPOOL_EINVAL);
    atomic_store(&gate_open, 1);
    CHECK(drain_until(cq, 1) == 1);
    CHECK(rs[0].status == WSPOOL_CQ_RAN);
    CHECK(wspool_cq_submit_task(cq, work_plain, on_done, &rs[2], NULL, &ran) == WSPOOL_OK);
    CHECK(drain_until(cq, 1) == 1);
    CHECK(rs[2].status == WSPOOL_CQ_RAN);
    CHECK(wspool_task_cancel(ran) == WSPOOL_EBUSY);
    /* done can run a moment before the handle reads DONE (the completion is queued from inside
     * the task); a wait, off the loop, settles it */
    CHECK(wspool_task_wait(ran, -1) == WSPOOL_OK);
    CHECK(wspool_task_state(ran) == WSPOOL_TASK_DONE);
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_DRAIN, -1) == WSPOOL_OK);
    wspool_task_release(held);
    wspool_task_release(queued);
    wspool_task_release(ran);
    for (int i = 0; i < 3; i++)
        CHECK(atomic_load(&rs[i].done_calls) == 1);
    CHECK(atomic_load(&rs[1].ran) == 0 && atomic_load(&rs[3].done_calls) == 0 && atomic_load(&rs[3].ran) == 0);
    wspool_destroy(p);
}

static atomic_int wakes;
static void count_wake(void *ctx) { (void)ctx; atomic_fetch_add(&wakes, 1); }

static int signals[16], nsignals;
static void on_signal(void *ctx, int s)
{
    (void)ctx;
    if (nsignals < 16)
        signals[nsignals++] = s;
}

static void test_wake_callback_cap_and_watermarks(void)
{
    enum { CAP = 8 };
    wspool *p = make_pool(1, 1);
    wspool_cq_opts o;
    wspool_cq_opts_init(&o);
    o.cap = CAP;
    o.high_water = 6;
    o.low_water = 2;
    o.overload_target_us = 0;
    o.wake = count_wake;
    o.on_signal = on_signal;
    wspool_cq *cq = NULL;
    CHECK(wspool_cq_create(p, &o, &cq) == WSPOOL_OK);
    CHECK(wspool_cq_fd(cq) == -1);
    req rs[CAP + 1];
    memset(rs, 0, sizeof rs);
    atomic_store(&gate_open, 0);
    atomic_store(&gate_entered, 0);
    atomic_store(&wakes, 0);
    nsignals = 0;
    CHECK(wspool_cq_submit(cq, work_gated, on_done, &rs[0]) == WSPOOL_OK);
    wait_gate_entered();
    for (int i = 1; i < CAP; i++)
        CHECK(wspool_cq_submit(cq, work_plain, on_done, &rs[i]) == WSPOOL_OK);
    CHECK(wspool_cq_submit(cq, work_plain, on_done, &rs[CAP]) == WSPOOL_EREJECTED);
    CHECK(atomic_load(&wakes) == 1); /* the HighWater signal made the queue ready */
    atomic_store(&gate_open, 1);
    while (wspool_cq_pending(cq) > 0) {
        usleep(1000);
        wspool_cq_drain(cq, 0);
    }
    CHECK(atomic_load(&rs[CAP].done_calls) == 0); /* refused: no done */
    CHECK(nsignals == 2);
    CHECK(signals[0] == WSPOOL_CQ_SIGNAL_HIGH_WATER);
    CHECK(signals[1] == WSPOOL_CQ_SIGNAL_LOW_WATER);
    for (int i = 0; i < CAP; i++)
        CHECK(atomic_load(&rs[i].done_calls) == 1);
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_DRAIN, -1) == WSPOOL_OK);
    wspool_destroy(p);
}

static void test_overload_signal_and_flag(void)
{
    enum { N = 40 };
    wspool *p = make_pool(1, 1);
    wspool_cq_opts o;
    wspool_cq_opts_init(&o);
    CHECK(o.overload_target_us == 5000 && o.overload_interval_us == 100000);
    o.overload_target_us = 2000;
    o.overload_interval_us = 10000;
    o.on_signal = on_signal;
    wspool_cq *cq = NULL;
    CHECK(wspool_cq_create(p, &o, &cq) == WSPOOL_OK);
    req rs[N];
    memset(rs, 0, sizeof rs);
    nsignals = 0;
    for (int i = 0; i < N; i++)
        CHECK(wspool_cq_submit(cq, work_sleep_2ms, on_done, &rs[i]) == WSPOOL_OK);
    int seen_flag = 0, seen_pool_flag = 0, got = 0;
    for (int spins = 0; got < N && spins < 30000; spins++) {
        seen_flag |= wspool_cq_overloaded(cq);
        seen_pool_flag |= wspool_overloaded(p);
        readable(wspool_cq_fd(cq), 5);
        got += wspool_cq_drain(cq, 0);
    }
    CHECK(got == N);
    CHECK(seen_flag && seen_pool_flag);
    /* Each 1 above was a refusal: the state recovers once the admission test
     * went an interval (10 ms) without one, asked as each new request would. */
    for (int spins = 0; nsignals < 2 && spins < 10000; spins++) {
        CHECK(!wspool_cq_overloaded(cq)); /* nothing waits: admitted */
        usleep(1000);
        wspool_cq_drain(cq, 0);
    }
    CHECK(nsignals == 2);
    CHECK(signals[0] == WSPOOL_CQ_SIGNAL_OVERLOADED);
    CHECK(signals[1] == WSPOOL_CQ_SIGNAL_RECOVERED);
    CHECK(!wspool_cq_overloaded(cq) && !wspool_overloaded(p));
    CHECK(wspool_cq_close(cq, WSPOOL_CQ_CLOSE_DRAIN, -1) == WSPOOL_OK);
    wspool_destroy(p);
}

static void test_openmetrics_buffer(void)
{
    wspool *p = make_pool(2, 0);
    int64_t need = wspool_stats_openmetrics(p, NULL, 0);
    CHECK(need > 100);
    char small[16];
    CHECK(wspool_stats_openmetrics(p, small, sizeof small) >= need); /* truncated, still the length */
    CHECK(strlen(small) == sizeof small - 1);
    char *buf = malloc((size_t)need + 64);
    int64_t n = wspool_stats_openmetrics(p, buf, (size_t)need + 64);
    CHECK(n > 0 && (size_t)n == strlen(buf));
    CHECK(strstr(buf, "# TYPE wspool_threads gauge") != NULL);
    CHECK(n >= 6 && strcmp(buf + n - 6, "# EOF\n") == 0);
    CHECK(wspool_stats_openmetrics(NULL, buf, 10) == WSPOOL_EINVAL);
    CHECK(wspool_stats_openmetrics(p, NULL, 10) == WSPOOL_EINVAL);
    free(buf);
    wspool_destroy(p);
}

int main(void)
{
    alarm(300);
    test_basic_fd_order_and_level();
    test_bounded_drain_keeps_fd_readable();
    test_pool_cancel_shutdown_exactly_once();
    test_close_cancel_exactly_once();
    test_cancel_through_task_handle();
    test_wake_callback_cap_and_watermarks();
    test_overload_signal_and_flag();
    test_openmetrics_buffer();
    if (failures) {
        fprintf(stderr, "test_cq: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_cq: all checks passed\n");
    return 0;
}
