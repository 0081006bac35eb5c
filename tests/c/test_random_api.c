/* A random C API driver: seeded random sequences of calls from several threads
 * against one pool per round, with objects destroyed while their work is
 * pending, and a shutdown racing the submitters. Built for ASan with
 * LeakSanitizer in strict mode (mk/c.mk, test-c-random): a double free, a use
 * after free or a leak of anything, the library's own memory included, fails
 * the run.
 *
 * What each round does (all choices from the seed):
 * - a pool with a random config (1-3 threads, growth, bounded or unbounded
 *   queue, reject policy);
 * - DRIVERS threads, each doing OPS random calls: submit (plain, _ex with
 *   and without a handle and on_cancel, the global flag, a group or serial
 *   queue, batches), task wait/cancel/state/release (released while pending
 *   too), groups created, fed and destroyed while pending, placed groups
 *   (on the driver's stack, fini'd), serial queues destroyed while pending,
 *   joins, a completion queue fed, drained and closed (drain or cancel);
 * - tasks that themselves submit, join, place a group on their stack,
 *   open a blocking region, or place a group in heap storage and leave it
 *   unfinalised: after the pool is destroyed the main thread submits to it
 *   (refused) and finalises it;
 * - the main thread shuts the pool down (drain or cancel, with a random
 *   timeout) while the drivers still submit, then destroys it; shared
 *   groups and serial queues are destroyed before or after the pool.
 *
 * Invariants checked after each round, per task id (ownership as the header
 * states it):
 * - a task with on_cancel and a heap arg: fn or on_cancel ran exactly once
 *   (both free the arg: ASan reports a second call, LSan a missing one);
 * - a task without on_cancel (arg not owned by the heap): ran at most once,
 *   and exactly once in a round where nothing may drop a task unrun;
 * - a refused submission: neither function was called (the caller freed it);
 * - a completion queue submission: done exactly once, status RAN iff its
 *   work ran;
 * - wspool_task_cancel == OK: its on_cancel had returned before.
 *
 * WSPOOL_RANDOM_SEED=N replays a run (the seed is printed first);
 * WSPOOL_RANDOM_ROUNDS=N overrides the number of rounds, WSPOOL_RANDOM_FIRST=N
 * starts at round N (its seed is the same as in the whole run). */
#include "harness.h"

#include <inttypes.h>

/* ---- PRNG: splitmix64, one state per thread ---------------------------------- */
static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint32_t rng_below(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) % n); }
static inline int rng_chance(uint64_t *s, uint32_t percent) { return rng_below(s, 100) < percent; }

/* A short delay that does not give the CPU away: yielding on a loaded
 * machine waits for whole time slices of other processes, which made a run
 * of the driver minutes long while it did seconds of work. */
static inline void spin(uint32_t n) {
    for (volatile uint32_t i = 0; i < n; i++) {
    }
}

/* ---- per-task accounting ------------------------------------------------------ */
#define MAX_IDS (1u << 20)
enum { K_UNUSED, K_HEAP, K_SLOT, K_CQ };
typedef struct {
    atomic_uchar kind;     /* K_* */
    atomic_uchar accepted; /* 1 once its submit returned OK, 2 refused */
    atomic_uchar ran;
    atomic_uchar cancelled;
    atomic_uchar done;      /* completion queue: done calls */
    atomic_uchar done_ran;  /* completion queue: done's status was RAN */
} rec_t;
static rec_t recs[MAX_IDS];
static atomic_uint next_id;
static atomic_int id_overflow;

typedef struct round_s round_t;

/* A heap arg: freed by fn or on_cancel, whichever the pool calls. */
typedef struct {
    uint32_t id;
    uint32_t nested; /* what the task does besides counting (bits) */
    uint64_t seed;
    round_t *round;
} harg_t;

