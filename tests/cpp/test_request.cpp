// tests/cpp/test_request.cpp: per-request control through include/wspool.hpp
// (issue 29): priorities, deadlines, lanes and labels on pool, lane and
// completion-queue submissions, and cancelling a queued completion-queue
// submission. Run plain, under ASan+UBSan and under TSan (make test-cpp).
//
//   test_request [NAME-SUBSTRING]
#include "wspool.hpp"

#include "harness.hpp"

#include <string>

using namespace std::chrono_literals;

namespace {

wspool::config fixed(uint32_t n) { return wspool::config().min_threads(n).growth(wspool::growth::fixed); }

/// A pool of one thread, held at a gate until the test opens it: what is
/// submitted meanwhile waits in the queues, in the order the test chose.
struct held_pool {
    th::gate g;
    wspool::pool p{fixed(1)};
    held_pool() {
        p.post([this] { g.pass(); });
        g.wait_inside(1);
    }
    ~held_pool() { g.open(); }  // before p drains in its destructor
};

/// Appends its tag to a shared log when it runs.
struct order_log {
    std::mutex m;
    std::string log;
    auto task(char tag) {
        return [this, tag] {
            std::lock_guard<std::mutex> l(m);
            log += tag;
        };
    }
};

/// Records wspool::cancel_reason() when the last copy of a callable holding
/// it is destroyed unrun (moved-from copies record nothing).
struct reason_probe {
    std::atomic<int>* out;
    explicit reason_probe(std::atomic<int>* o) : out(o) {}
    reason_probe(reason_probe&& o) noexcept : out(std::exchange(o.out, nullptr)) {}
    reason_probe(const reason_probe&) = delete;
    ~reason_probe() {
        if (out) out->store(static_cast<int>(wspool::cancel_reason()));
    }
};

}  // namespace

TEST(priorities_order_queued_work) {
    held_pool h;
    order_log o;
    wspool::lane high_lane(h.p, 1, wspool::priority::high);
    std::vector<wspool::task<void>> ts;
    ts.push_back(h.p.submit_with(wspool::options().priority(wspool::priority::low), o.task('l')));
    for (int i = 0; i < 3; ++i) ts.push_back(h.p.submit(o.task('n')));
    for (int i = 0; i < 2; ++i) ts.push_back(h.p.submit_with(wspool::options().priority(wspool::priority::high), o.task('H')));
    // A lane's tasks wait at the lane's priority, whatever their options say.
    ts.push_back(high_lane.submit_with(wspool::options().priority(wspool::priority::low), o.task('L')));
    std::atomic<int> live{0};
    CHECK_THROWS(h.p.submit_with(wspool::options().priority(static_cast<wspool::priority>(2)), [tr = th::tracker(&live)] {}),
                 const wspool::error&, e, e.status() == WSPOOL_EINVAL && std::string(e.what()).find("priority") != std::string::npos);
    CHECK_EQ(live.load(), 0);  // refused: the callable was freed, never run
    h.g.open();
    for (auto& t : ts) t.get();
    // High work first (the lane's turn too), then normal; the low task last:
    // it stepped back behind the normal work that was queued.
    CHECK(o.log == "HHLnnnl");
    if (o.log != "HHLnnnl") std::fprintf(stderr, "  order: %s\n", o.log.c_str());
}

TEST(deadlines_expire_unrun_and_say_why) {
    held_pool h;
    std::atomic<int> ran{0}, live{0}, reason{-1};
    auto past = h.p.submit_with(wspool::options().deadline(std::chrono::steady_clock::now() - 1s),
                                [&, tr = th::tracker(&live)] { ran++; });
    auto at_once = h.p.submit_with(wspool::options().deadline_in(0ms), [&] { ran++; });
    auto raw = h.p.submit_with(wspool::options().deadline_ns(1), [&] { ran++; });
    auto later = h.p.submit_with(wspool::options().deadline_in(1h), [&] {
        ran++;
        return 7;
    });
    wspool::lane l(h.p, 2);
    auto in_lane =
        l.submit_with(wspool::options().deadline_ns(wspool::capi::wspool_now_ns() - 1), [&] { ran++; });
    h.p.post_with(wspool::options().deadline_ns(1), [&, probe = reason_probe(&reason)] { ran++; });
    // A waiter expires the task at its deadline, with the only worker still held.
    CHECK_THROWS(past.get(), const wspool::task_expired&, e, e.status() == WSPOOL_EEXPIRED);
    CHECK_EQ(live.load(), 0);  // its callable destroyed unrun
    CHECK(at_once.wait_for(0ms) == std::future_status::ready);
    CHECK(at_once.state() == wspool::task_state::expired);
    CHECK(!at_once.cancel());  // expired already
    CHECK_THROWS(at_once.get(), const wspool::task_cancelled&, e, e.status() == WSPOOL_EEXPIRED);
    h.g.open();
    CHECK_THROWS(raw.get(), const wspool::task_expired&, e, true);
    CHECK_THROWS(in_lane.get(), const wspool::task_expired&, e, true);
    CHECK_EQ(later.get(), 7);
    while (reason.load() < 0) std::this_thread::yield();  // the watchdog bounds it
    CHECK(reason.load() == static_cast<int>(wspool::task_state::expired));
    CHECK(wspool::cancel_reason() == wspool::task_state::cancelled);  // outside any drop
    CHECK(h.p.shutdown());
    CHECK_EQ(ran.load(), 1);
    CHECK_EQ(h.p.stats().expired, 5);
}

