// http_beast.cpp (C++20): a Boost.Beast HTTP/1.1 keep-alive server whose
// connections are Asio coroutines that await their handlers on wspool with
// wspool::async_run (include/wspool.hpp), with the endpoints of the C HTTP
// examples (examples-c/http_common.h):
//
//   /ping          "pong"
//   /work?n=N      N rounds of splitmix64, the digest in hex (N <= 100000000);
//                  &deadline_ms=D: due D ms after the request's start (its
//                  X-Request-Start stamp, else its arrival), answered 503
//                  "expired" if its work has not started in time to make that
//   /sleep?ms=M    "slept" after M ms inside a wspool::blocking_region (M <= 60000)
//   /metrics       OpenMetrics: the pool's stats and the server's counters (on the loop)
//
//   http_beast [--port P] [--threads N] [--mode pool|inline|threads] [--spin-us U]
//              [--plain] [--work-deadline-ms D] [--sleep-lane N]
//
// One io_context thread (the loop) accepts, reads and writes: a coroutine per
// connection reads a request, awaits its handler's answer and writes it. A
// request's handler runs, by --mode:
//   pool     on wspool (default): `co_await wspool::async_run(pool, options,
//            handler, asio::use_awaitable)` resumes on the loop with the
//            body, or with wspool::task_expired / task_cancelled when it was
//            dropped unrun. Per request, as the C examples do:
//            /ping at wspool::priority::high, /work with its deadline
//            (?deadline_ms, else --work-deadline-ms; none by default), the
//            pool's deadline being the due time less a learnt reserve
//            (examples-c/http_deadline.h, shared with the C examples),
//            /sleep in a wspool::lane of
//            --sleep-lane (default 2: at most 2 sleep at once, the rest wait
//            without a thread). A client that hangs up while its /work or
//            /sleep is queued gets that work cancelled (wspool::cancel_handle):
//            the loop watches the socket while the request is out.
//            --plain: none of that, every handler through
//            wspool::async_run(pool, handler, asio::use_awaitable)
//   inline   on the loop itself (a /sleep stalls every connection meanwhile)
//   threads  on a plain std::thread pool of --threads threads (mutex + condvar
//            queue), awaited the same way (its async_run written by hand)
// --threads is also the pool's min_threads (Fixed growth is not used: a
// blocking region gets its lent thread). Prints "listening on PORT" once
// ready. SIGINT/SIGTERM: stops accepting, closes idle connections, lets the
// requests in flight finish and be answered, destroys the pool; prints
// "http_beast: exit: requests=.. submitted=.. done=.. cancelled=.." on stderr
// and exits 3 if a submitted request's ending (its response, its expiry or
// its cancellation) never came back to the loop.
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "wspool.hpp"  // after Asio: with wspool::async_run
#include "../examples-c/http_deadline.h"

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr uint64_t WORK_MAX = 100000000ull, SLEEP_MAX_MS = 60000;

// N rounds of splitmix64, as http_common.h's work_digest.
uint64_t work_digest(uint64_t n) {
    uint64_t h = n;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t z = h + i + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        h = z ^ (z >> 31);
    }
    return h;
}

enum class kind { ping, work, sleep, metrics, bad, not_found };
struct job {
    kind k = kind::not_found;
    uint64_t n = 0;
    uint64_t deadline_ms = 0;  // /work?deadline_ms=D; 0: the server's default
    uint64_t start_ns = 0;     // X-Request-Start on wspool_now_ns()'s clock; 0: none
    uint64_t due_ns = 0;       // /work with a deadline: when its answer is due (same clock); 0: none
};

bool query_u64(const std::string& q, const char* key, uint64_t max, uint64_t* out) {
    std::string k = std::string(key) + "=";
    size_t at = 0;
    while (at < q.size()) {
        size_t end = q.find('&', at);
        if (end == std::string::npos) end = q.size();
        if (q.compare(at, k.size(), k) == 0) {
            std::string v = q.substr(at + k.size(), end - at - k.size());
            if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 19) return false;
            uint64_t x = std::stoull(v);
            if (x > max) return false;
            *out = x;
            return true;
        }
        at = end + 1;
    }
    return false;
}

