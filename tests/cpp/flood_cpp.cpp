// The W1 flood through the C++ header, beside the same flood through the C
// API, for callgrind (make bench-cpp; tests/cpp/bench_callgrind.sh) and for
// valgrind's heap counts. Usage: flood_cpp VARIANT N
//
//   c          wspool_submit(pool, tiny, NULL): a C function, no argument
//   c_ex       wspool_submit_ex(pool, tiny, NULL, &opts, NULL) with an on_cancel:
//              what pool.post does under its callable (the like-for-like C peer)
//   c_handle   wspool_submit_ex(..., &handle) of the same C function, handles
//              kept in a reserved vector and released after the drain (the
//              C-API peer of cpp_submit)
//   cpp_post   pool.post([&counter] { ... }): a lambda capturing a reference
//   cpp_submit pool.submit([&counter] { ... }) into a reserved vector of
//              task<void> handles, released after the drain
//   asio_post  boost::asio::post(pool.get_executor(), [&counter] { ... })
//
// A foreign thread (main) submits N tiny tasks to 2 FIXED workers, then waits
// for the last. The client requests cut the run into phases as
// bench/callgrind/flood.c does (ZERO_STATS, dump "submit", dump "drain"), so
// bench/callgrind/report.py reads the files; a warm-up flood first touches
// every lazy path (and fills the C++ block cache). N = 0 skips the measured
// flood (the baseline run.sh-style subtraction uses it). WAVE > 0 submits in
// waves of WAVE tasks, each waited for (and its handles released) before the
// next: the steady state of a server, which valgrind's heap count reads
// (a flood keeps up to N tasks queued, and their memory, at once).
#include "wspool.hpp"

#include <boost/asio/post.hpp>
#include <semaphore.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {
std::atomic<long> left{0};
sem_t done;

inline void finish_one() {
    if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) sem_post(&done);
}
extern "C" void tiny(void*) { finish_one(); }

int flood(wspool::pool& pool, const std::string& v, long n, bool measured);

int waves(wspool::pool& pool, const std::string& v, long n, long wave) {
    for (long done_n = 0; done_n < n; done_n += wave)
        if (int rc = flood(pool, v, std::min(wave, n - done_n), false)) return rc;
    return 0;
}

int flood(wspool::pool& pool, const std::string& v, long n, bool measured) {
    if (n == 0) return 0;
    left.store(n);
    std::vector<wspool::task<void>> hs;
    std::vector<wspool::capi::wspool_task*> chs;
    if (v == "cpp_submit") hs.reserve(static_cast<size_t>(n));
    if (v == "c_handle") chs.reserve(static_cast<size_t>(n));
    auto ex = pool.get_executor();
    if (measured) CALLGRIND_ZERO_STATS;
    if (v == "c") {
        for (long i = 0; i < n; i++)
            if (wspool::capi::wspool_submit(pool.native_handle(), tiny, nullptr) != WSPOOL_OK) return 1;
    } else if (v == "c_ex") {
        using namespace wspool::capi;  // the _init macros name the C functions unqualified
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.on_cancel = tiny;
        for (long i = 0; i < n; i++)
            if (wspool::capi::wspool_submit_ex(pool.native_handle(), tiny, nullptr, &o, nullptr) != WSPOOL_OK) return 1;
    } else if (v == "c_handle") {
        for (long i = 0; i < n; i++) {
            wspool::capi::wspool_task* t = nullptr;
            if (wspool::capi::wspool_submit_ex(pool.native_handle(), tiny, nullptr, nullptr, &t) != WSPOOL_OK) return 1;
            chs.push_back(t);
        }
    } else if (v == "cpp_post") {
        for (long i = 0; i < n; i++) pool.post([] { finish_one(); });
    } else if (v == "cpp_submit") {
        for (long i = 0; i < n; i++) hs.push_back(pool.submit([] { finish_one(); }));
    } else if (v == "asio_post") {
        for (long i = 0; i < n; i++) boost::asio::post(ex, [] { finish_one(); });
    } else {
        std::fprintf(stderr, "unknown variant %s\n", v.c_str());
        return 2;
    }
    if (measured) CALLGRIND_DUMP_STATS_AT("submit");
    sem_wait(&done);
    if (measured) CALLGRIND_DUMP_STATS_AT("drain");
    for (wspool::capi::wspool_task* t : chs) wspool::capi::wspool_task_release(t);
    return 0;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s c|c_ex|c_handle|cpp_post|cpp_submit|asio_post N [WAVE]\n", argv[0]);
        return 2;
    }
    std::string v = argv[1];
    long n = std::atol(argv[2]);
    long wave = argc > 3 ? std::atol(argv[3]) : 0;
    sem_init(&done, 0, 0);
    int rc;
    {
        wspool::pool pool(wspool::config().min_threads(2).growth(wspool::growth::fixed));
        rc = flood(pool, v, 20000, false);  // warm-up
        if (rc == 0) rc = wave > 0 ? waves(pool, v, n, wave) : flood(pool, v, n, true);
    }
    std::printf("%s: %ld tasks\n", v.c_str(), n);
    return rc;
}
