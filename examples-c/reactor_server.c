/*
 * reactor_server.c: an epoll reactor on wspool (seed 002), and its negative control.
 *
 * One event-loop thread (level-triggered epoll) owns every socket: it accepts,
 * reads without blocking, cuts the byte stream into lines and hands complete
 * lines to the pool. Idle connections cost an fd and ~200 bytes, not a worker.
 * Workers only run the requests, so a server with 2 workers answers a late
 * client at once while 10,000 idle connections are open.
 *
 * Protocol (newline-delimited, one response line per request line, in order):
 *   PING          -> PONG
 *   ECHO <text>   -> <text>
 *   WORK <n>      -> 16 hex digits: the digest after n rounds of a hash (CPU)
 *   SLEEP <ms>    -> SLEPT (sleeps inside wspool_blocking_begin/end)
 *   STATS         -> one JSON line: the pool's wspool_stats fields + "server"
 *   DUMP          -> the pool's snapshot report (wspool_dump, docs/diagnosis.md)
 *                    on one line, its lines joined by " | "
 * With WSPOOL_DUMP_ON_SIGUSR1=1 in the environment, SIGUSR1 prints that report
 * on stderr (through the loop's signalfd; without it the signal is left alone).
 *   anything else -> ERR <reason> (the connection stays open)
 * A line longer than --line-max bytes (default 64 KiB) gets "ERR line too long"
 * and the connection is closed after the earlier responses and that one.
 *
 * Rules the reactor keeps (see examples-c/README.md, "The reactor server"):
 *  - At most one task per connection is in flight, so responses come back in
 *    request order. The in_flight flag lives under the connection's mutex:
 *    the loop sets it when it queues lines and none is in flight; the task
 *    clears it only after seeing the queue empty under the same lock
 *    (clear-then-recheck done atomically), so no line is ever stranded.
 *  - Writes never block: a worker sends inline when nothing is queued, else it
 *    appends to the connection's write queue; the loop arms EPOLLOUT when the
 *    task completes. A write queue past --write-cap (default 16 MiB) closes
 *    the connection.
 *  - Only the loop calls epoll_ctl and changes a connection's registration.
 *    Tasks go through a wspool completion queue (wspool_cq_*): each task's
 *    done callback runs on the loop, exactly once (also when a shutdown
 *    cancels the task), brings the connection's registration in line with
 *    the state the task left, and drops the task's reference. An fd is
 *    closed only when the last reference (loop, task) is dropped, so a
 *    worker can never write to a reused fd.
 *  - A task yields after TASK_BATCH_LIMIT batches; its done resubmits it
 *    behind the other connections' tasks.
 *  - Idle timeout (--idle-timeout-ms) and SO_KEEPALIVE (60 s idle, 3 x 20 s
 *    probes by default) reclaim idle and half-open connections.
 *  - SIGINT/SIGTERM: stop accepting and reading, answer every line already
 *    read, close each connection cleanly (FIN, then a short lingering read so
 *    no RST eats the last responses), then drain and destroy the pool. A
 *    second signal, or --grace-ms passing, closes what is left at once.
 *
 * --mode blocking is the seed's broken design, kept as the negative control:
 * one pool task per connection loops in a blocking recv(). With a fixed pool
 * of 2 workers, two idle clients hold both workers and nobody else is served.
 *
 * Only the public C API of include/libwspool.h is used.
 */
#define _GNU_SOURCE
#include <libwspool.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define INQ_PAUSE_BYTES (1u << 20)   /* stop reading a connection with 1 MiB of unprocessed lines */
#define TASK_BATCH_LIMIT 16          /* batches per task run before yielding the worker */
#define OUT_FLUSH_BYTES (64u << 10)  /* flush a task's output every 64 KiB */
#define WORK_MAX 100000000ull
#define SLEEP_MAX_MS 60000ull
#define ACCEPT_BATCH 128
#define MAX_EVENTS 256

/* ------------------------------------------------------------------ options */

enum mode { MODE_REACTOR, MODE_BLOCKING };

static struct options {
    const char *host;
    int port;
    enum mode mode;
    unsigned workers;        /* 0: the library default (available parallelism, >= 2) */
    unsigned max_threads;    /* 0: the library default */
    int growth;              /* -1: per mode (reactor: adaptive; blocking: fixed) */
    long long idle_timeout_ms; /* 0: off */
    bool keepalive;
    int ka_idle_s, ka_intvl_s, ka_cnt;
    size_t write_cap;
    size_t line_max;
    long long grace_ms;
    long long linger_ms;
    bool verbose;
} O = {
    .host = "127.0.0.1",
    .port = 7070,
    .mode = MODE_REACTOR,
    .growth = -1,
    .idle_timeout_ms = 300000,
    .keepalive = true,
    .ka_idle_s = 60,
    .ka_intvl_s = 20,
    .ka_cnt = 3,
    .write_cap = 16u << 20,
    .line_max = 64u << 10,
    .grace_ms = 10000,
    .linger_ms = 1000,
};

