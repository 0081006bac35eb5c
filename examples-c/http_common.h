/*
 * http_common.h: what the two HTTP examples (http_libuv.c, http_libevent.c)
 * share and is not embedding glue: options, the endpoints' work, routing,
 * and the /metrics text (the pool's OpenMetrics export plus the server's own
 * counters). Header-only (static functions): each example is one file.
 *
 * Endpoints:
 *   /ping          "pong"                       (through the pool)
 *   /work?n=N      16 hex digits after N rounds (CPU, through the pool)
 *   /sleep?ms=M    "slept" after M ms inside wspool_blocking_begin/end
 *   /metrics       OpenMetrics text             (on the loop thread)
 *   /debug/pool    the pool's snapshot report, wspool_dump (on the loop thread;
 *                  docs/diagnosis.md); with WSPOOL_DUMP_ON_SIGUSR1=1 in the
 *                  environment, SIGUSR1 prints it on stderr
 * A pool-bound request is answered 503 at once when the completion queue
 * refuses it or its admission test, wspool_cq_overloaded, says it would wait
 * past the target while the queue is overloaded; while overloaded, requests
 * that would not are still admitted (counted in http_admitted_overloaded).
 *
 * Per-request control (--plain turns it off):
 *   /ping   at WSPOOL_PRIORITY_HIGH: it goes before queued /work and is never
 *           shed by the overload test (it costs next to nothing)
 *   /work   with a deadline: --work-deadline-ms N, or ?deadline_ms=N on the
 *           request, by when its answer is due, counted from the request's
 *           start: the X-Request-Start header a proxy (or the client) stamps
 *           it with, else when this server read it. It is submitted with a
 *           pool deadline that much minus a learnt reserve
 *           (http_learn_reserve); not started by then, it never runs (503
 *           "expired")
 *   /sleep  in a lane of --sleep-lane N (default 2): at most N run at once,
 *           whatever threads the pool lends them
 * and a client that hangs up has its queued /work or /sleep cancelled
 * in the pool through the handle wspool_cq_submit_task returned
 * (http_cancelled_client_gone; with --uv-work, uv_cancel); one already
 * started skips its work if it has not begun it (http_skipped_client_gone).
 * libuv reads every connection; evhttp stops reading one while its request
 * is out, so the libevent server watches that socket itself meanwhile.
 */
#ifndef HTTP_COMMON_H
#define HTTP_COMMON_H

#define _GNU_SOURCE
#include <libwspool.h>

#include "http_deadline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORK_MAX 100000000ull
#define SLEEP_MAX_MS 10000ull

typedef struct http_opts {
    int port;                /* 0: any free port (printed on stdout) */
    unsigned threads;        /* pool min_threads */
    unsigned spin_us;        /* pool spin_max_us; ~0u = library default */
    unsigned target_us;      /* overload target; 0 = off */
    unsigned interval_us;    /* overload interval */
    unsigned cap;            /* completion-queue cap; 0 = unbounded */
    unsigned worker_nice;    /* pool thread_nice: its threads run this much nicer than the loop (Linux) */
    bool uv_work;            /* http_libuv only: uv_queue_work instead of wspool */
    bool plain;              /* no priority, deadline or lane: every request like any other */
    unsigned work_deadline_ms; /* /work's deadline unless the request names one; 0 = none */
    unsigned sleep_lane;     /* /sleep's lane limit; 0 = no lane */
} http_opts;

static void http_usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--port N] [--threads N] [--spin-us N] [--target-us N] [--interval-us N] [--cap N] "
            "[--worker-nice N] [--plain] [--work-deadline-ms N] [--sleep-lane N]%s\n",
            prog, strstr(prog, "libuv") ? " [--uv-work]" : "");
    exit(2);
}

