/*
 * http_libuv.c: an HTTP/1.1 keep-alive server on libuv that runs its
 * requests on wspool through a completion queue, or, with --uv-work, on
 * libuv's own threadpool through uv_queue_work (the comparison baseline).
 *
 * The embedding glue is the lines marked "glue:" (docs/embedding.md shows
 * them): one queue, a uv_poll_t on its fd that drains it, a submit per
 * request, a close at shutdown. libuv has no HTTP parser, so this file has a
 * minimal one: GET/HEAD without a body, one request at a time per
 * connection (pipelined bytes wait in the buffer), HTTP/1.1 keep-alive
 * unless "Connection: close", HTTP/1.0 only with "Connection: keep-alive".
 *
 * A connection is freed when its handle is closed *and* no request of it is
 * in flight (refs), so a client that hangs up mid-request is safe: the done
 * callback sees the connection closing and just drops its reference.
 * SIGINT/SIGTERM: the queue is closed with CANCEL (every pending done runs),
 * every handle closed, the pool destroyed. Exit status 3 if the number of
 * done calls differs from the accepted submissions.
 */
#include "http_common.h"

#include <signal.h>
#include <uv.h>

typedef struct conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    int refs;          /* 1 for the open handle + 1 while a request is in flight */
    bool closing, busy, keep_alive;
    size_t in_len, req_len;
    char in[8192];
    char head[256];
    char *body;        /* the response body being written (owned when body_owned) */
    bool body_owned;
    struct uv_job *inflight; /* the request out at the pool, if any */
    uint64_t reply_teaches;  /* http_reply_teaches of the reply being written */
} conn;

typedef struct uv_job uv_job;
struct uv_job {
    http_job j;
    uv_work_t w;       /* --uv-work only */
    wspool_task *task; /* its handle, to cancel it if the client hangs up (not with --plain) */
};

static http_opts O;
static uv_loop_t *loop;
static wspool *pool;
static wspool_cq *cq;
static uv_tcp_t listener;
static uv_poll_t cq_poll;
static uv_signal_t sig_int, sig_term, sig_usr1;
static bool dump_signal; /* SIGUSR1 prints the pool's snapshot (opt-in) */
static wspool_serial *sleep_lane; /* /sleep's lane */

static void conn_unref(conn *c)
{
    if (--c->refs == 0)
        free(c);
}

static void on_closed(uv_handle_t *h) { conn_unref((conn *)h->data); }

static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    /* The client is gone: its queued request need not run (it would answer nobody). Cancelled in
     * the pool, it never reaches a worker and its done comes at the next drain; one that started
     * (or, with --plain, has no handle) sees `gone` and skips its work if it has not begun it. */
    uv_job *u = c->inflight;
    if (u) {
        if (!http_client_hung_up(&u->j, u->task) && O.uv_work && uv_cancel((uv_req_t *)&u->w) == 0)
            atomic_fetch_add(&HC.cancelled_client_gone, 1);
    }
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void process_next(conn *c);

static void on_written(uv_write_t *w, int status)
{
    conn *c = w->data;
    if (status == 0 && http_learn_reserve(c->reply_teaches))
        atomic_fetch_add(&HC.answered_late, 1);
    c->reply_teaches = 0;
    if (c->body_owned)
        free(c->body);
    c->body = NULL;
    c->busy = false;
    memmove(c->in, c->in + c->req_len, c->in_len - c->req_len);
    c->in_len -= c->req_len;
    c->req_len = 0;
    if (status < 0 || !c->keep_alive)
        conn_close(c);
    else if (!c->closing)
        process_next(c);
}

static void respond(conn *c, int code, const char *reason, const char *ctype, char *body, size_t len, bool owned)
{
    if (c->closing) {
        if (owned)
            free(body);
        c->busy = false;
        return;
    }
    int k = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", code, reason, ctype,
                     len, c->keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    c->body = body;
    c->body_owned = owned;
    uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)k), uv_buf_init(body, (unsigned)len)};
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, bufs, 2, on_written) != 0) {
        if (owned)
            free(body);
        c->body = NULL;
        c->busy = false;
        conn_close(c);
    }
}

static void respond_text(conn *c, int code, const char *reason, const char *text)
{
    respond(c, code, reason, "text/plain", (char *)text, strlen(text), false);
}