/* ------------------------------------------------------------------ helpers */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("reactor_server: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void logv(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logv(const char *fmt, ...)
{
    if (!O.verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("reactor_server: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static bool buf_reserve(buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return true;
    size_t need = b->len + extra;
    if (need < b->len)
        return false;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return false;
    b->p = p;
    b->cap = cap;
    return true;
}

static bool buf_append(buf *b, const void *d, size_t n)
{
    if (!n)
        return true;
    if (!buf_reserve(b, n))
        return false;
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return true;
}

static void buf_free(buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------ the protocol */

/* WORK <n>: h = splitmix64(h + i) for i in 0..n, starting from h = n.
 * Serial on purpose (each round needs the previous one), so n rounds cost
 * n x a few ns on any CPU. tests/reactor/test_reactor.py has the same. */
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

/* Strict decimal parse of [p, p+n) into *out, at most max. */
static bool parse_u64(const char *p, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0 || n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

static bool cmd_is(const char *line, size_t len, const char *cmd, const char **arg, size_t *arglen)
{
    size_t cl = strlen(cmd);
    if (len < cl || memcmp(line, cmd, cl) != 0)
        return false;
    if (len == cl) {
        *arg = line + len;
        *arglen = 0;
        return true;
    }
    if (line[cl] != ' ')
        return false;
    *arg = line + cl + 1;
    *arglen = len - cl - 1;
    return true;
}

static struct server S;
static size_t format_stats(char *dst, size_t cap);

/* The pool's snapshot report and the opt-in SIGUSR1 (defined below). */
static char *dump_text(void);
static bool dump_on_sigusr1(void);
static void print_dump(void);

/* Runs one request line (without its '\n'); appends exactly one response line
 * to out. Returns a sleep in ms the caller must perform before appending
 * "SLEPT\n" (so it can flush the earlier responses first), or -1. */
static long long handle_line(const char *line, size_t len, buf *out, bool *oom)
{
    const char *arg;
    size_t alen;
    char tmp[64];
    bool ok = true;
    if (len && line[len - 1] == '\r')
        len--;
    if (len == 4 && memcmp(line, "PING", 4) == 0) {
        ok = buf_append(out, "PONG\n", 5);
    } else if (cmd_is(line, len, "ECHO", &arg, &alen)) {
        ok = buf_append(out, arg, alen) && buf_append(out, "\n", 1);
    } else if (cmd_is(line, len, "WORK", &arg, &alen)) {
        uint64_t n;
        if (parse_u64(arg, alen, WORK_MAX, &n)) {
            int k = snprintf(tmp, sizeof tmp, "%016" PRIx64 "\n", work_digest(n));
            ok = buf_append(out, tmp, (size_t)k);
        } else {
            static const char e[] = "ERR WORK wants an integer 0..100000000\n";
            ok = buf_append(out, e, sizeof e - 1);
        }
    } else if (cmd_is(line, len, "SLEEP", &arg, &alen)) {
        uint64_t ms;
        if (parse_u64(arg, alen, SLEEP_MAX_MS, &ms))
            return (long long)ms;
        static const char e[] = "ERR SLEEP wants milliseconds 0..60000\n";
        ok = buf_append(out, e, sizeof e - 1);
    } else if (len == 5 && memcmp(line, "STATS", 5) == 0) {
        char js[2048];
        size_t k = format_stats(js, sizeof js);
        ok = buf_append(out, js, k);
    } else if (len == 4 && memcmp(line, "DUMP", 4) == 0) {
        char *text = dump_text();
        if (!text) {
            static const char e[] = "ERR wspool_dump failed\n";
            ok = buf_append(out, e, sizeof e - 1);
        } else {
            /* one response line: the report's lines joined by " | " */
            size_t n = strlen(text);
            while (n && text[n - 1] == '\n')
                n--;
            for (size_t i = 0, from = 0; ok && i <= n; i++) {
                if (i == n || text[i] == '\n') {
                    ok = buf_append(out, text + from, i - from) &&
                         (i == n ? buf_append(out, "\n", 1) : buf_append(out, " | ", 3));
                    from = i + 1;
                }
            }
            free(text);
        }
    } else {
        static const char e[] = "ERR unknown command (PING, ECHO <text>, WORK <n>, SLEEP <ms>, STATS, DUMP)\n";
        ok = buf_append(out, e, sizeof e - 1);
    }
    if (!ok)
        *oom = true;
    return -1;
}

static void do_sleep(long long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    /* A declared blocking region: the pool lends a compensating thread, so a
     * sleeping request never holds back the others. */
    wspool_blocking_begin();
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    wspool_blocking_end();
}

/* --------------------------------------------------------------- the server */

enum close_reason { CR_PEER, CR_IDLE, CR_WRITE_CAP, CR_OVERSIZE, CR_ERROR, CR_SHUTDOWN, CR_COUNT };
static const char *const close_reason_names[CR_COUNT] = {"peer", "idle", "write_cap", "oversize", "error", "shutdown"};

typedef struct conn {
    int fd;
    atomic_int refs;
    pthread_mutex_t lock;

    /* guarded by lock */
    buf inq;               /* complete request lines not yet taken by the task */
    buf wq;                /* output not yet accepted by the kernel, from wq_off */
    size_t wq_off;
    bool in_flight;        /* a task of this connection is queued or running */
    bool oversize_pending; /* answer "ERR line too long" after inq */
    bool want_close;       /* close once quiescent (EOF, oversize, shutdown) */
    bool dead;             /* fatal (write error, write cap): close now */
    bool closed;           /* unregistered by the loop: tasks drop their output */
    bool read_paused;      /* inq too big: the loop stopped reading */
    bool yielded;          /* the task stopped at its batch limit: done resubmits it */
    enum close_reason reason;

    /* owned by the one task in flight */
    buf work, out;

    /* owned by the loop */
    buf rbuf;              /* the partial line after the last '\n' */
    bool registered, lingering;
    uint32_t ev_mask;
    int64_t deadline_base; /* last activity, or linger start */
    struct conn *prev, *next; /* S.active (LRU by activity) or S.linger */
} conn;

typedef struct list {
    conn *head, *tail;
} list;

/* blocking mode: one task per connection */
typedef struct bconn {
    int fd;
    struct bconn *prev, *next;
} bconn;

static char TAG_LISTEN, TAG_SIGNAL, TAG_CQ; /* epoll_data.ptr markers */

static struct server {
    wspool *pool;
    wspool_cq *cq;
    int epfd, lfd, sigfd, spare_fd;
    int port;
    atomic_bool shutting_down;
    int64_t grace_deadline;
    rlim_t nofile;

    list active, linger;   /* loop-owned */
    conn *graveyard;       /* closed this epoll batch; the loop's reference is dropped after it */
    size_t nconns;         /* registered connections (loop-owned) */

    pthread_mutex_t blk_lock; /* blocking mode registry */
    bconn *blk_head;
    size_t blk_count;

    atomic_ullong accepted, closed, received, requests, open, refused_emfile, submit_failures;
    atomic_ullong closed_by[CR_COUNT];
} S = {
    .blk_lock = PTHREAD_MUTEX_INITIALIZER,
    .lfd = -1,
    .spare_fd = -1,
};

static long rss_kb(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = -1;
    fclose(f);
    return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The pool's snapshot report (malloc'd, NUL-terminated; NULL on failure). */
static char *dump_text(void)
{
    size_t need = 0;
    if (wspool_dump(S.pool, NULL, 0, &need) != WSPOOL_OK)
        return NULL;
    size_t cap = need + 4096; /* it may grow meanwhile: then cut at a line */
    char *text = malloc(cap);
    if (text && wspool_dump(S.pool, text, cap, NULL) != WSPOOL_OK) {
        free(text);
        text = NULL;
    }
    return text;
}

/* SIGUSR1 through the signalfd: prints the report, and is not a stop. */
static bool dump_on_sigusr1(void)
{
    const char *v = getenv("WSPOOL_DUMP_ON_SIGUSR1");
    return v && *v && strcmp(v, "0") != 0;
}

static void print_dump(void)
{
    char *text = dump_text();
    fprintf(stderr, "%s", text ? text : "wspool_dump failed\n");
    free(text);
}

static size_t format_stats(char *dst, size_t cap)
{
    wspool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    int rc = wspool_stats_get(S.pool, &st);
    int k;
    if (rc != WSPOOL_OK) {
        k = snprintf(dst, cap, "{\"error\":\"wspool_stats_get: %s\"}\n", wspool_strerror(rc));
    } else {
        k = snprintf(dst, cap,
            "{\"threads\":%" PRIu32 ",\"idle_threads\":%" PRIu32 ",\"blocked_threads\":%" PRIu32
            ",\"peak_threads\":%" PRIu32 ",\"submitted\":%" PRIu64 ",\"completed\":%" PRIu64
            ",\"rejected\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"panicked\":%" PRIu64
            ",\"local_pops\":%" PRIu64 ",\"global_pops\":%" PRIu64 ",\"steals\":%" PRIu64
            ",\"spin_hits\":%" PRIu64 ",\"spin_misses\":%" PRIu64 ",\"spin_threshold_ns\":%" PRIu32
            ",\"threads_started\":%" PRIu64 ",\"threads_retired\":%" PRIu64
            ",\"starvation_injections\":%" PRIu64 ",\"queued\":%" PRIu64
            ",\"queue_delay_p50_ns\":%" PRIu64 ",\"queue_delay_p99_ns\":%" PRIu64
            ",\"queue_delay_max_ns\":%" PRIu64 ",\"spawn_failures\":%" PRIu64
            ",\"server\":{\"mode\":\"%s\",\"connections_open\":%llu,\"accepted\":%llu,\"closed\":%llu"
            ",\"received\":%llu,\"requests\":%llu,\"closed_peer\":%llu,\"closed_idle\":%llu,\"closed_write_cap\":%llu"
            ",\"closed_oversize\":%llu,\"closed_error\":%llu,\"closed_shutdown\":%llu"
            ",\"refused_emfile\":%llu,\"submit_failures\":%llu,\"rss_kb\":%ld}}\n",
            st.threads, st.idle_threads, st.blocked_threads, st.peak_threads, st.submitted,
            st.completed, st.rejected, st.cancelled, st.panicked, st.local_pops, st.global_pops,
            st.steals, st.spin_hits, st.spin_misses, st.spin_threshold_ns, st.threads_started,
            st.threads_retired, st.starvation_injections, st.queued, st.queue_delay_p50_ns,
            st.queue_delay_p99_ns, st.queue_delay_max_ns, st.spawn_failures,
            O.mode == MODE_REACTOR ? "reactor" : "blocking",
            (unsigned long long)atomic_load(&S.open), (unsigned long long)atomic_load(&S.accepted),
            (unsigned long long)atomic_load(&S.closed), (unsigned long long)atomic_load(&S.received),
            (unsigned long long)atomic_load(&S.requests),
            (unsigned long long)atomic_load(&S.closed_by[CR_PEER]),
            (unsigned long long)atomic_load(&S.closed_by[CR_IDLE]),
            (unsigned long long)atomic_load(&S.closed_by[CR_WRITE_CAP]),
            (unsigned long long)atomic_load(&S.closed_by[CR_OVERSIZE]),
            (unsigned long long)atomic_load(&S.closed_by[CR_ERROR]),
            (unsigned long long)atomic_load(&S.closed_by[CR_SHUTDOWN]),
            (unsigned long long)atomic_load(&S.refused_emfile),
            (unsigned long long)atomic_load(&S.submit_failures), rss_kb());
    }
    if (k < 0)
        k = 0;
    if ((size_t)k >= cap)
        k = (int)cap - 1;
    return (size_t)k;
}

static void count_close(enum close_reason r)
{
    atomic_fetch_add(&S.closed, 1);
    atomic_fetch_sub(&S.open, 1);
    atomic_fetch_add(&S.closed_by[r], 1);
}

static void set_socket_options(int fd, bool blocking_mode)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (O.keepalive) {
        /* Half-open connections (seed 002, factor 3): probe after 60 s idle,
         * 3 probes 20 s apart, so a dead peer is dropped after ~2 minutes. */
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &O.ka_idle_s, sizeof O.ka_idle_s);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &O.ka_intvl_s, sizeof O.ka_intvl_s);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &O.ka_cnt, sizeof O.ka_cnt);
    }
    if (blocking_mode && O.idle_timeout_ms > 0) {
        struct timeval tv = {.tv_sec = O.idle_timeout_ms / 1000, .tv_usec = (O.idle_timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
}

/* ---- connection references and lists */

static void conn_ref(conn *c) { atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed); }

static void conn_unref(conn *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    close(c->fd);
    buf_free(&c->inq);
    buf_free(&c->wq);
    buf_free(&c->work);
    buf_free(&c->out);
    buf_free(&c->rbuf);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void list_remove(list *l, conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

static void list_push(list *l, conn *c)
{
    c->next = NULL;
    c->prev = l->tail;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

/* Loop only: mark activity (moves c to the LRU tail). */
static void conn_touch(conn *c, int64_t now)
{
    if (c->lingering || !c->registered)
        return;
    c->deadline_base = now;
    if (S.active.tail != c) {
        list_remove(&S.active, c);
        list_push(&S.active, c);
    }
}

/* Loop only: unregister and drop the loop's reference. */
static void conn_close(conn *c, enum close_reason r)
{
    if (!c->registered)
        return;
    epoll_ctl(S.epfd, EPOLL_CTL_DEL, c->fd, NULL);
    list_remove(c->lingering ? &S.linger : &S.active, c);
    c->registered = false;
    S.nconns--;
    pthread_mutex_lock(&c->lock);
    c->closed = true;
    buf_free(&c->wq);
    c->wq_off = 0;
    buf_free(&c->inq);
    pthread_mutex_unlock(&c->lock);
    buf_free(&c->rbuf);
    /* Wakes the peer now even if a task still holds a reference; the fd
     * itself is closed with the last reference. */
    shutdown(c->fd, SHUT_RDWR);
    count_close(r);
    logv("closed fd %d (%s)", c->fd, close_reason_names[r]);
    /* Later events of the same epoll batch may still point at c: keep the
     * loop's reference until the batch is done (bury_dead). */
    c->next = S.graveyard;
    S.graveyard = c;
}

/* Loop only, between epoll batches: drop the references of closed conns. */
static void bury_dead(void)
{
    while (S.graveyard) {
        conn *c = S.graveyard;
        S.graveyard = c->next;
        c->next = NULL;
        conn_unref(c);
    }
}

static void conn_set_mask(conn *c, uint32_t mask)
{
    if (mask == c->ev_mask)
        return;
    struct epoll_event ev = {.events = mask, .data.ptr = c};
    if (epoll_ctl(S.epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->ev_mask = mask;
}

/* Loop only: FIN now, then read and discard until the peer's EOF or the
 * linger time, so closing with unread input cannot RST the last responses. */
static void conn_start_linger(conn *c, int64_t now)
{
    list_remove(&S.active, c);
    c->lingering = true;
    c->deadline_base = now;
    list_push(&S.linger, c);
    shutdown(c->fd, SHUT_WR);
    conn_set_mask(c, EPOLLIN);
}

/* Loop only: bring c's registration in line with its state. */
static void conn_reconcile(conn *c, int64_t now)
{
    if (!c->registered)
        return;
    pthread_mutex_lock(&c->lock);
    if (c->dead) {
        enum close_reason r = c->reason;
        pthread_mutex_unlock(&c->lock);
        conn_close(c, r);
        return;
    }
    if (c->lingering) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    bool wq_pending = c->wq.len > c->wq_off;
    bool quiescent = !c->in_flight && c->inq.len == 0 && !c->oversize_pending && !wq_pending;
    if (quiescent && c->want_close) {
        enum close_reason r = c->reason;
        pthread_mutex_unlock(&c->lock);
        if (r == CR_PEER)
            conn_close(c, r); /* the peer already sent its EOF: nothing to linger for */
        else
            conn_start_linger(c, now);
        return;
    }
    uint32_t mask = 0;
    if (!c->want_close && !c->read_paused)
        mask |= EPOLLIN;
    if (wq_pending)
        mask |= EPOLLOUT;
    conn_set_mask(c, mask);
    pthread_mutex_unlock(&c->lock);
}

/* ---- the task side */

static void conn_task(void *arg);

static int conn_submit(conn *c);

/* The task's done callback, on the loop, exactly once per submitted task:
 * after it ran, or when a shutdown cancelled it unrun (its lines cannot be
 * answered: the connection closes). */
static void conn_task_done(void *arg, int status)
{
    conn *c = arg;
    bool resubmit = false;
    pthread_mutex_lock(&c->lock);
    if (status != WSPOOL_CQ_RAN) {
        c->in_flight = false;
        c->dead = true;
        c->reason = CR_SHUTDOWN;
    } else if (c->yielded) {
        c->yielded = false;
        resubmit = !c->closed && !c->dead;
        if (!resubmit)
            c->in_flight = false;
    }
    pthread_mutex_unlock(&c->lock);
    if (resubmit && conn_submit(c) != WSPOOL_OK) {
        atomic_fetch_add(&S.submit_failures, 1);
        pthread_mutex_lock(&c->lock);
        c->in_flight = false;
        c->dead = true;
        c->reason = CR_ERROR;
        pthread_mutex_unlock(&c->lock);
    }
    conn_reconcile(c, now_ms());
    conn_unref(c);
}

/* Queues c's task; the task owns one reference until its done has run. */
static int conn_submit(conn *c)
{
    conn_ref(c);
    int rc = wspool_cq_submit(S.cq, conn_task, conn_task_done, c);
    if (rc != WSPOOL_OK)
        conn_unref(c);
    return rc;
}

/* Sends as much of p[0..n) as the socket takes without blocking (c->lock
 * held); both the task side and the loop side write through here. Returns
 * the bytes sent; a fatal error marks the connection dead with its reason. */
static size_t send_now(conn *c, const char *p, size_t n)
{
    size_t sent = 0;
    while (sent < n) {
        ssize_t k = send(c->fd, p + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            sent += (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            c->dead = true;
            c->reason = errno == EPIPE || errno == ECONNRESET ? CR_PEER : CR_ERROR;
            break;
        }
    }
    return sent;
}

/* Task side: send, or queue, n bytes in order. */
static void conn_write(conn *c, const char *p, size_t n)
{
    if (!n)
        return;
    pthread_mutex_lock(&c->lock);
    if (c->closed || c->dead)
        goto out;
    size_t pending = c->wq.len - c->wq_off;
    size_t sent = 0;
    if (pending == 0) {
        sent = send_now(c, p, n);
        if (c->dead)
            goto out;
        if (sent == n)
            goto out;
        c->wq.len = c->wq_off = 0;
    }
    size_t rest = n - sent;
    if (pending + rest > O.write_cap) {
        /* A reader too slow for what it asks: close it rather than buffer
         * without bound (seed 002's max_write_queue_bytes). */
        c->dead = true;
        c->reason = CR_WRITE_CAP;
        buf_free(&c->wq);
        c->wq_off = 0;
        goto out;
    }
    if (c->wq_off > 0 && c->wq_off >= c->wq.len / 2) {
        memmove(c->wq.p, c->wq.p + c->wq_off, c->wq.len - c->wq_off);
        c->wq.len -= c->wq_off;
        c->wq_off = 0;
    }
    if (!buf_append(&c->wq, p + sent, rest)) {
        c->dead = true;
        c->reason = CR_ERROR;
    }
out:
    pthread_mutex_unlock(&c->lock);
}

static void conn_flush_out(conn *c)
{
    conn_write(c, c->out.p, c->out.len);
    c->out.len = 0;
}

/* Runs every complete line of [p, p+n) (each ends with '\n'). */
static void conn_run_lines(conn *c, const char *p, size_t n)
{
    const char *end = p + n;
    unsigned long long count = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break; /* cannot happen: the loop queues whole lines only */
        bool oom = false;
        long long sleep_ms = handle_line(p, (size_t)(nl - p), &c->out, &oom);
        count++;
        if (sleep_ms >= 0) {
            conn_flush_out(c);
            do_sleep(sleep_ms);
            if (!buf_append(&c->out, "SLEPT\n", 6))
                oom = true;
        }
        if (oom) {
            pthread_mutex_lock(&c->lock);
            c->dead = true;
            c->reason = CR_ERROR;
            pthread_mutex_unlock(&c->lock);
            c->out.len = 0;
            break;
        }
        if (c->out.len >= OUT_FLUSH_BYTES)
            conn_flush_out(c);
        p = nl + 1;
    }
    conn_flush_out(c);
    if (c->out.cap > (1u << 20))
        buf_free(&c->out);
    atomic_fetch_add_explicit(&S.requests, count, memory_order_relaxed);
}

static void conn_task(void *arg)
{
    conn *c = arg;
    for (int batch = 0;; batch++) {
        pthread_mutex_lock(&c->lock);
        if (c->closed || c->dead) {
            c->in_flight = false;
            pthread_mutex_unlock(&c->lock);
            break;
        }
        if (c->inq.len == 0) {
            if (c->oversize_pending) {
                c->oversize_pending = false;
                pthread_mutex_unlock(&c->lock);
                static const char e[] = "ERR line too long\n";
                conn_write(c, e, sizeof e - 1);
                continue;
            }
            /* Clear-then-recheck, atomically: the loop appends to inq and
             * tests in_flight under this same lock, so it either sees the
             * flag still set (and we saw its lines) or sees it clear and
             * submits a new task. */
            c->in_flight = false;
            pthread_mutex_unlock(&c->lock);
            break;
        }
        if (batch >= TASK_BATCH_LIMIT) {
            /* A connection with a steady stream yields its worker now and
             * then: in_flight stays set and the done callback requeues the
             * task, behind the other connections. */
            c->yielded = true;
            pthread_mutex_unlock(&c->lock);
            break;
        }
        buf taken = c->inq;
        c->inq = c->work; /* an empty buffer whose memory we reuse */
        c->inq.len = 0;
        c->work = taken;
        c->read_paused = false; /* the loop resumes reading at done */
        pthread_mutex_unlock(&c->lock);
        conn_run_lines(c, c->work.p, c->work.len);
        c->work.len = 0;
        if (c->work.cap > (1u << 20))
            buf_free(&c->work);
    }
}

/* ---- the loop side */

/* Hands complete lines to c's task: [pre, pre+pren) then [p, p+n). */
static void conn_deliver(conn *c, const char *pre, size_t pren, const char *p, size_t n, bool oversize, int64_t now)
{
    bool submit = false, fail = false, changed = oversize;
    pthread_mutex_lock(&c->lock);
    if (!buf_append(&c->inq, pre, pren) || !buf_append(&c->inq, p, n)) {
        c->dead = true;
        c->reason = CR_ERROR;
        fail = true;
    } else {
        if (oversize) {
            c->oversize_pending = true;
            if (!c->want_close) {
                c->want_close = true;
                c->reason = CR_OVERSIZE;
            }
        }
        if (c->inq.len >= INQ_PAUSE_BYTES && !c->read_paused) {
            c->read_paused = true;
            changed = true;
        }
        if (!c->in_flight && (c->inq.len || c->oversize_pending)) {
            c->in_flight = true;
            submit = true;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (submit && conn_submit(c) != WSPOOL_OK) {
        atomic_fetch_add(&S.submit_failures, 1);
        pthread_mutex_lock(&c->lock);
        c->in_flight = false;
        c->dead = true;
        c->reason = CR_ERROR;
        pthread_mutex_unlock(&c->lock);
        fail = true;
    }
    if (fail || changed)
        conn_reconcile(c, now);
}

/* Cuts [d, d+n) into lines. Returns false when c stopped reading. */
static bool conn_ingest(conn *c, const char *d, size_t n, int64_t now)
{
    const char *p = d, *end = d + n;
    bool have_pre = false;
    if (c->rbuf.len) {
        const char *nl = memchr(p, '\n', n);
        size_t add = nl ? (size_t)(nl - p) : n;
        if (c->rbuf.len + add > O.line_max) {
            c->rbuf.len = 0;
            conn_deliver(c, NULL, 0, NULL, 0, true, now);
            return false;
        }
        if (!buf_append(&c->rbuf, p, nl ? add + 1 : add)) {
            conn_deliver(c, NULL, 0, NULL, 0, true, now);
            return false;
        }
        if (!nl)
            return true;
        have_pre = true;
        p = nl + 1;
    }
    const char *start = p, *last = p;
    bool over = false;
    unsigned long long lines = have_pre;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            over = (size_t)(end - p) > O.line_max;
            break;
        }
        if ((size_t)(nl - p) > O.line_max) {
            over = true;
            break;
        }
        p = nl + 1;
        last = p;
        lines++;
    }
    atomic_fetch_add_explicit(&S.received, lines, memory_order_relaxed);
    if (have_pre || last > start || over)
        conn_deliver(c, c->rbuf.p, have_pre ? c->rbuf.len : 0, start, (size_t)(last - start), over, now);
    c->rbuf.len = 0;
    if (over) {
        buf_free(&c->rbuf);
        return false;
    }
    if (last < end && !buf_append(&c->rbuf, last, (size_t)(end - last))) {
        conn_deliver(c, NULL, 0, NULL, 0, true, now);
        return false;
    }
    if (!c->rbuf.len && c->rbuf.cap > 4096)
        buf_free(&c->rbuf);
    return true;
}

static char rtmp[64 << 10]; /* the loop's receive buffer */

static void conn_on_readable(conn *c, int64_t now)
{
    for (int i = 0; i < 4; i++) {
        ssize_t n = recv(c->fd, rtmp, sizeof rtmp, 0);
        if (n > 0) {
            conn_touch(c, now);
            if (!conn_ingest(c, rtmp, (size_t)n, now) || !c->registered)
                return;
            if ((size_t)n < sizeof rtmp)
                return;
            pthread_mutex_lock(&c->lock);
            bool stop = c->read_paused || c->want_close;
            pthread_mutex_unlock(&c->lock);
            if (stop)
                return;
            continue;
        }
        if (n == 0) {
            /* EOF: answer what was read, then close. A partial last line is
             * not a request and gets no answer. */
            pthread_mutex_lock(&c->lock);
            if (!c->want_close) {
                c->want_close = true;
                c->reason = CR_PEER;
            }
            pthread_mutex_unlock(&c->lock);
            conn_reconcile(c, now);
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        conn_close(c, errno == ECONNRESET ? CR_PEER : CR_ERROR);
        return;
    }
}

static void conn_on_writable(conn *c, int64_t now)
{
    pthread_mutex_lock(&c->lock);
    if (!c->dead)
        c->wq_off += send_now(c, c->wq.p + c->wq_off, c->wq.len - c->wq_off);
    if (c->wq_off == c->wq.len) {
        c->wq.len = c->wq_off = 0;
        if (c->wq.cap > (1u << 20))
            buf_free(&c->wq);
    }
    pthread_mutex_unlock(&c->lock);
    conn_touch(c, now);
    conn_reconcile(c, now);
}

static void conn_on_linger_readable(conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, rtmp, sizeof rtmp, 0);
        if (n > 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        conn_close(c, c->reason); /* EOF or error: the peer has everything */
        return;
    }
}

enum { ACCEPT_AGAIN = -2 };

/* Accepts one pending connection with `flags` (both modes share this).
 * Returns its fd; ACCEPT_AGAIN when the caller should try again (interrupted,
 * aborted, or out of fds: then one pending connection is accepted and
 * dropped, so the level-triggered listener does not spin and the client sees
 * a clean close); -1 when nothing is left to accept. */
static int accept_one(int flags)
{
    int fd = accept4(S.lfd, NULL, NULL, flags);
    if (fd >= 0)
        return fd;
    if (errno == EINTR || errno == ECONNABORTED)
        return ACCEPT_AGAIN;
    if ((errno == EMFILE || errno == ENFILE) && S.spare_fd >= 0) {
        close(S.spare_fd);
        fd = accept(S.lfd, NULL, NULL);
        if (fd >= 0)
            close(fd);
        S.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        atomic_fetch_add(&S.refused_emfile, 1);
        return ACCEPT_AGAIN;
    }
    return -1;
}

static void accept_reactor(int64_t now)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        int fd = accept_one(SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd == ACCEPT_AGAIN)
            continue;
        if (fd < 0)
            return;
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        atomic_init(&c->refs, 1);
        pthread_mutex_init(&c->lock, NULL);
        set_socket_options(fd, false);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(S.epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            conn_unref(c);
            continue;
        }
        c->ev_mask = EPOLLIN;
        c->registered = true;
        c->deadline_base = now;
        list_push(&S.active, c);
        S.nconns++;
        atomic_fetch_add(&S.accepted, 1);
        atomic_fetch_add(&S.open, 1);
    }
}

static void begin_shutdown(int64_t now)
{
    if (atomic_exchange(&S.shutting_down, true))
        return;
    logv("shutting down: %zu connections", S.nconns);
    if (S.lfd >= 0) {
        epoll_ctl(S.epfd, EPOLL_CTL_DEL, S.lfd, NULL);
        close(S.lfd);
        S.lfd = -1;
    }
    S.grace_deadline = now + O.grace_ms;
    conn *c = S.active.head;
    while (c) {
        conn *next = c->next;
        pthread_mutex_lock(&c->lock);
        if (!c->want_close) {
            c->want_close = true;
            c->reason = CR_SHUTDOWN;
        }
        pthread_mutex_unlock(&c->lock);
        conn_reconcile(c, now);
        c = next;
    }
}

static void close_all(list *l, enum close_reason r)
{
    while (l->head)
        conn_close(l->head, r);
}

/* Closes idle connections and finished lingers; returns the next deadline. */
static int64_t run_timers(int64_t now)
{
    int64_t next = INT64_MAX;
    int64_t linger = O.linger_ms;
    while (S.linger.head) {
        conn *c = S.linger.head;
        int64_t due = c->deadline_base + linger;
        if (S.shutting_down && due > S.grace_deadline)
            due = S.grace_deadline;
        if (due > now) {
            next = due;
            break;
        }
        conn_close(c, c->reason);
    }
    if (O.idle_timeout_ms > 0 && !S.shutting_down) {
        while (S.active.head) {
            conn *c = S.active.head;
            int64_t due = c->deadline_base + O.idle_timeout_ms;
            if (due > now) {
                if (due < next)
                    next = due;
                break;
            }
            pthread_mutex_lock(&c->lock);
            bool busy = c->in_flight || c->inq.len || c->wq.len > c->wq_off;
            pthread_mutex_unlock(&c->lock);
            if (busy) {
                conn_touch(c, now); /* a long request is not idleness */
                continue;
            }
            conn_close(c, CR_IDLE);
        }
    }
    if (S.shutting_down && S.grace_deadline < next)
        next = S.grace_deadline;
    return next;
}

static void run_reactor(void)
{
    struct epoll_event evs[MAX_EVENTS];
    int signals = 0;
    for (;;) {
        bury_dead();
        int64_t now = now_ms();
        int64_t next = run_timers(now);
        if (S.shutting_down) {
            if (S.nconns == 0)
                break;
            if (now >= S.grace_deadline || signals > 1) {
                logv("grace period over: closing %zu connections", S.nconns);
                close_all(&S.active, CR_SHUTDOWN);
                close_all(&S.linger, CR_SHUTDOWN);
                bury_dead();
                break;
            }
        }
        int timeout = -1;
        if (next != INT64_MAX)
            timeout = next - now > INT_MAX ? INT_MAX : (int)(next - now);
        int n = epoll_wait(S.epfd, evs, MAX_EVENTS, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait: %s", strerror(errno));
        }
        now = now_ms();
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            uint32_t e = evs[i].events;
            if (tag == &TAG_LISTEN) {
                if (!S.shutting_down)
                    accept_reactor(now);
                continue;
            }
            if (tag == &TAG_SIGNAL) {
                struct signalfd_siginfo si;
                bool stop = false;
                while (read(S.sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    if (si.ssi_signo == SIGUSR1) {
                        print_dump();
                        continue;
                    }
                    stop = true;
                    signals++;
                    logv("signal %u", si.ssi_signo);
                }
                if (stop)
                    begin_shutdown(now);
                continue;
            }
            if (tag == &TAG_CQ) {
                wspool_cq_drain(S.cq, 0); /* runs conn_task_done for every finished task */
                continue;
            }
            conn *c = tag;
            if (!c->registered)
                continue;
            if (e & (EPOLLERR | EPOLLHUP)) {
                conn_close(c, c->lingering ? c->reason : CR_PEER);
                continue;
            }
            if (c->lingering) {
                if (e & EPOLLIN)
                    conn_on_linger_readable(c);
                continue;
            }
            if (e & EPOLLOUT)
                conn_on_writable(c, now);
            if ((e & EPOLLIN) && c->registered)
                conn_on_readable(c, now);
        }
    }
}

/* ------------------------------------------------ blocking mode (control) */

static void bconn_release(bconn *b, enum close_reason r)
{
    pthread_mutex_lock(&S.blk_lock);
    if (b->prev)
        b->prev->next = b->next;
    else
        S.blk_head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    S.blk_count--;
    close(b->fd); /* under the lock: shutdown_all never sees a reused fd */
    pthread_mutex_unlock(&S.blk_lock);
    count_close(r);
    free(b);
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else {
            return false;
        }
    }
    return true;
}

/* The seed's HandleConnection: this worker owns the connection for its whole
 * life and blocks in recv() while the client is idle. Deliberately NOT
 * wrapped in wspool_blocking_begin/end: that is the broken design. */
static void bconn_task(void *arg)
{
    bconn *b = arg;
    enum close_reason r = CR_PEER;
    buf in = {0}, out = {0};
    char *tmp = malloc(64 << 10);
    if (!tmp || atomic_load(&S.shutting_down)) {
        r = tmp ? CR_SHUTDOWN : CR_ERROR;
        goto done;
    }
    for (;;) {
        ssize_t n = recv(b->fd, tmp, 64 << 10, 0);
        if (n == 0) {
            r = atomic_load(&S.shutting_down) ? CR_SHUTDOWN : CR_PEER;
            break;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = errno == EAGAIN || errno == EWOULDBLOCK ? CR_IDLE : errno == ECONNRESET ? CR_PEER : CR_ERROR;
            break;
        }
        if (!buf_append(&in, tmp, (size_t)n)) {
            r = CR_ERROR;
            break;
        }
        size_t off = 0;
        bool oversize = false, oom = false;
        for (;;) {
            const char *nl = memchr(in.p + off, '\n', in.len - off);
            if (!nl) {
                oversize = in.len - off > O.line_max;
                break;
            }
            size_t len = (size_t)(nl - (in.p + off));
            if (len > O.line_max) {
                oversize = true;
                break;
            }
            atomic_fetch_add_explicit(&S.received, 1, memory_order_relaxed);
            long long ms = handle_line(in.p + off, len, &out, &oom);
            atomic_fetch_add_explicit(&S.requests, 1, memory_order_relaxed);
            if (ms >= 0) {
                if (!send_all(b->fd, out.p, out.len))
                    goto done_err;
                out.len = 0;
                do_sleep(ms);
                oom = !buf_append(&out, "SLEPT\n", 6);
            }
            if (oom) {
                r = CR_ERROR;
                goto done;
            }
            off = (size_t)(nl - in.p) + 1;
        }
        memmove(in.p, in.p + off, in.len - off);
        in.len -= off;
        if (oversize && !buf_append(&out, "ERR line too long\n", 18)) {
            r = CR_ERROR;
            goto done;
        }
        if (out.len && !send_all(b->fd, out.p, out.len))
            goto done_err;
        out.len = 0;
        if (oversize) {
            r = CR_OVERSIZE;
            shutdown(b->fd, SHUT_WR);
            break;
        }
    }
    goto done;
done_err:
    r = errno == EPIPE || errno == ECONNRESET ? CR_PEER : CR_ERROR;
done:
    free(tmp);
    buf_free(&in);
    buf_free(&out);
    bconn_release(b, r);
}

static void bconn_cancelled(void *arg) { bconn_release(arg, CR_SHUTDOWN); }

static void accept_blocking(void)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        int fd = accept_one(SOCK_CLOEXEC);
        if (fd == ACCEPT_AGAIN)
            continue;
        if (fd < 0)
            return;
        /* The listener is non-blocking; the accepted socket must not be. */
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        set_socket_options(fd, true);
        bconn *b = calloc(1, sizeof *b);
        if (!b) {
            close(fd);
            continue;
        }
        b->fd = fd;
        pthread_mutex_lock(&S.blk_lock);
        b->next = S.blk_head;
        if (S.blk_head)
            S.blk_head->prev = b;
        S.blk_head = b;
        S.blk_count++;
        pthread_mutex_unlock(&S.blk_lock);
        atomic_fetch_add(&S.accepted, 1);
        atomic_fetch_add(&S.open, 1);
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.on_cancel = bconn_cancelled;
        if (wspool_submit_ex(S.pool, bconn_task, b, &o, NULL) != WSPOOL_OK) {
            atomic_fetch_add(&S.submit_failures, 1);
            bconn_release(b, CR_ERROR);
        }
    }
}

static void blocking_shutdown_all(int how)
{
    pthread_mutex_lock(&S.blk_lock);
    for (bconn *b = S.blk_head; b; b = b->next)
        shutdown(b->fd, how);
    pthread_mutex_unlock(&S.blk_lock);
}

static size_t blocking_count(void)
{
    pthread_mutex_lock(&S.blk_lock);
    size_t n = S.blk_count;
    pthread_mutex_unlock(&S.blk_lock);
    return n;
}

static void run_blocking(void)
{
    struct epoll_event evs[8];
    int signals = 0;
    for (;;) {
        int64_t now = now_ms();
        if (S.shutting_down) {
            if (blocking_count() == 0)
                break;
            if (now >= S.grace_deadline || signals > 1) {
                blocking_shutdown_all(SHUT_RDWR);
                break;
            }
        }
        int n = epoll_wait(S.epfd, evs, 8, S.shutting_down ? 50 : -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &TAG_LISTEN && !S.shutting_down) {
                accept_blocking();
            } else if (evs[i].data.ptr == &TAG_SIGNAL) {
                struct signalfd_siginfo si;
                bool stop = false;
                while (read(S.sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    if (si.ssi_signo == SIGUSR1) {
                        print_dump();
                        continue;
                    }
                    stop = true;
                    signals++;
                }
                if (stop && !atomic_exchange(&S.shutting_down, true)) {
                    epoll_ctl(S.epfd, EPOLL_CTL_DEL, S.lfd, NULL);
                    close(S.lfd);
                    S.lfd = -1;
                    S.grace_deadline = now_ms() + O.grace_ms;
                    /* Wake every recv(): each worker answers what it has read
                     * and closes. Queued connections close when they start. */
                    blocking_shutdown_all(SHUT_RD);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------- main */

static void usage(FILE *f)
{
    fputs(
        "usage: reactor_server [options]\n"
        "  --host ADDR            listen address (default 127.0.0.1)\n"
        "  --port N               TCP port, 0 = ephemeral (default 7070); prints 'LISTENING port=N ...'\n"
        "  --mode reactor|blocking  reactor (default) or the seed's one-task-per-connection control\n"
        "  --workers N            pool min_threads (default 0 = available parallelism, >= 2)\n"
        "  --max-threads N        pool max_threads (default: library default; blocking mode: = workers)\n"
        "  --growth G             adaptive|scale_first|queue_first|fixed\n"
        "                         (default: adaptive in reactor mode, fixed in blocking mode)\n"
        "  --idle-timeout-ms N    close connections idle this long, 0 = never (default 300000)\n"
        "  --keepalive-idle S     TCP_KEEPIDLE seconds (default 60)\n"
        "  --keepalive-intvl S    TCP_KEEPINTVL seconds (default 20)\n"
        "  --keepalive-cnt N      TCP_KEEPCNT probes (default 3)\n"
        "  --no-keepalive         do not set SO_KEEPALIVE\n"
        "  --write-cap BYTES      per-connection write queue cap (default 16777216)\n"
        "  --line-max BYTES       longest request line (default 65536)\n"
        "  --grace-ms N           shutdown grace period (default 10000)\n"
        "  --linger-ms N          lingering close after the last response (default 1000)\n"
        "  --verbose              log connection events to stderr\n",
        f);
}

static long long arg_num(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        die("%s wants an integer in %lld..%lld, got '%s'", flag, lo, hi, v);
    return x;
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--no-keepalive")) {
            O.keepalive = false;
            continue;
        }
        if (!strcmp(a, "--verbose")) {
            O.verbose = true;
            continue;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            die("%s: missing value (or unknown flag)", a);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--host"))
            O.host = v;
        else if (!strcmp(a, "--port"))
            O.port = (int)arg_num(a, v, 0, 65535);
        else if (!strcmp(a, "--mode")) {
            if (!strcmp(v, "reactor"))
                O.mode = MODE_REACTOR;
            else if (!strcmp(v, "blocking"))
                O.mode = MODE_BLOCKING;
            else
                die("--mode wants reactor or blocking, got '%s'", v);
        } else if (!strcmp(a, "--workers"))
            O.workers = (unsigned)arg_num(a, v, 0, 4096);
        else if (!strcmp(a, "--max-threads"))
            O.max_threads = (unsigned)arg_num(a, v, 0, 65536);
        else if (!strcmp(a, "--growth")) {
            if (!strcmp(v, "adaptive"))
                O.growth = WSPOOL_GROWTH_ADAPTIVE;
            else if (!strcmp(v, "scale_first"))
                O.growth = WSPOOL_GROWTH_SCALE_FIRST;
            else if (!strcmp(v, "queue_first"))
                O.growth = WSPOOL_GROWTH_QUEUE_FIRST;
            else if (!strcmp(v, "fixed"))
                O.growth = WSPOOL_GROWTH_FIXED;
            else
                die("--growth wants adaptive, scale_first, queue_first or fixed, got '%s'", v);
        } else if (!strcmp(a, "--idle-timeout-ms"))
            O.idle_timeout_ms = arg_num(a, v, 0, 86400000LL * 365);
        else if (!strcmp(a, "--keepalive-idle"))
            O.ka_idle_s = (int)arg_num(a, v, 1, 32767);
        else if (!strcmp(a, "--keepalive-intvl"))
            O.ka_intvl_s = (int)arg_num(a, v, 1, 32767);
        else if (!strcmp(a, "--keepalive-cnt"))
            O.ka_cnt = (int)arg_num(a, v, 1, 127);
        else if (!strcmp(a, "--write-cap"))
            O.write_cap = (size_t)arg_num(a, v, 1, 1LL << 40);
        else if (!strcmp(a, "--line-max"))
            O.line_max = (size_t)arg_num(a, v, 1, 1LL << 30);
        else if (!strcmp(a, "--grace-ms"))
            O.grace_ms = arg_num(a, v, 0, 86400000LL);
        else if (!strcmp(a, "--linger-ms"))
            O.linger_ms = arg_num(a, v, 0, 600000LL);
        else {
            usage(stderr);
            die("unknown flag '%s'", a);
        }
    }
}

static void setup_listener(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)O.port)};
    if (inet_pton(AF_INET, O.host, &sa.sin_addr) != 1)
        die("--host '%s' is not an IPv4 address", O.host);
    S.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (S.lfd < 0)
        die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(S.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(S.lfd, (struct sockaddr *)&sa, sizeof sa) != 0)
        die("bind %s:%d: %s", O.host, O.port, strerror(errno));
    if (listen(S.lfd, SOMAXCONN) != 0)
        die("listen: %s", strerror(errno));
    socklen_t sl = sizeof sa;
    getsockname(S.lfd, (struct sockaddr *)&sa, &sl);
    S.port = ntohs(sa.sin_port);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);

    /* Raise the fd limit to the hard limit: each connection is one fd. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        S.nofile = rl.rlim_cur;
    }

    /* Signals arrive through a signalfd in the loop. Block them before the
     * pool exists so its threads inherit the mask and never take them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    if (dump_on_sigusr1())
        sigaddset(&sigs, SIGUSR1);
    if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0)
        die("pthread_sigmask failed");
    signal(SIGPIPE, SIG_IGN);
    S.sigfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    if (S.sigfd < 0)
        die("signalfd: %s", strerror(errno));

    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.name = O.mode == MODE_REACTOR ? "reactor" : "blocking";
    cfg.min_threads = O.workers;
    cfg.max_threads = O.max_threads;
    if (O.mode == MODE_BLOCKING) {
        /* The seed's pool: a fixed hardware_concurrency()-sized pool. */
        cfg.growth = O.growth >= 0 ? O.growth : WSPOOL_GROWTH_FIXED;
        if (O.growth < 0 && !O.max_threads)
            cfg.max_threads = O.workers;
    } else {
        cfg.growth = O.growth >= 0 ? O.growth : WSPOOL_GROWTH_ADAPTIVE;
    }
    int rc = wspool_create(&cfg, &S.pool);
    if (rc != WSPOOL_OK)
        die("wspool_create: %s (%s)", wspool_strerror(rc), wspool_last_error());

    setup_listener();
    S.epfd = epoll_create1(EPOLL_CLOEXEC);
    S.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (S.epfd < 0)
        die("epoll_create1: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &TAG_LISTEN};
    epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.lfd, &ev);
    ev.data.ptr = &TAG_SIGNAL;
    epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.sigfd, &ev);
    if (O.mode == MODE_REACTOR) {
        /* Overload shedding is the HTTP examples' business; this protocol has no "busy" answer. */
        wspool_cq_opts co;
        wspool_cq_opts_init(&co);
        co.overload_target_us = 0;
        rc = wspool_cq_create(S.pool, &co, &S.cq);
        if (rc != WSPOOL_OK)
            die("wspool_cq_create: %s (%s)", wspool_strerror(rc), wspool_last_error());
        ev.data.ptr = &TAG_CQ;
        epoll_ctl(S.epfd, EPOLL_CTL_ADD, wspool_cq_fd(S.cq), &ev);
    }

    wspool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    wspool_stats_get(S.pool, &st);
    printf("LISTENING port=%d mode=%s workers=%u nofile=%llu\n", S.port,
           O.mode == MODE_REACTOR ? "reactor" : "blocking", st.threads, (unsigned long long)S.nofile);
    fflush(stdout);

    if (O.mode == MODE_REACTOR) {
        run_reactor();
        bury_dead();
    } else
        run_blocking();

    /* Every accepted request has been answered (or its connection closed);
     * let the pool finish what is left, then destroy it. */
    int64_t left = S.grace_deadline - now_ms();
    if (left < 100)
        left = 100;
    if (S.cq) {
        /* The done callbacks of tasks still out run here; their connections
         * are closed already, so each only drops its reference. */
        if (wspool_cq_close(S.cq, WSPOOL_CQ_CLOSE_DRAIN, left) == WSPOOL_ETIMEDOUT)
            wspool_cq_close(S.cq, WSPOOL_CQ_CLOSE_CANCEL, -1);
        S.cq = NULL;
    }
    rc = wspool_shutdown(S.pool, WSPOOL_SHUTDOWN_DRAIN, left);
    if (rc == WSPOOL_ETIMEDOUT)
        rc = wspool_shutdown(S.pool, WSPOOL_SHUTDOWN_CANCEL, 1000);
    char js[2048];
    size_t k = format_stats(js, sizeof js);
    fprintf(stderr, "reactor_server: shut down (%s); final stats %.*s", rc == WSPOOL_OK ? "drained" : wspool_strerror(rc),
            (int)k, js);
    wspool_destroy(S.pool);
    S.pool = NULL;
    close(S.sigfd);
    close(S.epfd);
    if (S.spare_fd >= 0)
        close(S.spare_fd);
    return 0;
}