job route(beast::string_view target) {
    std::string t(target.data(), target.size()), q;
    size_t qm = t.find('?');
    if (qm != std::string::npos) {
        q = t.substr(qm + 1);
        t.resize(qm);
    }
    job j;
    if (t == "/ping")
        j.k = kind::ping;
    else if (t == "/metrics")
        j.k = kind::metrics;
    else if (t == "/work") {
        j.k = query_u64(q, "n", WORK_MAX, &j.n) ? kind::work : kind::bad;
        if (q.find("deadline_ms=") != std::string::npos && !query_u64(q, "deadline_ms", SLEEP_MAX_MS, &j.deadline_ms))
            j.k = kind::bad;
    }
    else if (t == "/sleep")
        j.k = query_u64(q, "ms", SLEEP_MAX_MS, &j.n) ? kind::sleep : kind::bad;
    return j;
}

// Counters: requests and submitted are written on the loop only; done,
// expired and cancelled_client_gone too (an ending is counted when it is back
// on the loop). sleeping and sleep_max_concurrent on the handlers' threads.
// Atomics for /metrics.
struct counters {
    std::atomic<unsigned long long> requests{0}, submitted{0}, done{0}, expired{0}, cancelled_client_gone{0};
    std::atomic<unsigned long long> answered_late{0};  // loop: /work replies written after their due time
    std::atomic<unsigned long long> sleeping{0}, sleep_max_concurrent{0};
} C;

/// Counts the /sleep handlers sleeping at once, and the most there were.
struct sleeping_now {
    sleeping_now() {
        unsigned long long n = ++C.sleeping, m = C.sleep_max_concurrent.load();
        while (n > m && !C.sleep_max_concurrent.compare_exchange_weak(m, n)) {
        }
    }
    ~sleeping_now() { C.sleeping--; }
};

// The handler: runs wherever --mode says. The blocking region is a no-op
// off the pool (inline, threads).
std::string run_job(const job& j) {
    switch (j.k) {
    case kind::ping:
        return "pong\n";
    case kind::work: {
        char b[32];
        std::snprintf(b, sizeof b, "%016llx\n", static_cast<unsigned long long>(work_digest(j.n)));
        return b;
    }
    case kind::sleep: {
        sleeping_now concurrent;
        wspool::blocking_region region;  // the pool lends a thread while this one sleeps
        std::this_thread::sleep_for(std::chrono::milliseconds(j.n));
        return "slept\n";
    }
    default:
        return "";
    }
}

