// tests/cpp/test_wspool.cpp: every piece of include/wspool.hpp (issue 27),
// run plain, under ASan+UBSan and under TSan (make test-cpp).
//
//   test_wspool [NAME-SUBSTRING]
//
// WSPOOL_TEST_SCALE scales the race rounds (sanitizers run fewer).
#include "wspool.hpp"

#include "harness.hpp"

#include <future>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <sys/wait.h>

using namespace std::chrono_literals;

namespace {

int rounds(int n) {
    const char* s = std::getenv("WSPOOL_TEST_SCALE");
    double f = s ? std::atof(s) : 1.0;
    int r = static_cast<int>(n * f);
    return r < 1 ? 1 : r;
}

wspool::config fixed(uint32_t n) { return wspool::config().min_threads(n).growth(wspool::growth::fixed); }

struct no_what {  // an exception type without what()
    int code;
};

// The exception handler's last report (tests set it, then restore the default).
std::mutex g_handled_m;
std::vector<std::string> g_handled;
void recording_handler(std::exception_ptr e, const char* name) {
    std::string what = "?";
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        what = x.what();
    } catch (int v) {
        what = "int " + std::to_string(v);
    } catch (...) {
        what = "other";
    }
    std::lock_guard<std::mutex> l(g_handled_m);
    g_handled.push_back(what + " | " + wspool::detail::demangle(name));
}
std::vector<std::string> handled() {
    std::lock_guard<std::mutex> l(g_handled_m);
    return g_handled;
}
void clear_handled() {
    std::lock_guard<std::mutex> l(g_handled_m);
    g_handled.clear();
}

}  // namespace

// ------------------------------------------------------------ submit/get ---

TEST(submit_returns_values_and_binds_arguments) {
    wspool::pool p(fixed(2));
    auto a = p.submit([](int x, const std::string& s) { return s + std::to_string(x * 2); }, 21, std::string("v"));
    CHECK(a.get() == "v42");
    CHECK(!a.valid());
    auto b = p.submit([] { return std::make_unique<int>(7); });  // move-only result
    CHECK(*b.get() == 7);
    auto up = std::make_unique<int>(5);
    auto c = p.submit([u = std::move(up)] { return *u + 1; });  // move-only callable
    CHECK_EQ(c.get(), 6);
    std::atomic<int> ran{0};
    auto d = p.submit([&] { ran++; });
    d.get();
    CHECK_EQ(ran.load(), 1);
    CHECK_THROWS(d.get(), const wspool::error&, e, e.status() == WSPOOL_EINVAL);
}

TEST(task_exceptions_reach_get) {
    wspool::pool p(fixed(2));
    auto a = p.submit([]() -> int { throw std::runtime_error("boom"); });
    CHECK_THROWS(a.get(), const std::runtime_error&, e, std::string(e.what()) == "boom");
    auto b = p.submit([] { throw 42; });
    CHECK_THROWS(b.get(), int, v, v == 42);
    auto c = p.submit([]() -> std::string { throw no_what{7}; });
    CHECK_THROWS(c.get(), const no_what&, x, x.code == 7);
    auto d = p.submit([] { throw std::logic_error("void task"); });
    CHECK_THROWS(d.get(), const std::logic_error&, e, std::string(e.what()) == "void task");
    // The pool is unharmed: its workers are alive and counted nothing as a panic.
    CHECK_EQ(p.submit([] { return 1; }).get(), 1);
    CHECK_EQ(p.stats().panicked, 0);
}

TEST(handles_outlive_and_drop_results) {
    std::atomic<int> live{0};
    wspool::pool p(fixed(2));
    for (int i = 0; i < 100; ++i) {
        auto t = p.submit([tr = th::tracker(&live), i] { return std::vector<int>(i, i); });
        (void)t;  // dropped at once: the task still runs, its result is dropped
    }
    p.shutdown();
    CHECK_EQ(live.load(), 0);
    CHECK_EQ(p.stats().completed, 100);
}

TEST(wait_for_and_state) {
    wspool::pool p(fixed(2));
    th::gate g;
    auto t = p.submit([&] {
        g.pass();
        return 3;
    });
    g.wait_inside(1);
    CHECK(t.state() == wspool::task_state::running);
    CHECK(t.wait_for(0ms) == std::future_status::timeout);
    CHECK(!t.cancel());  // running: too late
    g.open();
    t.wait();
    CHECK(t.wait_for(1ms) == std::future_status::ready);
    CHECK(t.state() == wspool::task_state::done);
    CHECK_EQ(t.get(), 3);
}

