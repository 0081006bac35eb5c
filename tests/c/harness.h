/* A tiny test harness shared by the C test programs (test_wspool.c, test_groups.c,
 * test_lifecycle.c, test_shutdown.c): CHECK macros usable from any thread, a
 * gate to hold workers, polling helpers, accounted task slots, a hang guard.
 * Each program is one translation unit, so everything here is static inline.
 * Prints "N passed, M failed". */
#ifndef WSPOOL_TEST_HARNESS_H
#define WSPOOL_TEST_HARNESS_H

#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libwspool.h"

/* Longest a call that should return at once may take before it counts as a
 * hang (generous: valgrind serialises every thread). */
#define HANG_MS 30000

/* A wait that must succeed uses this bound: a hang becomes a failure, never a
 * stuck CI job. It is not a timing assertion (nothing checks how long it took). */
#define MUST_MS 60000

static atomic_int t_failed_checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed; last_error: \"%s\"\n",       \
                    __FILE__, __LINE__, #cond, wspool_last_error());                 \
            atomic_fetch_add(&t_failed_checks, 1);                                   \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                               \
    do {                                                                             \
        long long va_ = (long long)(a), vb_ = (long long)(b);                        \
        if (va_ != vb_) {                                                            \
            fprintf(stderr, "  %s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld; "       \
                    "last_error: \"%s\"\n", __FILE__, __LINE__, #a, #b, va_, vb_,     \
                    wspool_last_error());                                            \
            atomic_fetch_add(&t_failed_checks, 1);                                   \
        }                                                                            \
    } while (0)

/* A status call that must succeed. */
#define OK(call) CHECK_EQ((call), WSPOOL_OK)

/* ---- gate: tasks pass it only once it is opened --------------------------- */
typedef struct {
    pthread_mutex_t m;
    pthread_cond_t c;
    int open;
    atomic_int inside; /* how many reached the gate */
} gate_t;

static inline void gate_init(gate_t *g) {
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
    g->open = 0;
    atomic_init(&g->inside, 0);
}
static inline void gate_pass(gate_t *g) {
    atomic_fetch_add(&g->inside, 1);
    pthread_mutex_lock(&g->m);
    while (!g->open) pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}
static inline void gate_open(gate_t *g) {
    pthread_mutex_lock(&g->m);
    g->open = 1;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}
static inline void gate_destroy(gate_t *g) {
    pthread_mutex_destroy(&g->m);
    pthread_cond_destroy(&g->c);
}

static inline void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls until *v >= target (1) or MUST_MS passed (0). */
static inline int wait_at_least(atomic_int *v, int target) {
    for (long waited = 0; waited < MUST_MS; waited += 1) {
        if (atomic_load(v) >= target) return 1;
        sleep_ms(1);
    }
    return atomic_load(v) >= target;
}

/* Size factor for loops: WSPOOL_TEST_SCALE (default 1.0; sanitizer and
 * valgrind runs use less). */
