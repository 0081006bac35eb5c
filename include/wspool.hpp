// wspool.hpp: a header-only C++17 layer over the C API (libwspool.h).
//
// No second library and no change to the C ABI: link libwspool as for C
// (pkg-config wspool, or CMake's wspool::wspool_cpp) and include this header.
// docs/cpp.md is the guide; in short:
//
//   wspool::pool pool(wspool::config().min_threads(4));
//   auto t = pool.submit([](int x) { return x * 2; }, 21);   // wspool::task<int>
//   int v = t.get();                  // rethrows what the task threw
//   pool.post([] { work(); });        // fire and forget
//   wspool::parallel_for(pool, 0, n, 1024, [&](size_t i) { a[i] += 1; });
//   asio::post(pool.get_executor(), handler);   // Networking-TS executor
//   int r = co_await pool.run(f);     // C++20: resumes where the task ran
//   int r = co_await wspool::async_run(pool, f, asio::use_awaitable);  // resumes on the
//                                     // coroutine's executor (include Asio before this header)
//
// Exceptions never cross into the library: every function the library calls
// (task, on_cancel, thread hook, completion-queue work/done/signal) is a
// noexcept trampoline here that catches everything. What it caught goes to
// the handle that can receive it (task<T>::get, group::wait, join,
// parallel_for/reduce, completion_queue::drain); a task with no such handle
// (post, executor post/defer, thread hooks) hands it to the handler set by
// wspool::set_exception_handler. The default handler prints the task's name
// (the callable's type) and the exception to stderr, then std::terminate():
// an exception nobody can observe is a bug, as for a std::thread.
//
// Allocation: a callable of up to detail::block_size bytes (with its
// bookkeeping) lives in a block recycled through a per-thread cache, so a
// steady stream of small tasks allocates nothing here beyond what the C API
// does (tests/cpp/test_alloc.cpp counts it). Larger callables use operator new.
#ifndef WSPOOL_HPP
#define WSPOOL_HPP

// Below C++17 the rest of this header would fail in dozens of places; say why
// in one line instead, and compile nothing else. MSVC keeps __cplusplus at
// 199711L unless /Zc:__cplusplus is given: _MSVC_LANG has the standard there.
#if defined(_MSVC_LANG)
#define WSPOOL_HPP_STD _MSVC_LANG
#else
#define WSPOOL_HPP_STD __cplusplus
#endif
#if WSPOOL_HPP_STD < 201703L
#error "wspool.hpp needs C++17 or later (-std=c++17, /std:c++17); from C or older C++, include libwspool.h instead"
#else

#ifdef LIBWSPOOL_H
#error "wspool.hpp declares the C API itself, in namespace wspool::capi: include wspool.hpp instead of libwspool.h (a global type named wspool would clash with namespace wspool)"
#endif
// What libwspool.h includes, first, so that it does not include them inside
// the namespace below.
#include <stddef.h>
#include <stdint.h>

// The C API, declared inside namespace wspool::capi: libwspool.h's global
// `typedef struct wspool wspool;` would clash with namespace wspool. The
// functions keep C linkage (the same symbols as for C); the WSPOOL_* macros
// are global as ever. C++ code calls them as wspool::capi::wspool_submit(...)
// (or unqualified inside namespace wspool, through the using-directive).
namespace wspool {
namespace capi {
#include "libwspool.h"
}  // namespace capi
using namespace capi;
}  // namespace wspool

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

// C++20 coroutines (pool.run, below): with -std=c++20 or later and a compiler
// that implements them. C++17 code sees none of it.
#if WSPOOL_HPP_STD >= 202002L && defined(__cpp_impl_coroutine) && __has_include(<coroutine>)
#include <coroutine>
#define WSPOOL_HPP_CORO 1
#endif

#if defined(__GNUG__) && __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define WSPOOL_HPP_CXXABI 1
#endif

#if defined(__cpp_rtti) || defined(__GXX_RTTI)
#define WSPOOL_HPP_RTTI 1
#endif

// Under AddressSanitizer the block cache is off by default, so ASan sees every
// task node's lifetime (a recycled block would hide a use after free).
#ifndef WSPOOL_HPP_RECYCLE
#if defined(__SANITIZE_ADDRESS__)
#define WSPOOL_HPP_RECYCLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WSPOOL_HPP_RECYCLE 0
#endif
#endif
#endif
#ifndef WSPOOL_HPP_RECYCLE
#define WSPOOL_HPP_RECYCLE 1
#endif

