// http_beast.cpp: a Boost.Beast HTTP/1.1 keep-alive server whose handlers run
// on wspool through its Boost.Asio executor (include/wspool.hpp), with the
// endpoints of the C HTTP examples (examples-c/http_common.h):
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
// One io_context thread (the loop) accepts, reads and writes. A request's
// handler runs, by --mode:
//   pool     on wspool (default), the response going back to the loop with
//            asio::post(ioc, ...). Per request, as the C examples do (issue 29):
//            /ping at wspool::priority::high, /work with its deadline
//            (?deadline_ms, else --work-deadline-ms; none by default), the
//            pool's deadline being the due time less a learnt reserve
//            (examples-c/http_deadline.h, shared with the C examples),
//            /sleep in a wspool::lane of
//            --sleep-lane (default 2: at most 2 sleep at once, the rest wait
//            without a thread). A client that hangs up while its /work or
//            /sleep is queued gets that work cancelled (wspool::task::cancel):
//            the loop watches the socket while the request is out.
//            --plain: none of that, every handler through
//            asio::post(pool.get_executor(), ...), the Asio executor
//   inline   on the loop itself (a /sleep stalls every connection meanwhile)
//   threads  on a plain std::thread pool of --threads threads (mutex + condvar
//            queue), the response posted back the same way
// --threads is also the pool's min_threads (Fixed growth is not used: a
// blocking region gets its lent thread). Prints "listening on PORT" once
// ready. SIGINT/SIGTERM: stops accepting, closes idle connections, lets the
// requests in flight finish and be answered, destroys the pool; prints
// "http_beast: exit: requests=.. submitted=.. done=.. cancelled=.." on stderr
// and exits 3 if a submitted request's ending (its response, its expiry or
// its cancellation) never came back to the loop.
#include "wspool.hpp"
#include "../examples-c/http_deadline.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

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

/// What a request handed off the loop came to, back on the loop.
enum class ending { ran, expired, cancelled };

struct options {
    mode m = mode::pool;
    bool plain = false;           // no priority, deadline or lane
    unsigned work_deadline_ms = 0;  // /work's deadline unless the request names one; 0: none
    unsigned sleep_lane = 2;        // /sleep's lane limit; 0: no lane
};

struct server;

/// A request's way back to the loop, carried inside its handler: send() posts
/// the answer; a reply destroyed unsent (the handler dropped unrun: its
/// deadline passed, or the loop cancelled it for a client that hung up) posts
/// that ending instead (wspool::cancel_reason tells which). The loop hears
/// once either way, and the work guard keeps ioc.run() going until it has.
class reply {
public:
    using done_fn = std::function<void(ending, std::string)>;
    reply(asio::io_context& ioc, done_fn done) : ioc_(&ioc), done_(std::move(done)), guard_(asio::make_work_guard(ioc)) {}
    reply(reply&& o) noexcept : ioc_(std::exchange(o.ioc_, nullptr)), done_(std::move(o.done_)), guard_(std::move(o.guard_)) {}
    reply(const reply&) = delete;
    ~reply() {
        if (ioc_)
            back(wspool::cancel_reason() == wspool::task_state::expired ? ending::expired : ending::cancelled, "");
    }
    void send(std::string body) { back(ending::ran, std::move(body)); }

private:
    void back(ending e, std::string body) {
        asio::io_context* ioc = std::exchange(ioc_, nullptr);
        asio::post(*ioc, [e, d = std::move(done_), body = std::move(body), g = std::move(guard_)]() mutable {
            C.done++;
            if (e == ending::expired) C.expired++;
            d(e, std::move(body));
        });
    }
    asio::io_context* ioc_;
    done_fn done_;
    asio::executor_work_guard<asio::io_context::executor_type> guard_;
};

class session : public std::enable_shared_from_this<session> {
public:
    session(tcp::socket s, server& srv) : sock_(std::move(s)), srv_(srv) {}
    void start();
    void close() {
        beast::error_code ec;
        sock_.shutdown(tcp::socket::shutdown_both, ec);
        sock_.close(ec);
    }

private:
    void read();
    void on_request();
    void watch_for_hang_up(unsigned request);
    void respond(unsigned status, std::string body, const char* type = "text/plain", uint64_t due_ns = 0);
    tcp::socket sock_;
    server& srv_;
    beast::flat_buffer buf_;
    http::request<http::empty_body> req_;
    http::response<http::string_body> res_;
    bool busy_ = false;  // a request in flight: not idle, not closed at shutdown
    unsigned requests_ = 0;
    wspool::task<void> queued_;  // the request in flight's handler, cancelled if its client hangs up
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
            sp->start();
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