/// The baseline of --mode threads: N std::threads on one locked queue.
class plain_pool {
public:
    explicit plain_pool(unsigned n) {
        for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
    }
    ~plain_pool() {
        {
            std::lock_guard<std::mutex> l(m_);
            stop_ = true;
        }
        c_.notify_all();
        for (auto& t : threads_) t.join();
    }
    void post(std::function<void()> f) {
        {
            std::lock_guard<std::mutex> l(m_);
            q_.push_back(std::move(f));
        }
        c_.notify_one();
    }
    /// f() on one of the threads, its string to the handler on the handler's
    /// executor: what wspool::async_run does, written by hand for this
    /// baseline (std::function copies, so the handler is shared).
    template <class Token>
    auto async_run(std::function<std::string()> f, Token&& token) {
        return asio::async_initiate<Token, void(std::string)>(
            [this](auto handler, std::function<std::string()> f) {
                using H = decltype(handler);
                struct op {
                    asio::executor_work_guard<asio::associated_executor_t<H>> work;
                    H handler;
                };
                auto o = std::make_shared<op>(op{asio::make_work_guard(asio::get_associated_executor(handler)), std::move(handler)});
                post([o, f = std::move(f)] {
                    asio::post(o->work.get_executor(), [o, body = f()]() mutable { std::move(o->handler)(std::move(body)); });
                });
            },
            token, std::move(f));
    }

private:
    void loop() {
        for (;;) {
            std::function<void()> f;
            {
                std::unique_lock<std::mutex> l(m_);
                c_.wait(l, [&] { return stop_ || !q_.empty(); });
                if (q_.empty()) return;
                f = std::move(q_.front());
                q_.pop_front();
            }
            f();
        }
    }
    std::mutex m_;
    std::condition_variable c_;
    std::deque<std::function<void()>> q_;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

enum class mode { pool, inline_, threads };

struct options {
    mode m = mode::pool;
    bool plain = false;           // no priority, deadline, lane or cancellation
    unsigned work_deadline_ms = 0;  // /work's deadline unless the request names one; 0: none
    unsigned sleep_lane = 2;        // /sleep's lane limit; 0: no lane
};

struct server;

/// A connection: one coroutine on the loop (serve) reads a request, awaits its
/// answer, writes it, and reads the next.
class session : public std::enable_shared_from_this<session> {
public:
    session(tcp::socket s, server& srv) : sock_(std::move(s)), srv_(srv) {}
    static asio::awaitable<void> serve(std::shared_ptr<session> self);
    void close() {
        beast::error_code ec;
        sock_.shutdown(tcp::socket::shutdown_both, ec);
        sock_.close(ec);
    }

private:
    struct answer {
        unsigned status = 200;
        std::string body;
        const char* type = "text/plain";
        uint64_t due_ns = 0;  // /work with a deadline: when it was due (0: none)
    };
    asio::awaitable<bool> handle(job j);
    std::string metrics() const;
    void watch_for_hang_up(unsigned request);
    tcp::socket sock_;
    server& srv_;
    beast::flat_buffer buf_;
    http::request<http::empty_body> req_;
    http::response<http::string_body> res_;
    bool busy_ = false;  // a request in flight: not idle, not closed at shutdown
    unsigned requests_ = 0;
    answer answer_;                 // what handle() answered
    wspool::cancel_handle queued_;  // the request in flight's handler, cancelled if its client hangs up
    friend struct server;
};

struct server {
    asio::io_context ioc{1};
    tcp::acceptor acceptor{ioc};
    asio::signal_set signals{ioc, SIGINT, SIGTERM};
    wspool::pool& pool;
    plain_pool* threads;
    options opt;
    std::unique_ptr<wspool::lane> sleep_lane;  // null: --plain, or --sleep-lane 0
    bool stopping = false;
    std::set<std::weak_ptr<session>, std::owner_less<std::weak_ptr<session>>> sessions;

    server(wspool::pool& p, plain_pool* t, const options& o) : pool(p), threads(t), opt(o) {
        if (opt.m == mode::pool && !opt.plain && opt.sleep_lane) sleep_lane = std::make_unique<wspool::lane>(pool, opt.sleep_lane);
    }

    void accept() {
        acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
            if (ec) return;  // closed at shutdown
            s.set_option(tcp::no_delay(true));
            auto sp = std::make_shared<session>(std::move(s), *this);
            sessions.insert(sp);
            asio::co_spawn(ioc, session::serve(sp), asio::detached);
            accept();
        });
    }

    uint64_t work_deadline_ms(const job& j) const { return j.deadline_ms ? j.deadline_ms : opt.work_deadline_ms; }

    // When the answer to j is due: /work with a deadline, in pool mode with per-request control;
    // else 0.
    uint64_t due_ns(const job& j) const {
        if (opt.m != mode::pool || opt.plain || j.k != kind::work || !work_deadline_ms(j)) return 0;
        return http_work_due_ns(j.start_ns, work_deadline_ms(j));
    }

    /// Whether j's handler can be cancelled while it waits (its client hung up).
    bool cancellable(const job& j) const { return opt.m == mode::pool && !opt.plain && j.k != kind::ping; }

    // j's handler, run off the loop as --mode says; back on the loop with its
    // body, or wspool::task_expired / task_cancelled when it was dropped unrun.
    asio::awaitable<void> off_loop(const job& j, wspool::cancel_handle& h, std::string& body) {
        auto handler = [j] { return run_job(j); };
        wspool::options o;
        if (opt.m == mode::threads)
            body = co_await threads->async_run(handler, asio::use_awaitable);
        else if (opt.plain)
            body = co_await wspool::async_run(pool, handler, asio::use_awaitable);
        else if (j.k == kind::ping)  // never cancelled: answered before anyone could
            body = co_await wspool::async_run(pool, o.priority(wspool::priority::high), handler, asio::use_awaitable);
        else {
            if (j.due_ns) o.deadline_ns(http_work_start_by_ns(j.due_ns, work_deadline_ms(j)));
            if (j.k == kind::sleep && sleep_lane) o.lane(*sleep_lane);
            body = co_await wspool::async_run(pool, o, h, handler, asio::use_awaitable);
        }
    }

    void stop() {
        stopping = true;
        beast::error_code ec;
        acceptor.close(ec);
        // Idle connections are closed now; busy ones once answered.
        for (auto& w : sessions)
            if (auto s = w.lock())
                if (!s->busy_) s->close();
    }
};