static http_opts http_parse_opts(int argc, char **argv)
{
    http_opts o = {.port = 0, .threads = 2, .spin_us = ~0u, .target_us = 5000, .interval_us = 5000, .sleep_lane = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        unsigned *dst = NULL;
        if (strcmp(a, "--uv-work") == 0) {
            o.uv_work = true;
            continue;
        }
        if (strcmp(a, "--plain") == 0) {
            o.plain = true;
            continue;
        }
        if (i + 1 >= argc)
            http_usage(argv[0]);
        if (strcmp(a, "--port") == 0)
            o.port = atoi(argv[++i]);
        else if (strcmp(a, "--threads") == 0)
            dst = &o.threads;
        else if (strcmp(a, "--spin-us") == 0)
            dst = &o.spin_us;
        else if (strcmp(a, "--target-us") == 0)
            dst = &o.target_us;
        else if (strcmp(a, "--interval-us") == 0)
            dst = &o.interval_us;
        else if (strcmp(a, "--cap") == 0)
            dst = &o.cap;
        else if (strcmp(a, "--worker-nice") == 0)
            dst = &o.worker_nice;
        else if (strcmp(a, "--work-deadline-ms") == 0)
            dst = &o.work_deadline_ms;
        else if (strcmp(a, "--sleep-lane") == 0)
            dst = &o.sleep_lane;
        else
            http_usage(argv[0]);
        if (dst)
            *dst = (unsigned)strtoul(argv[++i], NULL, 10);
    }
    return o;
}

static wspool *http_make_pool(const http_opts *o)
{
    wspool_config c;
    wspool_config_init(&c);
    c.name = "http";
    c.min_threads = o->threads;
    if (o->spin_us != ~0u)
        c.spin_max_us = o->spin_us;
    /* --worker-nice N: the loop thread answers every request (503s included)
     * and writes every response; with the pool's threads N nicer it preempts
     * them. Not the default: a loop (and, on a test machine, a client) that
     * keeps every core busy then starves the pool (docs/embedding.md). */
    c.thread_nice = o->worker_nice;
    wspool *p = NULL;
    if (wspool_create(&c, &p) != WSPOOL_OK) {
        fprintf(stderr, "wspool_create: %s\n", wspool_last_error());
        exit(1);
    }
    return p;
}

/* Server counters; written on the loop thread (all but the last three), atomics for /metrics readers' sake. */
typedef struct http_counters {
    atomic_ullong requests, submitted, done, done_cancelled, shed_overload, shed_refused, client_gone;
    atomic_ullong overload_signals, admitted_overloaded;
    atomic_ullong done_expired, skipped_client_gone, cancelled_client_gone;
    /* Written on pool threads: requests whose work began after their deadline by this server's own
     * clock read, and by how much at most (the pool checks the deadline just before it starts the
     * work; a thread preempted in between starts it later), /sleep requests running now and the
     * most at once. */
    atomic_ullong started_late, started_late_max_us, sleeping, sleeping_max;
    /* Loop thread: /work replies with a deadline written after their answer was due. */
    atomic_ullong answered_late;
} http_counters;

static http_counters HC;

/* ------------------------------------------------------------ the work */

enum job_kind { J_PING, J_WORK, J_SLEEP, J_METRICS, J_DEBUG_POOL, J_NOT_FOUND, J_BAD };

typedef struct http_job {
    enum job_kind kind;
    uint64_t n;
    uint64_t deadline_ms; /* /work?deadline_ms=N; 0 = the server's default */
    uint64_t start_ns;    /* X-Request-Start on the wspool_now_ns clock; 0 = none (when read) */
    uint64_t deadline_ns; /* the submission's deadline (wspool_now_ns clock); 0 = none */
    uint64_t due_ns;      /* /work with a deadline: when its answer is due (wspool_now_ns clock); 0 = none */
    atomic_bool gone;     /* the client hung up: do nothing when the pool gets here */
    bool skipped;
    char body[32];
    int body_len;
    void *conn; /* the server's request/connection handle */
} http_job;

/* N rounds of splitmix64: serial, so N rounds cost N x a few ns anywhere. */
static uint64_t work_digest(uint64_t n)
{
    uint64_t h = n;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t z = h + i + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        h = z ^ (z >> 31);
    }
    return h;
}

