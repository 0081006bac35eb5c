// A small harness for the C++ tests (tests/cpp/*.cpp): CHECK macros usable
// from any thread, a gate that holds workers, a watchdog that turns a hang
// into a failure (SIGALRM, WSPOOL_TEST_ALARM seconds, default 300), and a
// test registry. Nothing here measures time: waits are bounded only so that
// a deadlock fails instead of hanging.
#ifndef WSPOOL_TESTS_CPP_HARNESS_HPP
#define WSPOOL_TESTS_CPP_HARNESS_HPP

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace th {

inline std::atomic<int>& failed_checks() {
    static std::atomic<int> n{0};
    return n;
}
inline const char*& current_test() {
    static const char* name = "(none)";
    return name;
}

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            th::failed_checks()++;                                                        \
        }                                                                                 \
    } while (0)

#define CHECK_EQ(a, b)                                                                    \
    do {                                                                                  \
        long long va_ = (long long)(a), vb_ = (long long)(b);                             \
        if (va_ != vb_) {                                                                 \
            std::fprintf(stderr, "  %s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n",      \
                         __FILE__, __LINE__, #a, #b, va_, vb_);                           \
            th::failed_checks()++;                                                        \
        }                                                                                 \
    } while (0)

// CHECK_THROWS(expr, type, var, cond): expr throws `type` (bound to var) and cond holds.
#define CHECK_THROWS(expr, type, var, cond)                                               \
    do {                                                                                  \
        bool thrown_ = false;                                                             \
        try {                                                                             \
            (void)(expr);                                                                 \
        } catch (type var) {                                                              \
            thrown_ = true;                                                               \
            CHECK(cond);                                                                  \
        } catch (...) {                                                                   \
            std::fprintf(stderr, "  %s:%d: %s threw something else than %s\n", __FILE__,  \
                         __LINE__, #expr, #type);                                         \
            th::failed_checks()++;                                                        \
            thrown_ = true;                                                               \
        }                                                                                 \
        if (!thrown_) {                                                                   \
            std::fprintf(stderr, "  %s:%d: %s did not throw\n", __FILE__, __LINE__, #expr); \
            th::failed_checks()++;                                                        \
        }                                                                                 \
    } while (0)

/// Tasks pass it only once it is opened; `inside` counts who reached it.
struct gate {
    std::mutex m;
    std::condition_variable c;
    bool open_ = false;
    std::atomic<int> inside{0};
    void pass() {
        inside++;
        std::unique_lock<std::mutex> l(m);
        c.wait(l, [&] { return open_; });
    }
    void open() {
        std::lock_guard<std::mutex> l(m);
        open_ = true;
        c.notify_all();
    }
    /// Spins (yielding) until n tasks reached the gate; the watchdog bounds it.
    void wait_inside(int n) {
        while (inside.load() < n) std::this_thread::yield();
    }
};

/// Counts live copies of a callable's capture: constructed, destroyed.
struct tracker {
    std::atomic<int>* live;
    explicit tracker(std::atomic<int>* l) : live(l) { (*live)++; }
    tracker(const tracker& o) : live(o.live) { (*live)++; }
    tracker(tracker&& o) noexcept : live(o.live) { (*live)++; }
    ~tracker() { (*live)--; }
};

inline void on_alarm(int) {
    const char* n = current_test();
    const char msg[] = "\nWATCHDOG: a test hung (deadlock?) in ";
    ssize_t r = write(2, msg, sizeof msg - 1);
    r = write(2, n, std::strlen(n));
    r = write(2, "\n", 1);
    (void)r;
    _exit(70);
}

struct test_case {
    const char* name;
    void (*fn)();
};
inline std::vector<test_case>& registry() {
    static std::vector<test_case> r;
    return r;
}
struct registrar {
    registrar(const char* n, void (*f)()) { registry().push_back({n, f}); }
};
#define TEST(name)                                         \
    static void name();                                    \
    static th::registrar reg_##name(#name, &name);         \
    static void name()

/// Runs every test (or those whose name contains argv[1]); exit 1 on any failure.
inline int run_all(int argc, char** argv) {
    const char* env = std::getenv("WSPOOL_TEST_ALARM");
    std::signal(SIGALRM, on_alarm);
    alarm(env ? static_cast<unsigned>(std::atoi(env)) : 300u);
    int failed = 0, ran = 0;
    for (auto& t : registry()) {
        if (argc > 1 && !std::strstr(t.name, argv[1])) continue;
        current_test() = t.name;
        int before = failed_checks().load();
        t.fn();
        ++ran;
        bool ok = failed_checks().load() == before;
        if (!ok) ++failed;
        std::printf("%s %s\n", ok ? "ok  " : "FAIL", t.name);
        std::fflush(stdout);
    }
    std::printf("%d passed, %d failed\n", ran - failed, failed);
    return failed ? 1 : 0;
}

}  // namespace th

#endif
