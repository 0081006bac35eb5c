/* Shutdown as a closing point (issue 9, items 4-5, and the stress
 * test): a draining pool keeps lending threads to blocking regions, and
 * submissions racing a shutdown are never stranded: when wspool_shutdown
 * returns OK every accepted task has run or had its on_cancel called, exactly
 * once, and every waiter returns. Every wait that could hang runs under a
 * hang guard (harness.h), so a broken pool fails a CHECK instead of stalling
 * the run. Run by `make test-c` plain, under ASan+UBSan, under TSan and under
 * valgrind; arguments select tests by substring. */
#include "harness.h"

/* ------------------------------- drain keeps the pool growing (5) ------- */

/* Three declared-blocking tasks that can only finish together. They wait at
 * `start` first, so the test can open it only once the drain has begun. */
typedef struct {
    gate_t start;
    pthread_mutex_t m;
    pthread_cond_t c;
    int arrived, broken;
    atomic_int met;
} meet_t;
static void meet_task(void *a) {
    meet_t *b = a;
    gate_pass(&b->start);
    wspool_blocking_begin();
    pthread_mutex_lock(&b->m);
    if (++b->arrived == 3) pthread_cond_broadcast(&b->c);
    while (b->arrived < 3 && !b->broken) pthread_cond_wait(&b->c, &b->m);
    int met = b->arrived >= 3;
    pthread_mutex_unlock(&b->m);
    wspool_blocking_end();
    if (met) atomic_fetch_add(&b->met, 1);
}
static void *bg_destroy(void *p) {
    wspool_destroy(p);
    return NULL;
}
static void *bg_drain(void *p) {
    OK(wspool_shutdown(p, WSPOOL_SHUTDOWN_DRAIN, -1));
    return NULL;
}

/* Item 5: a draining pool keeps lending threads to blocking regions. */
static void test_drain_keeps_blocking_growth(void) {
    int rounds = 2 * scaled(5);
    for (int r = 0; r < rounds; r++) {
        int destroy = r % 2 == 0;
        wspool *p = make_pool(2, 8, WSPOOL_GROWTH_ADAPTIVE);
        wspool_group *probe = NULL; /* a handle that outlives the pool: tells when the drain began */
        OK(wspool_group_create(p, &probe));
        meet_t m;
        gate_init(&m.start);
        pthread_mutex_init(&m.m, NULL);
        pthread_cond_init(&m.c, NULL);
        m.arrived = m.broken = 0;
        atomic_init(&m.met, 0);
        for (int i = 0; i < 3; i++) OK(wspool_submit(p, meet_task, &m));
        bg_t bg;
        bg_start(&bg, destroy ? bg_destroy : bg_drain, p);
        int began = 0;
        for (long waited = 0; !began && waited < HANG_MS; waited++) {
            began = wspool_group_submit(probe, task_nop, NULL) == WSPOOL_ESHUTDOWN;
            if (!began) sleep_ms(1);
        }
        CHECK(began);
        gate_open(&m.start); /* only now can the running tasks declare blocking */
        int returned = bg_wait(&bg, HANG_MS);
        if (!returned) {
            fprintf(stderr, "  round %d: %s hangs on 3 blocking tasks on a min-2 pool\n", r,
                    destroy ? "wspool_destroy" : "wspool_shutdown(DRAIN)");
            CHECK(!"draining pool stopped lending threads");
            pthread_mutex_lock(&m.m); /* release the two that started */
            m.broken = 1;
            pthread_cond_broadcast(&m.c);
            pthread_mutex_unlock(&m.m);
            bg_join(&bg);
        }
        if (!destroy) wspool_destroy(p);
        wspool_group_destroy(probe);
        if (returned) CHECK_EQ(atomic_load(&m.met), 3);
        gate_destroy(&m.start);
        pthread_mutex_destroy(&m.m);
        pthread_cond_destroy(&m.c);
        if (!returned) return; /* one hang says it; the next rounds would repeat it */
    }
}