    // Runs j off the loop (or on it, inline), then `done(ending, body)` on the
    // loop, once. Returns the handler's task when it can be cancelled.
    wspool::task<void> offload(const job& j, reply::done_fn done) {
        if (opt.m == mode::inline_) {
            done(ending::ran, run_job(j));
            return {};
        }
        C.submitted++;
        auto handler = [j, r = reply(ioc, std::move(done))]() mutable { r.send(run_job(j)); };
        if (opt.m == mode::threads) {  // its queue holds std::function, which copies: share the handler
            threads->post([h = std::make_shared<decltype(handler)>(std::move(handler))] { (*h)(); });
            return {};
        }
        if (opt.plain) {
            asio::post(pool.get_executor(), std::move(handler));
            return {};
        }
        switch (j.k) {
        case kind::ping:  // never cancelled: answered before anyone could
            pool.post_with(wspool::options().priority(wspool::priority::high), std::move(handler));
            return {};
        case kind::work: {
            wspool::options o;
            if (j.due_ns) o.deadline_ns(http_work_start_by_ns(j.due_ns, work_deadline_ms(j)));
            return pool.submit_with(o, std::move(handler));
        }
        default:
            return sleep_lane ? sleep_lane->submit(std::move(handler)) : pool.submit(std::move(handler));
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

void session::start() {
    beast::error_code ec;
    sock_.non_blocking(true, ec);  // for the hang-up check's peek; Asio's own operations don't mind
    read();
}

void session::read() {
    req_ = {};
    auto self = shared_from_this();
    http::async_read(sock_, buf_, req_, [self](beast::error_code ec, std::size_t) {
        if (ec) {
            self->close();
            self->srv_.sessions.erase(self);
            return;
        }
        self->on_request();
    });
}

// While request `request` is out, the loop still listens: end of stream (or a
// reset) means the client is gone, and a handler that has not started is
// cancelled (its reply then reports the cancellation). Bytes of a pipelined
// request wait for this answer, unread.
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

void session::on_request() {
    C.requests++;
    job j = route(req_.target());
    auto stamp = req_.find("X-Request-Start");
    if (stamp != req_.end()) j.start_ns = http_request_start_ns(stamp->value().data(), stamp->value().size());
    j.due_ns = srv_.due_ns(j);
    switch (j.k) {
    case kind::metrics: {
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
        respond(200, std::move(text), "application/openmetrics-text; version=1.0.0; charset=utf-8");
        return;
    }
    case kind::bad:
        respond(400, "bad query\n");
        return;
    case kind::not_found:
        respond(404, "not found\n");
        return;
    default:
        break;
    }
    busy_ = true;
    unsigned request = ++requests_;
    queued_ = srv_.offload(j, [self = shared_from_this(), due = j.due_ns](ending e, std::string body) {
        self->busy_ = false;
        self->queued_ = {};
        beast::error_code ec;
        self->sock_.cancel(ec);  // the hang-up watch, if any
        if (e == ending::cancelled) {  // its client is gone
            self->close();
            self->srv_.sessions.erase(self);
        } else if (e == ending::expired) {
            self->respond(503, "expired\n");
        } else {
            self->respond(200, std::move(body), "text/plain", due);
        }
    });
    if (busy_ && queued_.valid()) watch_for_hang_up(request);
}

// due_ns: when the answer to a /work request with a deadline is due (0: none); its reply, once
// written, teaches the deadline reserve (http_learn_reserve).
void session::respond(unsigned status, std::string body, const char* type, uint64_t due_ns) {
    res_ = {};
    res_.version(req_.version());
    res_.result(status);
    res_.set(http::field::content_type, type);
    res_.keep_alive(req_.keep_alive() && !srv_.stopping);
    res_.body() = std::move(body);
    res_.prepare_payload();
    auto self = shared_from_this();
    http::async_write(sock_, res_, [self, due_ns](beast::error_code ec, std::size_t) {
        if (!ec && http_learn_reserve(due_ns)) C.answered_late++;
        if (ec || !self->res_.keep_alive()) {
            self->close();
            self->srv_.sessions.erase(self);
            return;
        }
        self->read();
    });
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
