/* The W1-W5 workloads with OpenMP tasks (libgomp, 2 threads). W1/W3 run in
 * a parallel region whose `single` thread is the submitter. A taskwait lets
 * the waiting thread run the task itself, so W3 is reported twice: W3 with
 * taskwait (the idiomatic round trip, usually no hand-off at all), and W3h,
 * a hand-off: the submitter spins on a flag until the other thread (idle at
 * the region's barrier, where libgomp spins before sleeping) ran the task. */
/* pthread barriers (W7's producers in common.h) */
#define _GNU_SOURCE
#include <omp.h>
#include <stdatomic.h>

#include "common.h"

static atomic_long counter;

static long fib_omp(int n) {
    if (n < 2) return n;
    long a, b;
#pragma omp task shared(a)
    a = fib_omp(n - 1);
    b = fib_omp(n - 2);
#pragma omp taskwait
    return a + b;
}

static double run_w2(void *unused) {
    (void)unused;
    long r = 0;
    uint64_t t0 = 0, t1 = 0;
#pragma omp parallel
#pragma omp single
    {
        t0 = now_ns();
        r = fib_omp(W2_FIB);
        t1 = now_ns();
    }
    if (r != fib_seq(W2_FIB)) {
        fprintf(stderr, "fib wrong\n");
        exit(1);
    }
    return (t1 - t0) / 1e6;
}

/* W4's rate (roots and children, M tasks/s), once every child counted. */
static double w4_rate(uint64_t t0, uint64_t t1) {
    if (atomic_load(&counter) != (long)W4_ROOTS * W4_CHILDREN) {
        fprintf(stderr, "W4 count wrong\n");
        exit(1);
    }
    return W4_ROOTS * (W4_CHILDREN + 1.0) / ((t1 - t0) / 1e9) / 1e6;
}

/* W4: roots each spawn W4_CHILDREN children and wait for them (`detached`
 * 0) or return at once (1); the task group waits for every descendant. */
static double run_w4_tasks(int detached) {
    uint64_t t0 = 0, t1 = 0;
    atomic_store(&counter, 0);
#pragma omp parallel
#pragma omp single
    {
        t0 = now_ns();
#pragma omp taskgroup
        {
            for (int i = 0; i < W4_ROOTS; i++) {
#pragma omp task
                {
                    for (int j = 0; j < W4_CHILDREN; j++) {
#pragma omp task
                        atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
                    }
                    if (!detached) {
#pragma omp taskwait
                    }
                }
            }
        }
        t1 = now_ns();
    }
    return w4_rate(t0, t1);
}

static double run_w4(void *unused) {
    (void)unused;
    return run_w4_tasks(0);
}

static double run_w4d(void *unused) {
    (void)unused;
    return run_w4_tasks(1);
}

int main(void) {
    omp_set_num_threads(2);
    uint64_t t0 = 0, t1 = 0;
#pragma omp parallel
#pragma omp single
    {
        t0 = now_ns();
        for (int i = 0; i < W1_TASKS; i++) {
#pragma omp task
            atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
        }
#pragma omp taskwait
        t1 = now_ns();
    }
    if (atomic_load(&counter) != W1_TASKS) return 1;
    printf("W1_mtps %.2f\n", W1_TASKS / ((t1 - t0) / 1e9) / 1e6);
    report_idle();

    printf("W2_ms %.2f\n", warm_median(run_w2, NULL));

    uint64_t *lat = malloc(sizeof(uint64_t) * W3_ROUNDS);
#pragma omp parallel
#pragma omp single
    {
        for (int i = 0; i < W3_ROUNDS; i++) {
            uint64_t a = now_ns();
#pragma omp task
            atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
#pragma omp taskwait
            lat[i] = now_ns() - a;
        }
    }
    report_latency(lat, W3_ROUNDS);
    atomic_int flag;
#pragma omp parallel
#pragma omp single
    {
        for (int i = 0; i < W3_ROUNDS; i++) {
            atomic_store(&flag, 0);
            uint64_t a = now_ns();
#pragma omp task shared(flag)
            atomic_store(&flag, 1);
            while (!atomic_load(&flag)) {
            }
            lat[i] = now_ns() - a;
        }
    }
    qsort(lat, W3_ROUNDS, sizeof *lat, cmp_u64);
    printf("W3h_p50_us %.2f\n", lat[W3_ROUNDS / 2] / 1e3);
    printf("W3h_p99_us %.2f\n", lat[(int)(W3_ROUNDS * 0.99)] / 1e3);
    free(lat);

    printf("W4_mtps %.2f\n", warm_median(run_w4, NULL));
    printf("W4d_mtps %.2f\n", warm_median(run_w4d, NULL));
    return 0;
}
