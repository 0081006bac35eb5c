/* The W1-W5 workloads through the C API of libwspool (BENCH_THREADS threads, default 2, FIXED). */
#define _GNU_SOURCE
#include <semaphore.h>
#include <stdatomic.h>

#include "common.h"
#include "libwspool.h"

static wspool *pool;

#include "flood_task.h"

#include "wspool_workloads.h"

static void nop(void *arg) { (void)arg; }

/* W7: one producer's submissions (`pool` is read once, into a register:
 * see flood_task.h). */
static void w7_produce(void *p) {
    wspool *pl = p;
    for (int i = 0; i < W7_TASKS_EACH; i++) wspool_submit(pl, tiny, NULL);
}

static double run_fib(void *fn_ptr) {
    wspool_fn fn = *(wspool_fn *)fn_ptr;
    fib_t f = {W2_FIB, 0};
    wspool_task *t;
    uint64_t t0 = now_ns();
    wspool_submit_ex(pool, fn, &f, NULL, &t);
    wspool_task_wait(t, -1);
    uint64_t t1 = now_ns();
    wspool_task_release(t);
    if (f.r != fib_seq(W2_FIB)) {
        fprintf(stderr, "fib wrong\n");
        exit(1);
    }
    return (t1 - t0) / 1e6;
}

/* W4: the roots through a heap group, each root's children through a
 * group placed on its stack. */
static double run_w4(void *unused) {
    (void)unused;
    atomic_long kids = 0;
    wspool_group *g;
    wspool_group_create(pool, &g);
    uint64_t t0 = now_ns();
    for (int i = 0; i < W4_ROOTS; i++) wspool_group_submit(g, root_placed, &kids);
    wspool_group_wait(g, -1);
    uint64_t t1 = now_ns();
    wspool_group_destroy(g);
    if (atomic_load(&kids) != (long)W4_ROOTS * W4_CHILDREN) {
        fprintf(stderr, "W4 count wrong\n");
        exit(1);
    }
    return W4_ROOTS * (W4_CHILDREN + 1.0) / ((t1 - t0) / 1e9) / 1e6;
}

/* W4 detached: a root submits its children and returns; the flood count
 * posts `done` once every child ran. */
static void root_detached(void *unused) {
    (void)unused;
    for (int j = 0; j < W4_CHILDREN; j++) wspool_submit(pool, tiny, NULL);
}

static double run_w4d(void *unused) {
    (void)unused;
    flood_arm((long)W4_ROOTS * W4_CHILDREN);
    uint64_t t0 = now_ns();
    for (int i = 0; i < W4_ROOTS; i++) wspool_submit(pool, root_detached, NULL);
    sem_wait(&done);
    return W4_ROOTS * (W4_CHILDREN + 1.0) / ((now_ns() - t0) / 1e9) / 1e6;
}

int main(void) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = (uint32_t)bench_threads();
    cfg.max_threads = cfg.min_threads;
    cfg.growth = WSPOOL_GROWTH_FIXED;
    if (getenv("BENCH_SPIN_MAX_US")) cfg.spin_max_us = (uint32_t)atoi(getenv("BENCH_SPIN_MAX_US")); /* diagnosis */
    if (getenv("BENCH_NICE")) cfg.thread_nice = (uint32_t)atoi(getenv("BENCH_NICE")); /* diagnosis */
    if (wspool_create(&cfg, &pool) != WSPOOL_OK) return 1;
    sem_init(&done, 0, 0);

    /* W1 */
    flood_arm(W1_TASKS);
    uint64_t t0 = now_ns();
    if (getenv("BENCH_W1_PUSH_TIMES")) {
        /* Diagnosis: is a slow flood slow in every push (cache misses) or
         * in a few (the submitter waking parked workers)? */
        uint64_t slow = 0, slow_ns = 0, prev = t0;
        for (int i = 0; i < W1_TASKS; i++) {
            wspool_submit(pool, tiny, NULL);
            uint64_t now = now_ns();
            if (now - prev > 1000) slow++, slow_ns += now - prev;
            prev = now;
        }
        fprintf(stderr, "W1 pushes over 1 us: %llu taking %.1f ms; submit loop %.1f ms\n", (unsigned long long)slow,
                slow_ns / 1e6, (prev - t0) / 1e6);
    } else {
        for (int i = 0; i < W1_TASKS; i++) wspool_submit(pool, tiny, NULL);
    }
    sem_wait(&done);
    uint64_t t1 = now_ns();
    printf("W1_mtps %.2f\n", W1_TASKS / ((t1 - t0) / 1e9) / 1e6);
    if (getenv("BENCH_W1_STATS")) {
        /* What the flood cost besides the tasks: where workers found them,
         * how their spins went, and how often threads slept (context
         * switches of the whole process). */
        wspool_stats st;
        wspool_stats_init(&st);
        wspool_stats_get(pool, &st);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(stderr, "W1 stats: global_pops %llu local_pops %llu steals %llu spin_hits %llu spin_misses %llu "
                "spin_threshold_ns %u vol_csw %ld invol_csw %ld\n",
                (unsigned long long)st.global_pops, (unsigned long long)st.local_pops, (unsigned long long)st.steals,
                (unsigned long long)st.spin_hits, (unsigned long long)st.spin_misses, st.spin_threshold_ns,
                ru.ru_nvcsw, ru.ru_nivcsw);
        if (getenv("BENCH_ONLY_W1")) return 0;
    }
    /* W1 in batches */
    wspool_batch_item batch[W1_BATCH];
    for (int i = 0; i < W1_BATCH; i++) batch[i] = (wspool_batch_item){tiny, NULL};
    flood_arm(W1_TASKS);
    t0 = now_ns();
    for (int i = 0; i < W1_TASKS; i += W1_BATCH) {
        size_t n = (size_t)(W1_TASKS - i < W1_BATCH ? W1_TASKS - i : W1_BATCH), accepted;
        if (wspool_submit_batch(pool, batch, n, NULL, &accepted) != WSPOOL_OK) return 1;
    }
    sem_wait(&done);
    t1 = now_ns();
    printf("W1b_mtps %.2f\n", W1_TASKS / ((t1 - t0) / 1e9) / 1e6);
    /* W5 right after the floods */
    report_idle();

    wspool_fn w2_join = fib_join, w2_group = fib_group, w2_heap = fib_group_heap;
    printf("W2_ms %.2f\n", warm_median(run_fib, &w2_join));
    printf("W2g_ms %.2f\n", warm_median(run_fib, &w2_group));
    printf("W2gh_ms %.2f\n", warm_median(run_fib, &w2_heap));

    /* W3 */
    uint64_t *lat = malloc(sizeof(uint64_t) * W3_ROUNDS);
    for (int i = 0; i < W3_ROUNDS; i++) {
        wspool_task *t;
        uint64_t a = now_ns();
        wspool_submit_ex(pool, nop, NULL, NULL, &t);
        wspool_task_wait(t, -1);
        lat[i] = now_ns() - a;
        wspool_task_release(t);
    }
    report_latency(lat, W3_ROUNDS);
    free(lat);

    printf("W4_mtps %.2f\n", warm_median(run_w4, NULL));
    printf("W4d_mtps %.2f\n", warm_median(run_w4d, NULL));

    /* W7 */
    w7_producers w7;
    flood_arm((long)W7_PRODUCERS * W7_TASKS_EACH);
    uint64_t w7_t0 = w7_start(&w7, w7_produce, pool);
    sem_wait(&done);
    report_w7(w7_t0, now_ns());
    w7_join(&w7);

    wspool_destroy(pool);
    return 0;
}
