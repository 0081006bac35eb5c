// tests/cpp/test_asio.cpp: wspool::executor under Boost.Asio (Debian 12's
// Boost 1.74): asio::post/dispatch/defer onto the pool, the result handed
// back to an io_context with asio::post(ioc, ...), bind_executor for an async
// operation's completion, executor_work_guard, a handler's exception, and
// wspool::async_run in C++17 (a callback on the loop, use_future).
#include "wspool.hpp"

#include <boost/asio.hpp>

// Again, after Asio: this enables wspool::async_run (C++17: callbacks, use_future).
#include "wspool.hpp"

#include "harness.hpp"

namespace asio = boost::asio;
using namespace std::chrono_literals;

static_assert(asio::is_executor<wspool::executor>::value, "a Networking-TS executor for Boost.Asio");

namespace {
std::atomic<int> g_handled{0};
void count_handler(std::exception_ptr, const char*) { g_handled++; }
}  // namespace

TEST(post_to_pool_and_back_to_the_io_context) {
    // The io_context first, so that the pool is destroyed (its tasks
    // finished, its threads joined) before it: a task may still be inside
    // asio::post(ioc, ...) when the io_context ran what it posted.
    asio::io_context ioc;
    wspool::pool pool(wspool::config().min_threads(2));
    auto ex = pool.get_executor();
    std::thread::id loop = std::this_thread::get_id();
    int results = 0, wrong = 0;
    std::atomic<int> on_pool{0};
    auto guard = asio::make_work_guard(ioc);
    const int n = 200;
    for (int i = 0; i < n; ++i)
        asio::post(ex, [&, i] {
            if (pool.running_in_this_pool()) on_pool++;
            long v = static_cast<long>(i) * i;
            asio::post(ioc, [&, v] {
                if (std::this_thread::get_id() != loop) wrong++;
                results++;
                if (results == n) guard.reset();
                (void)v;
            });
        });
    ioc.run();
    CHECK_EQ(results, n);
    CHECK_EQ(on_pool.load(), n);
    CHECK_EQ(wrong, 0);
}

TEST(dispatch_defer_and_work_guard) {
    wspool::pool pool(wspool::config().min_threads(2));
    auto ex = pool.get_executor();
    std::promise<bool> inline_seen;
    asio::post(ex, [&] {
        bool ran = false;
        asio::dispatch(ex, [&] { ran = true; });  // on the pool: runs at once
        inline_seen.set_value(ran);
    });
    CHECK(inline_seen.get_future().get());
    std::promise<int> deferred;
    asio::defer(ex, [&] { deferred.set_value(7); });
    CHECK_EQ(deferred.get_future().get(), 7);
    auto w = asio::make_work_guard(ex);  // on_work_started/finished
    CHECK(w.owns_work());
    w.reset();
}

TEST(async_operation_completes_on_the_pool) {
    // A timer on the io_context whose completion handler is bound to the
    // pool's executor: the handler runs on a pool thread, then posts back.
    asio::io_context ioc;  // outlives the pool (see above)
    wspool::pool pool(wspool::config().min_threads(2));
    asio::steady_timer t(ioc, 1ms);
    bool back = false;
    std::atomic<bool> on_pool{false};
    // The timer's work ends when its handler is handed to the pool, before
    // the handler posts back: the guard keeps run() going until then.
    auto guard = asio::make_work_guard(ioc);
    t.async_wait(asio::bind_executor(pool.get_executor(), [&](const boost::system::error_code& ec) {
        on_pool = pool.running_in_this_pool() && !ec;
        asio::post(ioc, [&] {
            back = true;
            guard.reset();
        });
    }));
    ioc.run();
    CHECK(on_pool.load());
    CHECK(back);
}

TEST(handler_exception_goes_to_the_exception_handler) {
    g_handled = 0;
    wspool::set_exception_handler(&count_handler);
    {
        wspool::pool pool(wspool::config().min_threads(2));
        asio::post(pool.get_executor(), [] { throw std::runtime_error("handler"); });
    }
    wspool::set_exception_handler(nullptr);
    CHECK_EQ(g_handled.load(), 1);
}

TEST(async_run_in_cxx17_callback_and_future) {
    // Kept until the pool's threads are done: the future's exception may lose
    // its last reference on the pool thread that set it, and libstdc++ counts
    // an exception's references out of TSan's sight.
    std::exception_ptr keep;
    asio::io_context ioc(1);  // outlives the pool (see above)
    wspool::pool pool(wspool::config().min_threads(2));
    const std::thread::id loop = std::this_thread::get_id();
    int got = 0;
    bool on_loop = false;
    wspool::async_run(pool, wspool::options().label("sum"), [] { return 6 * 7; },
                      asio::bind_executor(ioc, [&](std::exception_ptr e, int v) {
                          got = e ? -1 : v;
                          on_loop = std::this_thread::get_id() == loop;
                      }));
    ioc.run();  // until the handler ran: async_run keeps work on its executor
    CHECK_EQ(got, 42);
    CHECK(on_loop);
    std::future<int> f = wspool::async_run(pool, []() -> int { throw std::runtime_error("f"); }, asio::use_future);
    try {
        f.get();
        CHECK(!"f.get() returned");
    } catch (const std::runtime_error& e) {
        keep = std::current_exception();
        CHECK(std::string(e.what()) == "f");
    }
}

int main(int argc, char** argv) { return th::run_all(argc, argv); }
