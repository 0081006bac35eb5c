/* Issue 30, item 4: RSS across 1,000 cycles of: pool, group created, a task submitted,
 * group destroyed while the task is pending, task released, pool destroyed.
 * A destroyed group whose last task outlives it must be freed by that task;
 * when it was not, each cycle leaked the group and the pool (35 MiB per
 * 1,000 cycles on the 2-core development machine, 0.2 MiB after the fix).
 * Not a test (RSS is not asserted anywhere):
 *   make c-lib && gcc -O2 -std=c11 -Iinclude bench/c/group_destroy_rss.c \
 *     -Ltarget/release -Wl,-rpath,$PWD/target/release -lwspool -pthread -o /tmp/rss && /tmp/rss */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "libwspool.h"

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) sscanf(line + 6, "%ld", &kb);
    if (f) fclose(f);
    return kb;
}

static void hold(void *arg) {
    atomic_int *go = arg;
    while (!atomic_load(go)) usleep(50);
}

static void cycle(void) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 2;
    cfg.growth = WSPOOL_GROWTH_FIXED;
    wspool *p = NULL;
    wspool_create(&cfg, &p);
    wspool_group *g = NULL;
    wspool_group_create(p, &g);
    atomic_int go = 0;
    wspool_group_submit(g, hold, &go);
    wspool_group_destroy(g); /* the task is pending */
    atomic_store(&go, 1);
    wspool_destroy(p);
}

int main(void) {
    for (int i = 0; i < 10; i++) cycle(); /* warm-up: allocator arenas, thread stacks */
    long before = rss_kb();
    for (int i = 0; i < 1000; i++) cycle();
    long after = rss_kb();
    printf("RSS before %ld KiB, after 1000 cycles %ld KiB, growth %ld KiB\n", before, after, after - before);
    return 0;
}