TEST(cancel_pending_task_destroys_callable_unrun) {
    wspool::pool p(fixed(2));
    th::gate g;
    p.post([&] { g.pass(); });
    p.post([&] { g.pass(); });
    g.wait_inside(2);  // both workers held
    std::atomic<int> live{0}, ran{0};
    auto t = p.submit([tr = th::tracker(&live), &ran] {
        ran++;
        return 1;
    });
    CHECK(t.state() == wspool::task_state::pending);
    CHECK(t.cancel());
    CHECK(!t.cancel());  // once
    CHECK_EQ(live.load(), 0);  // destroyed by the cancel, before it returned
    CHECK(t.state() == wspool::task_state::cancelled);
    CHECK(t.wait_for(0ms) == std::future_status::ready);
    CHECK_THROWS(t.get(), const wspool::task_cancelled&, e, e.status() == WSPOOL_ECANCELLED);
    g.open();
    p.shutdown();
    CHECK_EQ(ran.load(), 0);
}

TEST(cancel_races_run_exactly_once) {
    wspool::pool p(fixed(2));
    int n = rounds(300);
    int cancelled_total = 0, ran_total = 0;
    for (int r = 0; r < n; ++r) {
        std::atomic<int> live{0}, ran{0}, wins{0};
        {
            auto t = p.submit([tr = th::tracker(&live), &ran] { ran++; });
            std::thread other([&] {
                if (t.cancel()) wins++;
            });
            if (t.cancel()) wins++;
            other.join();
            try {
                t.get();
            } catch (const wspool::task_cancelled&) {
            }
        }
        CHECK(wins.load() + ran.load() == 1);
        CHECK_EQ(live.load(), 0);  // the callable destroyed exactly once, run or not
        cancelled_total += wins.load();
        ran_total += ran.load();
    }
    std::printf("  cancel races: %d rounds, %d cancelled, %d ran\n", n, cancelled_total, ran_total);
}

TEST(task_handle_destroyed_while_cancel_and_run_race) {
    // The handle goes away on one thread while the task runs or is cancelled
    // on others: the shared state is freed once, by the last of them.
    wspool::pool p(fixed(2));
    int n = rounds(300);
    std::atomic<int> live{0};
    for (int r = 0; r < n; ++r) {
        auto t = std::make_unique<wspool::task<int>>(p.submit([tr = th::tracker(&live)] { return 1; }));
        std::thread other([&] { t->cancel(); });
        other.join();
        t.reset();
    }
    p.shutdown();
    CHECK_EQ(live.load(), 0);
}

// ------------------------------------------------------------------ post ---

TEST(post_exceptions_go_to_the_handler) {
    clear_handled();
    wspool::set_exception_handler(&recording_handler);
    {
        wspool::pool p(fixed(2));
        p.post([] { throw std::runtime_error("posted"); });
        p.post([] { throw 5; });
        p.post([] { throw no_what{1}; });
        p.post([](int x) { CHECK_EQ(x, 9); }, 9);
    }  // the destructor drains
    wspool::set_exception_handler(nullptr);
    auto h = handled();
    CHECK_EQ(h.size(), 3);
    std::set<std::string> whats;
    for (auto& s : h) {
        whats.insert(s.substr(0, s.find(" | ")));
        CHECK(s.find("post_exceptions_go_to_the_handler") != std::string::npos);  // names the task
    }
    CHECK(whats.count("posted") == 1 && whats.count("int 5") == 1 && whats.count("other") == 1);
}

static int child_unhandled() {
    wspool::pool p(fixed(2));
    p.post([] { throw std::runtime_error("boom-42"); });
    p.shutdown();
    return 0;  // not reached: the default handler terminates
}

