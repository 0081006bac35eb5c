// tests/cpp/test_coro.cpp (C++20): co_await on pool work. pool.run from a
// plain coroutine, and wspool::async_run (an Asio initiating function) with
// asio::use_awaitable on one io_context thread, asio::use_future, a plain
// callback and asio::bind_executor onto a strand: results, a task's exception
// reaching co_await, cancelled, expired and refused tasks ending the await
// with an error (never a hang), and where the awaiting side resumes.
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>  // before wspool.hpp: it enables wspool::async_run

#include "wspool.hpp"

#include <coroutine>
#include <future>
#include <stdexcept>
#include <vector>

#include "harness.hpp"

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {
/// A coroutine that starts at once and runs to its end on its own.
struct fire {
    struct promise_type {
        fire get_return_object() noexcept { return {}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_never final_suspend() noexcept { return {}; }
        void return_void() noexcept {}
        void unhandled_exception() noexcept { std::terminate(); }
    };
};

fire plain_coroutine(wspool::pool& pool, std::promise<std::string>& out) {
    std::string log;
    int v = co_await pool.run([](int x) { return x * 2; }, 21);
    log += std::to_string(v);
    log += pool.running_in_this_pool() ? " on-pool" : " off-pool";  // resumed where the task ran
    try {
        co_await pool.run([]() -> int { throw std::runtime_error("boom"); });
        log += " no-throw";
    } catch (const std::runtime_error& e) {
        log += std::string(" caught ") + e.what();
    }
    co_await pool.run_with(wspool::options().priority(wspool::priority::high), [] {});  // void
    try {
        co_await pool.run_with(wspool::options().deadline(std::chrono::steady_clock::now() - 1ms), [] { return 1; });
        log += " ran";
    } catch (const wspool::task_expired&) {
        log += " expired";
    }
    out.set_value(log);
}

fire refused_coroutine(wspool::pool& pool, std::promise<int>& out) {
    try {
        co_await pool.run([] { return 1; });
        out.set_value(0);
    } catch (const wspool::error& e) {
        out.set_value(e.status());
    }
}

/// Spins (the watchdog bounds it) until the pool accepted n tasks.
void wait_submitted(wspool::pool& pool, uint64_t n) {
    while (pool.stats().submitted < n) std::this_thread::yield();
}
}  // namespace

TEST(plain_coroutine_awaits_values_exceptions_and_expiry) {
    wspool::pool pool(wspool::config().min_threads(2));
    std::promise<std::string> out;
    plain_coroutine(pool, out);
    CHECK(out.get_future().get() == "42 on-pool caught boom expired");
}

TEST(plain_coroutine_refused_by_a_shut_down_pool) {
    wspool::pool pool(wspool::config().min_threads(1));
    pool.shutdown();
    std::promise<int> out;
    refused_coroutine(pool, out);
    CHECK_EQ(out.get_future().get(), WSPOOL_ESHUTDOWN);
}

TEST(a_thousand_asio_coroutines_on_one_thread) {
    asio::io_context ioc(1);  // first: destroyed after the pool
    wspool::pool pool(wspool::config().min_threads(2));
    const std::thread::id loop = std::this_thread::get_id();
    const int n = 1000;
    long long sum = 0;
    int done = 0, off_loop = 0;
    std::atomic<int> on_pool{0};
    for (int i = 0; i < n; ++i)
        asio::co_spawn(
            ioc,
            [&, i]() -> asio::awaitable<void> {
                long long v = co_await wspool::async_run(
                    pool,
                    [&, i] {
                        if (pool.running_in_this_pool()) ++on_pool;
                        return static_cast<long long>(i) * i;
                    },
                    asio::use_awaitable);
                if (std::this_thread::get_id() != loop) ++off_loop;
                sum += v;
                ++done;
            },
            asio::detached);
    ioc.run();
    CHECK_EQ(done, n);
    CHECK_EQ(on_pool.load(), n);
    CHECK_EQ(off_loop, 0);
    CHECK_EQ(sum, static_cast<long long>(n - 1) * n * (2 * n - 1) / 6);
}

TEST(asio_coroutine_gets_the_task_exception_and_errors) {
    asio::io_context ioc(1);
    wspool::pool pool(wspool::config().min_threads(2));
    const std::thread::id loop = std::this_thread::get_id();
    std::string log;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
            try {
                co_await wspool::async_run(pool, []() -> int { throw std::runtime_error("from the task"); },
                                           asio::use_awaitable);
                log += "no-throw";
            } catch (const std::runtime_error& e) {
                log += e.what();
            }
            log += std::this_thread::get_id() == loop ? " loop" : " elsewhere";
            try {  // a void task throwing a type without what()
                co_await wspool::async_run(pool, [] { throw 7; }, asio::use_awaitable);
            } catch (int x) {
                log += " int " + std::to_string(x);
            }
            try {
                co_await wspool::async_run(pool, wspool::options().deadline(std::chrono::steady_clock::now() - 1ms),
                                           [] { return 1; }, asio::use_awaitable);
            } catch (const wspool::task_expired&) {
                log += " expired";
            }
        },
        asio::detached);
    ioc.run();
    CHECK(log == "from the task loop int 7 expired");
}

