/* Shared helpers of the C benchmarks: clocks, percentiles, output.
 * Every bench binary prints lines "KEY VALUE" that report.py aggregates:
 *   W1_mtps   flood: 1,000,000 tiny tasks from one foreign thread, M tasks/s
 *   W1b_mtps  the same flood submitted in batches of W1_BATCH (one call, one lock or
 *             admission, one wake-up per batch), M tasks/s
 *   W2_ms     fork-join fib(25), every level forked, ms
 *   W2g_ms    the same with a group per join placed on the stack (wspool only), ms
 *   W2gh_ms   the same with a heap group per join (wspool only), ms
 *   W3_p50_us / W3_p99_us   ping-pong: submit one task, wait for it, 50,000 times
 *   W4_mtps   nested: 200 roots each spawn 1,000 children and wait, M tasks/s
 *   W4d_mtps  the same with detached children: no root waits; timed until the last
 *             child ran, M tasks/s (roots and children)
 *   W5_cpu_ms_per_s  CPU used by the idle pool in the 2 s after W1 and W1b
 *   W7_mtps   many producers: W7_PRODUCERS foreign threads, started together, each
 *             submitting W7_TASKS_EACH tiny tasks (an HTTP server's I/O threads), M tasks/s
 * Diagnosis knobs of bench_wspool (not set by make bench-c): BENCH_SPIN_MAX_US and BENCH_NICE set
 * the pool's spin_max_us and thread_nice; BENCH_W1_STATS=1 prints W1's counters.
 * W2 (every variant) and W4 run W_WARM times unmeasured, then W_REPS times,
 * in the same process, and print the median: a fork-join of a few ms
 * measured once per fresh process measured its cold start as much as the
 * work (one process's repetitions read 15.7 ms first and 8.2 ms later). */
#ifndef WSPOOL_BENCH_COMMON_H
#define WSPOOL_BENCH_COMMON_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define W1_TASKS 1000000
#define W1_BATCH 256
#define W2_FIB 25
#define W3_ROUNDS 50000
#define W4_ROOTS 200
#define W4_CHILDREN 1000
#define W5_SECONDS 2
#define W7_PRODUCERS 4
#define W7_TASKS_EACH 250000
#define W_WARM 1
#define W_REPS 5

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static inline int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median of W_REPS measurements taken after W_WARM unmeasured runs:
 * `measure(ctx)` runs the workload once and returns its figure. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static inline double warm_median(double (*measure)(void *), void *ctx) {
    double v[W_REPS];
    for (int i = 0; i < W_WARM; i++) measure(ctx);
    for (int i = 0; i < W_REPS; i++) v[i] = measure(ctx);
    qsort(v, W_REPS, sizeof *v, cmp_double);
    return v[W_REPS / 2];
}

/* Worker threads per pool: BENCH_THREADS (default 2, the 2-core CI
 * machine's figure); bench/c/scaling.sh sets 1..16. */
static inline int bench_threads(void) {
    const char *s = getenv("BENCH_THREADS");
    int n = s ? atoi(s) : 2;
    return n > 0 ? n : 2;
}

/* Sorts samples and prints p50/p99 in microseconds. */
static inline void report_latency(uint64_t *ns, int n) {
    qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
    printf("W3_p50_us %.2f\n", ns[n / 2] / 1e3);
    printf("W3_p99_us %.2f\n", ns[(int)(n * 0.99)] / 1e3);
}

/* Idle CPU: sleeps W5_SECONDS with the pool idle, prints CPU ms per second. */
static inline void report_idle(void) {
    if (getenv("BENCH_NO_IDLE")) return; /* the scaling run: W5 needs no 16-thread row */
    double c0 = cpu_ms();
    struct timespec ts = {W5_SECONDS, 0};
    nanosleep(&ts, NULL);
    printf("W5_cpu_ms_per_s %.3f\n", (cpu_ms() - c0) / W5_SECONDS);
}

/* W7's producers: `w7_start` starts W7_PRODUCERS threads that each run
 * `produce(ctx)` (W7_TASKS_EACH submissions) once all of them exist, and
 * returns the time it released them; `w7_join` waits for them. The caller
 * times up to its last task's completion, as W1 does. */
typedef struct {
    pthread_barrier_t go;
    pthread_t threads[W7_PRODUCERS];
    void (*produce)(void *);
    void *ctx;
} w7_producers;

static void *w7_producer(void *p) {
    w7_producers *w = (w7_producers *)p;
    pthread_barrier_wait(&w->go);
    w->produce(w->ctx);
    return NULL;
}

static inline uint64_t w7_start(w7_producers *w, void (*produce)(void *), void *ctx) {
    w->produce = produce;
    w->ctx = ctx;
    pthread_barrier_init(&w->go, NULL, W7_PRODUCERS + 1);
    for (int i = 0; i < W7_PRODUCERS; i++)
        if (pthread_create(&w->threads[i], NULL, w7_producer, w) != 0) {
            fprintf(stderr, "W7: pthread_create failed\n");
            exit(1);
        }
    uint64_t t0 = now_ns();
    pthread_barrier_wait(&w->go);
    return t0;
}

static inline void w7_join(w7_producers *w) {
    for (int i = 0; i < W7_PRODUCERS; i++) pthread_join(w->threads[i], NULL);
    pthread_barrier_destroy(&w->go);
}

static inline void report_w7(uint64_t t0, uint64_t t1) {
    printf("W7_mtps %.2f\n", (double)W7_PRODUCERS * W7_TASKS_EACH / ((t1 - t0) / 1e9) / 1e6);
}

static inline long fib_seq(int n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

#endif