TEST(default_handler_terminates_naming_the_task) {
    std::string err = "target/cpp-child-unhandled.log";
    std::string cmd = "/proc/" + std::to_string(getpid()) + "/exe --child-unhandled 2> " + err;
    int st = std::system(cmd.c_str());
    CHECK(st != 0);
    std::FILE* f = std::fopen(err.c_str(), "r");
    CHECK(f != nullptr);
    if (!f) return;
    std::string text;
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) text += buf;
    std::fclose(f);
    CHECK(text.find("wspool: task child_unhandled()::{lambda()#1} threw std::runtime_error: boom-42") !=
          std::string::npos);
    CHECK(text.find("std::terminate") != std::string::npos);
    if (text.find("boom-42") == std::string::npos) std::fprintf(stderr, "  child said: %s\n", text.c_str());
}

TEST(refused_submissions_throw_and_free_the_callable) {
    std::atomic<int> live{0};
    wspool::pool p(fixed(2).queue_capacity(1));
    th::gate g;
    p.post([&] { g.pass(); });
    p.post([&] { g.pass(); });
    g.wait_inside(2);
    p.post([tr = th::tracker(&live)] {});  // fills the queue
    CHECK_THROWS(p.post([tr = th::tracker(&live)] {}), const wspool::error&, e, e.status() == WSPOOL_EREJECTED);
    CHECK_THROWS(p.submit([tr = th::tracker(&live)] { return 1; }), const wspool::error&, e,
                 e.status() == WSPOOL_EREJECTED);
    CHECK_EQ(live.load(), 1);  // only the queued one is alive
    g.open();
    p.shutdown();
    CHECK_EQ(live.load(), 0);
    CHECK_THROWS(p.post([] {}), const wspool::error&, e,
                 e.status() == WSPOOL_ESHUTDOWN && std::string(e.what()).find("wspool_submit_ex") == 0);
}

TEST(cancel_shutdown_frees_posted_callables) {
    std::atomic<int> live{0}, ran{0};
    wspool::pool p(fixed(2));
    th::gate g;
    p.post([&] { g.pass(); });
    p.post([&] { g.pass(); });
    g.wait_inside(2);
    for (int i = 0; i < 50; ++i) p.post([tr = th::tracker(&live), &ran] { ran++; });
    auto t = p.submit([tr = th::tracker(&live)] { return 1; });
    std::thread opener([&] {
        while (p.stats().cancelled < 51) std::this_thread::yield();
        g.open();
    });
    p.shutdown(wspool::shutdown_mode::cancel);
    opener.join();
    CHECK_EQ(ran.load(), 0);
    CHECK_EQ(live.load(), 0);
    CHECK_THROWS(t.get(), const wspool::task_cancelled&, e, true);
}

// ---------------------------------------------------------------- config ---

TEST(config_errors_carry_status_and_message) {
    CHECK_THROWS(wspool::pool(wspool::config().stack_size(1024)), const wspool::error&, e,
                 e.status() == WSPOOL_EINVAL && std::string(e.what()).find("wspool_create") == 0 &&
                     std::string(e.what()).find("stack") != std::string::npos);
    CHECK_THROWS(wspool::pool(wspool::config().thread_nice(40)), const wspool::error&, e, e.status() == WSPOOL_EINVAL);
}

TEST(thread_hooks_and_name) {
    std::atomic<int> started{0}, stopped{0};
    {
        wspool::pool p(fixed(2).name("cpp").on_thread_start([&](uint32_t) { started++; }).on_thread_stop(
            [&](uint32_t) { stopped++; }));
        wspool::pool moved(std::move(p));  // the hooks' context stays where it was
        CHECK_EQ(moved.submit([] { return wspool::capi::wspool_current_index() >= 0; }).get(), 1);
    }
    CHECK_EQ(started.load(), 2);
    CHECK_EQ(stopped.load(), 2);
    clear_handled();
    wspool::set_exception_handler(&recording_handler);
    { wspool::pool p(fixed(2).on_thread_start([](uint32_t) { throw std::runtime_error("hook"); })); }
    wspool::set_exception_handler(nullptr);
    auto h = handled();
    CHECK_EQ(h.size(), 2);
    if (!h.empty()) CHECK(h[0] == "hook | wspool::config::on_thread_start");
}

TEST(stats_and_openmetrics) {
    wspool::pool p(fixed(2));
    for (int i = 0; i < 10; ++i) p.submit([] { return 0; }).get();
    auto s = p.stats();
    CHECK(s.submitted >= 10 && s.completed >= 10);
    CHECK_EQ(s.threads, 2);
    std::string m = p.openmetrics();
    CHECK(m.find("wspool_threads 2") != std::string::npos);
    CHECK(m.size() > 6 && m.compare(m.size() - 6, 6, "# EOF\n") == 0);
}

