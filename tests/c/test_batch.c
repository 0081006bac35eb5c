/* wspool_submit_batch (issue 15): arguments, ownership of every arg, the
 * prefix rule on refusal, and batches racing a shutdown with exact
 * accounting (each accepted task's fn or on_cancel exactly once, neither
 * for a refused one). */
#include "harness.h"

static wspool_batch_item *items_for(slot_t *slots, int n) {
    wspool_batch_item *items = calloc((size_t)n, sizeof *items);
    for (int i = 0; i < n; i++) items[i] = (wspool_batch_item){slot_run, &slots[i]};
    return items;
}

static wspool_submit_opts cancel_opts(void) {
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = slot_cancel;
    return o;
}

static void test_batch_runs_every_task_once(void) {
    wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
    int n = 5000;
    slot_t *slots = calloc((size_t)n, sizeof *slots);
    wspool_batch_item *items = items_for(slots, n);
    size_t accepted = 99;
    OK(wspool_submit_batch(p, items, (size_t)n, NULL, &accepted));
    CHECK_EQ(accepted, n);
    /* global flag and an on_cancel that never runs: every task runs */
    wspool_submit_opts o = cancel_opts();
    o.flags = WSPOOL_SUBMIT_GLOBAL;
    OK(wspool_submit_batch(p, items, 10, &o, &accepted));
    CHECK_EQ(accepted, 10);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, MUST_MS));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += atomic_load(&slots[i].ran) != (i < 10 ? 2 : 1) || atomic_load(&slots[i].cancelled);
    CHECK_EQ(bad, 0);
    CHECK_EQ(get_stats(p).submitted, n + 10);
    wspool_destroy(p);
    free(items);
    free(slots);
}

static void test_batch_arguments(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    slot_t slots[4];
    memset(slots, 0, sizeof slots);
    wspool_batch_item *items = items_for(slots, 4);
    size_t accepted = 99;
    CHECK_EQ(wspool_submit_batch(p, items, 4, NULL, NULL), WSPOOL_EINVAL);
    CHECK(last_error_mentions("accepted"));
    CHECK_EQ(wspool_submit_batch(NULL, items, 4, NULL, &accepted), WSPOOL_EINVAL);
    CHECK_EQ(accepted, 0);
    accepted = 99;
    CHECK_EQ(wspool_submit_batch(p, NULL, 4, NULL, &accepted), WSPOOL_EINVAL);
    CHECK_EQ(accepted, 0);
    OK(wspool_submit_batch(p, NULL, 0, NULL, &accepted));
    CHECK_EQ(accepted, 0);
    /* one NULL fn refuses the whole batch before anything is submitted */
    items[2].fn = NULL;
    CHECK_EQ(wspool_submit_batch(p, items, 4, NULL, &accepted), WSPOOL_EINVAL);
    CHECK(last_error_mentions("items[2]"));
    CHECK_EQ(accepted, 0);
    items[2].fn = slot_run;
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.flags = 0x80;
    CHECK_EQ(wspool_submit_batch(p, items, 4, &o, &accepted), WSPOOL_EINVAL);
    CHECK(last_error_mentions("flags"));
    /* a group of another pool: refused as a whole, the caller keeps every arg */
    wspool *other = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    wspool_group *og = NULL;
    OK(wspool_group_create(other, &og));
    wspool_submit_opts_init(&o);
    o.group = og;
    o.on_cancel = slot_cancel;
    CHECK_EQ(wspool_submit_batch(p, items, 4, &o, &accepted), WSPOOL_EINVAL);
    CHECK(last_error_mentions("another pool"));
    CHECK_EQ(accepted, 0);
    /* on its own pool the batch counts toward the group */
    OK(wspool_submit_batch(other, items, 4, &o, &accepted));
    CHECK_EQ(accepted, 4);
    OK(wspool_group_wait(og, MUST_MS));
    wspool_group_destroy(og);
    wspool_destroy(other);
    wspool_destroy(p);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(atomic_load(&slots[i].ran), 1);
        CHECK_EQ(atomic_load(&slots[i].cancelled), 0);
    }
    free(items);
}

static void test_batch_refused_after_shutdown(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, MUST_MS));
    slot_t slots[8];
    memset(slots, 0, sizeof slots);
    wspool_batch_item *items = items_for(slots, 8);
    wspool_submit_opts o = cancel_opts();
    size_t accepted = 99;
    CHECK_EQ(wspool_submit_batch(p, items, 8, &o, &accepted), WSPOOL_ESHUTDOWN);
    CHECK_EQ(accepted, 0);
    wspool_destroy(p);
    for (int i = 0; i < 8; i++) CHECK(atomic_load(&slots[i].ran) == 0 && atomic_load(&slots[i].cancelled) == 0);
    free(items);
}

