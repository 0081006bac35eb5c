/* The W2 and W4 task functions through libwspool's C API, shared by the
 * timed suite (bench_wspool.c) and the instruction counts
 * (groups_callgrind.c). The including file defines `static wspool *pool`
 * before including this. Built against a header without
 * wspool_group_init (an older library, for before/after counts), the
 * "placed" variants fall back to create/destroy. Inline: an includer need
 * not use every one. */
#ifndef WSPOOL_BENCH_WORKLOADS_H
#define WSPOOL_BENCH_WORKLOADS_H

#include <stdatomic.h>

#include "libwspool.h"

#ifndef W4_CHILDREN
#define W4_CHILDREN 1000
#endif

#ifdef WSPOOL_GROUP_STORAGE_WORDS
#define PLACE(gs, p, g) wspool_group_init(&(gs), (p), (g))
#define UNPLACE(g) wspool_group_fini(g)
#else
typedef int wspool_group_storage;
#define PLACE(gs, p, g) ((void)(gs), wspool_group_create((p), (g)))
#define UNPLACE(g) wspool_group_destroy(g)
#endif

typedef struct {
    int n;
    long r;
} fib_t;

/* W2: fib with wspool_join at every level */
static inline void fib_join(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    fib_t a = {f->n - 1, 0}, b = {f->n - 2, 0};
    wspool_join(pool, fib_join, &a, fib_join, &b);
    f->r = a.r + b.r;
}

/* One W2 level through group `g`: `self` runs the larger half here and
   the smaller one through the group. Always inlined, so that `self(&a)`
   stays a direct recursive call (callgrind: 795 instructions per level
   against 794 written out twice; 799 when left to gcc). */
static inline __attribute__((always_inline)) void fib_fork_in(wspool_group *g, wspool_fn self, fib_t *f) {
    fib_t a = {f->n - 1, 0}, b = {f->n - 2, 0};
    wspool_group_submit(g, self, &b);
    self(&a);
    wspool_group_wait(g, -1);
    f->r = a.r + b.r;
}

/* W2 with a group per level, placed on the stack (wspool_group_init) */
static inline void fib_group(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    wspool_group_storage gs;
    wspool_group *g;
    PLACE(gs, pool, &g);
    fib_fork_in(g, fib_group, f);
    UNPLACE(g);
}

/* The same with a heap group per level (wspool_group_create) */
static inline void fib_group_heap(void *arg) {
    fib_t *f = arg;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    wspool_group *g;
    wspool_group_create(pool, &g);
    fib_fork_in(g, fib_group_heap, f);
    wspool_group_destroy(g);
}

/* W4: a child counts itself; a root submits W4_CHILDREN of them through a
   group and waits for them */
static inline void child(void *arg) { atomic_fetch_add_explicit((atomic_long *)arg, 1, memory_order_relaxed); }

/* One W4 root's children through group `g`. */
static inline void children_in(wspool_group *g, void *counter) {
    for (int i = 0; i < W4_CHILDREN; i++) wspool_group_submit(g, child, counter);
    wspool_group_wait(g, -1);
}

static inline void root_placed(void *arg) {
    wspool_group_storage gs;
    wspool_group *g;
    PLACE(gs, pool, &g);
    children_in(g, arg);
    UNPLACE(g);
}

static inline void root_heap(void *arg) {
    wspool_group *g;
    wspool_group_create(pool, &g);
    children_in(g, arg);
    wspool_group_destroy(g);
}

#endif