// ----------------------------------------------------------------- group ---

TEST(group_runs_all_and_rethrows_the_first) {
    wspool::pool p(fixed(2));
    std::atomic<int> ran{0};
    wspool::group g(p);
    for (int i = 0; i < 100; ++i) g.run([&] { ran++; });
    g.wait();
    CHECK_EQ(ran.load(), 100);
    for (int i = 0; i < 10; ++i)
        g.run([&, i] {
            ran++;
            if (i % 3 == 0) throw std::runtime_error("g" + std::to_string(i));
        });
    CHECK_THROWS(g.wait(), const std::runtime_error&, e, std::string(e.what()).rfind("g", 0) == 0);
    CHECK_EQ(ran.load(), 110);  // every task ran, throwing or not
    g.wait();                   // reported once
    g.run([] { throw 3; });
    CHECK_THROWS(g.wait(), int, v, v == 3);
    g.run([] { throw no_what{4}; });
    CHECK_THROWS(g.wait(), const no_what&, x, x.code == 4);
}

TEST(group_tasks_nest_and_help) {
    // Fixed(2): each level waits for its children on a pool thread; helping
    // runs them there, so no thread is missing (the watchdog catches a deadlock).
    wspool::pool p(fixed(2));
    std::atomic<int> leaves{0};
    std::function<void(int)> tree = [&](int depth) {
        if (depth == 0) {
            leaves++;
            return;
        }
        wspool::group g(p);
        g.run([&, depth] { tree(depth - 1); });
        g.run([&, depth] { tree(depth - 1); });
        g.wait();
    };
    auto t = p.submit([&] { tree(8); });
    t.get();
    CHECK_EQ(leaves.load(), 256);
    // Nested task handles waited for on pool threads help too.
    auto outer = p.submit([&] {
        int sum = 0;
        std::vector<wspool::task<int>> ts;
        for (int i = 0; i < 20; ++i) ts.push_back(p.submit([i] { return i; }));
        for (auto& x : ts) sum += x.get();
        return sum;
    });
    CHECK_EQ(outer.get(), 190);
}

TEST(group_destroyed_unwaited_reports_its_exception) {
    clear_handled();
    wspool::set_exception_handler(&recording_handler);
    {
        wspool::pool p(fixed(2));
        {
            wspool::group g(p);
            g.run([] { throw std::runtime_error("unwaited"); });
        }  // fini waits; nobody saw the exception: the handler does
        try {
            wspool::group g(p);
            g.run([] { throw std::runtime_error("while unwinding"); });
            throw std::logic_error("scope failed");
        } catch (const std::logic_error&) {
        }
    }
    wspool::set_exception_handler(nullptr);
    auto h = handled();
    CHECK_EQ(h.size(), 1);  // the one dropped while unwinding is not reported
    if (!h.empty()) CHECK(h[0].rfind("unwaited | ", 0) == 0);
}

TEST(group_cancelled_by_shutdown_reports_cancelled) {
    wspool::pool p(fixed(2));
    th::gate gt;
    p.post([&] { gt.pass(); });
    p.post([&] { gt.pass(); });
    gt.wait_inside(2);
    std::atomic<int> live{0};
    wspool::group g(p);
    for (int i = 0; i < 5; ++i) g.run([tr = th::tracker(&live)] {});
    std::thread opener([&] {
        while (p.stats().cancelled < 5) std::this_thread::yield();
        gt.open();
    });
    p.shutdown(wspool::shutdown_mode::cancel);
    opener.join();
    CHECK_THROWS(g.wait(), const wspool::task_cancelled&, e, true);
    CHECK_EQ(live.load(), 0);
    CHECK_THROWS(g.run([] {}), const wspool::error&, e, e.status() == WSPOOL_ESHUTDOWN);
}

// ------------------------------------------------------- join, parallel ---