asio::awaitable<void> session::serve(std::shared_ptr<session> self) {
    beast::error_code ec;
    self->sock_.non_blocking(true, ec);  // for the hang-up check's peek; Asio's own operations don't mind
    for (;;) {
        self->req_ = {};
        co_await http::async_read(self->sock_, self->buf_, self->req_, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
        if (!co_await self->handle(route(self->req_.target()))) break;  // its client is gone
        answer& a = self->answer_;
        http::response<http::string_body>& res = self->res_;
        res = {static_cast<http::status>(a.status), self->req_.version()};
        res.set(http::field::content_type, a.type);
        res.keep_alive(self->req_.keep_alive() && !self->srv_.stopping);
        res.body() = std::move(a.body);
        res.prepare_payload();
        co_await http::async_write(self->sock_, res, asio::redirect_error(asio::use_awaitable, ec));
        // Once written, a /work reply with a deadline teaches the deadline reserve (http_learn_reserve).
        if (!ec && http_learn_reserve(a.due_ns)) C.answered_late++;
        if (ec || !res.keep_alive()) break;
    }
    self->close();
    self->srv_.sessions.erase(self);
}

// The answer to a request in answer_; false when its client hung up meanwhile.
asio::awaitable<bool> session::handle(job j) {
    C.requests++;
    auto stamp = req_.find("X-Request-Start");
    if (stamp != req_.end()) j.start_ns = http_request_start_ns(stamp->value().data(), stamp->value().size());
    j.due_ns = srv_.due_ns(j);
    switch (j.k) {
    case kind::metrics:
        answer_ = {200, metrics(), "application/openmetrics-text; version=1.0.0; charset=utf-8"};
        co_return true;
    case kind::bad:
        answer_ = {400, "bad query\n"};
        co_return true;
    case kind::not_found:
        answer_ = {404, "not found\n"};
        co_return true;
    default:
        break;
    }
    answer_ = {200, "", "text/plain", j.due_ns};
    if (srv_.opt.m == mode::inline_) {
        answer_.body = run_job(j);
        co_return true;
    }
    C.submitted++;
    busy_ = true;
    unsigned request = ++requests_;
    if (srv_.cancellable(j)) watch_for_hang_up(request);  // it fires once this coroutine waits
    bool answered = true;
    try {
        co_await srv_.off_loop(j, queued_, answer_.body);
    } catch (const wspool::task_expired&) {
        C.expired++;
        answer_ = {503, "expired\n"};
    } catch (const wspool::task_cancelled&) {
        answered = false;  // its client is gone
    }
    C.done++;
    busy_ = false;
    queued_.reset();
    beast::error_code ec;
    sock_.cancel(ec);  // the hang-up watch, if any
    co_return answered;
}

// While request `request` is out, the loop still listens: end of stream (or a
// reset) means the client is gone, and a handler that has not started is
// cancelled (its await then ends in wspool::task_cancelled). Bytes of a
// pipelined request wait for this answer, unread.
void session::watch_for_hang_up(unsigned request) {
    auto self = shared_from_this();
    sock_.async_wait(tcp::socket::wait_read, [self, request](beast::error_code ec) {
        if (ec || !self->busy_ || self->requests_ != request) return;  // answered meanwhile
        char b;
        beast::error_code peek;
        std::size_t n = self->sock_.receive(asio::buffer(&b, 1), tcp::socket::message_peek, peek);
        if (peek == asio::error::would_block) return self->watch_for_hang_up(request);
        if (!peek && n > 0) return;  // a pipelined request, not a hang-up
        if (self->queued_.cancel()) C.cancelled_client_gone++;
    });
}

std::string session::metrics() const {
    std::string text = srv_.pool.openmetrics();
    text.resize(text.size() - 6);  // "# EOF\n": ours go before it
    const struct {
        const char* name;
        const char* help;
        unsigned long long v;
    } fam[] = {{"http_requests", "HTTP requests parsed.", C.requests.load()},
               {"http_submitted", "Requests handed off the loop (pool or threads).", C.submitted.load()},
               {"http_done", "Endings back on the loop (one per submitted request: answered, expired or cancelled).",
                C.done.load()},
               {"http_expired", "Requests answered 503 because their work had not started by its deadline.",
                C.expired.load()},
               {"http_cancelled_client_gone", "Queued handlers cancelled because their client hung up.",
                C.cancelled_client_gone.load()},
               {"http_answered_late", "/work replies written after their due time, by the server's clock.",
                C.answered_late.load()},
               {"http_sleep_max_concurrent", "The most /sleep handlers sleeping at once.",
                C.sleep_max_concurrent.load()}};
    for (auto& f : fam)
        text += std::string("# TYPE ") + f.name + " counter\n# HELP " + f.name + " " + f.help + "\n" + f.name +
                "_total " + std::to_string(f.v) + "\n";
    text += "# EOF\n";
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    unsigned short port = 0;
    unsigned threads = 2;
    int spin_us = -1;
    options opt;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--port")
            port = static_cast<unsigned short>(std::stoi(next()));
        else if (a == "--threads")
            threads = static_cast<unsigned>(std::stoi(next()));
        else if (a == "--spin-us")
            spin_us = std::stoi(next());
        else if (a == "--plain")
            opt.plain = true;
        else if (a == "--work-deadline-ms")
            opt.work_deadline_ms = static_cast<unsigned>(std::stoul(next()));
        else if (a == "--sleep-lane")
            opt.sleep_lane = static_cast<unsigned>(std::stoul(next()));
        else if (a == "--mode") {
            std::string v = next();
            opt.m = v == "pool" ? mode::pool : v == "inline" ? mode::inline_ : v == "threads" ? mode::threads : (std::fprintf(stderr, "bad --mode %s\n", v.c_str()), std::exit(2), mode::pool);
        } else {
            std::fprintf(stderr,
                         "usage: %s [--port P] [--threads N] [--mode pool|inline|threads] [--spin-us U] [--plain] "
                         "[--work-deadline-ms D] [--sleep-lane N]\n",
                         argv[0]);
            return 2;
        }
    }
    // Handlers may write to a socket the client closed: no SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    wspool::config cfg = wspool::config().min_threads(threads).name("beast");
    if (spin_us >= 0) cfg.spin_max_us(static_cast<uint32_t>(spin_us));
    wspool::pool pool(cfg);
    std::unique_ptr<plain_pool> plain;
    if (opt.m == mode::threads) plain = std::make_unique<plain_pool>(threads);
    {
        server srv(pool, plain.get(), opt);
        tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
        srv.acceptor.open(ep.protocol());
        srv.acceptor.set_option(asio::socket_base::reuse_address(true));
        srv.acceptor.bind(ep);
        srv.acceptor.listen(asio::socket_base::max_listen_connections);
        srv.signals.async_wait([&srv](beast::error_code, int) { srv.stop(); });
        srv.accept();
        std::printf("listening on %u\n", srv.acceptor.local_endpoint().port());
        std::fflush(stdout);
        srv.ioc.run();
        // Before the io_context goes: a handler may still be inside
        // asio::post(ioc, ...) (waking the loop) after the loop ran what it
        // posted. Shutting down joins the threads, so every such call returned.
        plain.reset();
        pool.shutdown();
    }
    unsigned long long s = C.submitted.load(), d = C.done.load();
    std::fprintf(stderr, "http_beast: exit: requests=%llu submitted=%llu done=%llu cancelled=%llu\n", C.requests.load(), s, d,
                 C.cancelled_client_gone.load());
    return s == d ? 0 : 3;
}