namespace wspool {

// ------------------------------------------------------------------ errors --

/// A failed C call: `status()` is the WSPOOL_* code, `what()` names the call,
/// the status and wspool_last_error()'s message.
class error : public std::runtime_error {
public:
    error(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
    int status() const noexcept { return status_; }

private:
    int status_;
};

/// The task (or a task of a group, a completion-queue submission) was dropped
/// unrun: wspool::task::cancel, a CANCEL shutdown, DISCARD_OLDEST.
class task_cancelled : public error {
public:
    task_cancelled() : error(WSPOOL_ECANCELLED, "wspool: the task was cancelled before it ran") {}

protected:
    task_cancelled(int status, const std::string& what) : error(status, what) {}
};

#ifdef WSPOOL_EEXPIRED
/// The task's deadline (wspool_submit_opts.deadline_ns) passed before it
/// started: it never ran. A task_cancelled, with status WSPOOL_EEXPIRED.
class task_expired : public task_cancelled {
public:
    task_expired() : task_cancelled(WSPOOL_EEXPIRED, "wspool: the task's deadline passed before it started") {}
};
#endif

namespace detail {
[[noreturn]] inline void throw_status(int status, const char* call) {
    std::string msg = std::string(call) + ": " + wspool_strerror(status);
    const char* last = wspool_last_error();
    if (last && *last) msg += std::string(" (") + last + ")";
    if (status == WSPOOL_ECANCELLED) throw task_cancelled();
#ifdef WSPOOL_EEXPIRED
    if (status == WSPOOL_EEXPIRED) throw task_expired();
#endif
    throw error(status, msg);
}
inline void check(int status, const char* call) {
    if (status != WSPOOL_OK) throw_status(status, call);
}
}  // namespace detail

// -------------------------------------------------- unobserved exceptions --

/// Receives an exception thrown by a task nobody can observe (post, executor,
/// thread hooks, a group destroyed unwaited) and the task's name. Runs on the
/// thread that ran the task; it must not throw (it is called from a noexcept
/// trampoline, so a throw ends in std::terminate).
using exception_handler = void (*)(std::exception_ptr error, const char* task_name);

namespace detail {
inline std::atomic<exception_handler>& handler_slot() noexcept {
    static std::atomic<exception_handler> h{nullptr};
    return h;
}

/// "std::runtime_error: boom", or "an exception of type int" for a type without what().
inline std::string describe(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
#if WSPOOL_HPP_RTTI && WSPOOL_HPP_CXXABI
        int st = 0;
        char* n = abi::__cxa_demangle(typeid(x).name(), nullptr, nullptr, &st);
        std::string out = std::string(st == 0 && n ? n : typeid(x).name()) + ": " + x.what();
        std::free(n);
        return out;
#else
        return std::string("std::exception: ") + x.what();
#endif
    } catch (...) {
#if WSPOOL_HPP_CXXABI
        std::type_info* t = abi::__cxa_current_exception_type();
        if (t) {
            int st = 0;
            char* n = abi::__cxa_demangle(t->name(), nullptr, nullptr, &st);
            std::string out = std::string("an exception of type ") + (st == 0 && n ? n : t->name());
            std::free(n);
            return out;
        }
#endif
        return "an exception of unknown type";
    }
}

template <class F>
const char* type_name() noexcept {
#if WSPOOL_HPP_RTTI
    return typeid(F).name();  // mangled; demangled by the default handler
#else
    return "a task";
#endif
}

inline std::string demangle(const char* n) {
#if WSPOOL_HPP_CXXABI
    int st = 0;
    char* d = abi::__cxa_demangle(n, nullptr, nullptr, &st);
    std::string out = st == 0 && d ? d : n;
    std::free(d);
    return out;
#else
    return n;
#endif
}

[[noreturn]] inline void default_handler(std::exception_ptr e, const char* task_name) {
    std::string what, who;
    try {
        what = describe(e);
        who = demangle(task_name);
    } catch (...) {
    }
    std::fprintf(stderr,
                 "wspool: task %s threw %s, and nothing can receive it (no task handle): std::terminate "
                 "(wspool::set_exception_handler changes this)\n",
                 who.c_str(), what.c_str());
    std::fflush(stderr);
    std::terminate();
}

/// Called inside a catch (...) of a trampoline.
inline void unhandled(const char* task_name) noexcept {
    std::exception_ptr e = std::current_exception();
    exception_handler h = handler_slot().load(std::memory_order_acquire);
    if (h)
        h(e, task_name);  // a throw here ends in std::terminate: we are noexcept
    else
        default_handler(e, task_name);
}
}  // namespace detail

/// Sets the handler for exceptions nobody can observe; nullptr restores the
/// default (print, then std::terminate). Returns the previous one.
inline exception_handler set_exception_handler(exception_handler h) noexcept {
    return detail::handler_slot().exchange(h, std::memory_order_acq_rel);
}

// ------------------------------------------------------------ block cache --

namespace detail {
/// Task nodes up to this size (callable + bookkeeping) are recycled.
constexpr std::size_t block_size = 128;
constexpr std::size_t block_align = alignof(std::max_align_t);
constexpr std::size_t batch_blocks = 64;   // moved to/from the depot at once
constexpr std::size_t depot_max_batches = 64;

struct free_block {
    free_block* next;
    free_block* next_batch;  // in the depot: the next batch (first block of each batch only)
};

/// Batches of free blocks shared by all threads: a submitter that only
/// allocates and a worker that only frees meet here, one lock per batch.
/// Leaked on purpose: a pool thread may return blocks after static destructors ran.
struct depot {
    std::mutex m;
    free_block* batches = nullptr;
    std::size_t n = 0;
    static depot& get() {
        static depot* d = new depot;
        return *d;
    }
};

struct thread_cache {
    free_block* head = nullptr;
    std::size_t n = 0;
    ~thread_cache() {
        while (head) {
            free_block* b = head;
            head = b->next;
            ::operator delete(static_cast<void*>(b));
        }
    }
    void* alloc() {
        if (!head) refill();
        if (!head) return ::operator new(block_size);
        free_block* b = head;
        head = b->next;
        --n;
        return b;
    }
    void release(void* p) noexcept {
        free_block* b = static_cast<free_block*>(p);
        b->next = head;
        head = b;
        if (++n >= 2 * batch_blocks) spill();
    }
    void refill() {
        depot& d = depot::get();
        std::lock_guard<std::mutex> g(d.m);
        if (!d.batches) return;
        head = d.batches;
        d.batches = head->next_batch;
        --d.n;
        n = batch_blocks;
    }
    void spill() noexcept {
        // The first batch_blocks blocks go to the depot as one batch.
        free_block* first = head;
        free_block* last = head;
        for (std::size_t i = 1; i < batch_blocks; ++i) last = last->next;
        head = last->next;
        last->next = nullptr;
        n -= batch_blocks;
        depot& d = depot::get();
        {
            std::lock_guard<std::mutex> g(d.m);
            if (d.n < depot_max_batches) {
                first->next_batch = d.batches;
                d.batches = first;
                ++d.n;
                return;
            }
        }
        while (first) {
            free_block* b = first;
            first = b->next;
            ::operator delete(static_cast<void*>(b));
        }
    }
};

inline thread_cache& cache() noexcept {
    static thread_local thread_cache c;
    return c;
}

template <class T>
constexpr bool recycled = WSPOOL_HPP_RECYCLE && sizeof(T) <= block_size && alignof(T) <= block_align &&
                          sizeof(T) >= sizeof(free_block);

template <class T, class... A>
T* make_node(A&&... a) {
    void* mem;
    if constexpr (recycled<T>)
        mem = cache().alloc();
    else
        mem = ::operator new(sizeof(T), std::align_val_t(alignof(T)));
    try {
        return ::new (mem) T(std::forward<A>(a)...);
    } catch (...) {
        if constexpr (recycled<T>)
            cache().release(mem);
        else
            ::operator delete(mem, std::align_val_t(alignof(T)));
        throw;
    }
}

template <class T>
void free_node(T* n) noexcept {
    n->~T();
    if constexpr (recycled<T>)
        cache().release(n);
    else
        ::operator delete(static_cast<void*>(n), std::align_val_t(alignof(T)));
}

/// The pool whose task the calling thread is running (for executor::dispatch).
inline const capi::wspool*& current_pool() noexcept {
    static thread_local const capi::wspool* p = nullptr;
    return p;
}
struct running_on {
    const capi::wspool* prev;
    explicit running_on(const capi::wspool* p) noexcept : prev(current_pool()) { current_pool() = p; }
    ~running_on() { current_pool() = prev; }
    running_on(const running_on&) = delete;
    running_on& operator=(const running_on&) = delete;
};

/// Which C pool a group or serial queue submits to: null once the C++ pool
/// was destroyed (after wspool_destroy returned, when no task of it runs any
/// more), so that their submissions then fail with WSPOOL_ESHUTDOWN, as the
/// C API's do, instead of touching a freed pool.
struct pool_ref {
    std::atomic<capi::wspool*> p;
    explicit pool_ref(capi::wspool* w) : p(w) {}
    capi::wspool* get(const char* who) const {
        capi::wspool* w = p.load(std::memory_order_acquire);
        if (!w) throw error(WSPOOL_ESHUTDOWN, std::string(who) + ": the pool was destroyed");
        return w;
    }
};

/// Binds args to f by decayed copy: what submit(f, args...) runs.
template <class F, class... A>
auto bind(F&& f, A&&... a) {
    if constexpr (sizeof...(A) == 0) {
        return std::forward<F>(f);
    } else {
        return [fn = std::forward<F>(f), tup = std::make_tuple(std::forward<A>(a)...)]() mutable -> decltype(auto) {
            return std::apply(fn, std::move(tup));
        };
    }
}
}  // namespace detail

// ----------------------------------------------------------------- config --

enum class growth { adaptive = WSPOOL_GROWTH_ADAPTIVE, scale_first = WSPOOL_GROWTH_SCALE_FIRST,
                    queue_first = WSPOOL_GROWTH_QUEUE_FIRST, fixed = WSPOOL_GROWTH_FIXED };
enum class reject { abort = WSPOOL_REJECT_ABORT, caller_runs = WSPOOL_REJECT_CALLER_RUNS,
                    block = WSPOOL_REJECT_BLOCK, discard_oldest = WSPOOL_REJECT_DISCARD_OLDEST };
enum class shutdown_mode { drain = WSPOOL_SHUTDOWN_DRAIN, cancel = WSPOOL_SHUTDOWN_CANCEL };

/// Pool configuration, set through chained calls:
/// `wspool::config().min_threads(2).max_threads(8).name("io")`. Unset fields
/// keep the C defaults (wspool_config_init).
class config {
public:
    config() { wspool_config_init(&c_); }
    config& name(std::string n) { name_ = std::move(n); return *this; }
    config& min_threads(uint32_t v) { c_.min_threads = v; return *this; }
    config& max_threads(uint32_t v) { c_.max_threads = v; return *this; }
    config& queue_capacity(uint32_t v) { c_.queue_capacity = v; return *this; }
    config& growth(::wspool::growth g) { c_.growth = static_cast<int>(g); return *this; }
    config& reject(::wspool::reject r) { c_.reject = static_cast<int>(r); return *this; }
    config& keep_alive(std::chrono::milliseconds d) { c_.keep_alive_ms = static_cast<uint32_t>(d.count()); return *this; }
    config& spin_max_us(uint32_t v) { c_.spin_max_us = v; return *this; }
    config& block_timeout(std::chrono::milliseconds d) { c_.block_timeout_ms = static_cast<uint32_t>(d.count()); return *this; }
    config& stack_size(std::size_t v) { c_.stack_size = v; return *this; }
    config& thread_nice(uint32_t v) { c_.thread_nice = v; return *this; }
    /// Runs on each worker thread before its first task / as it exits, with
    /// the worker's index. An exception goes to the exception handler.
    config& on_thread_start(std::function<void(uint32_t)> f) { start_ = std::move(f); return *this; }
    config& on_thread_stop(std::function<void(uint32_t)> f) { stop_ = std::move(f); return *this; }
    /// The C struct, for fields this class has no setter for (yet).
    wspool_config& raw() noexcept { return c_; }
    const wspool_config& raw() const noexcept { return c_; }

private:
    friend class pool;
    wspool_config c_;
    std::string name_;
    std::function<void(uint32_t)> start_, stop_;
};

/// A snapshot of the pool's counters (the C struct, sized as compiled).
struct stats : wspool_stats {
    stats() noexcept : wspool_stats() { wspool_stats_init(static_cast<wspool_stats*>(this)); }
};

enum class task_state {
    pending = WSPOOL_TASK_PENDING,
    running = WSPOOL_TASK_RUNNING,
    done = WSPOOL_TASK_DONE,
    cancelled = WSPOOL_TASK_CANCELLED,
#ifdef WSPOOL_TASK_EXPIRED
    expired = WSPOOL_TASK_EXPIRED,
#endif
};

/// While a callable dropped unrun is destroyed (the header destroys it in
/// the task's on_cancel): task_state::expired when the task's deadline passed
/// before it started, task_state::cancelled for every other drop. Elsewhere
/// task_state::cancelled. Lets a capture's destructor answer for its request.
inline task_state cancel_reason() noexcept { return static_cast<task_state>(wspool_cancel_reason()); }

namespace detail {
/// A wait's status that means "dropped unrun": cancelled, or expired.
inline bool dropped(int st) noexcept {
#ifdef WSPOOL_EEXPIRED
    if (st == WSPOOL_EEXPIRED) return true;
#endif
    return st == WSPOOL_ECANCELLED;
}
/// wspool_task_cancel: true when this call dropped the task unrun.
inline bool cancel_task(wspool_task* h) {
    int st = wspool_task_cancel(h);
    if (st == WSPOOL_OK) return true;
    if (st == WSPOOL_EBUSY || dropped(st)) return false;
    throw_status(st, "wspool_task_cancel");
}
inline task_state state_of(wspool_task* h) {
    int st = wspool_task_state(h);
    if (st < 0) throw_status(st, "wspool_task_state");
    return static_cast<task_state>(st);
}
}  // namespace detail

class pool;
class group;
class lane;
class serial_queue;

/// A submission's priority (wspool_submit_opts.priority). It orders work
/// submitted from threads that are not the pool's (a pool thread's task keeps
/// its deque's order); a lane's tasks take the lane's priority.
enum class priority : int {
    /// After the normal work queued before it; then at most WSPOOL_PRIORITY_LOW_MAX_OVERTAKES later tasks start first (never starved).
    low = WSPOOL_PRIORITY_LOW,
    normal = WSPOOL_PRIORITY_NORMAL,
    /// Before every queued task, at most WSPOOL_PRIORITY_HIGH_BURST in a row per worker.
    high = WSPOOL_PRIORITY_HIGH,
};

namespace detail {
/// A steady_clock time on wspool_now_ns()'s clock: the distance from now
/// added to the library's now, whatever clock steady_clock reads on this
/// platform. A time already past gives 1 (long past; 0 means no deadline).
inline uint64_t to_deadline_ns(std::chrono::steady_clock::time_point t) noexcept {
    auto now = std::chrono::steady_clock::now();
    if (t <= now) return 1;
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(t - now).count();
    return wspool_now_ns() + static_cast<uint64_t>(left);
}
}  // namespace detail

/// Per-submission options (wspool_submit_opts); fields issue after issue are
/// added at the end of the C struct, which keeps its defaults here.
class options {
public:
    options() { wspool_submit_opts_init(&o_); }
    /// Through the pool's global queue even from a pool thread.
    options& global(bool on = true) {
        o_.flags = on ? (o_.flags | WSPOOL_SUBMIT_GLOBAL) : (o_.flags & ~uint32_t(WSPOOL_SUBMIT_GLOBAL));
        return *this;
    }
    /// See wspool::priority; on a lane the lane's priority is used instead.
    options& priority(::wspool::priority p) noexcept {
        o_.priority = static_cast<int>(p);
        return *this;
    }
    /// A task not started by `t` never runs: it ends expired (task::get throws
    /// wspool::task_expired, a completion queue's outcome is expired(), the
    /// pool's stats count it) and its callable is destroyed unrun, once.
    options& deadline(std::chrono::steady_clock::time_point t) noexcept {
        o_.deadline_ns = detail::to_deadline_ns(t);
        return *this;
    }
    /// deadline(now + d).
    template <class Rep, class Period>
    options& deadline_in(std::chrono::duration<Rep, Period> d) noexcept {
        return deadline(std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(d));
    }
    /// A deadline on wspool_now_ns()'s clock (0: none), for code that computes it there.
    options& deadline_ns(uint64_t ns) noexcept {
        o_.deadline_ns = ns;
        return *this;
    }
    /// What the task "is", shown by wspool_dump on the thread running it. The
    /// string is copied when the task is submitted: it must live until then
    /// (a string literal always does). Meant as a small set of names.
    options& label(const char* name) noexcept {
        o_.label = name;
        return *this;
    }
    /// The task runs on this lane (or serial queue), which must be of the same
    /// pool; what lane::submit_with does.
    inline options& lane(const ::wspool::lane& l) noexcept;
    wspool_submit_opts& raw() noexcept { return o_; }
    const wspool_submit_opts& raw() const noexcept { return o_; }

private:
    wspool_submit_opts o_;
};

// ------------------------------------------------------------------- task --

namespace detail {
template <class T>
struct task_state_base {
    // Two owners: the task<T> handle and the queued job (run or on_cancel).
    std::atomic<int> refs{2};
    void (*destroy)(task_state_base*) noexcept;
    std::exception_ptr error;
    std::optional<std::conditional_t<std::is_void_v<T>, std::monostate, T>> value;
    void unref() noexcept {
        // acq_rel: the last owner sees every write of the other (the result,
        // the callable's destruction) before it frees the node.
        if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(this);
    }
};

template <class T, class F>
struct task_node : task_state_base<T> {
    const capi::wspool* pool;
    std::optional<F> fn;
    template <class G>
    task_node(const capi::wspool* p, G&& g) : pool(p), fn(std::in_place, std::forward<G>(g)) {
        this->destroy = [](task_state_base<T>* b) noexcept { free_node(static_cast<task_node*>(b)); };
    }
    static void run(void* arg) noexcept {
        auto* n = static_cast<task_node*>(arg);
        {
            running_on on(n->pool);
            try {
                if constexpr (std::is_void_v<T>) {
                    std::invoke(*n->fn);
                    n->value.emplace();
                } else {
                    n->value.emplace(std::invoke(*n->fn));
                }
            } catch (...) {
                n->error = std::current_exception();
            }
            n->fn.reset();  // the captures die on the worker, before the waiter wakes
        }
        n->unref();
    }
    static void cancelled(void* arg) noexcept {
        auto* n = static_cast<task_node*>(arg);
        n->fn.reset();
        n->unref();
    }
};

/// A fire-and-forget job: nothing can observe its exception.
template <class F>
struct post_node {
    const capi::wspool* pool;
    F fn;
    template <class G>
    post_node(const capi::wspool* p, G&& g) : pool(p), fn(std::forward<G>(g)) {}
    static void run(void* arg) noexcept {
        auto* n = static_cast<post_node*>(arg);
        {
            running_on on(n->pool);
            try {
                std::invoke(n->fn);
            } catch (...) {
                unhandled(type_name<F>());
            }
        }
        free_node(n);
    }
    static void cancelled(void* arg) noexcept { free_node(static_cast<post_node*>(arg)); }
};

/// The default options with N's on_cancel, filled once per node type (a
/// submission then copies nothing and calls no init function).
template <class N>
const wspool_submit_opts* defaults_for() noexcept {
    static const wspool_submit_opts o = [] {
        wspool_submit_opts x;
        wspool_submit_opts_init(&x);
        x.on_cancel = &N::cancelled;  // a CANCEL shutdown frees the node
        return x;
    }();
    return &o;
}

/// Submits a post_node for f; on refusal frees it and throws.
template <class F>
void post_on(capi::wspool* p, const wspool_submit_opts* opts, F&& f) {
    using N = post_node<std::decay_t<F>>;
    N* n = make_node<N>(p, std::forward<F>(f));
    wspool_submit_opts local;
    if (!opts) {
        opts = defaults_for<N>();
    } else {
        local = *opts;
        local.on_cancel = &N::cancelled;  // a CANCEL shutdown frees the node
        opts = &local;
    }
    int st = wspool_submit_ex(p, &N::run, n, opts, nullptr);
    if (st != WSPOOL_OK) {
        free_node(n);  // refused: ours again, and nothing ran
        throw_status(st, "wspool_submit_ex");
    }
}
}  // namespace detail

/// A submitted task's handle: move-only, like std::future. Destroying it does
/// not wait for the task (which still runs) and drops what it would have
/// returned or thrown.
template <class T>
class task {
public:
    task() noexcept = default;
    task(task&& o) noexcept : h_(std::exchange(o.h_, nullptr)), s_(std::exchange(o.s_, nullptr)) {}
    task& operator=(task&& o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, nullptr);
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    task(const task&) = delete;
    task& operator=(const task&) = delete;
    ~task() { reset(); }