/* Runs on the loop thread, exactly once per accepted request. */
static void on_done(void *arg, int status)
{
    uv_job *u = arg;
    conn *c = u->j.conn;
    atomic_fetch_add(&HC.done, 1);
    http_count_done(&u->j, status);
    c->inflight = NULL;
    if (c->closing) {
        atomic_fetch_add(&HC.client_gone, 1);
    } else if (status == WSPOOL_CQ_RAN) {
        c->reply_teaches = http_reply_teaches(&u->j, status);
        char *b = malloc((size_t)u->j.body_len);
        memcpy(b, u->j.body, (size_t)u->j.body_len);
        respond(c, 200, "OK", "text/plain", b, (size_t)u->j.body_len, true);
    } else if (status == WSPOOL_CQ_EXPIRED) {
        respond_text(c, 503, "Service Unavailable", "expired\n");
    } else {
        atomic_fetch_add(&HC.done_cancelled, 1);
        respond_text(c, 503, "Service Unavailable", "cancelled\n");
    }
    wspool_task_release(u->task); /* NULL-safe */
    free(u);
    conn_unref(c);
}

static void uvpool_work(uv_work_t *w) { http_job_run(w->data); }
static void uvpool_after_work(uv_work_t *w, int status)
{
    on_done(w->data, status == UV_ECANCELED ? WSPOOL_CQ_CANCELLED : WSPOOL_CQ_RAN);
}

static void on_cq_readable(uv_poll_t *h, int status, int events)
{
    (void)h, (void)status, (void)events;
    wspool_cq_drain(cq, 0); /* glue: run the done callbacks here, on the loop */
}

/* The value of header line [h, end) if it is `name`'s (length in *len), else NULL. */
static const char *header_value(const char *h, const char *end, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    if ((size_t)(end - h) < nl + 1 || strncasecmp(h, name, nl) != 0 || h[nl] != ':')
        return NULL;
    h += nl + 1;
    while (h < end && *h == ' ')
        h++;
    *len = (size_t)(end - h);
    return h;
}

static bool header_is(const char *h, const char *end, const char *name, const char *value)
{
    size_t len, vl = strlen(value);
    const char *v = header_value(h, end, name, &len);
    return v && len >= vl && strncasecmp(v, value, vl) == 0;
}

/* Parses one request out of c->in if it is complete, and starts it. */
static void process_next(conn *c)
{
    if (c->busy || c->closing)
        return;
    char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
    if (!end) {
        if (c->in_len == sizeof c->in) {
            c->keep_alive = false;
            c->busy = true;
            c->req_len = c->in_len;
            respond_text(c, 431, "Request Header Fields Too Large", "too large\n");
        }
        return;
    }
    c->busy = true;
    c->req_len = (size_t)(end - c->in) + 4;
    atomic_fetch_add(&HC.requests, 1);
    char *line_end = memmem(c->in, c->req_len, "\r\n", 2);
    char *sp1 = memchr(c->in, ' ', (size_t)(line_end - c->in));
    char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1)) : NULL;
    if (!sp2 || (strncmp(c->in, "GET ", 4) != 0 && strncmp(c->in, "HEAD ", 5) != 0)) {
        c->keep_alive = false;
        respond_text(c, sp2 ? 405 : 400, sp2 ? "Method Not Allowed" : "Bad Request", "GET only\n");
        return;
    }
    bool http11 = (size_t)(line_end - sp2 - 1) == 8 && memcmp(sp2 + 1, "HTTP/1.1", 8) == 0;
    c->keep_alive = http11;
    bool has_body = false;
    uint64_t start_ns = 0;
    for (char *h = line_end + 2; h < end;) {
        char *e = memmem(h, (size_t)(end + 2 - h), "\r\n", 2);
        size_t vl;
        const char *v = header_value(h, e, "X-Request-Start", &vl);
        if (v)
            start_ns = http_request_start_ns(v, vl);
        else if (header_is(h, e, "Connection", "close"))
            c->keep_alive = false;
        else if (header_is(h, e, "Connection", "keep-alive"))
            c->keep_alive = true;
        else if (header_is(h, e, "Content-Length", "") && !header_is(h, e, "Content-Length", "0"))
            has_body = true;
        h = e + 2;
    }
    if (has_body) { /* bodies are not read: the stream cannot be resynchronised */
        c->keep_alive = false;
        respond_text(c, 400, "Bad Request", "no request bodies\n");
        return;
    }
    uv_job *u = calloc(1, sizeof *u);
    http_route(sp1 + 1, (size_t)(sp2 - sp1 - 1), &u->j);
    u->j.start_ns = start_ns;
    if (u->j.kind == J_DEBUG_POOL) {
        size_t len = 0;
        char *text = http_dump_text(pool, &len);
        free(u);
        if (!text)
            respond_text(c, 500, "Internal Server Error", "dump failed\n");
        else
            respond(c, 200, "OK", "text/plain; charset=utf-8", text, len, true);
        return;
    }
    if (u->j.kind == J_METRICS) {
        size_t len = 0;
        char *text = http_metrics_text(pool, &len);
        free(u);
        if (!text)
            respond_text(c, 500, "Internal Server Error", "metrics failed\n");
        else
            respond(c, 200, "OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", text, len, true);
        return;
    }
    if (u->j.kind == J_NOT_FOUND || u->j.kind == J_BAD) {
        bool bad = u->j.kind == J_BAD;
        free(u);
        respond_text(c, bad ? 400 : 404, bad ? "Bad Request" : "Not Found", "no\n");
        return;
    }
    u->j.conn = c;
    if (O.uv_work) {
        u->w.data = u;
        c->refs++;
        atomic_fetch_add(&HC.submitted, 1);
        uv_queue_work(loop, &u->w, uvpool_work, uvpool_after_work);
        return;
    }
    if (http_sheddable(&O, &u->j) && wspool_cq_overloaded(cq)) { /* shed load while queue delay stands above target */
        free(u);
        atomic_fetch_add(&HC.shed_overload, 1);
        respond_text(c, 503, "Service Unavailable", "overloaded\n");
        return;
    }
    wspool_submit_opts so;
    http_request_opts(&O, &u->j, sleep_lane, &so);
    /* A handle only where a hang-up can save work (not /ping, and not with --plain). */
    int rc = http_cancellable(&O, &u->j) ? wspool_cq_submit_task(cq, http_job_run, on_done, u, &so, &u->task)
                                         : wspool_cq_submit_ex(cq, http_job_run, on_done, u, &so); /* glue */
    if (rc != WSPOOL_OK) {
        free(u);
        atomic_fetch_add(&HC.shed_refused, 1);
        respond_text(c, 503, "Service Unavailable", "refused\n");
        return;
    }
    c->refs++;
    c->inflight = u;
    http_count_submitted();
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    conn *c = h->data;
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(sizeof c->in - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    conn *c = s->data;
    if (n < 0) {
        conn_close(c); /* EOF, reset, or a full buffer (UV_ENOBUFS) */
        return;
    }
    c->in_len += (size_t)n;
    process_next(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0)
        return;
    conn *c = calloc(1, sizeof *c);
    c->refs = 1;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (h->type == UV_TCP && h != (uv_handle_t *)&listener)
        conn_close(h->data);
}