struct round_s {
    wspool *pool;
    atomic_int may_drop;   /* something may drop tasks without on_cancel unrun */
    atomic_int closing;    /* shutdown began: nested work may be refused */
    wspool_group *groups[3];
    wspool_serial *serials[2];
    uint64_t seed;
    int drivers;
    int ops;
    /* Groups tasks placed in heap storage and left unfinalised: the main
     * thread submits to them and finalises them after the pool is destroyed. */
    pthread_mutex_t orphans_lock;
    wspool_group_storage *orphans[64];
    int n_orphans;
};

static uint32_t new_id(int kind) {
    uint32_t id = atomic_fetch_add(&next_id, 1);
    if (id >= MAX_IDS) {
        atomic_store(&id_overflow, 1);
        id = MAX_IDS - 1; /* reported after the round; never checked */
    }
    atomic_store(&recs[id].kind, (unsigned char)kind);
    return id;
}
static void mark(uint32_t id, int rc) { atomic_store(&recs[id].accepted, rc == WSPOOL_OK ? 1 : 2); }

/* Slot tasks: the arg is the id itself (no memory to own). */
static void slot_fn(void *arg) { atomic_fetch_add(&recs[(uintptr_t)arg].ran, 1); }
static void *slot_arg(uint32_t id) { return (void *)(uintptr_t)id; }

static void nested_work(harg_t *a);

static void heap_fn(void *arg) {
    harg_t *a = arg;
    atomic_fetch_add(&recs[a->id].ran, 1);
    if (a->nested) nested_work(a);
    free(a);
}
static void heap_cancel(void *arg) {
    harg_t *a = arg;
    atomic_fetch_add(&recs[a->id].cancelled, 1);
    free(a);
}
static harg_t *new_heap(round_t *r, uint64_t *s, int nested_ok) {
    harg_t *a = malloc(sizeof *a);
    if (!a) abort();
    a->id = new_id(K_HEAP);
    a->nested = nested_ok && rng_chance(s, 25) ? (uint32_t)(1 + rng_below(s, 31)) : 0;
    a->seed = rng_next(s);
    a->round = r;
    return a;
}
/* Submits a heap arg: the id is read before the call (once accepted, the task
 * may already have freed the arg); the caller keeps and frees a refused one
 * (neither function ran). */
#define SUBMIT_HEAP(a, call)                                                     \
    do {                                                                         \
        uint32_t id_ = (a)->id;                                                  \
        int rc_ = (call);                                                        \
        mark(id_, rc_);                                                          \
        if (rc_ != WSPOOL_OK) free(a);                                           \
    } while (0)

/* What a task may do on a pool thread besides counting. */
static void nested_work(harg_t *a) {
    round_t *r = a->round;
    uint64_t s = a->seed;
    if (a->nested & 1) { /* submit a child with on_cancel */
        harg_t *c = new_heap(r, &s, 0);
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.on_cancel = heap_cancel;
        if (rng_chance(&s, 30)) o.flags = WSPOOL_SUBMIT_GLOBAL;
        SUBMIT_HEAP(c, wspool_submit_ex(r->pool, heap_fn, c, &o, NULL));
    }
    if (a->nested & 2) { /* a join of two slot tasks: both run before it returns */
        uint32_t x = new_id(K_SLOT), y = new_id(K_SLOT);
        int rc = wspool_join(r->pool, slot_fn, slot_arg(x), slot_fn, slot_arg(y));
        mark(x, WSPOOL_OK);
        mark(y, WSPOOL_OK);
        if (rc == WSPOOL_OK) { /* both halves have returned */
            CHECK_EQ(atomic_load(&recs[x].ran), 1);
            CHECK_EQ(atomic_load(&recs[y].ran), 1);
        } else {
            CHECK(rc == WSPOOL_ESHUTDOWN || rc == WSPOOL_EREJECTED);
            atomic_store(&r->may_drop, 1);
        }
    }
    if (a->nested & 4) { /* a group placed on this task's stack, fini'd here */
        wspool_group_storage st;
        wspool_group *g = NULL;
        int rc = wspool_group_init(&st, r->pool, &g);
        CHECK(rc == WSPOOL_OK || rc == WSPOOL_ESHUTDOWN);
        if (rc == WSPOOL_OK) {
            for (int i = 0; i < 3; i++) {
                harg_t *c = new_heap(r, &s, 0);
                wspool_submit_opts o;
                wspool_submit_opts_init(&o);
                o.on_cancel = heap_cancel;
                o.group = g;
                SUBMIT_HEAP(c, wspool_submit_ex(r->pool, heap_fn, c, &o, NULL));
            }
            OK(wspool_group_fini(g));
        }
    }
    if (a->nested & 16) { /* a group placed in heap storage, left to outlive this task and the pool */
        wspool_group_storage *st = malloc(sizeof *st);
        wspool_group *g = NULL;
        int rc = st ? wspool_group_init(st, r->pool, &g) : WSPOOL_ENOMEM;
        CHECK(rc == WSPOOL_OK || rc == WSPOOL_ESHUTDOWN);
        int kept = 0;
        if (rc == WSPOOL_OK) {
            uint32_t id = new_id(K_SLOT);
            mark(id, wspool_group_submit(g, slot_fn, slot_arg(id)));
            pthread_mutex_lock(&r->orphans_lock);
            if (r->n_orphans < (int)(sizeof r->orphans / sizeof r->orphans[0])) {
                r->orphans[r->n_orphans++] = st;
                kept = 1;
            }
            pthread_mutex_unlock(&r->orphans_lock);
            if (!kept) OK(wspool_group_fini(g));
        }
        if (!kept) free(st);
    }
    if (a->nested & 8) { /* a blocking region around nothing much */
        wspool_blocking_begin();
        spin(100);
        wspool_blocking_end();
    }
}