    bool valid() const noexcept { return s_ != nullptr; }

    /// Waits (helping, on a pool thread), then returns the result or rethrows
    /// the task's exception; wspool::task_cancelled if it was dropped unrun.
    /// The handle is empty afterwards.
    T get() {
        task keep(std::move(*this));  // empty afterwards, however this returns
        keep.wait();
        if (keep.s_->error) std::rethrow_exception(keep.s_->error);
        if constexpr (!std::is_void_v<T>) return std::move(*keep.s_->value);
    }

    /// Waits until the task ran or was dropped (untimed: helps on a pool
    /// thread); throws wspool::task_cancelled when it was dropped unrun
    /// (wspool::task_expired, a task_cancelled, when its deadline passed).
    void wait() const {
        if (!s_) throw error(WSPOOL_EINVAL, "wspool::task: no task (moved from, or get() already called)");
        detail::check(wspool_task_wait(h_, -1), "wspool_task_wait");  // task_cancelled when dropped unrun
    }

    /// std::future_status::ready once it ran or was cancelled (get() then
    /// returns or throws at once), else timeout. Timed waits never help.
    template <class Rep, class Period>
    std::future_status wait_for(std::chrono::duration<Rep, Period> d) const {
        if (!s_) throw error(WSPOOL_EINVAL, "wspool::task: no task");
        auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
        int st = wspool_task_wait(h_, ms < 0 ? 0 : static_cast<int64_t>(ms));
        if (st == WSPOOL_OK || detail::dropped(st)) return std::future_status::ready;
        if (st == WSPOOL_ETIMEDOUT) return std::future_status::timeout;
        detail::throw_status(st, "wspool_task_wait");
    }

    /// true when this call cancelled the pending task (its callable destroyed
    /// unrun); false once it started, or when another canceller came first.
    bool cancel() { return s_ && detail::cancel_task(h_); }

