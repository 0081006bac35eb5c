// tests/cpp/test_alloc.cpp: what wspool.hpp allocates per small task, counted
// by replacing the global operator new (every C++ allocation of the process
// goes through it; the C library's own allocations are Rust's and not counted
// here: `make bench-cpp` compares whole-process heap counts under valgrind).
//
// Each kind of submission runs in waves (submit W tasks, wait for them),
// first to warm the block cache, then MEASURED waves: the C++ layer may
// allocate while the per-thread caches and the depot fill, but not per task.
// The blocks a wave can need at once are bounded whatever the schedule: the
// wave's W nodes, plus what each thread's cache may hold before it spills a
// batch (2 * batch_blocks - 1; 2 workers and the submitter). So the count
// over all MEASURED waves must stay below that bound (640), however many waves
// run; one allocation per task would be 51,200. Plain build only (ASan turns
// the cache off).
#include "wspool.hpp"

#include <boost/asio/post.hpp>

#include "harness.hpp"

namespace {
std::atomic<long> g_news{0};
}

void* operator new(std::size_t n) {
    g_news.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
    g_news.fetch_add(1, std::memory_order_relaxed);
    std::size_t al = static_cast<std::size_t>(a);
    if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {
constexpr int W = 256, WARM = 20, MEASURED = 200;
constexpr long BOUND = W + 3 * 2 * static_cast<long>(wspool::detail::batch_blocks);

/// Runs `wave(i)` WARM + MEASURED times; returns operator new calls during the measured ones.
template <class Wave>
long measure(const char* what, Wave wave) {
    for (int i = 0; i < WARM; ++i) wave();
    long before = g_news.load();
    for (int i = 0; i < MEASURED; ++i) wave();
    long n = g_news.load() - before;
    std::printf("  %-48s %6ld operator new calls in %d tasks: %.4f per task\n", what, n, W * MEASURED,
                double(n) / (W * MEASURED));
    return n;
}

void wait_for(std::atomic<int>& done, int n) {
    while (done.load(std::memory_order_acquire) < n) std::this_thread::yield();
}
}  // namespace

TEST(small_lambdas_allocate_nothing_per_task) {
    wspool::pool p(wspool::config().min_threads(2).growth(wspool::growth::fixed));
    std::atomic<int> done{0};
    long a = 1, b = 2, c = 3;
    long* pa = &a;
    long* pb = &b;
    long* pc = &c;

    long post = measure("pool.post([3 pointers] {...})", [&] {
        done = 0;
        for (int i = 0; i < W; ++i)
            p.post([pa, pb, &done] {
                (void)pa;
                (void)pb;
                done.fetch_add(1, std::memory_order_release);
            });
        wait_for(done, W);
    });
    CHECK(post < BOUND);

    std::vector<wspool::task<long>> hs;
    hs.reserve(W);
    long submit = measure("pool.submit([...] { return long; }).get()", [&] {
        for (int i = 0; i < W; ++i) hs.push_back(p.submit([pa, pb, pc, i] { return *pa + *pb + *pc + i; }));
        for (auto& h : hs) h.get();
        hs.clear();
    });
    CHECK(submit < BOUND);

    long grp = measure("group.run([...] {...}); group.wait()", [&] {
        wspool::group g(p);
        for (int i = 0; i < W; ++i) g.run([&done, i] { done.fetch_add(i & 1, std::memory_order_relaxed); });
        g.wait();
    });
    CHECK(grp < BOUND);

    wspool::serial_queue q(p);
    long ser = measure("serial_queue.post([...] {...})", [&] {
        done = 0;
        for (int i = 0; i < W; ++i) q.post([&done] { done.fetch_add(1, std::memory_order_release); });
        wait_for(done, W);
    });
    CHECK(ser < BOUND);

    auto ex = p.get_executor();
    long asio_post = measure("boost::asio::post(pool.get_executor(), ...)", [&] {
        done = 0;
        for (int i = 0; i < W; ++i) boost::asio::post(ex, [&done] { done.fetch_add(1, std::memory_order_release); });
        wait_for(done, W);
    });
    CHECK(asio_post < BOUND);

    {
        wspool::completion_queue cq(p);
        long cqn = measure("completion_queue.submit(work, done); drain()", [&] {
            int got = 0;
            for (int i = 0; i < W; ++i) cq.submit([i] { return i; }, [&got](wspool::outcome<int> o) { got += o.get() >= 0; });
            while (got < W) cq.drain();
        });
        CHECK(cqn < BOUND);
    }

    long joins = measure("join(a, b) inside a task (W per wave)", [&] {
        p.submit([&] {
             for (int i = 0; i < W; ++i) wspool::join(p, [&] { done++; }, [&] { done++; });
         }).get();
    });
    // One submit per wave (its node is recycled); the joins allocate nothing.
    CHECK(joins < BOUND);
}

int main(int argc, char** argv) { return th::run_all(argc, argv); }
