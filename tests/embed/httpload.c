/*
 * httpload.c: a small HTTP/1.1 keep-alive load generator for bench-embed,
 * for what wrk cannot report: latency per endpoint in a mix, and latency
 * split by status (served 200 vs shed 503) under an open-loop rate.
 *
 *   httpload PORT SECONDS GROUP...     GROUP = CONNS:RATE:PATH
 *
 * Each group opens CONNS keep-alive connections that request PATH, one
 * request in flight per connection. RATE is the group's total requests per
 * second, spread evenly over its connections (open loop: a connection sends
 * on schedule, or as soon as its previous response arrived if it is late);
 * 0 = closed loop (send again as soon as the response arrived). Latency is
 * from just before the request's send() to the epoll wake-up that delivered
 * the response's last byte. Each request carries X-Request-Start: t=<us since
 * the epoch>, stamped at its send, as a proxy in front of a server stamps it
 * (the HTTP examples count a /work deadline from it). One line per group on
 * stdout:
 *   path=... sent=N ok=N shed=N other=N ok_p50_us= ok_p99_us= shed_p50_us= shed_p99_us= shed_max_us=
 * Single-threaded epoll; loopback only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct lat {
    int64_t *v;
    size_t n, cap;
} lat;

typedef struct group {
    const char *path;
    int conns;
    double rate;
    unsigned long long sent, ok, shed, other;
    lat ok_lat, shed_lat;
} group;

typedef struct cn {
    int fd, g;
    int busy;
    int64_t sent_ns, next_ns, period_ns;
    size_t rlen;
    char rbuf[8192];
} cn;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void lat_add(lat *l, int64_t v)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v)
            exit(1);
    }
    l->v[l->n++] = v;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static long long pct_us(lat *l, double q)
{
    if (!l->n)
        return -1;
    qsort(l->v, l->n, sizeof *l->v, cmp64);
    size_t i = (size_t)((double)(l->n - 1) * q + 0.5);
    return (long long)(l->v[i] / 1000);
}

/* A complete response at the start of c->rbuf: its length, and its status in *st; 0 if incomplete. */
static size_t parse_response(cn *c, int *st)
{
    char *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t head = (size_t)(end - c->rbuf) + 4;
    *st = atoi(c->rbuf + 9);
    size_t body = 0;
    char *cl = memmem(c->rbuf, head, "Content-Length:", 15);
    if (!cl)
        cl = memmem(c->rbuf, head, "content-length:", 15);
    if (cl)
        body = (size_t)strtoul(cl + 15, NULL, 10);
    return c->rlen >= head + body ? head + body : 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: httpload PORT SECONDS CONNS:RATE:PATH...\n");
        return 2;
    }
    int port = atoi(argv[1]);
    double seconds = atof(argv[2]);
    int ng = argc - 3, total = 0;
    group *gs = calloc((size_t)ng, sizeof *gs);
    for (int i = 0; i < ng; i++) {
        char *spec = argv[3 + i], *a = strchr(spec, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            return 2;
        gs[i].conns = atoi(spec);
        gs[i].rate = atof(a + 1);
        gs[i].path = b + 1;
        total += gs[i].conns;
    }
    cn *cs = calloc((size_t)total, sizeof *cs);
    int ep = epoll_create1(0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int64_t t0 = now_ns();
    for (int g = 0, k = 0; g < ng; g++) {
        for (int j = 0; j < gs[g].conns; j++, k++) {
            cn *c = &cs[k];
            c->g = g;
            c->fd = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
                perror("connect");
                return 1;
            }
            int one = 1;
            setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            c->period_ns = gs[g].rate > 0 ? (int64_t)(1e9 * gs[g].conns / gs[g].rate) : 0;
            /* stagger the first sends over one period */
            c->next_ns = t0 + (c->period_ns ? c->period_ns * j / gs[g].conns : 0);
            struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)k};
            epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        }
    }
    int64_t end = t0 + (int64_t)(seconds * 1e9);
    struct epoll_event evs[256];
    for (;;) {
        int64_t now = now_ns();
        if (now >= end)
            break;
        int64_t wake = end;
        for (int k = 0; k < total; k++) {
            cn *c = &cs[k];
            if (c->busy)
                continue;
            if (c->next_ns <= now) {
                group *g = &gs[c->g];
                /* Stamped at its own send: with many connections due at once,
                 * the loop's `now` would charge the server for this client's
                 * earlier sends. */
                int64_t at = now_ns();
                struct timespec real;
                clock_gettime(CLOCK_REALTIME, &real);
                char req[600];
                int req_len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Start: t=%lld\r\n\r\n",
                                       g->path, (long long)real.tv_sec * 1000000 + real.tv_nsec / 1000);
                if (req_len >= (int)sizeof req) {
                    fprintf(stderr, "httpload: path too long\n");
                    return 2;
                }
                if (send(c->fd, req, (size_t)req_len, MSG_NOSIGNAL) != req_len) {
                    perror("send");
                    return 1;
                }
                g->sent++;
                c->busy = 1;
                c->sent_ns = at;
            } else if (c->next_ns < wake) {
                wake = c->next_ns;
            }
        }
        int timeout = (int)((wake - now + 999999) / 1000000);
        int n = epoll_wait(ep, evs, 256, timeout < 0 ? 0 : timeout);
        now = now_ns();
        for (int i = 0; i < n; i++) {
            cn *c = &cs[evs[i].data.u32];
            ssize_t r = recv(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen, 0);
            if (r <= 0) {
                fprintf(stderr, "httpload: connection closed by the server\n");
                return 1;
            }
            c->rlen += (size_t)r;
            int st = 0;
            size_t len = parse_response(c, &st);
            if (!len)
                continue;
            group *g = &gs[c->g];
            int64_t l = now - c->sent_ns;
            if (st == 200) {
                g->ok++;
                lat_add(&g->ok_lat, l);
            } else if (st == 503) {
                g->shed++;
                lat_add(&g->shed_lat, l);
            } else {
                g->other++;
            }
            memmove(c->rbuf, c->rbuf + len, c->rlen - len);
            c->rlen -= len;
            c->busy = 0;
            if (c->period_ns) {
                c->next_ns += c->period_ns;
                if (c->next_ns < now - 100000000)
                    c->next_ns = now; /* too far behind: do not burst to catch up */
            } else {
                c->next_ns = now;
            }
        }
    }
    for (int g = 0; g < ng; g++) {
        group *x = &gs[g];
        long long sm = -1;
        if (x->shed_lat.n) {
            qsort(x->shed_lat.v, x->shed_lat.n, sizeof(int64_t), cmp64);
            sm = x->shed_lat.v[x->shed_lat.n - 1] / 1000;
        }
        printf("path=%s sent=%llu ok=%llu shed=%llu other=%llu ok_p50_us=%lld ok_p99_us=%lld shed_p50_us=%lld "
               "shed_p99_us=%lld shed_max_us=%lld\n",
               x->path, x->sent, x->ok, x->shed, x->other, pct_us(&x->ok_lat, 0.5), pct_us(&x->ok_lat, 0.99),
               pct_us(&x->shed_lat, 0.5), pct_us(&x->shed_lat, 0.99), sm);
    }
    for (int k = 0; k < total; k++)
        close(cs[k].fd);
    return 0;
}