    task_state state() const {
        if (!s_) throw error(WSPOOL_EINVAL, "wspool::task: no task");
        return detail::state_of(h_);
    }

    wspool_task* native_handle() const noexcept { return h_; }

    /// Internal (used by the submit functions): adopts a C handle and its state.
    static task adopt_(wspool_task* h, detail::task_state_base<T>* s) noexcept { return task(h, s); }

private:
    task(wspool_task* h, detail::task_state_base<T>* s) noexcept : h_(h), s_(s) {}
    void reset() noexcept {
        if (h_) wspool_task_release(h_);
        if (s_) s_->unref();
        h_ = nullptr;
        s_ = nullptr;
    }
    wspool_task* h_ = nullptr;
    detail::task_state_base<T>* s_ = nullptr;
};

/// A handle that can cancel a submission while it waits, and read its state
/// (wspool::async_run with one, completion_queue::submit_cancellable as a
/// cq_task). Move-only; destroying it leaves the submission as it is (its
/// completion still comes, once).
class cancel_handle {
public:
    cancel_handle() noexcept = default;
    explicit cancel_handle(wspool_task* h) noexcept : h_(h) {}
    cancel_handle(cancel_handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    cancel_handle& operator=(cancel_handle&& o) noexcept {
        if (this != &o) {
            wspool_task_release(h_);
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }
    cancel_handle(const cancel_handle&) = delete;
    cancel_handle& operator=(const cancel_handle&) = delete;
    ~cancel_handle() { wspool_task_release(h_); }

    bool valid() const noexcept { return h_ != nullptr; }
    /// true when this call dropped the work unrun: its completion then reports
    /// wspool::task_cancelled. false once the work started (it completes as
    /// usual), after it expired, or when it was cancelled already.
    bool cancel() { return h_ && detail::cancel_task(h_); }
    /// The work's state; the completion may come a moment before it reads done.
    task_state state() const {
        if (!h_) throw error(WSPOOL_EINVAL, "wspool::cancel_handle: no handle");
        return detail::state_of(h_);
    }
    /// Releases the handle now (the submission is left as it is).
    void reset() noexcept { wspool_task_release(std::exchange(h_, nullptr)); }
    wspool_task* native_handle() const noexcept { return h_; }

private:
    wspool_task* h_ = nullptr;
};

namespace detail {
template <class F>
auto submit_on(capi::wspool* p, const wspool_submit_opts* opts, F&& f) -> task<std::invoke_result_t<std::decay_t<F>&>> {
    using T = std::invoke_result_t<std::decay_t<F>&>;
    static_assert(!std::is_reference_v<T>, "wspool::task<T>: a task cannot return a reference (return a pointer)");
    using N = task_node<T, std::decay_t<F>>;
    N* n = make_node<N>(p, std::forward<F>(f));
    wspool_submit_opts o;
    if (opts) {
        o = *opts;
        o.on_cancel = &N::cancelled;
        opts = &o;
    } else {
        opts = defaults_for<N>();
    }
    wspool_task* h = nullptr;
    int st = wspool_submit_ex(p, &N::run, n, opts, &h);
    if (st != WSPOOL_OK) {
        free_node(n);  // refused: neither run nor on_cancel will be called
        throw_status(st, "wspool_submit_ex");
    }
    return task<T>::adopt_(h, n);
}
}  // namespace detail

// ------------------------------------------------------------------- pool --

class executor;

/// A pool (RAII over wspool_create/wspool_destroy). The destructor drains:
/// every accepted task runs, then the threads are joined. Task handles,
/// groups and serial queues may outlive it (their submissions then throw
/// wspool::error with WSPOOL_ESHUTDOWN).
class pool {
public:
    pool() : pool(config()) {}
    explicit pool(const config& c) : hooks_(std::make_unique<hooks>()) {
        wspool_config cfg = c.c_;
        if (!c.name_.empty()) cfg.name = c.name_.c_str();  // copied by wspool_create
        hooks_->start = c.start_;
        hooks_->stop = c.stop_;
        if (hooks_->start) cfg.on_thread_start = &hooks::on_start;
        if (hooks_->stop) cfg.on_thread_stop = &hooks::on_stop;
        if (hooks_->start || hooks_->stop) cfg.hook_ctx = hooks_.get();
        ref_ = std::make_shared<detail::pool_ref>(nullptr);
        detail::check(wspool_create(&cfg, &p_), "wspool_create");
        ref_->p.store(p_, std::memory_order_release);
    }
    pool(pool&& o) noexcept
        : p_(std::exchange(o.p_, nullptr)), hooks_(std::move(o.hooks_)), ref_(std::move(o.ref_)) {}
    pool& operator=(pool&&) = delete;
    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;
    ~pool() {
        wspool_destroy(p_);
        if (ref_) ref_->p.store(nullptr, std::memory_order_release);
    }

    /// Fire and forget. Throws wspool::error (WSPOOL_EREJECTED, WSPOOL_ESHUTDOWN)
    /// when refused; then f was not called. An exception f throws goes to the
    /// exception handler.
    template <class F, class... A>
    void post(F&& f, A&&... a) {
        detail::post_on(p_, nullptr, detail::bind(std::forward<F>(f), std::forward<A>(a)...));
    }
    template <class F, class... A>
    void post_with(const options& o, F&& f, A&&... a) {
        detail::post_on(p_, &o.raw(), detail::bind(std::forward<F>(f), std::forward<A>(a)...));
    }

    /// Submits f(a...) and returns its handle; get() returns what it returned
    /// or rethrows what it threw.
    template <class F, class... A>
    auto submit(F&& f, A&&... a) {
        return detail::submit_on(p_, nullptr, detail::bind(std::forward<F>(f), std::forward<A>(a)...));
    }
    template <class F, class... A>
    auto submit_with(const options& o, F&& f, A&&... a) {
        return detail::submit_on(p_, &o.raw(), detail::bind(std::forward<F>(f), std::forward<A>(a)...));
    }

#if WSPOOL_HPP_CORO
    /// C++20: `co_await pool.run(f, args...)` runs f(args...) on the pool and
    /// gives its result, or rethrows what it threw (wspool::task_cancelled
    /// when it was dropped unrun; wspool::error when the pool refused it).
    /// Submitted when awaited; see wspool::run_awaitable.
    template <class F, class... A>
    auto run(F&& f, A&&... a);
    template <class F, class... A>
    auto run_with(const options& o, F&& f, A&&... a);
#endif

    /// Refuses new tasks, then drains or cancels; false on timeout (the shutdown carries on).
    /// From one of the pool's own tasks it cannot wait for itself: it begins the shutdown and
    /// throws wspool::error with status() WSPOOL_EDEADLK (true would claim every accepted task
    /// ran, and the caller's own task has not finished); the threads finish and exit on their own.
    bool shutdown(shutdown_mode m = shutdown_mode::drain,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) {
        int st = wspool_shutdown(p_, static_cast<int>(m), timeout.count() < 0 ? -1 : timeout.count());
        if (st == WSPOOL_ETIMEDOUT) return false;
        detail::check(st, "wspool_shutdown");
        return true;
    }

    ::wspool::stats stats() const {
        ::wspool::stats s;
        detail::check(wspool_stats_get(p_, &s), "wspool_stats_get");
        return s;
    }

    /// The stats as OpenMetrics text (ending in "# EOF\n").
    std::string openmetrics() const {
        std::string out(1024, '\0');
        for (;;) {
            int64_t n = wspool_stats_openmetrics(p_, out.data(), out.size());
            if (n < 0) detail::throw_status(static_cast<int>(n), "wspool_stats_openmetrics");
            if (static_cast<uint64_t>(n) < out.size()) {
                out.resize(static_cast<std::size_t>(n));
                return out;
            }
            out.assign(static_cast<std::size_t>(n) + 1, '\0');
        }
    }

    /// The snapshot report of wspool_dump (docs/diagnosis.md): what every
    /// thread is doing (with its task's label), every queue, the monitor's
    /// recent decisions. A sample taken while the pool runs.
    std::string dump() const {
        std::string out(4096, '\0');
        for (;;) {
            std::size_t needed = 0;
            detail::check(wspool_dump(p_, out.data(), out.size(), &needed), "wspool_dump");
            if (needed <= out.size()) {
                out.resize(needed - 1);
                return out;
            }
            out.assign(needed + 1024, '\0');  // the next report may be a little longer
        }
    }

    /// 1 while any completion queue of the pool is overloaded.
    bool overloaded() const noexcept { return wspool_overloaded(p_) == 1; }

    /// True on a thread running one of this pool's tasks (through this header).
    bool running_in_this_pool() const noexcept { return detail::current_pool() == p_; }

    inline executor get_executor() noexcept;
    capi::wspool* native_handle() const noexcept { return p_; }

private:
    struct hooks {
        std::function<void(uint32_t)> start, stop;
        static void on_start(void* ctx, uint32_t i) noexcept {
            try {
                static_cast<hooks*>(ctx)->start(i);
            } catch (...) {
                detail::unhandled("wspool::config::on_thread_start");
            }
        }
        static void on_stop(void* ctx, uint32_t i) noexcept {
            try {
                static_cast<hooks*>(ctx)->stop(i);
            } catch (...) {
                detail::unhandled("wspool::config::on_thread_stop");
            }
        }
    };
    capi::wspool* p_ = nullptr;
    // The hooks' address is the C pool's hook_ctx: on the heap, so moving
    // the pool keeps it; freed after wspool_destroy joined every thread.
    std::unique_ptr<hooks> hooks_;
    std::shared_ptr<detail::pool_ref> ref_;
    friend class group;
    friend class lane;
};

// --------------------------------------------------------------- executor --

/// A Networking-TS executor (context, on_work_started/finished, dispatch, post,
/// defer) over a pool: Boost.Asio (1.66 on, Boost 1.74's included) accepts it in
/// asio::post/dispatch/defer, bind_executor and executor_work_guard (not
/// asio::strand, which needs an asio::execution_context: use a serial_queue,
/// which occupies no worker while it waits). post and defer queue the function (from a pool task, on that
/// thread's own deque, as every submission from a pool thread); dispatch runs it at once on a thread running
/// one of this pool's tasks, else queues it. An exception a function throws
/// goes to the exception handler. The pool must outlive its executors' uses,
/// as an io_context must.
class executor {
public:
    explicit executor(pool& p) noexcept : p_(&p) {}
    pool& context() const noexcept { return *p_; }
    void on_work_started() const noexcept {}
    void on_work_finished() const noexcept {}
    template <class F, class Alloc>
    void post(F&& f, const Alloc&) const {
        detail::post_on(p_->native_handle(), nullptr, std::forward<F>(f));
    }
    template <class F, class Alloc>
    void defer(F&& f, const Alloc&) const {
        detail::post_on(p_->native_handle(), nullptr, std::forward<F>(f));
    }
    template <class F, class Alloc>
    void dispatch(F&& f, const Alloc& a) const {
        if (p_->running_in_this_pool()) {
            std::decay_t<F> tmp(std::forward<F>(f));
            std::move(tmp)();
        } else {
            post(std::forward<F>(f), a);
        }
    }
    friend bool operator==(const executor& a, const executor& b) noexcept { return a.p_ == b.p_; }
    friend bool operator!=(const executor& a, const executor& b) noexcept { return a.p_ != b.p_; }

private:
    pool* p_;
};

inline executor pool::get_executor() noexcept { return executor(*this); }

// ------------------------------------------------------------------ group --

namespace detail {
/// What a group or join keeps of its tasks' failures: the first exception.
struct first_error {
    std::atomic<bool> claimed{false};
    std::exception_ptr error;
    std::atomic<bool> any_cancelled{false};
    void capture() noexcept {
        // Only the first thrower writes `error`; the waiter reads it after the
        // wait returned, which the library orders after the task.
        if (!claimed.exchange(true, std::memory_order_acq_rel)) error = std::current_exception();
    }
    bool failed() const noexcept { return claimed.load(std::memory_order_acquire); }
    /// Rethrows (once) what was captured; clears it.
    void rethrow() {
        if (claimed.load(std::memory_order_acquire)) {
            std::exception_ptr e = std::move(error);
            error = nullptr;
            claimed.store(false, std::memory_order_release);
            std::rethrow_exception(e);
        }
        if (any_cancelled.exchange(false, std::memory_order_acq_rel)) throw task_cancelled();
    }
};

template <class F>
struct group_node {
    const capi::wspool* pool;
    first_error* errs;
    F fn;
    template <class G>
    group_node(const capi::wspool* p, first_error* e, G&& g) : pool(p), errs(e), fn(std::forward<G>(g)) {}
    static void run(void* arg) noexcept {
        auto* n = static_cast<group_node*>(arg);
        {
            running_on on(n->pool);
            try {
                std::invoke(n->fn);
            } catch (...) {
                n->errs->capture();
            }
        }
        // Freed before returning: the group's wait (and fini) return only
        // after this function did, so `errs` and the captures are gone by then.
        free_node(n);
    }
    static void cancelled(void* arg) noexcept {
        auto* n = static_cast<group_node*>(arg);
        n->errs->any_cancelled.store(true, std::memory_order_release);
        free_node(n);
    }
};
}  // namespace detail

/// A task group placed in its own storage (wspool_group_init: no allocation
/// for the group). run() adds tasks; wait() waits for all of them (helping on
/// a pool thread) and rethrows the first exception one threw. The destructor
/// waits too (wspool_group_fini); an exception nobody waited for goes to the
/// exception handler then (or is dropped while unwinding). Not movable: the
/// library holds its address.
class group {
public:
    explicit group(pool& p) : pool_(p.ref_) {
        detail::check(wspool_group_init(&storage_, p.native_handle(), &g_), "wspool_group_init");
    }
    group(const group&) = delete;
    group& operator=(const group&) = delete;
    ~group() {
        wspool_group_fini(g_);
        if (errs_.failed() && std::uncaught_exceptions() == 0) {
            try {
                std::rethrow_exception(errs_.error);
            } catch (...) {
                detail::unhandled("a task of a wspool::group destroyed without wait()");
            }
        }
    }

    template <class F, class... A>
    void run(F&& f, A&&... a) {
        run_with(options(), std::forward<F>(f), std::forward<A>(a)...);
    }
    template <class F, class... A>
    void run_with(const options& o, F&& f, A&&... a) {
        capi::wspool* p = pool_->get("wspool::group::run");
        auto b = detail::bind(std::forward<F>(f), std::forward<A>(a)...);
        using N = detail::group_node<decltype(b)>;
        N* n = detail::make_node<N>(p, &errs_, std::move(b));
        wspool_submit_opts opts = o.raw();
        opts.group = g_;
        opts.on_cancel = &N::cancelled;
        int st = wspool_submit_ex(p, &N::run, n, &opts, nullptr);
        if (st != WSPOOL_OK) {
            detail::free_node(n);
            detail::throw_status(st, "wspool_submit_ex (group)");
        }
    }

    /// Waits for every task, then rethrows the first exception (once), or
    /// wspool::task_cancelled when a task was dropped unrun.
    void wait() {
        detail::check(wspool_group_wait(g_, -1), "wspool_group_wait");
        errs_.rethrow();
    }
    /// false on timeout; true (and rethrows as wait() does) once all finished.
    template <class Rep, class Period>
    bool wait_for(std::chrono::duration<Rep, Period> d) {
        auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
        int st = wspool_group_wait(g_, ms < 0 ? 0 : static_cast<int64_t>(ms));
        if (st == WSPOOL_ETIMEDOUT) return false;
        detail::check(st, "wspool_group_wait");
        errs_.rethrow();
        return true;
    }
    wspool_group* native_handle() const noexcept { return g_; }

private:
    std::shared_ptr<detail::pool_ref> pool_;
    wspool_group_storage storage_;
    wspool_group* g_ = nullptr;
    detail::first_error errs_;
};

// ------------------------------------------------------------------- join --

namespace detail {
template <class F>
struct join_side {
    F* fn;
    const capi::wspool* pool;
    std::exception_ptr error;
    static void run(void* arg) noexcept {
        auto* s = static_cast<join_side*>(arg);
        running_on on(s->pool);
        try {
            std::invoke(*s->fn);
        } catch (...) {
            s->error = std::current_exception();
        }
    }
};
}  // namespace detail

/// Runs a() on the caller and b() on the pool (or the caller, if nobody took
/// it), returning when both are done; no allocation on a pool thread. Rethrows
/// a's exception, else b's (both always ran).
template <class A, class B>
void join(pool& p, A&& a, B&& b) {
    detail::join_side<std::remove_reference_t<A>> sa{&a, p.native_handle(), nullptr};
    detail::join_side<std::remove_reference_t<B>> sb{&b, p.native_handle(), nullptr};
    int st = wspool_join(p.native_handle(), &decltype(sa)::run, &sa, &decltype(sb)::run, &sb);
    detail::check(st, "wspool_join");
    if (sa.error) std::rethrow_exception(sa.error);
    if (sb.error) std::rethrow_exception(sb.error);
}

// ------------------------------------------------------ parallel algorithms --

namespace detail {
template <class I, class F>
void parallel_for_rec(pool& p, I first, I last, I grain, F& f, std::atomic<bool>& stop) {
    if (stop.load(std::memory_order_relaxed)) return;
    if (last - first <= grain) {
        try {
            for (I i = first; i < last; ++i) f(i);
        } catch (...) {
            stop.store(true, std::memory_order_relaxed);
            throw;
        }
        return;
    }
    I mid = first + (last - first) / 2;
    join(p, [&] { parallel_for_rec(p, first, mid, grain, f, stop); },
         [&] { parallel_for_rec(p, mid, last, grain, f, stop); });
}
}  // namespace detail

/// f(i) for every i in [first, last), split in halves down to `grain` indices
/// through join (fork-join, no allocation on a pool thread; the caller takes
/// part). The first exception stops the chunks not yet started and is
/// rethrown once every started chunk finished.
template <class I, class F>
void parallel_for(pool& p, I first, I last, I grain, F&& f) {
    static_assert(std::is_integral_v<I>, "wspool::parallel_for: an integral index type");
    if (!(first < last)) return;
    if (grain < 1) grain = 1;
    std::atomic<bool> stop{false};
    detail::parallel_for_rec(p, first, last, grain, f, stop);
}

/// Reduce over a group: [first, last) cut into chunks of `grain`, each chunk
/// folded by chunk(lo, hi, identity) -> T as a task of a group placed on the
/// caller's stack, then the chunk results combined left to right (so combine
/// need not be commutative). The caller helps while waiting (on a pool thread
/// it runs the group's tasks itself). Rethrows the first exception.
template <class I, class T, class Chunk, class Combine>
T parallel_reduce(pool& p, I first, I last, I grain, T identity, Chunk&& chunk, Combine&& combine) {
    static_assert(std::is_integral_v<I>, "wspool::parallel_reduce: an integral index type");
    if (!(first < last)) return identity;
    if (grain < 1) grain = 1;
    std::size_t n = static_cast<std::size_t>((last - first + grain - 1) / grain);
    std::vector<std::optional<T>> parts(n);
    {
        group g(p);
        for (std::size_t k = 0; k < n; ++k) {
            I lo = first + static_cast<I>(k) * grain;
            I hi = (last - lo > grain) ? lo + grain : last;
            g.run([&, k, lo, hi] { parts[k].emplace(chunk(lo, hi, identity)); });
        }
        g.wait();
    }
    T acc = identity;
    for (auto& v : parts) acc = combine(std::move(acc), std::move(*v));
    return acc;
}

// ----------------------------------------------------------- serial queue --

namespace detail {
#if defined(__SANITIZE_THREAD__)
#define WSPOOL_HPP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WSPOOL_HPP_TSAN 1
#endif
#endif
#if WSPOOL_HPP_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif
/// Under TSan, wraps a serial task so that TSan sees the queue's order: the
/// library (not instrumented) runs turn N+1 after turn N returned, but does
/// not report that edge, so TSan would flag a serial task's writes read by
/// the next turn. Elsewhere the callable as is.
/// A lane of more than one (q null) runs its tasks side by side: no edge.
template <class F>
auto serial_turn(wspool_serial* q, F&& f) {
#if WSPOOL_HPP_TSAN
    return [q, g = std::forward<F>(f)]() mutable -> decltype(auto) {
        if (q) __tsan_acquire(q);
        struct rel {
            wspool_serial* q;
            ~rel() {
                if (q) __tsan_release(q);
            }
        } r{q};
        return g();
    };
#else
    (void)q;
    return std::forward<F>(f);
#endif
}
}  // namespace detail

/// A queue with a concurrency limit (wspool_lane_create): FIFO, at most
/// limit() of its tasks running at a time; its queued tasks occupy no worker,
/// a task blocking inside it counts against the lane, lanes take their turns
/// fairly, and every task of the lane waits at the lane's priority.
/// Destroying the lane leaves its pending tasks to run, in order.
class lane {
public:
    /// Throws wspool::error (WSPOOL_EINVAL) for a limit of 0.
    lane(pool& p, uint32_t limit, ::wspool::priority prio = ::wspool::priority::normal) : pool_(p.ref_), limit_(limit) {
        detail::check(wspool_lane_create(p.native_handle(), limit, static_cast<int>(prio), &s_), "wspool_lane_create");
    }
    lane(lane&& o) noexcept : pool_(std::move(o.pool_)), s_(std::exchange(o.s_, nullptr)), limit_(o.limit_) {}
    lane& operator=(lane&&) = delete;
    lane(const lane&) = delete;
    lane& operator=(const lane&) = delete;
    ~lane() { wspool_serial_destroy(s_); }

    template <class F, class... A>
    void post(F&& f, A&&... a) {
        post_with(options(), std::forward<F>(f), std::forward<A>(a)...);
    }
    /// With a deadline or a label (the options' priority is the lane's).
    template <class F, class... A>
    void post_with(const options& o, F&& f, A&&... a) {
        wspool_submit_opts so = o.raw();
        so.serial = s_;
        detail::post_on(pool_->get("wspool::lane::post"), &so, turn(detail::bind(std::forward<F>(f), std::forward<A>(a)...)));
    }
    template <class F, class... A>
    auto submit(F&& f, A&&... a) {
        return submit_with(options(), std::forward<F>(f), std::forward<A>(a)...);
    }
    template <class F, class... A>
    auto submit_with(const options& o, F&& f, A&&... a) {
        wspool_submit_opts so = o.raw();
        so.serial = s_;
        return detail::submit_on(pool_->get("wspool::lane::submit"), &so,
                                 turn(detail::bind(std::forward<F>(f), std::forward<A>(a)...)));
    }
    uint32_t limit() const noexcept { return limit_; }
    wspool_serial* native_handle() const noexcept { return s_; }

protected:
    struct serial_tag {};
    lane(pool& p, serial_tag) : pool_(p.ref_), limit_(1) {
        detail::check(wspool_serial_create(p.native_handle(), &s_), "wspool_serial_create");
    }

private:
    template <class F>
    auto turn(F&& f) {
        return detail::serial_turn(limit_ == 1 ? s_ : nullptr, std::forward<F>(f));
    }
    std::shared_ptr<detail::pool_ref> pool_;
    wspool_serial* s_ = nullptr;
    uint32_t limit_;
};

inline options& options::lane(const ::wspool::lane& l) noexcept {
    o_.serial = l.native_handle();
    return *this;
}

/// FIFO, at most one of its tasks running at a time (wspool_serial_*): a
/// lane of 1. Destroying the queue leaves its pending tasks to run, in order.
class serial_queue : public lane {
public:
    explicit serial_queue(pool& p) : lane(p, serial_tag{}) {}
};

// ---------------------------------------------------------- blocking region --

/// RAII wspool_blocking_begin/end: the pool lends a thread while this lives
/// (no-op off the pool).
class blocking_region {
public:
    blocking_region() noexcept { wspool_blocking_begin(); }
    ~blocking_region() { wspool_blocking_end(); }
    blocking_region(const blocking_region&) = delete;
    blocking_region& operator=(const blocking_region&) = delete;
};

/// f() inside a blocking region.
template <class F>
decltype(auto) blocking(F&& f) {
    blocking_region r;
    return std::forward<F>(f)();
}

// ------------------------------------------------------- completion queue --

template <class T, class W, class D>
struct detail_cq_node;

/// What a completion-queue submission came to, handed to its done callable on
/// the loop's thread: a value, an exception, or cancelled (never ran; expired()
/// too when that was because its deadline passed).
template <class T>
class outcome {
public:
    bool cancelled() const noexcept { return cancelled_; }
    bool expired() const noexcept { return expired_; }
    bool has_value() const noexcept { return !cancelled_ && !error_; }
    std::exception_ptr error() const noexcept { return error_; }
    /// The value; rethrows the work's exception, or throws wspool::task_cancelled
    /// (wspool::task_expired when it expired).
    std::add_lvalue_reference_t<T> get() {
        if (expired_) throw task_expired();
        if (cancelled_) throw task_cancelled();
        if (error_) std::rethrow_exception(error_);
        if constexpr (!std::is_void_v<T>) return *value_;
    }

private:
    template <class, class, class>
    friend struct detail_cq_node;
    bool cancelled_ = false;
    bool expired_ = false;
    std::exception_ptr error_;
    std::optional<std::conditional_t<std::is_void_v<T>, std::monostate, T>> value_;
};

template <class T, class W, class D>
struct detail_cq_node {
    const capi::wspool* pool;
    std::exception_ptr* done_error;  // the queue's slot for an exception a done threw
    W work;
    D done;
    outcome<T> out;
    template <class W2, class D2>
    detail_cq_node(const capi::wspool* p, std::exception_ptr* de, W2&& w, D2&& d)
        : pool(p), done_error(de), work(std::forward<W2>(w)), done(std::forward<D2>(d)) {}
    static void run(void* arg) noexcept {
        auto* n = static_cast<detail_cq_node*>(arg);
        detail::running_on on(n->pool);
        try {
            if constexpr (std::is_void_v<T>) {
                std::invoke(n->work);
                n->out.value_.emplace();
            } else {
                n->out.value_.emplace(std::invoke(n->work));
            }
        } catch (...) {
            n->out.error_ = std::current_exception();
        }
    }
    static void finished(void* arg, int status) noexcept {
        auto* n = static_cast<detail_cq_node*>(arg);
        if (status != WSPOOL_CQ_RAN) n->out.cancelled_ = true;
        if (status == WSPOOL_CQ_EXPIRED) n->out.expired_ = true;
        try {
            std::invoke(n->done, std::move(n->out));
        } catch (...) {
            // Handed to drain()/close(), which rethrow it on return.
            if (!*n->done_error) *n->done_error = std::current_exception();
        }
        detail::free_node(n);
    }
};

enum class cq_signal { high_water = WSPOOL_CQ_SIGNAL_HIGH_WATER, low_water = WSPOOL_CQ_SIGNAL_LOW_WATER,
                       overloaded = WSPOOL_CQ_SIGNAL_OVERLOADED, recovered = WSPOOL_CQ_SIGNAL_RECOVERED };

/// A completion-queue submission's handle (completion_queue::submit_cancellable):
/// cancel() before the work starts, and done gets a cancelled() outcome at the
/// next drain. Move-only; destroying it leaves the submission as it is (its
/// done still runs once).
class cq_task : public cancel_handle {
public:
    using cancel_handle::cancel_handle;
};

/// Completion-queue options (wspool_cq_opts) with callables for wake and signals.
class cq_options {
public:
    cq_options() { wspool_cq_opts_init(&o_); }
    cq_options& cap(uint32_t v) { o_.cap = v; return *this; }
    cq_options& high_water(uint32_t v) { o_.high_water = v; return *this; }
    cq_options& low_water(uint32_t v) { o_.low_water = v; return *this; }
    cq_options& overload_target_us(uint32_t v) { o_.overload_target_us = v; return *this; }
    cq_options& overload_interval_us(uint32_t v) { o_.overload_interval_us = v; return *this; }
    cq_options& global(bool on = true) {
        o_.flags = on ? (o_.flags | WSPOOL_CQ_GLOBAL) : (o_.flags & ~uint32_t(WSPOOL_CQ_GLOBAL));
        return *this;
    }
    /// Wakes the loop instead of the queue's fd; runs on any thread, must not throw
    /// (an exception goes to the exception handler).
    cq_options& wake(std::function<void()> f) { wake_ = std::move(f); return *this; }
    /// Signals, on the draining thread.
    cq_options& on_signal(std::function<void(cq_signal)> f) { signal_ = std::move(f); return *this; }
    wspool_cq_opts& raw() noexcept { return o_; }

private:
    friend class completion_queue;
    wspool_cq_opts o_;
    std::function<void()> wake_;
    std::function<void(cq_signal)> signal_;
};

/// A completion queue (wspool_cq_*): work runs on the pool, its done callable
/// runs on the thread that calls drain() (the event loop's), with an outcome<T>.
/// Not movable (the library holds its address for wake and signals). The
/// destructor closes it with DRAIN if close() was not called: every done runs
/// there; never destroy it on a pool thread.
class completion_queue {
public:
    completion_queue(pool& p, cq_options o = cq_options()) : pool_(p.native_handle()), wake_(std::move(o.wake_)),
                                                            signal_(std::move(o.signal_)) {
        if (wake_) {
            o.o_.wake = &completion_queue::on_wake;
            o.o_.wake_ctx = this;
        }
        if (signal_) {
            o.o_.on_signal = &completion_queue::on_sig;
            o.o_.signal_ctx = this;
        }
        detail::check(wspool_cq_create(pool_, &o.o_, &cq_), "wspool_cq_create");
    }
    completion_queue(const completion_queue&) = delete;
    completion_queue& operator=(const completion_queue&) = delete;
    ~completion_queue() {
        if (cq_) wspool_cq_close(cq_, WSPOOL_CQ_CLOSE_DRAIN, -1);
    }

    /// Runs work() on the pool; then done(outcome) on the draining thread,
    /// exactly once. Throws wspool::error (WSPOOL_EREJECTED, WSPOOL_ESHUTDOWN)
    /// when refused: then neither runs.
    template <class W, class D>
    void submit(W&& work, D&& done) {
        submit_node(nullptr, nullptr, std::forward<W>(work), std::forward<D>(done));
    }
    /// submit() with options: a deadline (a submission not started by then
    /// never runs and its done gets an expired() outcome), a priority, a lane
    /// (options::lane), a label, global().
    template <class W, class D>
    void submit_with(const options& o, W&& work, D&& done) {
        submit_node(&o.raw(), nullptr, std::forward<W>(work), std::forward<D>(done));
    }
    /// submit_with() that also returns a handle for cancelling the submission
    /// while it waits (a client that hung up): cq_task::cancel() before the
    /// work starts means it never runs, and done gets a cancelled() outcome at
    /// the next drain. One allocation more than submit_with.
    template <class W, class D>
    cq_task submit_cancellable(const options& o, W&& work, D&& done) {
        wspool_task* h = nullptr;
        submit_node(&o.raw(), &h, std::forward<W>(work), std::forward<D>(done));
        return cq_task(h);
    }

    /// Runs up to max (0 = all) done callables here; returns how many ran.
    /// Rethrows the first exception a done (or signal) callable threw, after
    /// the batch (the others still ran).
    std::size_t drain(uint32_t max = 0) {
        int n = wspool_cq_drain(cq_, max);
        rethrow_done();
        if (n < 0) detail::throw_status(n, "wspool_cq_drain");
        return static_cast<std::size_t>(n);
    }
    /// Closes: every remaining done runs here. false on timeout (still open for drain()).
    bool close(int mode = WSPOOL_CQ_CLOSE_DRAIN, std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) {
        if (!cq_) return true;
        int st = wspool_cq_close(cq_, mode, timeout.count() < 0 ? -1 : timeout.count());
        if (st == WSPOOL_OK) cq_ = nullptr;
        rethrow_done();
        if (st == WSPOOL_ETIMEDOUT) return false;
        detail::check(st, "wspool_cq_close");
        return true;
    }
    int fd() const noexcept { return wspool_cq_fd(cq_); }
    std::size_t pending() const noexcept { return wspool_cq_pending(cq_); }
    bool overloaded() const noexcept { return wspool_cq_overloaded(cq_) == 1; }
    wspool_cq* native_handle() const noexcept { return cq_; }

private:
    template <class W, class D>
    void submit_node(const wspool_submit_opts* o, wspool_task** handle, W&& work, D&& done) {
        using T = std::invoke_result_t<std::decay_t<W>&>;
        using N = detail_cq_node<T, std::decay_t<W>, std::decay_t<D>>;
        N* n = detail::make_node<N>(pool_, &done_error_, std::forward<W>(work), std::forward<D>(done));
        int st = handle ? wspool_cq_submit_task(cq_, &N::run, &N::finished, n, o, handle)
                        : wspool_cq_submit_ex(cq_, &N::run, &N::finished, n, o);
        if (st != WSPOOL_OK) {
            detail::free_node(n);  // refused: neither work nor done will run
            detail::throw_status(st, handle ? "wspool_cq_submit_task" : "wspool_cq_submit_ex");
        }
    }
    void rethrow_done() {
        if (done_error_) {
            std::exception_ptr e = std::move(done_error_);
            done_error_ = nullptr;
            std::rethrow_exception(e);
        }
    }
    static void on_wake(void* ctx) noexcept {
        try {
            static_cast<completion_queue*>(ctx)->wake_();
        } catch (...) {
            detail::unhandled("wspool::cq_options::wake");
        }
    }
    static void on_sig(void* ctx, int s) noexcept {
        auto* q = static_cast<completion_queue*>(ctx);
        try {
            q->signal_(static_cast<cq_signal>(s));
        } catch (...) {
            if (!q->done_error_) q->done_error_ = std::current_exception();
        }
    }
    capi::wspool* pool_;
    wspool_cq* cq_ = nullptr;
    std::function<void()> wake_;
    std::function<void(cq_signal)> signal_;
    std::exception_ptr done_error_;  // the draining thread's only
};

// ------------------------------------------------------- continuations --

namespace detail {
/// What a task came to, handed to its continuation: a value, or the
/// exception to rethrow (the task's own, task_cancelled / task_expired when
/// it was dropped unrun, an error when the pool refused it).
template <class T>
struct result {
    std::exception_ptr error;
    std::optional<std::conditional_t<std::is_void_v<T>, std::monostate, T>> value;
    T get() {
        if (error) std::rethrow_exception(error);
        if constexpr (!std::is_void_v<T>) return std::move(*value);
    }
};

/// The exception throw_status(st, call) throws, as a value.
inline std::exception_ptr status_error(int st, const char* call) noexcept {
    try {
        throw_status(st, call);
    } catch (...) {
        return std::current_exception();
    }
}

/// A task whose ending goes to a continuation `then(result<T>&&)`, called
/// once, with the node already freed (the callable destroyed): on the worker
/// that ran the task, or in on_cancel on the thread that dropped it.
template <class T, class F, class Then>
struct then_node {
    const capi::wspool* pool;
    std::optional<F> fn;
    Then then;
    template <class G, class H>
    then_node(const capi::wspool* p, G&& g, H&& h) : pool(p), fn(std::in_place, std::forward<G>(g)), then(std::forward<H>(h)) {}
    static void run(void* arg) noexcept {
        auto* n = static_cast<then_node*>(arg);
        running_on on(n->pool);
        result<T> r;
        try {
            if constexpr (std::is_void_v<T>) {
                std::invoke(*n->fn);
                r.value.emplace();
            } else {
                r.value.emplace(std::invoke(*n->fn));
            }
        } catch (...) {
            r.error = std::current_exception();
        }
        finish(n, std::move(r));
    }
    static void cancelled(void* arg) noexcept {
        result<T> r;
#ifdef WSPOOL_EEXPIRED
        if (wspool_cancel_reason() == WSPOOL_TASK_EXPIRED) r.error = status_error(WSPOOL_EEXPIRED, "wspool");
#endif
        if (!r.error) r.error = status_error(WSPOOL_ECANCELLED, "wspool");
        finish(static_cast<then_node*>(arg), std::move(r));  // the callable dies here, as cancel_reason() says
    }
    static void finish(then_node* n, result<T>&& r) noexcept {
        Then t(std::move(n->then));
        free_node(n);
        std::move(t)(std::move(r));
    }
    /// Submits f with `then` after it; refused: returns the status with the
    /// node freed (nothing ran) and `then` moved back into *back.
    template <class G, class H>
    static int submit(capi::wspool* p, wspool_submit_opts o, wspool_task** handle, G&& g, H&& h, std::optional<Then>* back) {
        then_node* n = make_node<then_node>(p, std::forward<G>(g), std::forward<H>(h));
        o.on_cancel = &cancelled;
        int st = wspool_submit_ex(p, &run, n, &o, handle);
        if (st != WSPOOL_OK) {
            if (back) back->emplace(std::move(n->then));
            free_node(n);
        }
        return st;
    }
};
}  // namespace detail

#if WSPOOL_HPP_CORO
// -------------------------------------------------------- C++20 coroutines --

/// What pool.run(f) returns: `co_await` it (once) from any coroutine. The
/// task is submitted when awaited, with the awaitable's options (so an
/// options::label string must live until then; a literal does); the
/// coroutine resumes on the pool thread that ran it (or on the thread that
/// dropped it unrun) with its value, or rethrows what it threw:
/// wspool::task_cancelled / wspool::task_expired when it was dropped unrun
/// (cancelled by a CANCEL shutdown, or its deadline passed), wspool::error
/// (WSPOOL_EREJECTED, WSPOOL_ESHUTDOWN) when the pool refused it, as
/// pool.submit throws. Allocates what pool.post does (one recycled node),
/// nothing more. In a Boost.Asio coroutine, await wspool::async_run instead:
/// it resumes on the coroutine's executor.
template <class T, class F>
class run_awaitable {
public:
    template <class G>
    run_awaitable(capi::wspool* p, const wspool_submit_opts& o, G&& g) : pool_(p), opts_(o), fn_(std::forward<G>(g)) {}
    run_awaitable(run_awaitable&&) = default;
    run_awaitable& operator=(run_awaitable&&) = delete;

    bool await_ready() const noexcept { return false; }
    /// Throws (and the coroutine goes on with that exception at once) when refused.
    void await_suspend(std::coroutine_handle<> h) {
        h_ = h;
        int st = node::submit(pool_, opts_, nullptr, std::move(fn_), resume{this}, nullptr);
        // Accepted: the coroutine may be running again already; touch nothing.
        if (st != WSPOOL_OK) detail::throw_status(st, "wspool::pool::run");
    }
    T await_resume() { return r_.get(); }

private:
    struct resume {
        run_awaitable* self;
        void operator()(detail::result<T>&& r) && noexcept {
            self->r_ = std::move(r);
            self->h_.resume();
        }
    };
    using node = detail::then_node<T, F, resume>;
    capi::wspool* pool_;
    wspool_submit_opts opts_;
    F fn_;
    std::coroutine_handle<> h_;
    detail::result<T> r_;
};

template <class F, class... A>
auto pool::run(F&& f, A&&... a) {
    return run_with(options(), std::forward<F>(f), std::forward<A>(a)...);
}
template <class F, class... A>
auto pool::run_with(const options& o, F&& f, A&&... a) {
    auto b = detail::bind(std::forward<F>(f), std::forward<A>(a)...);
    using B = decltype(b);
    using T = std::invoke_result_t<B&>;
    static_assert(!std::is_reference_v<T>, "wspool::pool::run: a task cannot return a reference (return a pointer)");
    return run_awaitable<T, B>(p_, o.raw(), std::move(b));
}
#endif  // WSPOOL_HPP_CORO

}  // namespace wspool

#endif  // WSPOOL_HPP_STD >= 201703L
#endif  // WSPOOL_HPP


// ---------------------------------------------------------- Boost.Asio --
//
// wspool::async_run, an Asio initiating function: compiled when Boost.Asio
// was included before this header (include <boost/asio.hpp> first; including
// wspool.hpp again after it works too).
#if defined(BOOST_ASIO_VERSION) && defined(WSPOOL_HPP) && WSPOOL_HPP_STD >= 201703L && !defined(WSPOOL_HPP_ASIO)
#define WSPOOL_HPP_ASIO 1
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace wspool {
namespace detail {
template <class T>
struct run_signature {
    using type = void(std::exception_ptr, T);
};
template <>
struct run_signature<void> {
    using type = void(std::exception_ptr);
};

/// async_run's continuation: the handler, and work on its executor until it ran.
template <class T, class Handler>
struct asio_then {
    using executor_type = boost::asio::associated_executor_t<Handler, ::wspool::executor>;
    /// The handler has no executor of its own: it runs where the task ended.
    static constexpr bool inline_ = std::is_same_v<executor_type, ::wspool::executor>;
    boost::asio::executor_work_guard<executor_type> work;
    Handler handler;
    template <class H>
    asio_then(H&& h, const ::wspool::executor& def)
        : work(boost::asio::get_associated_executor(h, def)), handler(std::forward<H>(h)) {}
    void operator()(result<T>&& r) && noexcept { complete(std::move(r), false); }
    /// posted: never run the handler inside this call (the initiating function's).
    void complete(result<T>&& r, bool posted) noexcept {
        auto call = [h = std::move(handler), r = std::move(r)]() mutable {
            if constexpr (std::is_void_v<T>)
                std::move(h)(r.error);
            else
                std::move(h)(r.error, r.value ? std::move(*r.value) : T());
        };
        try {
            if constexpr (inline_)
                call();
            else if (posted)
                boost::asio::post(work.get_executor(), std::move(call));
            else
                boost::asio::dispatch(work.get_executor(), std::move(call));
        } catch (...) {
            unhandled(type_name<Handler>());
        }
        work.reset();
    }
};

template <class T>
struct initiate_run {
    pool* p;
    wspool_submit_opts opts;
    cancel_handle* handle;
    template <class Handler, class F>
    void operator()(Handler&& h, F&& f) const {
        using Then = asio_then<T, std::decay_t<Handler>>;
        using N = then_node<T, std::decay_t<F>, Then>;
        std::optional<Then> back;
        wspool_task* t = nullptr;
        int st = N::submit(p->native_handle(), opts, handle ? &t : nullptr, std::forward<F>(f),
                           Then(std::forward<Handler>(h), p->get_executor()), &back);
        if (st == WSPOOL_OK) {
            if (handle) *handle = cancel_handle(t);
        } else if constexpr (Then::inline_) {
            throw_status(st, "wspool::async_run");  // as pool.post: no executor to report it on
        } else {
            back->complete(result<T>{status_error(st, "wspool::async_run"), {}}, true);
        }
    }
};

template <class F, class Token>
auto async_run(pool& p, const wspool_submit_opts& o, cancel_handle* c, F&& f, Token&& token) {
    using T = std::invoke_result_t<std::decay_t<F>&>;
    static_assert(!std::is_reference_v<T>, "wspool::async_run: a task cannot return a reference (return a pointer)");
    static_assert(std::is_void_v<T> || std::is_default_constructible_v<T>,
                  "wspool::async_run: the handler's signature is (std::exception_ptr, T), and T() is what it "
                  "gets with an exception: a default-constructible T (or co_await pool.run(f) in C++20)");
    return boost::asio::async_initiate<Token, typename run_signature<T>::type>(initiate_run<T>{&p, o, c}, token,
                                                                              std::forward<F>(f));
}
}  // namespace detail

/// Runs f() on the pool; its completion handler gets (std::exception_ptr e,
/// T value), or (std::exception_ptr e) for a void f, as asio::co_spawn's:
/// e is null and value what f returned, or e is what f threw (value T()),
/// wspool::task_cancelled / task_expired when the task was dropped unrun
/// (a CANCEL shutdown, cancel_handle::cancel, its deadline), wspool::error
/// (WSPOOL_EREJECTED, WSPOOL_ESHUTDOWN) when the pool refused it. The
/// handler runs on its associated executor (asio::use_awaitable: the
/// coroutine's; asio::bind_executor(ex, ...): ex), dispatched there, with
/// work kept on that executor until then; a handler without one (or bound
/// to the pool's own executor) runs on the thread that finished the task (a
/// pool thread, or the one that cancelled it), and a refusal throws from
/// async_run, as pool.post does. Any completion token:
///
///   int v = co_await wspool::async_run(pool, [] { return 42; }, asio::use_awaitable);
///   std::future<int> f = wspool::async_run(pool, [] { return 42; }, asio::use_future);
template <class F, class Token>
auto async_run(pool& p, F&& f, Token&& token) {
    return detail::async_run(p, options().raw(), nullptr, std::forward<F>(f), std::forward<Token>(token));
}
/// With options: a priority, a deadline, a lane (options().lane(l)), a label.
template <class F, class Token>
auto async_run(pool& p, const options& o, F&& f, Token&& token) {
    return detail::async_run(p, o.raw(), nullptr, std::forward<F>(f), std::forward<Token>(token));
}
/// With options, and a handle that can cancel the task while it waits
/// (`c.cancel()`: its handler then gets wspool::task_cancelled). c is
/// assigned when the task is submitted; one allocation more.
template <class F, class Token>
auto async_run(pool& p, const options& o, cancel_handle& c, F&& f, Token&& token) {
    return detail::async_run(p, o.raw(), &c, std::forward<F>(f), std::forward<Token>(token));
}
}  // namespace wspool
#endif  // Boost.Asio
