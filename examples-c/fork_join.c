/* fork_join.c: recursive parallel work on the pool.
 *  - a parallel sum over an array, split in halves with a group per level;
 *    each task waits for its group, and that wait runs other tasks
 *    (help-while-waiting), so a 2-thread pool never deadlocks however deep
 *    the recursion goes;
 *  - fib(n) with wspool_join (fork-join without allocation). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "libwspool.h"

static wspool *pool;

typedef struct {
    const uint32_t *data;
    size_t len;
    uint64_t sum;
} sum_job;

static void sum_task(void *arg) {
    sum_job *j = arg;
    if (j->len <= 4096) {
        uint64_t s = 0;
        for (size_t i = 0; i < j->len; i++) s += j->data[i];
        j->sum = s;
        return;
    }
    size_t half = j->len / 2;
    sum_job l = {j->data, half, 0}, r = {j->data + half, j->len - half, 0};
    wspool_group *g = NULL;
    if (wspool_group_create(pool, &g) != WSPOOL_OK) abort();
    if (wspool_group_submit(g, sum_task, &l) != WSPOOL_OK) abort();
    if (wspool_group_submit(g, sum_task, &r) != WSPOOL_OK) abort();
    wspool_group_wait(g, -1); /* helps: runs queued tasks meanwhile */
    wspool_group_destroy(g);
    j->sum = l.sum + r.sum;
}

typedef struct {
    int n;
    uint64_t r;
} fib_job;

static uint64_t fib_seq(int n) { return n < 2 ? (uint64_t)n : fib_seq(n - 1) + fib_seq(n - 2); }

static void fib_task(void *arg) {
    fib_job *f = arg;
    if (f->n < 18) { /* sequential (still exponential) below a cutoff */
        f->r = fib_seq(f->n);
        return;
    }
    fib_job x = {f->n - 1, 0}, y = {f->n - 2, 0};
    wspool_join(pool, fib_task, &x, fib_task, &y);
    f->r = x.r + y.r;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 8u << 20;
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.name = "forkjoin";
    if (wspool_create(&cfg, &pool) != WSPOOL_OK) {
        fprintf(stderr, "wspool_create: %s\n", wspool_last_error());
        return 1;
    }
    uint32_t *data = malloc(n * sizeof *data);
    uint64_t expect = 0;
    for (size_t i = 0; i < n; i++) {
        data[i] = (uint32_t)(i % 1000);
        expect += data[i];
    }

    double s0 = now_ms();
    volatile uint64_t seq_sum = 0;
    for (size_t i = 0; i < n; i++) seq_sum += data[i];
    double seq_sum_ms = now_ms() - s0;

    double t0 = now_ms();
    sum_job root = {data, n, 0};
    wspool_task *t = NULL;
    wspool_submit_ex(pool, sum_task, &root, NULL, &t);
    wspool_task_wait(t, -1);
    wspool_task_release(t);
    double t1 = now_ms();
    printf("parallel sum of %zu values = %llu (%s) in %.1f ms (a plain loop on one thread: %.1f ms)\n", n,
           (unsigned long long)root.sum, root.sum == expect && seq_sum == expect ? "correct" : "WRONG", t1 - t0,
           seq_sum_ms);

    fib_job f = {32, 0};
    fib_task(&f); /* from the main thread: join submits one half and helps */
    double t2 = now_ms();
    volatile int fib_n = 32;
    uint64_t seq_fib = fib_seq(fib_n);
    double t3 = now_ms();
    printf("fib(32) = %llu (%s) in %.1f ms (plain recursion on one thread: %.1f ms)\n", (unsigned long long)f.r,
           f.r == 2178309ull && seq_fib == f.r ? "correct" : "WRONG", t2 - t1, t3 - t2);

    wspool_stats st = {.struct_size = sizeof st};
    wspool_stats_get(pool, &st);
    printf("threads=%u completed=%llu local=%llu global=%llu steals=%llu starvation_injections=%llu\n",
           st.threads, (unsigned long long)st.completed, (unsigned long long)st.local_pops,
           (unsigned long long)st.global_pops, (unsigned long long)st.steals,
           (unsigned long long)st.starvation_injections);
    wspool_destroy(pool);
    free(data);
    return root.sum == expect && f.r == 2178309ull ? 0 : 1;
}
