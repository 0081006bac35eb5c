// http_beast.cpp: a Boost.Beast HTTP/1.1 keep-alive server whose handlers run
// on wspool through its Boost.Asio executor (include/wspool.hpp), with the
// endpoints of the C HTTP examples (examples-c/http_common.h):
//
//   /ping          "pong"
//   /work?n=N      N rounds of splitmix64, the digest in hex (N <= 100000000)
//   /sleep?ms=M    "slept" after M ms inside a wspool::blocking_region (M <= 60000)
//   /metrics       OpenMetrics: the pool's stats and the server's counters (on the loop)
//
//   http_beast [--port P] [--threads N] [--mode pool|inline|threads] [--spin-us U]
//
// One io_context thread (the loop) accepts, reads and writes. A request's
// handler runs, by --mode:
//   pool     on wspool: asio::post(pool.get_executor(), ...), and the response
//            goes back to the loop with asio::post(ioc, ...) (default)
//   inline   on the loop itself (a /sleep stalls every connection meanwhile)
//   threads  on a plain std::thread pool of --threads threads (mutex + condvar
//            queue), the response posted back the same way
// --threads is also the pool's min_threads (Fixed growth is not used: a
// blocking region gets its lent thread). Prints "listening on PORT" once
// ready. SIGINT/SIGTERM: stops accepting, closes idle connections, lets the
// requests in flight finish and be answered, destroys the pool; prints
// "http_beast: exit: requests=.. submitted=.. done=.. cancelled=0" on stderr
// and exits 3 if a submitted handler's response never came back to the loop.
#include "wspool.hpp"

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
    else if (t == "/work")
        j.k = query_u64(q, "n", WORK_MAX, &j.n) ? kind::work : kind::bad;
    else if (t == "/sleep")
        j.k = query_u64(q, "ms", SLEEP_MAX_MS, &j.n) ? kind::sleep : kind::bad;
    return j;
}

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

// Counters: requests and submitted are written on the loop only; done too
// (the response is counted when it is back on the loop). Atomics for /metrics.
struct counters {
    std::atomic<unsigned long long> requests{0}, submitted{0}, done{0};
} C;

struct server;

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
    void respond(unsigned status, std::string body, const char* type = "text/plain");
    tcp::socket sock_;
    server& srv_;
    beast::flat_buffer buf_;
    http::request<http::empty_body> req_;
    http::response<http::string_body> res_;
    bool busy_ = false;  // a request in flight: not idle, not closed at shutdown
    friend struct server;
};

struct server {
    asio::io_context ioc{1};
    tcp::acceptor acceptor{ioc};
    asio::signal_set signals{ioc, SIGINT, SIGTERM};
    wspool::pool& pool;
    plain_pool* threads;
    mode m;
    bool stopping = false;
    std::set<std::weak_ptr<session>, std::owner_less<std::weak_ptr<session>>> sessions;

    server(wspool::pool& p, plain_pool* t, mode md) : pool(p), threads(t), m(md) {}

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

    // Runs j off the loop (or on it, inline), then `done(body)` on the loop.
    template <class Done>
    void offload(const job& j, Done done) {
        if (m == mode::inline_) {
            done(run_job(j));
            return;
        }
        C.submitted++;
        // The guard keeps ioc.run() going until the response is back on the loop.
        auto back = [this, j, done = std::move(done), g = asio::make_work_guard(ioc)]() mutable {
            std::string body = run_job(j);
            asio::post(ioc, [done = std::move(done), body = std::move(body), g = std::move(g)]() mutable {
                C.done++;
                done(std::move(body));
            });
        };
        if (m == mode::pool)
            asio::post(pool.get_executor(), std::move(back));
        else
            threads->post(std::move(back));
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

void session::start() { read(); }

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

void session::on_request() {
    C.requests++;
    job j = route(req_.target());
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
                   {"http_done", "Responses back on the loop (one per submitted request).", C.done.load()}};
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
    srv_.offload(j, [self = shared_from_this()](std::string body) {
        self->busy_ = false;
        self->respond(200, std::move(body));
    });
}

void session::respond(unsigned status, std::string body, const char* type) {
    res_ = {};
    res_.version(req_.version());
    res_.result(status);
    res_.set(http::field::content_type, type);
    res_.keep_alive(req_.keep_alive() && !srv_.stopping);
    res_.body() = std::move(body);
    res_.prepare_payload();
    auto self = shared_from_this();
    http::async_write(sock_, res_, [self](beast::error_code ec, std::size_t) {
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
    mode m = mode::pool;
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
        else if (a == "--mode") {
            std::string v = next();
            m = v == "pool" ? mode::pool : v == "inline" ? mode::inline_ : v == "threads" ? mode::threads : (std::fprintf(stderr, "bad --mode %s\n", v.c_str()), std::exit(2), mode::pool);
        } else {
            std::fprintf(stderr, "usage: %s [--port P] [--threads N] [--mode pool|inline|threads] [--spin-us U]\n", argv[0]);
            return 2;
        }
    }
    // Handlers may write to a socket the client closed: no SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    wspool::config cfg = wspool::config().min_threads(threads).name("beast");
    if (spin_us >= 0) cfg.spin_max_us(static_cast<uint32_t>(spin_us));
    wspool::pool pool(cfg);
    std::unique_ptr<plain_pool> plain;
    if (m == mode::threads) plain = std::make_unique<plain_pool>(threads);
    {
        server srv(pool, plain.get(), m);
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
    std::fprintf(stderr, "http_beast: exit: requests=%llu submitted=%llu done=%llu cancelled=0\n", C.requests.load(), s, d);
    return s == d ? 0 : 3;
}
