// hello.cpp: the C++ quick start (docs/cpp.md): a pool, a task with a
// result, a task that throws, fire-and-forget posts in a group, parallel_for.
//   g++ -std=c++17 hello.cpp $(pkg-config --cflags --libs wspool) -pthread
#include <wspool.hpp>

#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <vector>

int main() {
    wspool::pool pool(wspool::config().min_threads(2).name("hello"));

    // A task with a result: get() waits (helping, on a pool thread).
    wspool::task<int> answer = pool.submit([](int x) { return x * 2; }, 21);
    std::printf("answer: %d\n", answer.get());

    // What a task throws comes back from get().
    auto failing = pool.submit([]() -> int { throw std::runtime_error("no luck"); });
    try {
        failing.get();
    } catch (const std::runtime_error& e) {
        std::printf("caught: %s\n", e.what());
    }

    // A group on the stack: run() many, wait() for all (first exception rethrown).
    std::atomic<long> ran{0};
    {
        wspool::group g(pool);
        for (int i = 0; i < 100000; ++i) g.run([&ran] { ran.fetch_add(1, std::memory_order_relaxed); });
        g.wait();
    }

    // Fork-join over an index range.
    std::vector<long> squares(1000);
    wspool::parallel_for(pool, size_t(0), squares.size(), size_t(64), [&](size_t i) { squares[i] = long(i * i); });
    ran += squares[999] == 998001;

    std::printf("ran %ld tasks\n", ran.load());
    return ran.load() == 100001 ? 0 : 1;
}