TEST(asio_cancel_handle_and_cancel_shutdown_end_the_await) {
    asio::io_context ioc(1);
    wspool::pool pool(wspool::config().min_threads(1).max_threads(1).growth(wspool::growth::fixed));
    th::gate g;
    pool.post([&] { g.pass(); });  // holds the only worker: what follows stays queued
    g.wait_inside(1);
    std::string log;
    wspool::cancel_handle h;
    std::thread shutter;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
            try {
                co_await wspool::async_run(pool, wspool::options(), h, [] { return 1; }, asio::use_awaitable);
                log += "ran";
            } catch (const wspool::task_cancelled&) {
                log += "cancelled";
            }
            // Queued again; a CANCEL shutdown drops it, then the gate opens.
            shutter = std::thread([&] {
                wait_submitted(pool, 3);
                pool.shutdown(wspool::shutdown_mode::cancel);
            });
            try {
                co_await wspool::async_run(pool, [] {}, asio::use_awaitable);
                log += " ran";
            } catch (const wspool::task_cancelled&) {
                log += " cancelled";
            }
            g.open();
            try {  // the pool refuses from now on
                co_await wspool::async_run(pool, [] {}, asio::use_awaitable);
            } catch (const wspool::error& e) {
                log += e.status() == WSPOOL_ESHUTDOWN ? " refused" : " other error";
            }
        },
        asio::detached);
    // The coroutine's first task is queued once h holds it: cancel it then.
    std::function<void()> cancel_when_queued = [&] {
        if (!h.valid()) return asio::post(ioc, cancel_when_queued);
        CHECK(h.cancel());
        CHECK(!h.cancel());  // once
    };
    asio::post(ioc, cancel_when_queued);
    ioc.run();
    shutter.join();
    CHECK(log == "cancelled cancelled refused");
}

TEST(use_future_and_callback_forms) {
    // A future's exception may lose its last reference on the thread that set
    // it, after get() read it here; libstdc++ counts an exception's references
    // out of TSan's sight, so this test keeps a copy of each until the pool's
    // threads (and Asio's system threads) are done: declared before the pool.
    std::vector<std::exception_ptr> keep;
    wspool::pool pool(wspool::config().min_threads(2));
    std::future<int> f = wspool::async_run(pool, [] { return 7; }, asio::use_future);
    CHECK_EQ(f.get(), 7);
    std::future<void> fv = wspool::async_run(pool, [] { throw std::logic_error("void"); }, asio::use_future);
    try {
        fv.get();
        CHECK(!"fv.get() returned");
    } catch (const std::logic_error& e) {
        keep.push_back(std::current_exception());
        CHECK(std::string(e.what()) == "void");
    }

    // A plain callback has no executor: it runs on the pool thread that ran the task.
    std::promise<std::string> p;
    wspool::async_run(pool, [] { return std::string("cb"); }, [&](std::exception_ptr e, std::string v) {
        p.set_value(v + (e ? " error" : "") + (pool.running_in_this_pool() ? " on-pool" : " off-pool"));
    });
    CHECK(p.get_future().get() == "cb on-pool");

    pool.shutdown();  // then refused: the callback form throws, as pool.post does
    bool called = false;
    CHECK_THROWS(wspool::async_run(pool, [] {}, [&](std::exception_ptr) { called = true; }), const wspool::error&, e,
                 e.status() == WSPOOL_ESHUTDOWN);
    CHECK(!called);
    // A refusal is posted to the handler's executor: for use_future, Asio's system thread pool.
    std::future<int> refused = wspool::async_run(pool, [] { return 1; }, asio::use_future);
    try {
        refused.get();
        CHECK(!"refused.get() returned");
    } catch (const wspool::error& e) {
        keep.push_back(std::current_exception());
        CHECK_EQ(e.status(), WSPOOL_ESHUTDOWN);
    }
    asio::system_executor().context().stop();
    asio::system_executor().context().join();
}

TEST(bind_executor_delivers_on_a_strand) {
    asio::io_context ioc(1);
    wspool::pool pool(wspool::config().min_threads(2));
    auto strand = asio::make_strand(ioc);
    const std::thread::id loop = std::this_thread::get_id();
    const int n = 200;
    int got = 0, wrong = 0;
    long sum = 0;
    for (int i = 0; i < n; ++i)
        wspool::async_run(pool, [i] { return i; },
                          asio::bind_executor(strand, [&](std::exception_ptr e, int v) {
                              if (e || !strand.running_in_this_thread() || std::this_thread::get_id() != loop) ++wrong;
                              sum += v;
                              ++got;
                          }));
    ioc.run();  // the handlers' work keeps it running until the last
    CHECK_EQ(got, n);
    CHECK_EQ(wrong, 0);
    CHECK_EQ(sum, static_cast<long>(n) * (n - 1) / 2);
}

int main(int argc, char** argv) { return th::run_all(argc, argv); }