/* ---- completion queue: done frees the arg ------------------------------------ */
static void cq_work(void *arg) { atomic_fetch_add(&recs[((harg_t *)arg)->id].ran, 1); }
static void cq_done(void *arg, int status) {
    harg_t *a = arg;
    atomic_fetch_add(&recs[a->id].done, 1);
    if (status == WSPOOL_CQ_RAN) atomic_fetch_add(&recs[a->id].done_ran, 1);
    free(a);
}

/* ---- one driver thread -------------------------------------------------------- */
#define HANDLES 8
typedef struct {
    round_t *r;
    uint64_t seed;
    int index;
} driver_t;

static void submit_opts_random(uint64_t *s, wspool_submit_opts *o, round_t *r, wspool_group *own,
                               wspool_serial *own_serial) {
    wspool_submit_opts_init(o);
    o->on_cancel = heap_cancel;
    if (rng_chance(s, 20)) o->flags = WSPOOL_SUBMIT_GLOBAL;
    switch (rng_below(s, 6)) {
    case 0: o->group = r->groups[rng_below(s, 3)]; break;
    case 1: o->serial = r->serials[rng_below(s, 2)]; break;
    case 2: o->group = own; break;
    case 3: o->serial = own_serial; break;
    default: break;
    }
}

static void *driver_main(void *arg) {
    driver_t *d = arg;
    round_t *r = d->r;
    uint64_t s = d->seed;
    wspool_task *handles[HANDLES] = {0};
    uint32_t handle_ids[HANDLES] = {0};
    int handle_heap[HANDLES] = {0}; /* what the handle's task is: 0 slot arg, 1 heap arg with on_cancel, 2 cq */
    wspool_group *own = NULL;
    wspool_serial *own_serial = NULL;
    wspool_cq *cq = NULL;
    if (wspool_group_create(r->pool, &own) != WSPOOL_OK) own = NULL;
    if (wspool_serial_create(r->pool, &own_serial) != WSPOOL_OK) own_serial = NULL;
    if (rng_chance(&s, 60)) {
        wspool_cq_opts co;
        wspool_cq_opts_init(&co);
        if (rng_chance(&s, 30)) co.cap = 4 + rng_below(&s, 8);
        if (rng_chance(&s, 30)) co.flags = WSPOOL_CQ_GLOBAL;
        if (wspool_cq_create(r->pool, &co, &cq) != WSPOOL_OK) cq = NULL;
    }
    for (int op = 0; op < r->ops; op++) {
        uint32_t what = rng_below(&s, 20);
        switch (what) {
        case 0: case 1: case 2: { /* plain submit: slot arg, no on_cancel */
            uint32_t id = new_id(K_SLOT);
            mark(id, wspool_submit(r->pool, slot_fn, slot_arg(id)));
            break;
        }
        case 3: case 4: case 5: { /* _ex with on_cancel, maybe a handle */
            harg_t *a = new_heap(r, &s, 1);
            wspool_submit_opts o;
            submit_opts_random(&s, &o, r, own, own_serial);
            int slot = rng_below(&s, HANDLES);
            int want = handles[slot] == NULL && rng_chance(&s, 60);
            wspool_task *t = NULL;
            uint32_t id = a->id;
            int rc = wspool_submit_ex(r->pool, heap_fn, a, &o, want ? &t : NULL);
            mark(id, rc);
            if (rc != WSPOOL_OK) free(a);
            if (rc == WSPOOL_OK && want) {
                handles[slot] = t;
                handle_ids[slot] = id;
                handle_heap[slot] = 1;
            }
            break;
        }
        case 6: { /* _ex with a handle and no on_cancel: slot arg */
            uint32_t id = new_id(K_SLOT);
            int slot = rng_below(&s, HANDLES);
            wspool_task *t = NULL;
            int want = handles[slot] == NULL;
            int rc = wspool_submit_ex(r->pool, slot_fn, slot_arg(id), NULL, want ? &t : NULL);
            mark(id, rc);
            if (rc == WSPOOL_OK && want) {
                handles[slot] = t;
                handle_ids[slot] = id;
                handle_heap[slot] = 0;
                /* cancelling this one drops a task without on_cancel */
            }
            break;
        }
        case 7: case 8: { /* a handle: wait, cancel, state or release */
            int slot = rng_below(&s, HANDLES);
            wspool_task *t = handles[slot];
            if (!t) break;
            switch (rng_below(&s, 4)) {
            case 0: {
                int64_t timeout = rng_chance(&s, 50) ? -1 : (int64_t)rng_below(&s, 3);
                int rc = wspool_task_wait(t, timeout);
                CHECK(rc == WSPOOL_OK || rc == WSPOOL_ECANCELLED || rc == WSPOOL_ETIMEDOUT);
                if (timeout == -1) CHECK(rc != WSPOOL_ETIMEDOUT);
                break;
            }
            case 1: {
                if (handle_heap[slot] == 0) atomic_store(&r->may_drop, 1);
                int rc = wspool_task_cancel(t);
                CHECK(rc == WSPOOL_OK || rc == WSPOOL_EBUSY || rc == WSPOOL_ECANCELLED);
                if (rc == WSPOOL_OK && handle_heap[slot] == 1) CHECK_EQ(atomic_load(&recs[handle_ids[slot]].cancelled), 1);
                if (rc == WSPOOL_OK) CHECK_EQ(atomic_load(&recs[handle_ids[slot]].ran), 0);
                break;
            }
            case 2: {
                int st = wspool_task_state(t);
                CHECK(st >= WSPOOL_TASK_PENDING && st <= WSPOOL_TASK_CANCELLED);
                break;
            }
            default:
                wspool_task_release(t); /* pending or not */
                handles[slot] = NULL;
                break;
            }
            break;
        }
        case 9: { /* a group of our own: fed, then waited or destroyed while pending */
            if (!own) break;
            for (int i = 0, n = 1 + rng_below(&s, 4); i < n; i++) {
                uint32_t id = new_id(K_SLOT);
                mark(id, wspool_group_submit(own, slot_fn, slot_arg(id)));
            }
            if (rng_chance(&s, 40)) {
                int rc = wspool_group_wait(own, rng_chance(&s, 50) ? -1 : 1);
                CHECK(rc == WSPOOL_OK || rc == WSPOOL_ETIMEDOUT);
            } else if (rng_chance(&s, 50)) {
                wspool_group_destroy(own); /* tasks pending: freed after the last */
                if (wspool_group_create(r->pool, &own) != WSPOOL_OK) own = NULL;
            }
            break;
        }
        case 10: { /* a shared group or serial queue */
            uint32_t id = new_id(K_SLOT);
            if (rng_chance(&s, 50)) mark(id, wspool_group_submit(r->groups[rng_below(&s, 3)], slot_fn, slot_arg(id)));
            else mark(id, wspool_serial_submit(r->serials[rng_below(&s, 2)], slot_fn, slot_arg(id)));
            break;
        }
        case 11: { /* our serial queue: fed, maybe destroyed while pending */
            if (!own_serial) break;
            for (int i = 0, n = 1 + rng_below(&s, 4); i < n; i++) {
                uint32_t id = new_id(K_SLOT);
                mark(id, wspool_serial_submit(own_serial, slot_fn, slot_arg(id)));
            }
            if (rng_chance(&s, 40)) {
                wspool_serial_destroy(own_serial);
                if (wspool_serial_create(r->pool, &own_serial) != WSPOOL_OK) own_serial = NULL;
            }
            break;
        }
        case 12: { /* a group placed on this thread's stack */
            wspool_group_storage st;
            wspool_group *g = NULL;
            int rc = wspool_group_init(&st, r->pool, &g);
            CHECK(rc == WSPOOL_OK || rc == WSPOOL_ESHUTDOWN);
            if (rc != WSPOOL_OK) break;
            for (int i = 0, n = 1 + rng_below(&s, 4); i < n; i++) {
                harg_t *a = new_heap(r, &s, 1);
                wspool_submit_opts o;
                wspool_submit_opts_init(&o);
                o.on_cancel = heap_cancel;
                o.group = g;
                SUBMIT_HEAP(a, wspool_submit_ex(r->pool, heap_fn, a, &o, NULL));
            }
            if (rng_chance(&s, 30)) {
                int rc2 = wspool_group_wait(g, 0);
                CHECK(rc2 == WSPOOL_OK || rc2 == WSPOOL_ETIMEDOUT);
            }
            OK(wspool_group_fini(g));
            break;
        }
        case 13: { /* a batch with on_cancel: the caller frees the refused rest */
            enum { N = 6 };
            wspool_batch_item items[N];
            harg_t *args[N];
            size_t n = 1 + rng_below(&s, N);
            for (size_t i = 0; i < n; i++) {
                args[i] = new_heap(r, &s, 1);
                items[i].fn = heap_fn;
                items[i].arg = args[i];
            }
            wspool_submit_opts o;
            submit_opts_random(&s, &o, r, own, own_serial);
            size_t accepted = 0;
            uint32_t ids[N];
            for (size_t i = 0; i < n; i++) ids[i] = args[i]->id;
            int rc = wspool_submit_batch(r->pool, items, n, &o, &accepted);
            CHECK(accepted <= n);
            CHECK((rc == WSPOOL_OK) == (accepted == n));
            for (size_t i = 0; i < n; i++) {
                if (i < accepted) mark(ids[i], WSPOOL_OK);
                else {
                    mark(ids[i], rc == WSPOOL_OK ? WSPOOL_EINVAL : rc);
                    free(args[i]);
                }
            }
            break;
        }
        case 14: { /* a join from this (foreign) thread */
            uint32_t x = new_id(K_SLOT), y = new_id(K_SLOT);
            int rc = wspool_join(r->pool, slot_fn, slot_arg(x), slot_fn, slot_arg(y));
            if (rc == WSPOOL_OK) {
                mark(x, WSPOOL_OK);
                mark(y, WSPOOL_OK);
                CHECK_EQ(atomic_load(&recs[x].ran), 1);
                CHECK_EQ(atomic_load(&recs[y].ran), 1);
            } else {
                CHECK(rc == WSPOOL_ESHUTDOWN || rc == WSPOOL_EREJECTED);
                mark(x, WSPOOL_OK);
                mark(y, WSPOOL_OK);
                atomic_store(&r->may_drop, 1);
            }
            break;
        }
        case 15: case 16: { /* the completion queue */
            if (!cq) break;
            if (rng_chance(&s, 70)) {
                harg_t *a = new_heap(r, &s, 0);
                atomic_store(&recs[a->id].kind, K_CQ);
                uint32_t id = a->id;
                /* Sometimes with a handle (wspool_cq_submit_task), which case 7/8 may cancel:
                 * done must still run exactly once, and never after its work ran. */
                int slot = rng_below(&s, HANDLES);
                wspool_task *t = NULL;
                int with_handle = handles[slot] == NULL && rng_chance(&s, 50);
                int rc = with_handle ? wspool_cq_submit_task(cq, cq_work, cq_done, a, NULL, &t)
                                     : wspool_cq_submit(cq, cq_work, cq_done, a);
                mark(id, rc);
                if (rc != WSPOOL_OK) free(a);
                if (rc == WSPOOL_OK && with_handle) {
                    handles[slot] = t;
                    handle_ids[slot] = id;
                    handle_heap[slot] = 2;
                }
            } else {
                int rc = wspool_cq_drain(cq, rng_below(&s, 4));
                CHECK(rc >= 0);
            }
            break;
        }
        case 17: { /* close the completion queue (maybe cancelling) and open another */
            if (!cq) break;
            OK(wspool_cq_close(cq, rng_chance(&s, 50) ? WSPOOL_CQ_CLOSE_CANCEL : WSPOOL_CQ_CLOSE_DRAIN, -1));
            cq = NULL;
            if (wspool_cq_create(r->pool, NULL, &cq) != WSPOOL_OK) cq = NULL;
            break;
        }
        case 18: { /* stats and a poll of the pool */
            wspool_stats st;
            wspool_stats_init(&st);
            int rc = wspool_stats_get(r->pool, &st);
            CHECK(rc == WSPOOL_OK);
            break;
        }
        default:
            spin(rng_below(&s, 2000));
            break;
        }
    }
    /* Leave: handles released (some still pending), own objects destroyed
     * with work pending, the completion queue closed. */
    for (int i = 0; i < HANDLES; i++) {
        if (handles[i] && rng_chance(&s, 50)) {
            int rc = wspool_task_wait(handles[i], -1);
            CHECK(rc == WSPOOL_OK || rc == WSPOOL_ECANCELLED);
        }
        wspool_task_release(handles[i]);
    }
    if (cq) OK(wspool_cq_close(cq, rng_chance(&s, 50) ? WSPOOL_CQ_CLOSE_CANCEL : WSPOOL_CQ_CLOSE_DRAIN, -1));
    wspool_group_destroy(own);
    wspool_serial_destroy(own_serial);
    return NULL;
}