/* ----------------------------- submissions racing shutdown (4, stress) -- */

/* One round: `subs` threads submit up to `per` tasks each (every one with an
 * on_cancel) while another thread shuts the pool down in `mode`. When the
 * shutdown returns OK every accepted task has run or been cancelled, exactly
 * once; every waiter (task handles, the group) returns. */
typedef struct {
    int subs, per, mixed, mode, delay_us;
    int features; /* issue 29: priorities, deadlines (past and far) and a lane of 2 mixed in */
} race_cfg_t;

typedef struct {
    race_cfg_t cfg;
    wspool *pool;
    wspool_group *group;
    wspool_serial *serial[2];
    slot_t *slots;
    unsigned char *accepted; /* 2: accepted before the shutdown began, 1: after */
    /* wspool_task_cancel returned OK: 1 for a call begun before the shutdown
       returned, 2 after (so the task was still pending after the close) */
    unsigned char *cancel_ok;
    unsigned char *at_close; /* ran + cancelled when the shutdown returned */
    atomic_int stop;   /* set just before the shutdown call */
    atomic_int closed; /* set once it returned */
    int shutdown_rc;
    atomic_int bad_submit, bad_cancel, bad_wait, early_ok;
    unsigned char *expired; /* on_cancel told WSPOOL_TASK_EXPIRED (features only) */
} race_t;

/* The race in progress (one at a time): on_cancel finds its slot's index from it. */
static race_t *RACE;

/* on_cancel of the features stress: counts the drop like slot_cancel, and whether it was an expiry. */
static void slot_cancel_or_expire(void *a) {
    slot_t *s = a;
    if (wspool_cancel_reason() == WSPOOL_TASK_EXPIRED) RACE->expired[s - RACE->slots]++;
    slot_cancel(a);
}

typedef struct {
    race_t *r;
    int id;
} sub_t;

static void busy_run(void *a) {
    for (volatile int i = 0; i < 200; i++) {
    }
    slot_run(a);
}

static void *race_submitter(void *a) {
    sub_t *sa = a;
    race_t *r = sa->r;
    int per = r->cfg.per;
    wspool_task **handles = calloc((size_t)per, sizeof *handles);
    int nh = 0;
    for (int i = 0; i < per; i++) {
        int idx = sa->id * per + i;
        wspool_submit_opts o;
        wspool_submit_opts_init(&o);
        o.on_cancel = slot_cancel;
        wspool_task *t = NULL;
        wspool_task **out = &t;
        if (r->cfg.features) {
            static const int prio[3] = {WSPOOL_PRIORITY_LOW, WSPOOL_PRIORITY_NORMAL, WSPOOL_PRIORITY_HIGH};
            o.on_cancel = slot_cancel_or_expire;
            o.priority = prio[(i + sa->id) % 3];
            if (i % 5 == 0) o.deadline_ns = wspool_now_ns();                               /* expires */
            if (i % 5 == 1) o.deadline_ns = wspool_now_ns() + 3600ull * 1000000000ull;     /* runs */
        }
        if (r->cfg.mixed) {
            switch ((i + sa->id) % 4) {
            case 0: break;                                                    /* plain */
            case 1: o.group = r->group; out = NULL; break;                    /* group */
            case 2: o.serial = r->serial[sa->id % 2]; break;                  /* serial */
            default: o.group = r->group; o.serial = r->serial[(sa->id + 1) % 2]; out = NULL; /* both */
            }
        }
        int rc = wspool_submit_ex(r->pool, busy_run, &r->slots[idx], &o, out);
        if (rc != WSPOOL_OK) {
            if (rc != WSPOOL_ESHUTDOWN || !atomic_load(&r->stop)) atomic_fetch_add(&r->bad_submit, 1);
            break; /* refused: the pool is closed */
        }
        r->accepted[idx] = atomic_load(&r->stop) ? 1 : 2;
        if (!t) continue;
        if (i % 3 == 0) {
            int late = atomic_load(&r->closed);
            int c = wspool_task_cancel(t);
            if (c == WSPOOL_OK) {
                r->cancel_ok[idx] = late ? 2 : 1;
                if (atomic_load(&r->slots[idx].cancelled) != 1) atomic_fetch_add(&r->early_ok, 1);
            } else if (c != WSPOOL_EBUSY && c != WSPOOL_ECANCELLED && c != WSPOOL_EEXPIRED) {
                atomic_fetch_add(&r->bad_cancel, 1);
            }
        }
        handles[nh++] = t;
    }
    /* waiters: they must all return, whatever the shutdown did */
    for (int k = 0; k < nh; k++) {
        int w = wspool_task_wait(handles[k], -1);
        if (w != WSPOOL_OK && w != WSPOOL_ECANCELLED && w != WSPOOL_EEXPIRED) atomic_fetch_add(&r->bad_wait, 1);
        int st = wspool_task_state(handles[k]);
        if (st != WSPOOL_TASK_DONE && st != WSPOOL_TASK_CANCELLED && st != WSPOOL_TASK_EXPIRED)
            atomic_fetch_add(&r->bad_wait, 1);
        wspool_task_release(handles[k]);
    }
    if (wspool_group_wait(r->group, -1) != WSPOOL_OK) atomic_fetch_add(&r->bad_wait, 1);
    free(handles);
    return NULL;
}