/* A full bounded queue accepts a prefix: the pool frees the accepted heap
 * args (through fn or on_cancel), the caller frees the rest; ASan and
 * valgrind see a double free or a leak if either side is wrong. */
static void test_batch_full_queue_accepts_a_prefix(void) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 1;
    cfg.max_threads = 1;
    cfg.growth = WSPOOL_GROWTH_FIXED;
    cfg.queue_capacity = 3;
    cfg.reject = WSPOOL_REJECT_ABORT;
    wspool *p = NULL;
    OK(wspool_create(&cfg, &p));
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 1);
    wspool_batch_item items[10];
    for (int i = 0; i < 10; i++) items[i] = (wspool_batch_item){owned_run, malloc(16)};
    wspool_submit_opts o;
    wspool_submit_opts_init(&o);
    o.on_cancel = owned_cancel;
    atomic_store(&owned_ran, 0);
    atomic_store(&owned_cancelled, 0);
    size_t accepted = 99;
    CHECK_EQ(wspool_submit_batch(p, items, 10, &o, &accepted), WSPOOL_EREJECTED);
    CHECK_EQ(accepted, 3);
    for (size_t i = accepted; i < 10; i++) free(items[i].arg);
    gate_open(&g);
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, MUST_MS));
    CHECK_EQ(atomic_load(&owned_ran), 3);
    CHECK_EQ(atomic_load(&owned_cancelled), 0);
    CHECK_EQ(get_stats(p).rejected, 1);
    wspool_destroy(p);
    gate_destroy(&g);
}

typedef struct {
    wspool *p;
    int mode;
    int rc;
} shutdown_arg_t;
static void *shutdown_bg(void *a) {
    shutdown_arg_t *s = a;
    s->rc = wspool_shutdown(s->p, s->mode, MUST_MS);
    return NULL;
}

/* Shutdown CANCEL calls each queued task's on_cancel exactly once. */
static void test_batch_cancelled_by_shutdown(void) {
    wspool *p = make_pool(1, 1, WSPOOL_GROWTH_FIXED);
    gate_t g;
    gate_init(&g);
    hold_workers(p, &g, 1);
    int n = 200;
    slot_t *slots = calloc((size_t)n, sizeof *slots);
    wspool_batch_item *items = items_for(slots, n);
    wspool_submit_opts o = cancel_opts();
    size_t accepted = 0;
    OK(wspool_submit_batch(p, items, (size_t)n, &o, &accepted));
    CHECK_EQ(accepted, n);
    shutdown_arg_t a = {p, WSPOOL_SHUTDOWN_CANCEL, 0};
    bg_t bg;
    bg_start(&bg, shutdown_bg, &a);
    /* the queued tasks are cancelled while the gate task still runs */
    int cancelled = 0;
    for (long waited = 0; waited < MUST_MS && cancelled < n; waited++) {
        cancelled = 0;
        for (int i = 0; i < n; i++) cancelled += atomic_load(&slots[i].cancelled);
        if (cancelled < n) sleep_ms(1);
    }
    gate_open(&g);
    CHECK(bg_wait(&bg, HANG_MS));
    CHECK_EQ(a.rc, WSPOOL_OK);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += atomic_load(&slots[i].cancelled) != 1 || atomic_load(&slots[i].ran) != 0;
    CHECK_EQ(bad, 0);
    CHECK_EQ(get_stats(p).cancelled, n);
    wspool_destroy(p);
    gate_destroy(&g);
    free(items);
    free(slots);
}

/* ---- batches racing a shutdown ------------------------------------------- */
#define RACE_THREADS 3
#define RACE_BATCH 64
typedef struct {
    wspool *p;
    slot_t *slots;
    int batches;
    int thread;
    size_t *accepted; /* per batch */
    atomic_int *go;
    int bad_status;
} racer_t;