static void on_dump_signal(uv_signal_t *s, int signum)
{
    (void)s, (void)signum;
    http_print_dump(pool);
}

static void on_stop(uv_signal_t *s, int signum)
{
    (void)s, (void)signum;
    if (cq) {
        wspool_cq_close(cq, WSPOOL_CQ_CLOSE_CANCEL, -1); /* glue: every pending done runs, now */
        cq = NULL;
        uv_close((uv_handle_t *)&cq_poll, NULL); /* glue */
        wspool_serial_destroy(sleep_lane);
        sleep_lane = NULL;
    }
    uv_close((uv_handle_t *)&listener, NULL);
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
    if (dump_signal)
        uv_close((uv_handle_t *)&sig_usr1, NULL);
    uv_walk(loop, close_walk, NULL);
}

int main(int argc, char **argv)
{
    O = http_parse_opts(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    pool = http_make_pool(&O);
    uv_tcp_init(loop, &listener);
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", O.port, &addr);
    if (uv_tcp_bind(&listener, (const struct sockaddr *)&addr, 0) != 0 ||
        uv_listen((uv_stream_t *)&listener, 1024, on_connection) != 0) {
        fprintf(stderr, "http_libuv: cannot listen on 127.0.0.1:%d\n", O.port);
        return 1;
    }
    int alen = sizeof addr;
    uv_tcp_getsockname(&listener, (struct sockaddr *)&addr, &alen);
    if (!O.uv_work) {
        wspool_cq_opts co;
        wspool_cq_opts_init(&co);
        co.cap = O.cap;
        co.overload_target_us = O.target_us;
        co.overload_interval_us = O.interval_us;
        co.on_signal = http_on_signal;
        sleep_lane = http_make_sleep_lane(&O, pool);
        wspool_cq_create(pool, &co, &cq);                        /* glue */
        uv_poll_init(loop, &cq_poll, wspool_cq_fd(cq));          /* glue */
        uv_poll_start(&cq_poll, UV_READABLE, on_cq_readable);    /* glue */
    }
    uv_signal_init(loop, &sig_int);
    uv_signal_init(loop, &sig_term);
    uv_signal_start(&sig_int, on_stop, SIGINT);
    uv_signal_start(&sig_term, on_stop, SIGTERM);
    dump_signal = http_dump_on_sigusr1();
    if (dump_signal) {
        uv_signal_init(loop, &sig_usr1);
        uv_signal_start(&sig_usr1, on_dump_signal, SIGUSR1);
    }
    printf("listening on %d\n", ntohs(addr.sin_port));
    fflush(stdout);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    wspool_destroy(pool);
    return http_report_exit("http_libuv");
}