TEST(cancelled_task_says_cancelled_not_expired) {
    held_pool h;
    std::atomic<int> reason{-1};
    auto t = h.p.submit_with(wspool::options().deadline_in(1h), [probe = reason_probe(&reason)] {});
    CHECK(t.cancel());
    CHECK(reason.load() == static_cast<int>(wspool::task_state::cancelled));
    CHECK(t.state() == wspool::task_state::cancelled);
}

TEST(lane_runs_at_most_limit_and_lends_the_rest) {
    wspool::pool p(wspool::config().min_threads(2).max_threads(32));
    CHECK_THROWS(wspool::lane(p, 0), const wspool::error&, e, e.status() == WSPOOL_EINVAL);
    wspool::lane l(p, 2);
    CHECK_EQ(l.limit(), 2u);
    th::gate g;
    std::atomic<int> now{0}, most{0};
    std::vector<wspool::task<int>> ts;
    for (int i = 0; i < 12; ++i)
        ts.push_back(l.submit([&, i] {
            int n = ++now;
            for (int m = most.load(); n > m && !most.compare_exchange_weak(m, n);) {
            }
            {
                wspool::blocking_region r;  // counts against the lane, not only the pool
                g.pass();
            }
            now--;
            return i;
        }));
    g.wait_inside(2);
    // The pool lends threads to the blocked lane tasks; other work still runs.
    CHECK_EQ(p.submit([] { return 5; }).get(), 5);
    CHECK_EQ(now.load(), 2);
    g.open();
    int sum = 0;
    for (auto& t : ts) sum += t.get();
    CHECK_EQ(sum, 66);
    CHECK_EQ(most.load(), 2);
}

TEST(labels_show_in_the_dump) {
    wspool::pool p(fixed(2));
    th::gate g;
    std::string label = "resize-images";
    auto t = p.submit_with(wspool::options().label(label.c_str()), [&] { g.pass(); });
    label = "changed after the submission";  // it was copied
    g.wait_inside(1);
    std::string d = p.dump();
    g.open();
    t.get();
    CHECK(d.find("resize-images") != std::string::npos);
    if (d.find("resize-images") == std::string::npos) std::fprintf(stderr, "  dump:\n%s\n", d.c_str());
}

TEST(completion_queue_deadline_lane_priority_and_cancel) {
    held_pool h;
    wspool::lane l(h.p, 1);
    wspool::completion_queue cq(h.p);
    int expired = 0, cancelled = 0, ran = 0;
    std::atomic<int> live{0};
    cq.submit_with(wspool::options().deadline_ns(1), [tr = th::tracker(&live)] { return 1; },
                   [&](wspool::outcome<int> o) {
                       if (o.expired() && o.cancelled() && !o.has_value()) expired++;
                       CHECK_THROWS(o.get(), const wspool::task_expired&, e, e.status() == WSPOOL_EEXPIRED);
                   });
    wspool::cq_task c = cq.submit_cancellable(wspool::options().lane(l), [tr = th::tracker(&live)] { return 2; },
                                              [&](wspool::outcome<int> o) {
                                                  if (o.cancelled() && !o.expired()) cancelled++;
                                                  CHECK_THROWS(o.get(), const wspool::task_cancelled&, e,
                                                               e.status() == WSPOOL_ECANCELLED);
                                              });
    wspool::cq_task r = cq.submit_cancellable(wspool::options().priority(wspool::priority::high), [] { return 3; },
                                              [&](wspool::outcome<int> o) { ran += o.get(); });
    CHECK(c.state() == wspool::task_state::pending);
    CHECK(c.cancel());
    CHECK(!c.cancel());
    CHECK(c.state() == wspool::task_state::cancelled);
    // The cancelling call completed it: its done comes at this drain, while
    // the only worker is still held (nothing else can have finished).
    CHECK_EQ(cq.drain(), 1u);
    CHECK_EQ(cancelled, 1);
    // on_cancel belongs to the queue (done reports every ending): refused, freed.
    wspool::options bad;
    bad.raw().on_cancel = [](void*) {};
    CHECK_THROWS(cq.submit_with(bad, [tr = th::tracker(&live)] {}, [](wspool::outcome<void>) {}), const wspool::error&, e,
                 e.status() == WSPOOL_EINVAL);
    h.g.open();
    while (cq.pending()) cq.drain();
    CHECK_EQ(expired, 1);
    CHECK_EQ(ran, 3);
    CHECK(!r.cancel());  // it ran
    CHECK_EQ(live.load(), 0);
    wspool::cq_task moved = std::move(r);
    CHECK(moved.valid() && !r.valid());
    wspool::cq_task none;
    CHECK(!none.cancel());
}

TEST(cq_handle_released_before_done_and_close_cancels) {
    held_pool h;
    int cancelled = 0, total = 0;
    {
        wspool::completion_queue cq(h.p);
        for (int i = 0; i < 8; ++i) {
            // Handles dropped at once: the submissions stay, each done runs once.
            cq.submit_cancellable(wspool::options(), [] { return 1; }, [&](wspool::outcome<int> o) {
                total++;
                if (o.cancelled()) cancelled++;
            });
        }
        CHECK(!cq.close(WSPOOL_CQ_CLOSE_CANCEL, 0ms));  // closed; the work waits behind the gate
        h.g.open();
        CHECK(cq.close(WSPOOL_CQ_CLOSE_CANCEL));
    }
    CHECK_EQ(total, 8);
    CHECK_EQ(cancelled, 8);
}

int main(int argc, char** argv) { return th::run_all(argc, argv); }