/* ---- a round ------------------------------------------------------------------- */
static void run_round(uint64_t seed, int round_no) {
    static const int growths[] = {WSPOOL_GROWTH_ADAPTIVE, WSPOOL_GROWTH_SCALE_FIRST, WSPOOL_GROWTH_QUEUE_FIRST,
                                  WSPOOL_GROWTH_FIXED};
    static const int rejects[] = {WSPOOL_REJECT_ABORT, WSPOOL_REJECT_CALLER_RUNS, WSPOOL_REJECT_BLOCK,
                                  WSPOOL_REJECT_DISCARD_OLDEST};
    uint64_t s = seed;
    round_t r;
    memset(&r, 0, sizeof r);
    r.seed = seed;
    r.drivers = 2 + (int)rng_below(&s, 3);
    r.ops = 20 + (int)rng_below(&s, 60);
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 1 + rng_below(&s, 3);
    cfg.max_threads = cfg.min_threads + rng_below(&s, 3);
    cfg.growth = growths[rng_below(&s, 4)];
    if (cfg.growth == WSPOOL_GROWTH_FIXED) cfg.max_threads = cfg.min_threads;
    if (cfg.growth == WSPOOL_GROWTH_QUEUE_FIRST || rng_chance(&s, 40)) { /* QUEUE_FIRST needs a bound */
        cfg.queue_capacity = 4 + rng_below(&s, 32);
        cfg.reject = rejects[rng_below(&s, 4)];
        cfg.block_timeout_ms = 2;
    }
    cfg.spin_max_us = rng_chance(&s, 50) ? 0 : 50;
    cfg.keep_alive_ms = 50;
    if (cfg.reject == WSPOOL_REJECT_DISCARD_OLDEST) atomic_store(&r.may_drop, 1);
    uint32_t first_id = atomic_load(&next_id);
    pthread_mutex_init(&r.orphans_lock, NULL);
    OK(wspool_create(&cfg, &r.pool));
    if (!r.pool) return;
    for (int i = 0; i < 3; i++) OK(wspool_group_create(r.pool, &r.groups[i]));
    for (int i = 0; i < 2; i++) OK(wspool_serial_create(r.pool, &r.serials[i]));

    enum { MAX_DRIVERS = 4 };
    pthread_t th[MAX_DRIVERS];
    driver_t d[MAX_DRIVERS];
    for (int i = 0; i < r.drivers; i++) {
        d[i] = (driver_t){&r, rng_next(&s), i};
        if (pthread_create(&th[i], NULL, driver_main, &d[i]) != 0) abort();
    }
    /* The shutdown races the drivers, which go on submitting after it. */
    int shutdown_first = rng_chance(&s, 60);
    if (shutdown_first) {
        spin(rng_below(&s, 200000));
        int mode = rng_chance(&s, 50) ? WSPOOL_SHUTDOWN_CANCEL : WSPOOL_SHUTDOWN_DRAIN;
        if (mode == WSPOOL_SHUTDOWN_CANCEL) atomic_store(&r.may_drop, 1);
        atomic_store(&r.closing, 1);
        int64_t timeout = rng_chance(&s, 50) ? -1 : (int64_t)rng_below(&s, 3);
        int rc = wspool_shutdown(r.pool, mode, timeout);
        CHECK(rc == WSPOOL_OK || (timeout >= 0 && rc == WSPOOL_ETIMEDOUT));
        /* A timed-out shutdown is finished by calling again (the header's
         * rule): a submission that was in flight lands after the pool's last
         * thread exited, and nothing runs or cancels it (nor releases a
         * driver waiting for it) until that next call. */
        if (rc == WSPOOL_ETIMEDOUT) OK(wspool_shutdown(r.pool, mode, -1));
    }
    for (int i = 0; i < r.drivers; i++) pthread_join(th[i], NULL);
    /* Shared groups and queues: destroyed before or after their pool. */
    int objects_after = rng_chance(&s, 50);
    if (!objects_after) {
        for (int i = 0; i < 3; i++) wspool_group_destroy(r.groups[i]);
        for (int i = 0; i < 2; i++) wspool_serial_destroy(r.serials[i]);
    }
    wspool_destroy(r.pool);
    if (objects_after) {
        for (int i = 0; i < 3; i++) wspool_group_destroy(r.groups[i]);
        for (int i = 0; i < 2; i++) wspool_serial_destroy(r.serials[i]);
    }
    /* Groups placed by tasks outlive the pool: a submission is refused, and
     * fini returns (ASan sees any read of the destroyed pool's memory). */
    for (int i = 0; i < r.n_orphans; i++) {
        wspool_group *g = (wspool_group *)r.orphans[i];
        uint32_t id = new_id(K_SLOT);
        int rc = wspool_group_submit(g, slot_fn, slot_arg(id));
        CHECK_EQ(rc, WSPOOL_ESHUTDOWN);
        mark(id, rc);
        OK(wspool_group_wait(g, -1));
        OK(wspool_group_fini(g));
        free(r.orphans[i]);
    }
    pthread_mutex_destroy(&r.orphans_lock);

    /* Every task of the round is finished now (destroy drains and joins). */
    uint32_t last_id = atomic_load(&next_id);
    if (last_id > MAX_IDS) last_id = MAX_IDS - 1;
    int may_drop = atomic_load(&r.may_drop);
    int bad = 0;
    for (uint32_t id = first_id; id < last_id; id++) {
        rec_t *x = &recs[id];
        int kind = atomic_load(&x->kind), acc = atomic_load(&x->accepted);
        int ran = atomic_load(&x->ran), can = atomic_load(&x->cancelled);
        const char *why = NULL;
        if (acc == 2) {
            if (kind != K_CQ && (ran || can)) why = "a refused task was run or cancelled";
            if (kind == K_CQ && (ran || atomic_load(&x->done))) why = "a refused cq submission ran or completed";
        } else if (acc != 1) {
            why = "an id never submitted";
        } else if (kind == K_HEAP) {
            if (ran + can != 1) why = "a task with on_cancel did not end exactly once";
        } else if (kind == K_SLOT) {
            if (can != 0 || ran > 1) why = "a task without on_cancel ran twice or was cancelled";
            else if (!may_drop && ran != 1) why = "a task was lost (nothing could drop it)";
        } else if (kind == K_CQ) {
            int done = atomic_load(&x->done), done_ran = atomic_load(&x->done_ran);
            if (done != 1) why = "a cq submission's done did not run exactly once";
            else if (done_ran != ran) why = "a cq status disagrees with its work";
        }
        if (why) {
            if (bad++ < 5)
                fprintf(stderr, "  round %d (seed %" PRIu64 "): task %u (kind %d, accepted %d, ran %d, cancelled %d): %s\n",
                        round_no, seed, id, kind, acc, ran, can, why);
        }
    }
    CHECK_EQ(bad, 0);
}

