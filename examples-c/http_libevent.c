/*
 * http_libevent.c: an HTTP/1.1 keep-alive server on libevent's evhttp that
 * runs its requests on wspool through a completion queue.
 *
 * The embedding glue is the lines marked "glue:" (docs/embedding.md shows
 * them): one queue, one persistent read event on its fd that drains it, a
 * submit per request, and a close at shutdown. evhttp owns the connections;
 * a client that hangs up while its request is out leaves the request alive,
 * and its done callback's evhttp_send_reply frees it. evhttp does not read a
 * connection while its request is out, so the loop watches the socket itself
 * meanwhile (on_maybe_hung_up): a client that hangs up has its queued /work
 * or /sleep cancelled in the pool.
 *
 * SIGINT/SIGTERM: the queue is closed with CANCEL (every pending done runs:
 * 503 for the ones that never started), evhttp is freed, the pool destroyed.
 * Exit status 3 if the number of done calls differs from the accepted
 * submissions. See http_common.h for endpoints and options.
 */
#include "http_common.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <signal.h>
#include <sys/socket.h>

static wspool *pool;
static wspool_cq *cq;
static struct event_base *base;
static struct evhttp *http;
static http_opts O;
static wspool_serial *sleep_lane; /* /sleep's lane */

/* A request out in the pool. */
typedef struct ev_job {
    http_job j;          /* first: http_job_run is handed this pointer */
    wspool_task *task;   /* its handle, to cancel it if the client hangs up (not /ping, not --plain) */
    struct event *watch; /* the hang-up watch on its connection while it is out; NULL: none */
} ev_job;

static void reply(struct evhttp_request *req, int code, const char *reason, const char *body, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, body, len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

/* evhttp calls this once the reply has been written: `arg` is http_reply_teaches. */
static void on_reply_sent(struct evhttp_request *req, void *arg)
{
    (void)req;
    if (http_learn_reserve((uint64_t)(uintptr_t)arg))
        atomic_fetch_add(&HC.answered_late, 1);
}

/* Runs on the loop thread, exactly once per accepted request. */
static void on_done(void *arg, int status)
{
    ev_job *e = arg;
    http_job *j = &e->j;
    struct evhttp_request *req = j->conn;
    if (e->watch)
        event_free(e->watch);
    atomic_fetch_add(&HC.done, 1);
    http_count_done(j, status);
    if (evhttp_request_get_connection(req) == NULL)
        atomic_fetch_add(&HC.client_gone, 1); /* evhttp_send_reply just frees it */
    if (status == WSPOOL_CQ_RAN) {
        if (evhttp_request_get_connection(req))
            evhttp_request_set_on_complete_cb(req, on_reply_sent, (void *)(uintptr_t)http_reply_teaches(j, status));
        reply(req, 200, "OK", j->body, (size_t)j->body_len);
    } else if (status == WSPOOL_CQ_EXPIRED) {
        reply(req, 503, "Service Unavailable", "expired\n", 8);
    } else {
        atomic_fetch_add(&HC.done_cancelled, 1);
        reply(req, 503, "Service Unavailable", "cancelled\n", 10);
    }
    wspool_task_release(e->task); /* NULL-safe */
    free(e);
}

/* The connection of a request that is out became readable: end of stream or a reset means the
 * client hung up, and its work, if no worker has started it, is cancelled in the pool (its done
 * comes with WSPOOL_CQ_CANCELLED at the next drain; one that started skips its work if it has
 * not begun it). Bytes of a pipelined request are evhttp's, once this request is answered: the
 * watch stops. */
static void on_maybe_hung_up(evutil_socket_t fd, short ev, void *arg)
{
    (void)ev;
    ev_job *e = arg;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        event_add(e->watch, NULL);
        return;
    }
    if (n > 0)
        return; /* a pipelined request, not a hang-up */
    http_client_hung_up(&e->j, e->task);
}

/* Watches the connection of `e`'s request while it is out (on_maybe_hung_up). */
static void watch_for_hang_up(ev_job *e, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0)
        return;
    e->watch = event_new(base, fd, EV_READ, on_maybe_hung_up, e);
    if (e->watch)
        event_add(e->watch, NULL);
}

static void on_cq_readable(evutil_socket_t fd, short ev, void *ctx)
{
    (void)fd, (void)ev, (void)ctx;
    wspool_cq_drain(cq, 0); /* glue: run the done callbacks here, on the loop */
}

static void on_dump_signal(evutil_socket_t fd, short ev, void *ctx)
{
    (void)fd, (void)ev, (void)ctx;
    http_print_dump(pool);
}