static void *racer_main(void *a) {
    racer_t *r = a;
    wspool_submit_opts o = cancel_opts();
    while (!atomic_load(r->go)) sched_yield();
    for (int b = 0; b < r->batches; b++) {
        int base = (r->thread * r->batches + b) * RACE_BATCH;
        wspool_batch_item items[RACE_BATCH];
        for (int i = 0; i < RACE_BATCH; i++) items[i] = (wspool_batch_item){slot_run, &r->slots[base + i]};
        size_t acc = 99;
        int rc = wspool_submit_batch(r->p, items, RACE_BATCH, &o, &acc);
        /* an unbounded pool refuses only at shutdown, and a batch whole */
        if (!(rc == WSPOOL_OK && acc == RACE_BATCH) && !(rc == WSPOOL_ESHUTDOWN && acc == 0)) r->bad_status++;
        r->accepted[b] = acc;
    }
    return NULL;
}

static void test_batch_racing_shutdown(void) {
    int rounds = scaled(60);
    int batches = 40;
    long tot_ran = 0, tot_cancelled = 0, tot_refused = 0;
    for (int round = 0; round < rounds; round++) {
        int mode = round % 2 ? WSPOOL_SHUTDOWN_CANCEL : WSPOOL_SHUTDOWN_DRAIN;
        wspool *p = make_pool(2, 2, WSPOOL_GROWTH_FIXED);
        int total = RACE_THREADS * batches * RACE_BATCH;
        slot_t *slots = calloc((size_t)total, sizeof *slots);
        atomic_int go = 0;
        racer_t racers[RACE_THREADS];
        pthread_t th[RACE_THREADS];
        for (int t = 0; t < RACE_THREADS; t++) {
            racers[t] = (racer_t){p, slots, batches, t, calloc((size_t)batches, sizeof(size_t)), &go, 0};
            pthread_create(&th[t], NULL, racer_main, &racers[t]);
        }
        /* One worker is held until the shutdown has begun, so tasks queue
           up and a CANCEL finds some to cancel. */
        gate_t g;
        gate_init(&g);
        hold_workers(p, &g, 1);
        atomic_store(&go, 1);
        sleep_ms(round % 4);
        shutdown_arg_t a = {p, mode, 0};
        bg_t bg;
        bg_start(&bg, shutdown_bg, &a);
        sleep_ms(1);
        gate_open(&g);
        CHECK(bg_wait(&bg, HANG_MS));
        CHECK_EQ(a.rc, WSPOOL_OK);
        gate_destroy(&g);
        for (int t = 0; t < RACE_THREADS; t++) pthread_join(th[t], NULL);
        /* Closing point: once shutdown returned, every accepted task ran or
           was cancelled exactly once; refused ones were never touched. */
        int twice = 0, lost = 0, touched = 0, bad = 0;
        long ran = 0, cancelled = 0;
        for (int t = 0; t < RACE_THREADS; t++) {
            bad += racers[t].bad_status;
            for (int b = 0; b < batches; b++) {
                int base = (t * batches + b) * RACE_BATCH;
                for (int i = 0; i < RACE_BATCH; i++) {
                    slot_t *s = &slots[base + i];
                    int rn = atomic_load(&s->ran), c = atomic_load(&s->cancelled);
                    ran += rn;
                    cancelled += c;
                    if ((size_t)i < racers[t].accepted[b]) {
                        if (rn + c > 1) twice++;
                        if (rn + c == 0) lost++;
                        if (mode == WSPOOL_SHUTDOWN_DRAIN && c) lost++;
                    } else {
                        tot_refused++;
                        if (rn + c) touched++;
                    }
                }
            }
            free(racers[t].accepted);
        }
        CHECK_EQ(bad, 0);
        CHECK_EQ(twice, 0);
        CHECK_EQ(lost, 0);
        CHECK_EQ(touched, 0);
        wspool_stats st = get_stats(p);
        CHECK_EQ(st.completed, ran + 1); /* and the gate task */
        CHECK_EQ(st.cancelled, cancelled);
        tot_ran += ran;
        tot_cancelled += cancelled;
        wspool_destroy(p);
        free(slots);
        if (bad || twice || lost || touched) {
            fprintf(stderr, "  failed in round %d (mode %d)\n", round, mode);
            break;
        }
    }
    printf("        %d rounds: %ld ran, %ld cancelled, %ld refused\n", rounds, tot_ran, tot_cancelled, tot_refused);
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"batch_runs_every_task_once", test_batch_runs_every_task_once},
        {"batch_arguments", test_batch_arguments},
        {"batch_refused_after_shutdown", test_batch_refused_after_shutdown},
        {"batch_full_queue_accepts_a_prefix", test_batch_full_queue_accepts_a_prefix},
        {"batch_cancelled_by_shutdown", test_batch_cancelled_by_shutdown},
        {"batch_racing_shutdown", test_batch_racing_shutdown},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
