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
 * *start*, so the server submits with the answer's deadline minus a reserve: what a request
 * needs once its work begins (the run, the wait for the loop to drain it, the write). The
 * reserve is learnt from served /work requests, from the work's start to the moment its reply
 * is handed to the kernel (each server calls this from its write-completion callback), as a
 * high quantile: it rises by a quarter of the gap at once and falls by 1/256 of it per request,
 * so it sits above nearly every sample. Loop thread only. */
static uint64_t http_work_reserve_ns = 1000000; /* 1 ms until learnt */

static void http_learn_reserve(uint64_t work_started_ns)
{
    if (!work_started_ns)
        return;
    uint64_t took = http_now_ns() - work_started_ns, r = http_work_reserve_ns;
    http_work_reserve_ns = took > r ? r + (took - r) / 4 : r - (r - took) / 256;
}

/* X-Request-Start, the header a load balancer or proxy stamps a request with as it forwards it
 * (Heroku's router, nginx's "t=${msec}"): "t=" (optional) and the time since the epoch, in s
 * with a fraction, else in s, ms, us or ns by magnitude. Returns when the request started, on
 * wspool_now_ns's clock, so that a deadline counts the time the request waited before this
 * server read it; 0 (ignored) when unreadable or more than a minute old. A stamp from the
 * future (clocks a little apart) is "now". */
static uint64_t http_request_start_ns(const char *v, size_t len)
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

/* The pool deadline of a /work request due `due_ms` after `start_ns` (its X-Request-Start on
 * wspool_now_ns's clock; 0: now): the due time minus the reserve. A deadline already past is
 * accepted: the request expires where a worker meets it. */
static inline uint64_t http_work_start_by_ns(uint64_t start_ns, uint64_t due_ms)
{
    uint64_t due = due_ms * 1000000ull, reserve = http_work_reserve_ns < due ? http_work_reserve_ns : due - 1;
    return (start_ns ? start_ns : http_now_ns()) + due - reserve;
}

#endif /* HTTP_DEADLINE_H */