TEST(join_runs_both_and_rethrows) {
    wspool::pool p(fixed(2));
    int a = 0, b = 0;
    wspool::join(p, [&] { a = 1; }, [&] { b = 2; });
    CHECK(a == 1 && b == 2);
    a = b = 0;
    CHECK_THROWS(wspool::join(p, [&] { a = 1; }, [&] { b = 1; throw std::runtime_error("b"); }),
                 const std::runtime_error&, e, std::string(e.what()) == "b");
    CHECK(a == 1 && b == 1);
    CHECK_THROWS(wspool::join(p, [] { throw 1; }, [] { throw 2; }), int, v, v == 1);  // a's first
    // From a pool thread too.
    CHECK_EQ(p.submit([&] {
                  int x = 0, y = 0;
                  wspool::join(p, [&] { x = 3; }, [&] { y = 4; });
                  return x + y;
              }).get(),
             7);
}

TEST(parallel_for_covers_each_index_once) {
    wspool::pool p(fixed(2));
    std::vector<std::atomic<int>> hits(10007);
    wspool::parallel_for(p, size_t(0), hits.size(), size_t(64), [&](size_t i) { hits[i]++; });
    int bad = 0;
    for (auto& h : hits) bad += h.load() != 1;
    CHECK_EQ(bad, 0);
    std::atomic<int> n{0};
    wspool::parallel_for(p, 5, 5, 1, [&](int) { n++; });  // empty
    wspool::parallel_for(p, -3, 3, 0, [&](int) { n++; });  // grain 0 = 1, negative indices
    CHECK_EQ(n.load(), 6);
    // Nested inside a task.
    CHECK_EQ(p.submit([&] {
                  std::atomic<int> c{0};
                  wspool::parallel_for(p, 0, 1000, 10, [&](int) { c++; });
                  return c.load();
              }).get(),
             1000);
}

TEST(parallel_for_exception_propagates) {
    wspool::pool p(fixed(2));
    std::atomic<int> calls{0};
    CHECK_THROWS(wspool::parallel_for(p, 0, 100000, 100,
                                      [&](int i) {
                                          calls++;
                                          if (i == 500) throw std::out_of_range("500");
                                      }),
                 const std::out_of_range&, e, std::string(e.what()) == "500");
    CHECK(calls.load() >= 1 && calls.load() <= 100000);
    CHECK_THROWS(wspool::parallel_for(p, 0, 10, 1, [](int i) { if (i == 9) throw no_what{9}; }), const no_what&, x,
                 x.code == 9);
    CHECK_EQ(p.submit([] { return 2; }).get(), 2);
}

TEST(parallel_reduce_over_groups) {
    wspool::pool p(fixed(2));
    auto sum = [](long lo, long hi, long acc) {
        for (long i = lo; i < hi; ++i) acc += i;
        return acc;
    };
    CHECK_EQ(wspool::parallel_reduce(p, 0L, 100000L, 1000L, 0L, sum, std::plus<long>()), 4999950000L);
    // combine in order: string concatenation is not commutative
    std::string s = wspool::parallel_reduce(
        p, 0, 26, 3, std::string(),
        [](int lo, int hi, std::string acc) {
            for (int i = lo; i < hi; ++i) acc += char('a' + i);
            return acc;
        },
        [](std::string a, const std::string& b) { return a + b; });
    CHECK(s == "abcdefghijklmnopqrstuvwxyz");
    CHECK_THROWS(wspool::parallel_reduce(p, 0, 100, 10, 0, [](int lo, int, int) -> int {
                     if (lo == 50) throw std::runtime_error("chunk 50");
                     return 0;
                 }, std::plus<int>()),
                 const std::runtime_error&, e, std::string(e.what()) == "chunk 50");
    // From a pool thread (help while waiting on Fixed(2)).
    CHECK_EQ(p.submit([&] { return wspool::parallel_reduce(p, 0L, 1000L, 10L, 0L, sum, std::plus<long>()); }).get(),
             499500L);
}

// ---------------------------------------------------------- serial queue ---

TEST(serial_queue_fifo_one_at_a_time) {
    wspool::pool p(fixed(2));
    wspool::serial_queue q(p);
    std::vector<int> order;
    std::atomic<int> inside{0}, overlap{0};
    for (int i = 0; i < 200; ++i)
        q.post([&, i] {
            if (inside.fetch_add(1) != 0) overlap++;
            order.push_back(i);  // unsynchronised on purpose: one at a time (TSan checks)
            inside.fetch_sub(1);
        });
    auto last = q.submit([&] { return order.size(); });
    CHECK_EQ(last.get(), 200);
    CHECK_EQ(overlap.load(), 0);
    bool sorted = true;
    for (int i = 0; i < 200; ++i) sorted = sorted && order[i] == i;
    CHECK(sorted);
    auto bad = q.submit([]() -> int { throw std::runtime_error("serial"); });
    CHECK_THROWS(bad.get(), const std::runtime_error&, e, std::string(e.what()) == "serial");
}