static void on_request(struct evhttp_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&HC.requests, 1);
    const char *uri = evhttp_request_get_uri(req);
    http_job tmp = {0};
    http_route(uri, strlen(uri), &tmp);
    if (tmp.kind == J_DEBUG_POOL) {
        size_t len = 0;
        char *text = http_dump_text(pool, &len);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; charset=utf-8");
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, text ? text : "", text ? len : 0);
        evhttp_send_reply(req, text ? 200 : 500, text ? "OK" : "Internal Server Error", b);
        evbuffer_free(b);
        free(text);
        return;
    }
    if (tmp.kind == J_METRICS) {
        size_t len = 0;
        char *text = http_metrics_text(pool, &len);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "application/openmetrics-text; version=1.0.0; charset=utf-8");
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, text ? text : "", text ? len : 0);
        evhttp_send_reply(req, text ? 200 : 500, text ? "OK" : "Internal Server Error", b);
        evbuffer_free(b);
        free(text);
        return;
    }
    if (tmp.kind == J_NOT_FOUND || tmp.kind == J_BAD) {
        reply(req, tmp.kind == J_BAD ? 400 : 404, tmp.kind == J_BAD ? "Bad Request" : "Not Found", "no\n", 3);
        return;
    }
    if (http_sheddable(&O, &tmp) && wspool_cq_overloaded(cq)) { /* shed load while queue delay stands above target */
        atomic_fetch_add(&HC.shed_overload, 1);
        reply(req, 503, "Service Unavailable", "overloaded\n", 11);
        return;
    }
    ev_job *e = calloc(1, sizeof *e);
    http_job *j = &e->j;
    *j = tmp;
    j->conn = req;
    const char *stamp = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Start");
    if (stamp)
        j->start_ns = http_request_start_ns(stamp, strlen(stamp));
    wspool_submit_opts so;
    http_request_opts(&O, j, sleep_lane, &so);
    /* A handle only where a hang-up can save work (not /ping, and not with --plain). */
    int rc = http_cancellable(&O, j) ? wspool_cq_submit_task(cq, http_job_run, on_done, e, &so, &e->task)
                                     : wspool_cq_submit_ex(cq, http_job_run, on_done, e, &so); /* glue */
    if (rc != WSPOOL_OK) {
        free(e);
        atomic_fetch_add(&HC.shed_refused, 1);
        reply(req, 503, "Service Unavailable", "refused\n", 8);
        return;
    }
    if (e->task)
        watch_for_hang_up(e, req);
    http_count_submitted();
}

static void on_stop(evutil_socket_t sig, short ev, void *ctx)
{
    (void)sig, (void)ev, (void)ctx;
    wspool_cq_close(cq, WSPOOL_CQ_CLOSE_CANCEL, -1); /* glue: every pending done runs, now */
    cq = NULL;
    wspool_serial_destroy(sleep_lane);
    sleep_lane = NULL;
    event_base_loopexit(base, NULL);
}

int main(int argc, char **argv)
{
    http_opts o = O = http_parse_opts(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    pool = http_make_pool(&o);
    sleep_lane = http_make_sleep_lane(&o, pool);
    base = event_base_new();
    http = evhttp_new(base);
    evhttp_set_gencb(http, on_request, NULL);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(http, "127.0.0.1", (ev_uint16_t)o.port);
    if (!sock) {
        fprintf(stderr, "http_libevent: cannot bind 127.0.0.1:%d\n", o.port);
        return 1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl);
    wspool_cq_opts co;
    wspool_cq_opts_init(&co);
    co.cap = o.cap;
    co.overload_target_us = o.target_us;
    co.overload_interval_us = o.interval_us;
    co.on_signal = http_on_signal;
    wspool_cq_create(pool, &co, &cq);                                                          /* glue */
    struct event *cqev = event_new(base, wspool_cq_fd(cq), EV_READ | EV_PERSIST, on_cq_readable, NULL); /* glue */
    event_add(cqev, NULL);                                                                     /* glue */
    struct event *sigint = evsignal_new(base, SIGINT, on_stop, NULL);
    struct event *sigterm = evsignal_new(base, SIGTERM, on_stop, NULL);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    /* SIGUSR1 prints the pool's snapshot, when asked for (http_common.h) */
    struct event *sigusr1 = http_dump_on_sigusr1() ? evsignal_new(base, SIGUSR1, on_dump_signal, NULL) : NULL;
    if (sigusr1)
        event_add(sigusr1, NULL);
    printf("listening on %d\n", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    fflush(stdout);
    event_base_dispatch(base);
    event_free(cqev); /* glue */
    event_free(sigint);
    event_free(sigterm);
    if (sigusr1)
        event_free(sigusr1);
    evhttp_free(http);
    event_base_free(base);
    wspool_destroy(pool);
    libevent_global_shutdown();
    return http_report_exit("http_libevent");
}
