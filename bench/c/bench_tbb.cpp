// The W1-W5 and W7 workloads with oneTBB: BENCH_THREADS worker threads (default 2;
// global_control lifts TBB's default of cores-1 workers) in a task_arena of that concurrency with no
// slot reserved for the main thread, so W1/W3 submit from a foreign thread
// as with the other pools; W3 waits with a futex-backed std::atomic wait so
// the task is run by a worker, not inline. W2/W4 enter the arena with
// execute() (the idiomatic way: the main thread then works too).
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <atomic>
#include <vector>

extern "C" {
#include "common.h"
}

static std::atomic<long> counter{0};

/* warm_median's callback for a lambda. */
template <class F> static double call(void *f) { return (*static_cast<F *>(f))(); }

static long fib_tbb(int n) {
    if (n < 2) return n;
    long a = 0, b = 0;
    tbb::task_group g;
    g.run([&] { a = fib_tbb(n - 1); });
    b = fib_tbb(n - 2);
    g.wait();
    return a + b;
}

int main() {
    const int threads = bench_threads();
    tbb::global_control workers(tbb::global_control::max_allowed_parallelism, threads + 1);
    tbb::task_arena arena(threads, 0);
    std::atomic<int> done{0};

    // W1: enqueue from the foreign main thread, then wait for the count.
    uint64_t t0 = now_ns();
    for (int i = 0; i < W1_TASKS; i++)
        arena.enqueue([&] {
            if (counter.fetch_add(1, std::memory_order_relaxed) + 1 == W1_TASKS) {
                done.store(1);
                done.notify_one();
            }
        });
    done.wait(0);
    uint64_t t1 = now_ns();
    printf("W1_mtps %.2f\n", W1_TASKS / ((t1 - t0) / 1e9) / 1e6);
    report_idle();

    auto w2 = [&] {
        long r = 0;
        uint64_t a = now_ns();
        arena.execute([&] { r = fib_tbb(W2_FIB); });
        uint64_t b = now_ns();
        if (r != fib_seq(W2_FIB)) {
            fprintf(stderr, "fib wrong\n");
            exit(1);
        }
        return (b - a) / 1e6;
    };
    printf("W2_ms %.2f\n", warm_median(call<decltype(w2)>, &w2));

    std::vector<uint64_t> lat(W3_ROUNDS);
    for (int i = 0; i < W3_ROUNDS; i++) {
        std::atomic<int> flag{0};
        uint64_t a = now_ns();
        arena.enqueue([&] {
            flag.store(1);
            flag.notify_one();
        });
        flag.wait(0);
        lat[i] = now_ns() - a;
    }
    report_latency(lat.data(), W3_ROUNDS);

    auto w4 = [&] {
        counter = 0;
        uint64_t a = now_ns();
        arena.execute([&] {
            tbb::task_group roots;
            for (int i = 0; i < W4_ROOTS; i++)
                roots.run([] {
                    tbb::task_group kids;
                    for (int j = 0; j < W4_CHILDREN; j++)
                        kids.run([] { counter.fetch_add(1, std::memory_order_relaxed); });
                    kids.wait();
                });
            roots.wait();
        });
        uint64_t b = now_ns();
        if (counter.load() != (long)W4_ROOTS * W4_CHILDREN) {
            fprintf(stderr, "W4 count wrong\n");
            exit(1);
        }
        return W4_ROOTS * (W4_CHILDREN + 1.0) / ((b - a) / 1e9) / 1e6;
    };
    printf("W4_mtps %.2f\n", warm_median(call<decltype(w4)>, &w4));

    // W4 detached: roots enqueued from the main thread, each enqueueing its
    // children into the arena it runs in; nobody waits but for the count.
    auto w4d = [&] {
        counter = 0;
        done = 0;
        uint64_t a = now_ns();
        for (int i = 0; i < W4_ROOTS; i++)
            arena.enqueue([&done] {
                for (int j = 0; j < W4_CHILDREN; j++)
                    tbb::this_task_arena::enqueue([&done] {
                        if (counter.fetch_add(1, std::memory_order_relaxed) + 1 == (long)W4_ROOTS * W4_CHILDREN) {
                            done.store(1);
                            done.notify_one();
                        }
                    });
            });
        done.wait(0);
        return W4_ROOTS * (W4_CHILDREN + 1.0) / ((now_ns() - a) / 1e9) / 1e6;
    };
    printf("W4d_mtps %.2f\n", warm_median(call<decltype(w4d)>, &w4d));

    // W7: W7_PRODUCERS foreign threads enqueue into the arena at once.
    struct W7 {
        tbb::task_arena *arena;
        std::atomic<int> *done;
    } w7ctx{&arena, &done};
    counter = 0;
    done = 0;
    w7_producers w7;
    uint64_t w7_t0 = w7_start(
        &w7,
        [](void *p) {
            auto *c = static_cast<W7 *>(p);
            for (int i = 0; i < W7_TASKS_EACH; i++)
                c->arena->enqueue([d = c->done] {
                    if (counter.fetch_add(1, std::memory_order_relaxed) + 1 == (long)W7_PRODUCERS * W7_TASKS_EACH) {
                        d->store(1);
                        d->notify_one();
                    }
                });
        },
        &w7ctx);
    done.wait(0);
    report_w7(w7_t0, now_ns());
    w7_join(&w7);
    return 0;
}
