/*
 * http_deadline.h: a request's deadline, shared by the HTTP examples in C
 * (http_common.h) and C++ (examples-cpp/http_beast.cpp). Header-only, C and
 * C++ alike; loop-thread state (the reserve), one loop per process.
 *
 * A /work request is due D ms after it started: when a proxy (or the client)
 * stamped it with X-Request-Start, else when this server read it. The pool's
 * deadline is when the work must *start*, so the server submits it with the
 * due time minus a learnt reserve, http_work_start_by_ns.
 */
#ifndef HTTP_DEADLINE_H
#define HTTP_DEADLINE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* wspool_now_ns, the pool's deadline clock. C++ takes the C API from wspool.hpp, which
 * declares it in namespace wspool::capi. */
#ifdef __cplusplus
#include "wspool.hpp"
static inline uint64_t http_now_ns(void) { return wspool::capi::wspool_now_ns(); }
#else
#include <libwspool.h>
static inline uint64_t http_now_ns(void) { return wspool_now_ns(); }
#endif

/* A /work deadline is the time its answer is due. The pool's deadline is when the work must
 * *start*, so the server submits with the answer's due time minus a reserve: what a request needs
 * once its work begins (the run, the wait for the loop to drain it, the write).
 *
 * The reserve is learnt by feedback from the served /work requests themselves: each reply that
 * reaches the kernel after its due time raises it by a quarter of how late it was, at least
 * HTTP_RESERVE_STEP_NS (so a step in the load is caught in a few replies); each one on time lowers
 * it by HTTP_RESERVE_STEP_NS / (HTTP_LATE_PER - 1). Were every rise HTTP_RESERVE_STEP_NS, it would
 * settle where one reply in HTTP_LATE_PER is late, whatever the shape of the run-and-write times
 * (a fixed-step quantile controller: late replies push it up by what on-time ones take back); the
 * larger rises for very late replies leave it a little above that, with fewer late (0.065 % in
 * tests/embed/test_deadline_reserve.c, against 0.1 %). A quantile of the run-and-write time
 * alone fell short, because the served tail is the sum of that time and of how close to its pool
 * deadline the work started; the feedback counts both. Each server calls http_learn_reserve from
 * its write-completion callback, and counts the late replies it reports (http_answered_late).
 * Loop thread only. */
#define HTTP_RESERVE_STEP_NS 50000ull /* 50 us per late reply */
#define HTTP_LATE_PER 1000ull         /* the share of served replies let be late: 1 in 1000 */

static uint64_t http_work_reserve_ns = 1000000; /* 1 ms until learnt */
/* A request is never reserved more than half its allowance (http_work_start_by_ns), so that one
 * that waited little still runs and teaches: a reserve at or past the allowance would expire every
 * request, and nothing served would bring it down. Nor does the reserve learn past half the
 * longest allowance submitted, which it could never apply. */
static uint64_t http_reserve_ceiling_ns;

/* A served /work reply due at `due_ns` (0: not one that teaches) reached the kernel at `now_ns`.
 * True if it was late. */
static inline bool http_reserve_learn_at(uint64_t due_ns, uint64_t now_ns)
{
    if (!due_ns)
        return false;
    uint64_t r = http_work_reserve_ns, down = HTTP_RESERVE_STEP_NS / (HTTP_LATE_PER - 1);
    if (now_ns > due_ns) {
        uint64_t up = (now_ns - due_ns) / 4 > HTTP_RESERVE_STEP_NS ? (now_ns - due_ns) / 4 : HTTP_RESERVE_STEP_NS;
        http_work_reserve_ns = r + up <= http_reserve_ceiling_ns ? r + up
                               : r > http_reserve_ceiling_ns     ? r
                                                                 : http_reserve_ceiling_ns;
    } else
        http_work_reserve_ns = r > down ? r - down : 0;
    return now_ns > due_ns;
}

static inline bool http_learn_reserve(uint64_t due_ns) { return http_reserve_learn_at(due_ns, http_now_ns()); }

/* X-Request-Start, the header a load balancer or proxy stamps a request with as it forwards it
 * (Heroku's router, nginx's "t=${msec}"): "t=" (optional) and the time since the epoch, in s
 * with a fraction, else in s, ms, us or ns by magnitude. Returns when the request started, on
 * wspool_now_ns's clock, so that a deadline counts the time the request waited before this
 * server read it; 0 (ignored) when unreadable or more than a minute old. A stamp from the
 * future (clocks a little apart) is "now". */
static inline uint64_t http_request_start_ns(const char *v, size_t len)
{
    const char *end = v + len;
    while (v < end && *v == ' ')
        v++;
    if (end - v >= 2 && v[0] == 't' && v[1] == '=')
        v += 2;
    uint64_t whole = 0, frac = 0, scale = 1;
    const char *digits = v;
    while (v < end && *v >= '0' && *v <= '9' && v - digits < 19)
        whole = whole * 10 + (uint64_t)(*v++ - '0');
    if (v == digits)
        return 0;
    uint64_t stamp; /* ns since the epoch */
    if (v < end && *v == '.') {
        for (v++; v < end && *v >= '0' && *v <= '9'; v++)
            if (scale < 1000000000ull) {
                frac = frac * 10 + (uint64_t)(*v - '0');
                scale *= 10;
            }
        stamp = whole * 1000000000ull + frac * (1000000000ull / scale);
    } else {
        stamp = whole >= 100000000000000000ull ? whole
                : whole >= 100000000000000ull  ? whole * 1000ull
                : whole >= 100000000000ull     ? whole * 1000000ull
                                               : whole * 1000000000ull;
    }
    while (v < end && *v == ' ')
        v++;
    if (v != end)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t real = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, mono = http_now_ns();
    uint64_t age = real > stamp ? real - stamp : 0;
    if (age > 60000000000ull || age >= mono)
        return 0;
    return mono - age;
}

/* When the answer to a /work request that started at `start_ns` (its X-Request-Start on
 * wspool_now_ns's clock; 0: now) is due, `due_ms` later. */
static inline uint64_t http_work_due_ns(uint64_t start_ns, uint64_t due_ms)
{
    return (start_ns ? start_ns : http_now_ns()) + due_ms * 1000000ull;
}

/* The pool deadline of a /work request whose answer is due at `due_ns`, `due_ms` after its start:
 * the due time minus the reserve, or minus half of `due_ms` if that is less. A deadline already
 * past is accepted: the request expires where a worker meets it. */
static inline uint64_t http_work_start_by_ns(uint64_t due_ns, uint64_t due_ms)
{
    uint64_t half = due_ms * 500000ull;
    if (half > http_reserve_ceiling_ns)
        http_reserve_ceiling_ns = half;
    return due_ns - (http_work_reserve_ns < half ? http_work_reserve_ns : half);
}

#endif /* HTTP_DEADLINE_H */