/* Runs on a pool thread (or a libuv threadpool thread with --uv-work). */
static void http_job_run(void *arg)
{
    http_job *j = arg;
    if (atomic_load_explicit(&j->gone, memory_order_relaxed)) {
        j->skipped = true; /* nobody to answer: what a cancel would have saved */
        return;
    }
    uint64_t now = j->deadline_ns ? wspool_now_ns() : 0; /* no clock read without a deadline */
    if (now > j->deadline_ns && j->deadline_ns) { /* an independent check of the pool's rule */
        atomic_fetch_add(&HC.started_late, 1);
        unsigned long long late = (now - j->deadline_ns) / 1000, seen = atomic_load(&HC.started_late_max_us);
        while (late > seen && !atomic_compare_exchange_weak(&HC.started_late_max_us, &seen, late)) {
        }
    }
    switch (j->kind) {
    case J_PING:
        j->body_len = snprintf(j->body, sizeof j->body, "pong\n");
        break;
    case J_WORK:
        j->body_len = snprintf(j->body, sizeof j->body, "%016" PRIx64 "\n", work_digest(j->n));
        break;
    case J_SLEEP: {
        unsigned long long now = atomic_fetch_add(&HC.sleeping, 1) + 1;
        unsigned long long max = atomic_load(&HC.sleeping_max);
        while (now > max && !atomic_compare_exchange_weak(&HC.sleeping_max, &max, now)) {
        }
        struct timespec ts = {.tv_sec = (time_t)(j->n / 1000), .tv_nsec = (long)(j->n % 1000) * 1000000L};
        /* A declared blocking region: the pool lends a thread meanwhile
         * (a no-op off the pool, i.e. with --uv-work). */
        wspool_blocking_begin();
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        wspool_blocking_end();
        atomic_fetch_sub(&HC.sleeping, 1);
        j->body_len = snprintf(j->body, sizeof j->body, "slept\n");
        break;
    }
    default:
        break;
    }
}

static bool query_u64(const char *q, const char *key, uint64_t max, uint64_t *out)
{
    size_t kl = strlen(key);
    while (q && *q) {
        if (strncmp(q, key, kl) == 0 && q[kl] == '=') {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(q + kl + 1, &end, 10);
            if (errno || end == q + kl + 1 || (*end && *end != '&') || v > max)
                return false;
            *out = v;
            return true;
        }
        q = strchr(q, '&');
        if (q)
            q++;
    }
    return false;
}

/* Routes "path?query" (len bytes, not NUL-terminated) into j. */
static void http_route(const char *target, size_t len, http_job *j)
{
    char t[256];
    if (len >= sizeof t) {
        j->kind = J_NOT_FOUND;
        return;
    }
    memcpy(t, target, len);
    t[len] = 0;
    char *q = strchr(t, '?');
    if (q)
        *q++ = 0;
    if (strcmp(t, "/ping") == 0)
        j->kind = J_PING;
    else if (strcmp(t, "/metrics") == 0)
        j->kind = J_METRICS;
    else if (strcmp(t, "/debug/pool") == 0)
        j->kind = J_DEBUG_POOL;
    else if (strcmp(t, "/work") == 0) {
        j->kind = query_u64(q, "n", WORK_MAX, &j->n) ? J_WORK : J_BAD;
        uint64_t d = 0;
        if (query_u64(q, "deadline_ms", SLEEP_MAX_MS, &d))
            j->deadline_ms = d;
    }
    else if (strcmp(t, "/sleep") == 0)
        j->kind = query_u64(q, "ms", SLEEP_MAX_MS, &j->n) ? J_SLEEP : J_BAD;
    else
        j->kind = J_NOT_FOUND;
}

/* ------------------------------------------------------------- metrics */

/* Between the OVERLOADED and RECOVERED signals (loop thread only). */
static bool HTTP_OVERLOADED;

/* The completion queue's on_signal: runs on the loop thread, from the drain. */
static void http_on_signal(void *ctx, int s)
{
    (void)ctx;
    if (s == WSPOOL_CQ_SIGNAL_OVERLOADED) {
        atomic_fetch_add(&HC.overload_signals, 1);
        HTTP_OVERLOADED = true;
    } else if (s == WSPOOL_CQ_SIGNAL_RECOVERED) {
        HTTP_OVERLOADED = false;
    }
}

/* When the reply to `j` goes out, the reserve learns from it (http_learn_reserve): its due time if
 * it is /work with a deadline that ran, else 0. */
static uint64_t http_reply_teaches(const http_job *j, int status)
{
    return j->kind == J_WORK && status == WSPOOL_CQ_RAN ? j->due_ns : 0;
}

