/* W1's task, shared by the C floods (bench_wspool.c, bench_mutex.c and
 * bench/callgrind/flood.c): each task counts itself, and the one that
 * brings the count to `target` posts `done`. `flood_arm(n)` starts a
 * flood of n tasks. */
#ifndef WSPOOL_BENCH_FLOOD_TASK_H
#define WSPOOL_BENCH_FLOOD_TASK_H

#include <semaphore.h>
#include <stdatomic.h>

/* The count has a cache line to itself: the workers write it for every
 * task, and whatever shares its line is a cache miss for any other thread
 * that reads it. The submitter of bench_wspool.c read the global `pool`,
 * which the linker had put next to it, once per submission: that halved
 * the C flood's rate (13-15 against 24-30 M tasks/s for the same loop with
 * the pool in a local variable). */
static struct {
    _Alignas(64) atomic_long count;
    char rest_of_line[64 - sizeof(atomic_long)];
} flood;
static long target;
static sem_t done;

static inline void flood_arm(long n) {
    atomic_store(&flood.count, 0);
    target = n;
}

static inline void tiny(void *arg) {
    (void)arg;
    if (atomic_fetch_add_explicit(&flood.count, 1, memory_order_relaxed) + 1 == target) sem_post(&done);
}

#endif
