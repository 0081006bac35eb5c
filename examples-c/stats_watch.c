/* stats_watch.c: a live one-line view of a pool's stats while a mixed
 * workload runs: bursts of small CPU tasks, tasks that block inside
 * blocking regions (the pool lends threads), and nested fork-join.
 *   usage: stats_watch [seconds]   (default 5) */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "libwspool.h"

static wspool *pool;
static atomic_int stop;

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void small(void *arg) {
    volatile uint64_t x = (uintptr_t)arg;
    for (int i = 0; i < 2000; i++) x = x * 6364136223846793005ull + 1;
}

static void blocking_io(void *arg) { /* pretend I/O: declared, so the pool compensates */
    (void)arg;
    wspool_blocking_begin();
    sleep_us(20000);
    wspool_blocking_end();
}

static void nested(void *arg) {
    int depth = (int)(intptr_t)arg;
    if (depth == 0) {
        small(NULL);
        return;
    }
    wspool_join(pool, nested, (void *)(intptr_t)(depth - 1), nested, (void *)(intptr_t)(depth - 1));
}

static void *producer(void *arg) {
    (void)arg;
    unsigned tick = 0;
    while (!atomic_load(&stop)) {
        int burst = (tick % 10 < 3) ? 20000 : 500; /* bursty */
        for (int i = 0; i < burst; i++) wspool_submit(pool, small, (void *)(uintptr_t)i);
        if (tick % 4 == 0)
            for (int i = 0; i < 8; i++) wspool_submit(pool, blocking_io, NULL);
        if (tick % 5 == 0) wspool_submit(pool, nested, (void *)(intptr_t)10);
        tick++;
        sleep_us(10000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.name = "watch";
    cfg.keep_alive_ms = 500; /* let lent threads retire within the demo */
    if (wspool_create(&cfg, &pool) != WSPOOL_OK) {
        fprintf(stderr, "wspool_create: %s\n", wspool_last_error());
        return 1;
    }
    pthread_t th;
    pthread_create(&th, NULL, producer, NULL);

    int tty = isatty(STDOUT_FILENO);
    int frames = (int)(seconds * 10);
    for (int f = 0; f <= frames; f++) {
        wspool_stats s = {.struct_size = sizeof s};
        wspool_stats_get(pool, &s);
        char line[200];
        snprintf(line, sizeof line,
                 "threads %3u  idle %3u  blocked %2u  queued %6llu  p99 %8.1f us  spin hits %7llu  "
                 "steals %7llu  injected %4llu  done %9llu",
                 s.threads, s.idle_threads, s.blocked_threads, (unsigned long long)s.queued,
                 s.queue_delay_p99_ns / 1e3, (unsigned long long)s.spin_hits,
                 (unsigned long long)s.steals, (unsigned long long)s.starvation_injections,
                 (unsigned long long)s.completed);
        if (tty) {
            printf("\r%s", line);
            fflush(stdout);
        } else if (f % 5 == 0) {
            printf("%s\n", line); /* not a terminal: a line every 0.5 s */
        }
        if (f < frames) sleep_us(100000);
    }
    if (tty) printf("\n");
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    wspool_destroy(pool);
    return 0;
}