static void *race_shutdown(void *a) {
    race_t *r = a;
    struct timespec ts = {0, r->cfg.delay_us * 1000L};
    nanosleep(&ts, NULL);
    atomic_store(&r->stop, 1);
    r->shutdown_rc = wspool_shutdown(r->pool, r->cfg.mode, -1);
    atomic_store(&r->closed, 1);
    int n = r->cfg.subs * r->cfg.per;
    for (int i = 0; i < n; i++)
        r->at_close[i] = (unsigned char)(atomic_load(&r->slots[i].ran) + atomic_load(&r->slots[i].cancelled));
    return NULL;
}

typedef struct {
    long accepted, ran, cancelled;
} race_totals_t;

/* Returns 0 once a round failed (the caller stops: one failure says it). */
static int race_round(const race_cfg_t *cfg, race_totals_t *tot) {
    enum { MAX_SUBS = 8 };
    int n = cfg->subs * cfg->per;
    race_t r;
    memset(&r, 0, sizeof r);
    r.cfg = *cfg;
    r.pool = make_pool(2, 4, WSPOOL_GROWTH_ADAPTIVE);
    if (!r.pool) return 0;
    OK(wspool_group_create(r.pool, &r.group));
    OK(wspool_serial_create(r.pool, &r.serial[0]));
    if (cfg->features)
        OK(wspool_lane_create(r.pool, 2, WSPOOL_PRIORITY_HIGH, &r.serial[1]));
    else
        OK(wspool_serial_create(r.pool, &r.serial[1]));
    r.slots = calloc((size_t)n, sizeof *r.slots);
    r.accepted = calloc((size_t)n, 1);
    r.cancel_ok = calloc((size_t)n, 1);
    r.at_close = calloc((size_t)n, 1);
    r.expired = calloc((size_t)n, 1);
    RACE = &r;
    atomic_init(&r.stop, 0);
    atomic_init(&r.closed, 0);
    sub_t sa[MAX_SUBS];
    bg_t subs[MAX_SUBS], closer;
    for (int i = 0; i < cfg->subs; i++) {
        sa[i] = (sub_t){&r, i};
        bg_start(&subs[i], race_submitter, &sa[i]);
    }
    bg_start(&closer, race_shutdown, &r);
    int closer_hung = !bg_wait(&closer, HANG_MS), waiter_hung = 0;
    int joined[MAX_SUBS];
    for (int i = 0; i < cfg->subs; i++) {
        joined[i] = bg_wait(&subs[i], closer_hung || waiter_hung ? 0 : HANG_MS); /* one guard in all */
        waiter_hung |= !joined[i];
    }
    int hung = closer_hung || waiter_hung;
    if (hung) {
        fprintf(stderr, "  %s did not return (mode %d)\n",
                closer_hung ? "wspool_shutdown" : "a waiter, after shutdown returned OK,", cfg->mode);
        CHECK(!"shutdown returns, and every waiter returns once it has");
        wspool_destroy(r.pool); /* cancels what was stranded, releasing the waiters */
        r.pool = NULL;
        if (closer_hung) bg_join(&closer);
        for (int i = 0; i < cfg->subs; i++)
            if (!joined[i]) bg_join(&subs[i]);
    }
    OK(r.shutdown_rc);
    long acc = 0, ran = 0, canc = 0, expd = 0, not_closed = 0, twice = 0, drain_lost = 0, cancel_lost = 0;
    for (int i = 0; i < n; i++) {
        int a = r.accepted[i] != 0;
        int rn = atomic_load(&r.slots[i].ran), c = atomic_load(&r.slots[i].cancelled);
        acc += a;
        ran += rn;
        canc += c;
        expd += r.expired[i];
        /* pending (or run twice) when shutdown returned. A cancel begun before that may still be
           inside on_cancel on the canceller's thread (shutdown cannot wait for it), so its task
           was not pending; one that won after shutdown returned found it pending. */
        if ((r.at_close[i] != a && r.cancel_ok[i] != 1) || r.cancel_ok[i] == 2) not_closed++;
        if (rn + c != a) twice++;
        if (r.cancel_ok[i] && c != 1) cancel_lost++;
        /* DRAIN runs whatever was accepted before it began (unless cancelled by handle, or expired) */
        if (cfg->mode == WSPOOL_SHUTDOWN_DRAIN && r.accepted[i] == 2 && !r.cancel_ok[i] && !r.expired[i] && rn != 1)
            drain_lost++;
    }
    CHECK_EQ(not_closed, 0);
    CHECK_EQ(twice, 0);
    CHECK_EQ(cancel_lost, 0);
    CHECK_EQ(drain_lost, 0);
    CHECK_EQ(atomic_load(&r.bad_submit), 0);
    CHECK_EQ(atomic_load(&r.bad_cancel), 0);
    CHECK_EQ(atomic_load(&r.bad_wait), 0);
    CHECK_EQ(atomic_load(&r.early_ok), 0);
    int ok = !hung && !not_closed && !twice && !cancel_lost && !drain_lost;
    if (r.pool) {
        wspool_stats st = get_stats(r.pool);
        /* on_cancel counted expiries as drops too: the pool counts them apart */
        CHECK_EQ(st.submitted, acc);
        CHECK_EQ(st.completed, ran);
        CHECK_EQ(st.cancelled, canc - expd);
        CHECK_EQ(st.expired, expd);
        ok &= st.submitted == (uint64_t)acc && st.completed == (uint64_t)ran &&
              st.cancelled == (uint64_t)(canc - expd) && st.expired == (uint64_t)expd;
        if (!ok)
            fprintf(stderr, "  mode %d: %ld accepted, %ld ran, %ld cancelled; %ld not closed at shutdown, "
                    "%ld not exactly once, %ld DRAIN-accepted not run; stats %llu/%llu/%llu\n",
                    cfg->mode, acc, ran, canc, not_closed, twice, drain_lost,
                    (unsigned long long)st.submitted, (unsigned long long)st.completed,
                    (unsigned long long)st.cancelled);
    }
    wspool_group_destroy(r.group);
    wspool_serial_destroy(r.serial[0]);
    wspool_serial_destroy(r.serial[1]);
    wspool_destroy(r.pool);
    tot->accepted += acc;
    tot->ran += ran;
    tot->cancelled += canc;
    free(r.slots);
    free(r.accepted);
    free(r.cancel_ok);
    free(r.at_close);
    free(r.expired);
    RACE = NULL;
    return ok;
}