static inline double test_scale(void) {
    const char *s = getenv("WSPOOL_TEST_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}
static inline int scaled(int n) {
    int v = (int)(n * test_scale());
    return v < 1 ? 1 : v;
}

/* ---- wspool helpers shared by the C test programs ------------------------ */

static inline void task_inc(void *arg) { atomic_fetch_add((atomic_long *)arg, 1); }
static inline void task_gate(void *arg) { gate_pass((gate_t *)arg); }
static inline void task_nop(void *arg) { (void)arg; }

/* An accounted task: ran/cancelled counted per slot, so "exactly once" is checkable. */
typedef struct {
    atomic_int ran;
    atomic_int cancelled;
} slot_t;
static inline void slot_run(void *a) { atomic_fetch_add(&((slot_t *)a)->ran, 1); }
static inline void slot_cancel(void *a) { atomic_fetch_add(&((slot_t *)a)->cancelled, 1); }

/* Heap-owned args: the task (or its on_cancel) frees them; ASan/valgrind
 * report a double free or a leak if ownership is wrong. */
static atomic_long owned_ran, owned_cancelled;
static inline void owned_run(void *a) { free(a); atomic_fetch_add(&owned_ran, 1); }
static inline void owned_cancel(void *a) { free(a); atomic_fetch_add(&owned_cancelled, 1); }

static inline wspool *make_pool(uint32_t min, uint32_t max, int growth) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = min;
    cfg.max_threads = max;
    cfg.growth = growth;
    wspool *p = NULL;
    OK(wspool_create(&cfg, &p));
    return p;
}

/* Holds `n` workers in `g`; returns once all n are inside. */
static inline void hold_workers(wspool *p, gate_t *g, int n) {
    for (int i = 0; i < n; i++) OK(wspool_submit(p, task_gate, g));
    CHECK(wait_at_least(&g->inside, n));
}

static inline int last_error_mentions(const char *word) { return strstr(wspool_last_error(), word) != NULL; }

static inline wspool_stats get_stats(const wspool *p) {
    wspool_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(wspool_stats_get(p, &s));
    return s;
}

/* ---- hang guard: a call that could hang runs on a background thread ----------
 * bg_wait gives up after `ms` (a failure the caller reports, then unblocks the
 * call and joins it), so a hang becomes a failed CHECK instead of a stuck run. */
typedef struct {
    pthread_t th;
    void *(*fn)(void *);
    void *arg;
    atomic_int done;
} bg_t;
static inline void *bg_main(void *a) {
    bg_t *b = a;
    b->fn(b->arg);
    atomic_store(&b->done, 1);
    return NULL;
}
static inline void bg_start(bg_t *b, void *(*fn)(void *), void *arg) {
    b->fn = fn;
    b->arg = arg;
    atomic_init(&b->done, 0);
    if (pthread_create(&b->th, NULL, bg_main, b) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        abort();
    }
}
/* 1 (and joined) if the call returned within `ms`, else 0 (still running). */
static inline int bg_wait(bg_t *b, long ms) {
    for (long waited = 0; !atomic_load(&b->done) && waited < ms; waited++) sleep_ms(1);
    if (!atomic_load(&b->done)) return 0;
    pthread_join(b->th, NULL);
    return 1;
}
static inline void bg_join(bg_t *b) { pthread_join(b->th, NULL); }

typedef void (*test_fn)(void);
typedef struct {
    const char *name;
    test_fn fn;
} test_case;

static inline int run_tests(const test_case *tests, int n, int argc, char **argv) {
    int passed = 0, failed = 0;
    const char *alarm_s = getenv("WSPOOL_TEST_ALARM");
    unsigned alarm_secs = alarm_s ? (unsigned)atoi(alarm_s) : 300;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n; i++) {
        /* arguments: NAME selects tests containing NAME, -NAME skips them */
        int any_select = 0, selected = 0, skipped = 0;
        for (int a = 1; a < argc; a++) {
            if (argv[a][0] == '-') {
                if (strstr(tests[i].name, argv[a] + 1)) skipped = 1;
            } else {
                any_select = 1;
                if (strstr(tests[i].name, argv[a])) selected = 1;
            }
        }
        if (skipped || (any_select && !selected)) continue;
        atomic_store(&t_failed_checks, 0);
        alarm(alarm_secs); /* a hung test kills the run (SIGALRM) instead of CI */
        tests[i].fn();
        alarm(0);
        if (atomic_load(&t_failed_checks) == 0) {
            passed++;
            printf("ok      %s\n", tests[i].name);
        } else {
            failed++;
            printf("FAILED  %s (%d checks)\n", tests[i].name, atomic_load(&t_failed_checks));
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* Waits for a forked child that _exit()s with the number of failed checks:
   the test fails unless it exited 0. */
static inline void expect_child_passed(pid_t pid) {
    CHECK(pid > 0);
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    if (WIFEXITED(status)) CHECK_EQ(WEXITSTATUS(status), 0);
    else fprintf(stderr, "  child died with signal %d\n", WTERMSIG(status));
}

#endif
