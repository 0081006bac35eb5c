/* Instructions per fork-join level (W2, fib(25)) and per task (W4, 200
 * roots x 1,000 children) through the C group API, counted by callgrind on
 * ONE worker, where the count does not depend on scheduling
 * (bench/c/groups_callgrind.sh runs it and divides). Usage:
 *   groups_callgrind w2 join|placed|heap
 *   groups_callgrind w4 placed|heap
 * placed = wspool_group_init/fini on the stack, heap = wspool_group_create/
 * destroy. A third argument runs
 * the workload that many times (default 1): the script takes the
 * difference between 2 runs and 1, which leaves out the pool's start,
 * shutdown and first-use costs without client requests (callgrind's are
 * per thread). The task functions are bench_wspool.c's
 * (wspool_workloads.h). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libwspool.h"

static wspool *pool;

#include "wspool_workloads.h"

static int run(int w4, wspool_fn fn) {
    int ok;
    if (!w4) {
        fib_t f = {25, 0};
        wspool_task *t;
        wspool_submit_ex(pool, fn, &f, NULL, &t);
        wspool_task_wait(t, -1);
        wspool_task_release(t);
        ok = f.r == 75025;
    } else {
        atomic_long kids = 0;
        wspool_group *g;
        wspool_group_create(pool, &g);
        for (int i = 0; i < 200; i++) wspool_group_submit(g, fn, &kids);
        wspool_group_wait(g, -1);
        wspool_group_destroy(g);
        ok = atomic_load(&kids) == 200L * 1000;
    }
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s w2 join|placed|heap | w4 placed|heap [RUNS]\n", argv[0]);
        return 2;
    }
    int w4 = strcmp(argv[1], "w4") == 0;
    const char *v = argv[2];
    wspool_fn fn = w4 ? (strcmp(v, "heap") == 0 ? root_heap : root_placed)
                      : (strcmp(v, "join") == 0 ? fib_join : strcmp(v, "heap") == 0 ? fib_group_heap : fib_group);
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 1;
    cfg.growth = WSPOOL_GROWTH_FIXED;
    if (wspool_create(&cfg, &pool) != WSPOOL_OK) return 1;
    int runs = argc == 4 ? atoi(argv[3]) : 1, ok = 1;
    for (int i = 0; i < runs && ok; i++) ok = run(w4, fn);
    wspool_destroy(pool);
    if (!ok) fprintf(stderr, "wrong result\n");
    return ok ? 0 : 1;
}
