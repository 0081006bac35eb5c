/* Instructions per fork-join level (W2, fib(25)) and per task (W4, 200
 * roots x 1,000 children) through the C group API, counted by callgrind on
 * ONE worker, where the count does not depend on scheduling
 * (bench/c/groups_callgrind.sh runs it and divides). Usage:
 *   groups_callgrind w2 join|placed|heap
 *   groups_callgrind w4 placed|heap
 * placed = wspool_group_init/fini on the stack, heap = wspool_group_create/
 * destroy. Built against a header without wspool_group_init (an older
 * library), "placed" falls back to create/destroy. A third argument runs
 * the workload that many times (default 1): the script takes the
 * difference between 2 runs and 1, which leaves out the pool's start,
 * shutdown and first-use costs without client requests (callgrind's are
 * per thread). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libwspool.h"

#ifdef WSPOOL_GROUP_STORAGE_WORDS
#define PLACE(gs, p, g) wspool_group_init(&(gs), (p), (g))
#define UNPLACE(g) wspool_group_fini(g)
#else
typedef int wspool_group_storage;
#define PLACE(gs, p, g) ((void)(gs), wspool_group_create((p), (g)))
#define UNPLACE(g) wspool_group_destroy(g)
#endif

static wspool *pool;

typedef struct {
    int n;
    long r;
} fib_t;

static void fib_join(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    fib_t a = {f->n - 1, 0}, b = {f->n - 2, 0};
    wspool_join(pool, fib_join, &a, fib_join, &b);
    f->r = a.r + b.r;
}

static void fib_placed(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    fib_t a = {f->n - 1, 0}, b = {f->n - 2, 0};
    wspool_group_storage gs;
    wspool_group *g;
    PLACE(gs, pool, &g);
    wspool_group_submit(g, fib_placed, &b);
    fib_placed(&a);
    wspool_group_wait(g, -1);
    UNPLACE(g);
    f->r = a.r + b.r;
}

static void fib_heap(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    fib_t a = {f->n - 1, 0}, b = {f->n - 2, 0};
    wspool_group *g;
    wspool_group_create(pool, &g);
    wspool_group_submit(g, fib_heap, &b);
    fib_heap(&a);
    wspool_group_wait(g, -1);
    wspool_group_destroy(g);
    f->r = a.r + b.r;
}

static void child(void *arg) { atomic_fetch_add_explicit((atomic_long *)arg, 1, memory_order_relaxed); }

static void root_placed(void *arg) {
    wspool_group_storage gs;
    wspool_group *g;
    PLACE(gs, pool, &g);
    for (int i = 0; i < 1000; i++) wspool_group_submit(g, child, arg);
    wspool_group_wait(g, -1);
    UNPLACE(g);
}

static void root_heap(void *arg) {
    wspool_group *g;
    wspool_group_create(pool, &g);
    for (int i = 0; i < 1000; i++) wspool_group_submit(g, child, arg);
    wspool_group_wait(g, -1);
    wspool_group_destroy(g);
}

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
                      : (strcmp(v, "join") == 0 ? fib_join : strcmp(v, "heap") == 0 ? fib_heap : fib_placed);
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