// ------------------------------------------------------------- blocking ---

TEST(blocking_region_lends_a_thread) {
    wspool::pool p(wspool::config().min_threads(2).max_threads(8));
    { wspool::blocking_region off_pool; }  // no-op off the pool
    auto t = p.submit([&] {
        wspool::blocking_region r;
        return p.stats().blocked_threads;
    });
    CHECK_EQ(t.get(), 1);
    CHECK_EQ(p.submit([&] { return wspool::blocking([&] { return p.stats().blocked_threads; }); }).get(), 1);
    CHECK_EQ(p.stats().blocked_threads, 0);
}

// ------------------------------------------------------ completion queue ---

TEST(completion_queue_values_exceptions_cancel) {
    wspool::pool p(fixed(2));
    std::thread::id loop = std::this_thread::get_id();
    {
        wspool::completion_queue cq(p);
        int sum = 0, errors = 0, wrong_thread = 0;
        for (int i = 0; i < 50; ++i)
            cq.submit([i] { return i; }, [&](wspool::outcome<int> o) {
                if (std::this_thread::get_id() != loop) wrong_thread++;
                sum += o.get();
            });
        cq.submit([]() -> int { throw std::runtime_error("work"); }, [&](wspool::outcome<int> o) {
            CHECK(!o.has_value() && !o.cancelled());
            CHECK_THROWS(o.get(), const std::runtime_error&, e, std::string(e.what()) == "work");
            errors++;
        });
        cq.submit([] {}, [&](wspool::outcome<void> o) { o.get(); });
        while (cq.pending()) cq.drain();
        CHECK_EQ(sum, 1225);
        CHECK_EQ(errors, 1);
        CHECK_EQ(wrong_thread, 0);
        // A done that throws: drain rethrows after the batch.
        int after = 0;
        cq.submit([] { return 1; }, [](wspool::outcome<int>) { throw std::runtime_error("done threw"); });
        cq.submit([] { return 1; }, [&](wspool::outcome<int> o) { after += o.get(); });
        bool thrown = false;
        while (cq.pending()) {
            try {
                cq.drain();
            } catch (const std::runtime_error& e) {
                thrown = std::string(e.what()) == "done threw";
            }
        }
        CHECK(thrown);
        CHECK_EQ(after, 1);
    }
    {
        // CANCEL close: work not started never runs; done sees cancelled.
        th::gate g;
        p.post([&] { g.pass(); });
        p.post([&] { g.pass(); });
        g.wait_inside(2);
        wspool::completion_queue cq(p, wspool::cq_options().cap(100));
        int cancelled = 0;
        std::atomic<int> live{0};
        for (int i = 0; i < 10; ++i)
            cq.submit([tr = th::tracker(&live)] { return 1; }, [&](wspool::outcome<int> o) {
                if (o.cancelled()) cancelled++;
                CHECK_THROWS(o.get(), const wspool::task_cancelled&, e, true);
            });
        // A close that times out at once has still closed the queue (CANCEL):
        // the work then never runs, whenever the workers get to it.
        CHECK(!cq.close(WSPOOL_CQ_CLOSE_CANCEL, 0ms));
        g.open();
        CHECK(cq.close(WSPOOL_CQ_CLOSE_CANCEL));
        CHECK_EQ(cancelled, 10);
        CHECK_EQ(live.load(), 0);
    }
}

TEST(completion_queue_wake_and_signals) {
    wspool::pool p(fixed(2));
    std::atomic<int> wakes{0};
    std::vector<wspool::cq_signal> sigs;
    {
        th::gate g;
        wspool::completion_queue cq(p, wspool::cq_options().cap(8).high_water(4).low_water(1)
                                           .wake([&] { wakes++; })
                                           .on_signal([&](wspool::cq_signal s) { sigs.push_back(s); }));
        CHECK_EQ(cq.fd(), -1);  // woken through the callable instead
        for (int i = 0; i < 4; ++i) cq.submit([&] { g.pass(); }, [](wspool::outcome<void>) {});
        g.open();
        while (cq.pending()) cq.drain();
    }
    CHECK(wakes.load() >= 1);
    CHECK(sigs.size() >= 2 && sigs[0] == wspool::cq_signal::high_water && sigs[1] == wspool::cq_signal::low_water);
}