/* LeakSanitizer's recoverable check, present in an ASan build (weak: absent
 * elsewhere). Called between rounds, when every pool, group, queue and
 * driver thread of the rounds before is gone, so a leak is pinned on a few
 * rounds rather than found at exit. Not after every round: each check stops
 * the world, which takes long on a loaded machine. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));
#define LEAK_CHECK_EVERY 25

static uint64_t base_seed;

static void test_random_api(void) {
    const char *rs = getenv("WSPOOL_RANDOM_ROUNDS");
    int rounds = rs ? atoi(rs) : scaled(1500);
    /* WSPOOL_RANDOM_FIRST=N starts at round N of the seed's sequence (to
     * replay one round: WSPOOL_RANDOM_FIRST=N WSPOOL_RANDOM_ROUNDS=N+1). */
    const char *fs = getenv("WSPOOL_RANDOM_FIRST");
    int first = fs ? atoi(fs) : 0;
    uint64_t s = base_seed;
    for (int i = 0; i < first; i++) rng_next(&s);
    for (int i = first; i < rounds; i++) {
        uint64_t seed = rng_next(&s);
        run_round(seed, i);
        if ((i + 1) % LEAK_CHECK_EVERY == 0 && __lsan_do_recoverable_leak_check &&
            __lsan_do_recoverable_leak_check()) {
            fprintf(stderr, "  LeakSanitizer: rounds %d..%d leaked (report above)\n", i + 1 - LEAK_CHECK_EVERY, i);
            atomic_fetch_add(&t_failed_checks, 1);
        }
        if (atomic_load(&id_overflow)) {
            fprintf(stderr, "  ran out of task ids after %d rounds\n", i + 1);
            break;
        }
        if (atomic_load(&t_failed_checks)) {
            fprintf(stderr, "  stopping after round %d; replay it with WSPOOL_RANDOM_SEED=%" PRIu64
                    " WSPOOL_RANDOM_FIRST=%d\n", i, base_seed, i);
            break;
        }
    }
    printf("random api: %d rounds, %u tasks\n", rounds, atomic_load(&next_id));
}

int main(int argc, char **argv) {
    const char *env = getenv("WSPOOL_RANDOM_SEED");
    base_seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("random api: seed %" PRIu64 " (WSPOOL_RANDOM_SEED=%" PRIu64 " replays it)\n", base_seed, base_seed);
    fflush(stdout);
    static const test_case tests[] = {
        {"random_api", test_random_api},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