/* Item 4: 6 threads submit (with handles and on_cancel) while another thread
 * drains; a submission accepted in the race must not be stranded. */
static void test_shutdown_racing_submitters(void) {
    int rounds = scaled(100);
    race_totals_t tot = {0, 0, 0};
    int r = 0;
    for (; r < rounds; r++) {
        /* submitting until refused (20000 is never reached): the shutdown lands
           while all six are inside a submit */
        race_cfg_t cfg = {6, 20000, 0, WSPOOL_SHUTDOWN_DRAIN, 100 + (r * 397) % 1500, 0};
        if (!race_round(&cfg, &tot)) {
            fprintf(stderr, "  failed in round %d of %d\n", r + 1, rounds);
            break;
        }
    }
    printf("        %d rounds: %ld accepted, %ld ran, %ld cancelled\n", r, tot.accepted, tot.ran, tot.cancelled);
}

/* The stress test: 8 threads submit plain tasks with handles, group,
 * serial and group+serial tasks, all with on_cancel, while another thread
 * shuts down, DRAIN and CANCEL alternating; >= 1000 iterations at scale 1. */
static void test_stress_submit_vs_shutdown(void) {
    int iterations = scaled(1000);
    race_totals_t tot[2] = {{0, 0, 0}, {0, 0, 0}};
    int it = 0;
    for (; it < iterations; it++) {
        int mode = it % 2 ? WSPOOL_SHUTDOWN_CANCEL : WSPOOL_SHUTDOWN_DRAIN;
        race_cfg_t cfg = {8, 256, 1, mode, (it * 131) % 1000, 0}; /* some close mid-submission, some after */
        if (!race_round(&cfg, &tot[mode])) {
            fprintf(stderr, "  failed in iteration %d of %d\n", it + 1, iterations);
            break;
        }
    }
    printf("        %d iterations; DRAIN: %ld accepted, %ld ran, %ld cancelled; "
           "CANCEL: %ld accepted, %ld ran, %ld cancelled\n", it,
           tot[0].accepted, tot[0].ran, tot[0].cancelled, tot[1].accepted, tot[1].ran, tot[1].cancelled);
}