// ------------------------------------------------------ destruction order ---

TEST(pool_destroyed_while_tasks_and_handles_live) {
    std::atomic<int> live{0};
    std::vector<wspool::task<int>> handles;
    std::optional<wspool::group> gp;
    std::optional<wspool::serial_queue> sq;
    {
        wspool::pool p(fixed(2));
        for (int i = 0; i < 100; ++i) handles.push_back(p.submit([i, tr = th::tracker(&live)] { return i; }));
        for (int i = 0; i < 100; ++i) p.post([tr = th::tracker(&live)] {});
        gp.emplace(p);
        sq.emplace(p);
        gp->run([tr = th::tracker(&live)] {});
        sq->post([tr = th::tracker(&live)] {});
    }  // ~pool drains every accepted task, then frees the pool
    CHECK_EQ(live.load(), 0);
    int sum = 0;
    for (auto& h : handles) sum += h.get();  // handles outlive their pool
    CHECK_EQ(sum, 4950);
    CHECK_THROWS(gp->run([] {}), const wspool::error&, e, e.status() == WSPOOL_ESHUTDOWN);
    CHECK_THROWS(sq->post([] {}), const wspool::error&, e, e.status() == WSPOOL_ESHUTDOWN);
    gp->wait();
    gp.reset();  // fini after the pool: the group kept what it needed
    sq.reset();
}

TEST(pool_destroyed_while_tasks_run_and_handles_wait) {
    // Handles waited for on other threads while the pool is destroyed.
    std::atomic<int> ran{0};
    std::vector<wspool::task<int>> hs;
    std::vector<std::thread> waiters;
    std::atomic<int> got{0};
    {
        wspool::pool p(fixed(2));
        for (int i = 0; i < 40; ++i)
            hs.push_back(p.submit([&ran] {
                ran++;
                std::this_thread::yield();
                return 1;
            }));
        for (int w = 0; w < 4; ++w)
            waiters.emplace_back([&, w] {
                for (int i = w; i < 40; i += 4) got += hs[i].get();
            });
    }
    for (auto& t : waiters) t.join();
    CHECK_EQ(ran.load(), 40);
    CHECK_EQ(got.load(), 40);
}

// Issue 38.4b: shutdown() from one of the pool's own tasks returned true (OK) with 1 of 20
// accepted tasks run. It cannot wait for itself: it throws WSPOOL_EDEADLK, and the queued tasks
// still run (a shutdown from outside then closes the pool).
TEST(shutdown_from_its_own_task_throws_edeadlk) {
    wspool::pool p(fixed(1));
    std::promise<void> queued;
    std::atomic<int> ran{0};
    auto shutter = p.submit([&, all = queued.get_future().share()]() -> int {
        all.wait();
        try {
            p.shutdown();
            return WSPOOL_OK;
        } catch (const wspool::error& e) {
            return e.status();
        }
    });
    for (int i = 0; i < 19; ++i) p.post([&] { ran++; });
    queued.set_value();
    CHECK_EQ(shutter.get(), WSPOOL_EDEADLK);
    CHECK(p.shutdown());
    CHECK_EQ(ran.load(), 19);
}

TEST(executor_without_asio) {
    wspool::pool p(fixed(2));
    auto ex = p.get_executor();
    CHECK(ex == p.get_executor());
    CHECK(&ex.context() == &p);
    std::atomic<int> n{0};
    std::allocator<void> a;
    ex.post([&] { n++; }, a);
    ex.defer([&] { n++; }, a);
    // dispatch on a pool thread runs inline; off the pool it queues.
    auto t = p.submit([&] {
        bool inline_ran = false;
        ex.dispatch([&] { inline_ran = true; }, a);
        return inline_ran;
    });
    CHECK(t.get());
    CHECK(!p.running_in_this_pool());
    p.shutdown();
    CHECK_EQ(n.load(), 2);
    CHECK_THROWS(ex.post([] {}, a), const wspool::error&, e, e.status() == WSPOOL_ESHUTDOWN);
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "--child-unhandled") return child_unhandled();
    return th::run_all(argc, argv);
}