/* Per-request control: the submission options of `j`. */
static void http_request_opts(const http_opts *o, http_job *j, wspool_serial *sleep_lane,
                              wspool_submit_opts *so)
{
    wspool_submit_opts_init(so);
    if (o->plain)
        return;
    if (j->kind == J_PING)
        so->priority = WSPOOL_PRIORITY_HIGH;
    uint64_t d = j->deadline_ms ? j->deadline_ms : o->work_deadline_ms;
    if (j->kind == J_WORK && d) {
        j->due_ns = http_work_due_ns(j->start_ns, d);
        so->deadline_ns = http_work_start_by_ns(j->due_ns, d);
    }
    j->deadline_ns = so->deadline_ns;
    if (j->kind == J_SLEEP)
        so->serial = sleep_lane;
}

/* The client of `j` hung up (loop thread): the pool skips its work if it has not begun it, and
 * `task` (NULL: none) is cancelled if no worker has started it. True if that cancel took. */
static bool http_client_hung_up(http_job *j, wspool_task *task)
{
    atomic_store_explicit(&j->gone, true, memory_order_relaxed);
    if (!task || wspool_task_cancel(task) != WSPOOL_OK)
        return false;
    atomic_fetch_add(&HC.cancelled_client_gone, 1);
    return true;
}

/* Does `j` get a task handle, to be cancelled if its client hangs up? Work a hang-up can save:
 * /work and /sleep, not /ping (it costs less than the handle); nothing with --plain. */
static inline bool http_cancellable(const http_opts *o, const http_job *j) { return !o->plain && j->kind != J_PING; }

/* May the overload test shed `j`? Not a high-priority /ping. */
static bool http_sheddable(const http_opts *o, const http_job *j) { return o->plain || j->kind != J_PING; }

/* /sleep's lane (NULL: none). */
static wspool_serial *http_make_sleep_lane(const http_opts *o, wspool *p)
{
    wspool_serial *s = NULL;
    if (o->plain || o->uv_work || o->sleep_lane == 0)
        return NULL;
    if (wspool_lane_create(p, o->sleep_lane, WSPOOL_PRIORITY_NORMAL, &s) != WSPOOL_OK) {
        fprintf(stderr, "wspool_lane_create: %s\n", wspool_last_error());
        exit(1);
    }
    return s;
}

/* Counts how a done ended (loop thread). */
static void http_count_done(const http_job *j, int status)
{
    if (status == WSPOOL_CQ_EXPIRED)
        atomic_fetch_add(&HC.done_expired, 1);
    if (j->skipped)
        atomic_fetch_add(&HC.skipped_client_gone, 1);
}

/* A request the completion queue accepted. */
static void http_count_submitted(void)
{
    atomic_fetch_add(&HC.submitted, 1);
    if (HTTP_OVERLOADED)
        atomic_fetch_add(&HC.admitted_overloaded, 1);
}

/* The pool's snapshot report (wspool_dump): a malloc'd string (the caller
 * frees) and its length in *len; NULL on failure. The report may grow between
 * the size query and the fill: then it is cut at a whole line, which is fine
 * for a debugging page. */
static char *http_dump_text(wspool *pool, size_t *len)
{
    size_t need = 0;
    if (wspool_dump(pool, NULL, 0, &need) != WSPOOL_OK)
        return NULL;
    size_t cap = need + 4096;
    char *buf = malloc(cap);
    if (!buf || wspool_dump(pool, buf, cap, NULL) != WSPOOL_OK) {
        free(buf);
        return NULL;
    }
    *len = strlen(buf);
    return buf;
}

/* SIGUSR1 prints the snapshot on stderr only when asked for: the signal's
 * default action ends the process, which a server must not start doing for
 * everybody who upgrades. */
static bool http_dump_on_sigusr1(void)
{
    const char *v = getenv("WSPOOL_DUMP_ON_SIGUSR1");
    return v && *v && strcmp(v, "0") != 0;
}

static void http_print_dump(wspool *pool)
{
    size_t len = 0;
    char *text = http_dump_text(pool, &len);
    fprintf(stderr, "%s", text ? text : "wspool_dump failed\n");
    free(text);
}

