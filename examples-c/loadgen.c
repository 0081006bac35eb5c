/*
 * loadgen.c: a closed-loop load generator for reactor_server.
 *
 * Opens --conns connections, keeps --depth requests in flight on each
 * (depth 1 = request/response, more = pipelining), for --duration seconds
 * (or --requests per connection), and checks every response (PONG for PING,
 * the exact digest for WORK). Reports requests/s and latency percentiles:
 *
 *   loadgen: label conns=64 depth=1 mix=ping ... rps=41152 p50_us=35.2 p99_us=120.4 ...
 *
 * Connections the server never answers (the blocking mode's starvation) are
 * reported as starved_conns, with the requests left unanswered; the run
 * still ends on time. --stats prints the server's STATS line afterwards.
 * Exit status: 0, or 1 when a response was wrong or a connection failed.
 * Uses no wspool code: it is a plain epoll client.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct {
    const char *host;
    int port;
    int conns, depth, threads;
    double duration;
    long long requests; /* per connection; 0: run for duration */
    int work_pct;
    unsigned long long work_n;
    long long drain_ms;
    bool stats, json;
    const char *label;
} O = {
    .host = "127.0.0.1",
    .port = 7070,
    .conns = 64,
    .depth = 1,
    .threads = 1,
    .duration = 3.0,
    .work_pct = 0,
    .work_n = 2000,
    .drain_ms = 1000,
    .label = "run",
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Same as reactor_server.c. */
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

/* ---- latency histogram: 32 linear sub-buckets per power of two (~3 %) */

#define SUB_BITS 5
#define SUB (1u << SUB_BITS)
#define NBUCKETS ((64 - SUB_BITS + 1) * SUB)

typedef struct hist {
    uint64_t n[NBUCKETS];
    uint64_t count, max;
} hist;

static unsigned bucket_of(uint64_t v)
{
    if (v < SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS */
    unsigned sub = (unsigned)(v >> (e - SUB_BITS)) & (SUB - 1);
    return (e - SUB_BITS + 1) * SUB + sub;
}

static double bucket_mid(unsigned b)
{
    if (b < SUB)
        return b;
    unsigned e = b / SUB + SUB_BITS - 1, sub = b % SUB;
    double lo = (double)((uint64_t)(SUB + sub) << (e - SUB_BITS));
    double width = (double)(1ull << (e - SUB_BITS));
    return lo + width / 2;
}

static void hist_add(hist *h, uint64_t v)
{
    h->n[bucket_of(v)]++;
    h->count++;
    if (v > h->max)
        h->max = v;
}

static double hist_pct(const hist *h, double p)
{
    if (!h->count)
        return 0;
    uint64_t want = (uint64_t)(p * (double)h->count);
    if (want >= h->count)
        want = h->count - 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < NBUCKETS; b++) {
        seen += h->n[b];
        if (seen > want)
            return bucket_mid(b);
    }
    return (double)h->max;
}

/* ---- connections */

typedef struct lconn {
    int fd;
    uint64_t *sent_at; /* ring of depth send times */
    uint8_t *kind;     /* ring: 0 PING, 1 WORK */
    int head, outstanding;
    long long issued, answered;
    char rbuf[256];
    size_t rlen;
    char wbuf[4096];
    size_t wlen;
    bool want_out, failed;
    uint64_t rng;
} lconn;

typedef struct worker {
    pthread_t th;
    int first, count;
    lconn *c;
    hist h;
    uint64_t answered_in_window, errors, conn_failures;
    char first_error[200];
} worker;

static char expected_work[32];
static size_t expected_work_len;
static char work_req[48];
static size_t work_req_len;
static uint64_t t_start, t_end;

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void set_out(int ep, lconn *c, bool on)
{
    if (c->want_out == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

static void flush_out(int ep, lconn *c, worker *w)
{
    size_t off = 0;
    while (off < c->wlen) {
        ssize_t k = send(c->fd, c->wbuf + off, c->wlen - off, MSG_NOSIGNAL);
        if (k > 0) {
            off += (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            c->failed = true;
            w->conn_failures++;
            return;
        }
    }
    memmove(c->wbuf, c->wbuf + off, c->wlen - off);
    c->wlen -= off;
    set_out(ep, c, c->wlen > 0);
}

static bool may_issue(lconn *c, uint64_t now)
{
    if (c->failed)
        return false;
    if (O.requests > 0)
        return c->issued < O.requests;
    return now < t_end;
}

static void issue(lconn *c, uint64_t now)
{
    bool work = O.work_pct > 0 && (int)(xorshift(&c->rng) % 100) < O.work_pct;
    const char *r = work ? work_req : "PING\n";
    size_t n = work ? work_req_len : 5;
    if (c->wlen + n > sizeof c->wbuf)
        return; /* cannot happen with depth <= 64 */
    memcpy(c->wbuf + c->wlen, r, n);
    c->wlen += n;
    int slot = (c->head + c->outstanding) % O.depth;
    c->sent_at[slot] = now;
    c->kind[slot] = work;
    c->outstanding++;
    c->issued++;
}

static void on_line(worker *w, lconn *c, const char *line, size_t len, uint64_t now)
{
    if (c->outstanding == 0) {
        w->errors++;
        if (!w->first_error[0])
            snprintf(w->first_error, sizeof w->first_error, "unsolicited response '%.*s'", (int)len, line);
        return;
    }
    int slot = c->head;
    c->head = (c->head + 1) % O.depth;
    c->outstanding--;
    c->answered++;
    bool ok = c->kind[slot] ? (len == expected_work_len && memcmp(line, expected_work, len) == 0)
                            : (len == 4 && memcmp(line, "PONG", 4) == 0);
    if (!ok) {
        w->errors++;
        if (!w->first_error[0])
            snprintf(w->first_error, sizeof w->first_error, "%s answered '%.*s'",
                     c->kind[slot] ? "WORK" : "PING", (int)(len > 80 ? 80 : len), line);
    }
    hist_add(&w->h, now - c->sent_at[slot]);
    if (now <= t_end)
        w->answered_in_window++;
}

static void on_readable(int ep, worker *w, lconn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            c->failed = true;
            w->conn_failures++;
            if (!w->first_error[0])
                snprintf(w->first_error, sizeof w->first_error, "connection closed by the server (%s)",
                         n == 0 ? "EOF" : strerror(errno));
            epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
            return;
        }
        uint64_t now = now_ns();
        c->rlen += (size_t)n;
        size_t off = 0;
        for (;;) {
            char *nl = memchr(c->rbuf + off, '\n', c->rlen - off);
            if (!nl)
                break;
            on_line(w, c, c->rbuf + off, (size_t)(nl - (c->rbuf + off)), now);
            off = (size_t)(nl - c->rbuf) + 1;
        }
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
        if (c->rlen == sizeof c->rbuf) { /* a line longer than any valid answer */
            w->errors++;
            c->rlen = 0;
        }
        while (c->outstanding < O.depth && may_issue(c, now))
            issue(c, now);
        if (c->wlen)
            flush_out(ep, c, w);
        if ((size_t)n < sizeof c->rbuf)
            return;
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    uint64_t now = now_ns();
    for (int i = 0; i < w->count; i++) {
        lconn *c = &w->c[i];
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        while (c->outstanding < O.depth && may_issue(c, now))
            issue(c, now);
        flush_out(ep, c, w);
    }
    struct epoll_event evs[256];
    uint64_t drain_deadline = 0;
    for (;;) {
        now = now_ns();
        bool busy = false;
        for (int i = 0; i < w->count && !busy; i++) {
            lconn *c = &w->c[i];
            busy = !c->failed && (c->outstanding > 0 || may_issue(c, now));
        }
        if (!busy)
            break;
        if (now >= t_end && O.requests == 0) {
            if (!drain_deadline)
                drain_deadline = t_end + (uint64_t)O.drain_ms * 1000000ull;
            if (now >= drain_deadline)
                break;
        }
        uint64_t until = O.requests ? now + 100000000ull : (now < t_end ? t_end : drain_deadline);
        int timeout = until > now ? (int)((until - now) / 1000000ull) + 1 : 0;
        if (timeout > 100)
            timeout = 100;
        int n = epoll_wait(ep, evs, 256, timeout);
        for (int i = 0; i < n; i++) {
            lconn *c = evs[i].data.ptr;
            if (c->failed)
                continue;
            if (evs[i].events & EPOLLOUT)
                flush_out(ep, c, w);
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(ep, w, c);
        }
    }
    close(ep);
    return NULL;
}

static void usage(FILE *f)
{
    fputs("usage: loadgen [--host H] [--port P] [--conns N] [--depth D] [--duration S | --requests N]\n"
          "               [--work-pct P] [--work-n N] [--threads T] [--drain-ms MS] [--label TEXT]\n"
          "               [--stats] [--json]\n"
          "  --conns N       connections (default 64)\n"
          "  --depth D       requests in flight per connection (default 1; max 64)\n"
          "  --duration S    seconds to run (default 3)\n"
          "  --requests N    requests per connection instead of a duration\n"
          "  --work-pct P    percent of requests that are WORK (default 0: all PING)\n"
          "  --work-n N      rounds per WORK request (default 2000)\n"
          "  --threads T     client threads (default 1)\n"
          "  --drain-ms MS   after the duration, wait this long for answers (default 1000)\n"
          "  --stats         print the server's STATS line afterwards\n"
          "  --json          print the result as one JSON object\n",
          f);
}

static long long num(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "loadgen: %s wants an integer in %lld..%lld, got '%s'\n", flag, lo, hi, v);
        exit(2);
    }
    return x;
}

static int connect_to(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)O.port)};
    if (inet_pton(AF_INET, O.host, &sa.sin_addr) != 1) {
        fprintf(stderr, "loadgen: --host '%s' is not an IPv4 address\n", O.host);
        exit(2);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        fprintf(stderr, "loadgen: connect %s:%d: %s\n", O.host, O.port, strerror(errno));
        exit(2);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void print_server_stats(void)
{
    int fd = connect_to();
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (send(fd, "STATS\n", 6, MSG_NOSIGNAL) != 6) {
        close(fd);
        return;
    }
    char buf[4096];
    size_t len = 0;
    while (len < sizeof buf - 1) {
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (memchr(buf, '\n', len))
            break;
    }
    buf[len] = 0;
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = 0;
    printf("STATS %s\n", len ? buf : "(no answer: the server's workers are all busy)");
    close(fd);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--stats")) {
            O.stats = true;
            continue;
        }
        if (!strcmp(a, "--json")) {
            O.json = true;
            continue;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            fprintf(stderr, "loadgen: %s: missing value (or unknown flag)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--host"))
            O.host = v;
        else if (!strcmp(a, "--port"))
            O.port = (int)num(a, v, 1, 65535);
        else if (!strcmp(a, "--conns"))
            O.conns = (int)num(a, v, 1, 1000000);
        else if (!strcmp(a, "--depth"))
            O.depth = (int)num(a, v, 1, 64);
        else if (!strcmp(a, "--threads"))
            O.threads = (int)num(a, v, 1, 256);
        else if (!strcmp(a, "--duration"))
            O.duration = (double)num(a, v, 1, 86400);
        else if (!strcmp(a, "--requests"))
            O.requests = num(a, v, 1, 1LL << 40);
        else if (!strcmp(a, "--work-pct"))
            O.work_pct = (int)num(a, v, 0, 100);
        else if (!strcmp(a, "--work-n"))
            O.work_n = (unsigned long long)num(a, v, 0, 100000000);
        else if (!strcmp(a, "--drain-ms"))
            O.drain_ms = num(a, v, 0, 600000);
        else if (!strcmp(a, "--label"))
            O.label = v;
        else {
            usage(stderr);
            fprintf(stderr, "loadgen: unknown flag '%s'\n", a);
            return 2;
        }
    }
    if (O.threads > O.conns)
        O.threads = O.conns;

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    expected_work_len = (size_t)snprintf(expected_work, sizeof expected_work, "%016" PRIx64, work_digest(O.work_n));
    work_req_len = (size_t)snprintf(work_req, sizeof work_req, "WORK %llu\n", O.work_n);

    lconn *conns = calloc((size_t)O.conns, sizeof *conns);
    worker *ws = calloc((size_t)O.threads, sizeof *ws);
    if (!conns || !ws) {
        fputs("loadgen: out of memory\n", stderr);
        return 2;
    }
    for (int i = 0; i < O.conns; i++) {
        lconn *c = &conns[i];
        c->fd = connect_to();
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        c->sent_at = calloc((size_t)O.depth, sizeof *c->sent_at);
        c->kind = calloc((size_t)O.depth, 1);
        c->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)i * 0x2545f4914f6cdd1dull) ^ 1;
        if (!c->sent_at || !c->kind) {
            fputs("loadgen: out of memory\n", stderr);
            return 2;
        }
    }
    int per = O.conns / O.threads, extra = O.conns % O.threads, at = 0;
    t_start = now_ns();
    t_end = t_start + (uint64_t)(O.duration * 1e9);
    for (int t = 0; t < O.threads; t++) {
        ws[t].first = at;
        ws[t].count = per + (t < extra);
        ws[t].c = &conns[at];
        at += ws[t].count;
        if (pthread_create(&ws[t].th, NULL, worker_main, &ws[t]) != 0) {
            fputs("loadgen: pthread_create failed\n", stderr);
            return 2;
        }
    }
    hist all;
    memset(&all, 0, sizeof all);
    uint64_t in_window = 0, errors = 0, failures = 0;
    const char *first_error = "";
    for (int t = 0; t < O.threads; t++) {
        pthread_join(ws[t].th, NULL);
        for (unsigned b = 0; b < NBUCKETS; b++)
            all.n[b] += ws[t].h.n[b];
        all.count += ws[t].h.count;
        if (ws[t].h.max > all.max)
            all.max = ws[t].h.max;
        in_window += ws[t].answered_in_window;
        errors += ws[t].errors;
        failures += ws[t].conn_failures;
        if (!first_error[0] && ws[t].first_error[0])
            first_error = ws[t].first_error;
    }
    uint64_t t_stop = now_ns();
    long long unanswered = 0, starved = 0;
    for (int i = 0; i < O.conns; i++) {
        unanswered += conns[i].outstanding;
        starved += conns[i].answered == 0;
        close(conns[i].fd);
    }
    double window = O.requests ? (double)(t_stop - t_start) / 1e9 : O.duration;
    double rps = (double)(O.requests ? all.count : in_window) / window;
    char mix[64];
    if (O.work_pct == 0)
        snprintf(mix, sizeof mix, "ping");
    else if (O.work_pct == 100)
        snprintf(mix, sizeof mix, "work:%llu", O.work_n);
    else
        snprintf(mix, sizeof mix, "ping+%d%%work:%llu", O.work_pct, O.work_n);
    double p50 = hist_pct(&all, 0.50) / 1e3, p99 = hist_pct(&all, 0.99) / 1e3, mx = (double)all.max / 1e3;
    if (O.json)
        printf("{\"label\":\"%s\",\"conns\":%d,\"depth\":%d,\"mix\":\"%s\",\"seconds\":%.2f,\"responses\":%" PRIu64
               ",\"rps\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"errors\":%" PRIu64
               ",\"conn_failures\":%" PRIu64 ",\"unanswered\":%lld,\"starved_conns\":%lld}\n",
               O.label, O.conns, O.depth, mix, window, all.count, rps, p50, p99, mx, errors, failures, unanswered,
               starved);
    else
        printf("loadgen: %s conns=%d depth=%d mix=%s seconds=%.2f responses=%" PRIu64
               " rps=%.0f p50_us=%.1f p99_us=%.1f max_us=%.1f errors=%" PRIu64 " conn_failures=%" PRIu64
               " unanswered=%lld starved_conns=%lld\n",
               O.label, O.conns, O.depth, mix, window, all.count, rps, p50, p99, mx, errors, failures, unanswered,
               starved);
    if (first_error[0])
        fprintf(stderr, "loadgen: first error: %s\n", first_error);
    fflush(stdout);
    if (O.stats)
        print_server_stats();
    for (int i = 0; i < O.conns; i++) {
        free(conns[i].sent_at);
        free(conns[i].kind);
    }
    free(conns);
    free(ws);
    return errors || failures ? 1 : 0;
}
