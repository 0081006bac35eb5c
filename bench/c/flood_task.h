/* W1's task, shared by the C floods (bench_wspool.c, bench_mutex.c and
 * bench/callgrind/flood.c): each task counts itself, and the one that
 * brings `counter` to `target` posts `done`. */
#ifndef WSPOOL_BENCH_FLOOD_TASK_H
#define WSPOOL_BENCH_FLOOD_TASK_H

#include <semaphore.h>
#include <stdatomic.h>

static atomic_long counter;
static long target;
static sem_t done;

static inline void tiny(void *arg) {
    (void)arg;
    if (atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed) + 1 == target) sem_post(&done);
}

#endif
