/* A tiny test harness for the C suite: CHECK macros usable from any thread,
 * a gate to hold workers, and polling helpers. Prints "N passed, M failed". */
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
#include <unistd.h>

#include "libwspool.h"

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

static void gate_init(gate_t *g) {
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
    g->open = 0;
    atomic_init(&g->inside, 0);
}
static void gate_pass(gate_t *g) {
    atomic_fetch_add(&g->inside, 1);
    pthread_mutex_lock(&g->m);
    while (!g->open) pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}
static void gate_open(gate_t *g) {
    pthread_mutex_lock(&g->m);
    g->open = 1;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}
static void gate_destroy(gate_t *g) {
    pthread_mutex_destroy(&g->m);
    pthread_cond_destroy(&g->c);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls until *v >= target (1) or MUST_MS passed (0). */
static int wait_at_least(atomic_int *v, int target) {
    for (long waited = 0; waited < MUST_MS; waited += 1) {
        if (atomic_load(v) >= target) return 1;
        sleep_ms(1);
    }
    return atomic_load(v) >= target;
}

/* Size factor for loops: WSPOOL_TEST_SCALE (default 1.0; sanitizer and
 * valgrind runs use less). */
static double test_scale(void) {
    const char *s = getenv("WSPOOL_TEST_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}
static int scaled(int n) {
    int v = (int)(n * test_scale());
    return v < 1 ? 1 : v;
}

typedef void (*test_fn)(void);
typedef struct {
    const char *name;
    test_fn fn;
} test_case;

static int run_tests(const test_case *tests, int n, int argc, char **argv) {
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

#endif