/* Issue 29: the same stress with priorities (low, normal, high), deadlines (one task in five
 * already past, one in five an hour away) and a high-priority lane of 2 in place of the second
 * serial queue mixed in: every accepted task still ends exactly once, ran, cancelled or expired,
 * and the pool's stats count each ending once. */
static void test_stress_features_vs_shutdown(void) {
    int iterations = scaled(300);
    race_totals_t tot[2] = {{0, 0, 0}, {0, 0, 0}};
    int it = 0;
    for (; it < iterations; it++) {
        int mode = it % 2 ? WSPOOL_SHUTDOWN_CANCEL : WSPOOL_SHUTDOWN_DRAIN;
        race_cfg_t cfg = {8, 256, 1, mode, (it * 131) % 1000, 1};
        if (!race_round(&cfg, &tot[mode])) {
            fprintf(stderr, "  failed in iteration %d of %d\n", it + 1, iterations);
            break;
        }
    }
    printf("        %d iterations; DRAIN: %ld accepted, %ld ran, %ld dropped; "
           "CANCEL: %ld accepted, %ld ran, %ld dropped\n", it,
           tot[0].accepted, tot[0].ran, tot[0].cancelled, tot[1].accepted, tot[1].ran, tot[1].cancelled);
}

/* ---------------------------------------------------------------- main --- */

int main(int argc, char **argv) {
    static const test_case tests[] = {
        {"drain_keeps_blocking_growth", test_drain_keeps_blocking_growth},
        {"shutdown_racing_submitters", test_shutdown_racing_submitters},
        {"stress_submit_vs_shutdown", test_stress_submit_vs_shutdown},
        {"stress_features_vs_shutdown", test_stress_features_vs_shutdown},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
