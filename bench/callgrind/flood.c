/* The W1 flood through the C API, instrumented for callgrind (make
 * bench-callgrind; bench/callgrind/run.sh). Usage: flood N [BATCH]
 *
 * A foreign thread (main) submits N tiny tasks to a pool of 2 FIXED workers,
 * then waits for the last one. BATCH > 0 submits through
 * wspool_submit_batch, BATCH tasks per call. The callgrind client requests
 * cut the run into phases, so setup (pool start, a warm-up flood that
 * touches every lazy path) is not counted:
 *   ZERO_STATS                 counters start here
 *   dump "submit"              after the last submit returned
 *   dump "drain"               after the last task ran
 * With --separate-threads=yes each dump is one file per thread: the main
 * thread's "submit" part is the submitter's cost, the pool threads' parts
 * together are the workers' cost (report.py divides both by N). Outside
 * valgrind the requests are no-ops, so the program also runs plainly.
 * N = 0 skips the measured flood: run.sh subtracts that run's pool-thread
 * counts (start, warm-up, shutdown) from the full run's. */
#define _GNU_SOURCE
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <valgrind/callgrind.h>

#include "libwspool.h"

#include "../c/flood_task.h"

/* One flood of n tasks; batch 0 = one wspool_submit per task. */
static int run_flood(wspool *pool, long n, size_t batch, int measured) {
    flood_arm(n);
    if (measured) CALLGRIND_ZERO_STATS;
    if (batch == 0) {
        for (long i = 0; i < n; i++)
            if (wspool_submit(pool, tiny, NULL) != WSPOOL_OK) return 1;
    } else {
        wspool_batch_item *items = calloc(batch, sizeof *items);
        if (!items) return 1;
        for (size_t i = 0; i < batch; i++) items[i] = (wspool_batch_item){tiny, NULL};
        for (long i = 0; i < n; i += (long)batch) {
            size_t k = (size_t)(n - i) < batch ? (size_t)(n - i) : batch;
            size_t accepted = 0;
            if (wspool_submit_batch(pool, items, k, NULL, &accepted) != WSPOOL_OK || accepted != k) return 1;
        }
        free(items);
    }
    if (measured) CALLGRIND_DUMP_STATS_AT("submit");
    sem_wait(&done);
    if (measured) CALLGRIND_DUMP_STATS_AT("drain");
    return 0;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    size_t batch = argc > 2 ? (size_t)atol(argv[2]) : 0;
    if (n < 0) return 2;
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 2;
    cfg.growth = WSPOOL_GROWTH_FIXED;
    wspool *pool;
    if (wspool_create(&cfg, &pool) != WSPOOL_OK) return 1;
    sem_init(&done, 0, 0);
    if (run_flood(pool, 1000, batch, 0) || (n > 0 && run_flood(pool, n, batch, 1))) {
        fprintf(stderr, "flood: a submission failed: %s\n", wspool_last_error());
        return 1;
    }
    printf("flood: %ld tasks ran (batch %zu)\n", n, batch);
    wspool_destroy(pool);
    return 0;
}