/* The pool's OpenMetrics text with the server's families before its "# EOF".
 * Returns a malloc'd string (the caller frees) and its length in *len. */
static char *http_metrics_text(wspool *pool, size_t *len)
{
    int64_t need = wspool_stats_openmetrics(pool, NULL, 0);
    if (need < 0)
        return NULL;
    size_t cap = (size_t)need + 4096; /* room for the server's families below */
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    int64_t n = wspool_stats_openmetrics(pool, buf, cap);
    if (n < 6 || (size_t)n >= cap) {
        free(buf);
        return NULL;
    }
    size_t at = (size_t)n - 6; /* drop "# EOF\n": ours go before it */
    static const struct {
        const char *name, *help;
        size_t off;
    } fam[] = {
        {"http_requests", "HTTP requests parsed.", offsetof(http_counters, requests)},
        {"http_cq_submitted", "Requests accepted by the completion queue.", offsetof(http_counters, submitted)},
        {"http_cq_done", "done callbacks run (one per accepted request).", offsetof(http_counters, done)},
        {"http_cq_cancelled", "done callbacks with WSPOOL_CQ_CANCELLED.", offsetof(http_counters, done_cancelled)},
        {"http_shed_overload", "Requests answered 503 because the pool was overloaded.", offsetof(http_counters, shed_overload)},
        {"http_shed_refused", "Requests answered 503 because the queue refused them.", offsetof(http_counters, shed_refused)},
        {"http_client_gone", "Responses dropped because the client had hung up.", offsetof(http_counters, client_gone)},
        {"http_overload_signals", "WSPOOL_CQ_SIGNAL_OVERLOADED signals received.", offsetof(http_counters, overload_signals)},
        {"http_admitted_overloaded", "Requests admitted while overloaded (they would wait less than the target).",
         offsetof(http_counters, admitted_overloaded)},
        {"http_cq_expired", "done callbacks with WSPOOL_CQ_EXPIRED (not started by their deadline).",
         offsetof(http_counters, done_expired)},
        {"http_skipped_client_gone", "Queued requests whose client hung up: the pool skipped their work.",
         offsetof(http_counters, skipped_client_gone)},
        {"http_cancelled_client_gone", "Queued requests whose client hung up, cancelled before they started.",
         offsetof(http_counters, cancelled_client_gone)},
        {"http_started_late", "Requests whose work began after their deadline by the server's clock read.",
         offsetof(http_counters, started_late)},
        {"http_started_late_max_us", "The most such a start was late, in microseconds (only grows).",
         offsetof(http_counters, started_late_max_us)},
        {"http_answered_late", "/work replies that reached the kernel after their due time, by the server's clock.",
         offsetof(http_counters, answered_late)},
        {"http_sleep_max_concurrent", "Most /sleep requests running at once (a counter that only grows).",
         offsetof(http_counters, sleeping_max)},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        unsigned long long v = atomic_load((atomic_ullong *)((char *)&HC + fam[i].off));
        int k = snprintf(buf + at, cap - at, "# TYPE %s counter\n# HELP %s %s\n%s_total %llu\n", fam[i].name,
                         fam[i].name, fam[i].help, fam[i].name, v);
        if (k < 0 || (size_t)k >= cap - at) {
            free(buf);
            return NULL;
        }
        at += (size_t)k;
    }
    int k = snprintf(buf + at, cap - at, "# EOF\n");
    if (k < 0 || (size_t)k >= cap - at) {
        free(buf);
        return NULL;
    }
    *len = at + (size_t)k;
    return buf;
}

/* Printed at exit; the tests check that every accepted request saw exactly one done. */
static int http_report_exit(const char *who)
{
    unsigned long long s = atomic_load(&HC.submitted), d = atomic_load(&HC.done);
    fprintf(stderr, "%s: exit: requests=%llu submitted=%llu done=%llu cancelled=%llu shed=%llu client_gone=%llu\n",
            who, (unsigned long long)atomic_load(&HC.requests), s, d,
            (unsigned long long)atomic_load(&HC.done_cancelled),
            (unsigned long long)(atomic_load(&HC.shed_overload) + atomic_load(&HC.shed_refused)),
            (unsigned long long)atomic_load(&HC.client_gone));
    return s == d ? 0 : 3;
}

#endif
