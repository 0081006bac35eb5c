/*
 * test_deadline_reserve.c: the HTTP examples' deadline reserve
 * (examples-c/http_deadline.h), driven with a simulated clock and scripted
 * replies: no threads, no sleeps, so the figures are exact on any machine.
 *
 * The model is the worst case under overload: every /work request starts at
 * its pool deadline (the due time minus what http_work_start_by_ns reserved)
 * and its reply reaches the kernel `took` later, so it is late exactly when
 * `took` exceeds the reserve applied to it.
 */
#include "../../examples-c/http_deadline.h"

#include <stdio.h>
#include <stdlib.h>

static int failures;
#define CHECK(cond, ...)                                                                                                \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                            \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#define MS 1000000ull
#define US 1000ull
#define DUE_MS 20ull

static void reset(uint64_t reserve_ns)
{
    http_work_reserve_ns = reserve_ns;
    http_reserve_ceiling_ns = 0;
}

/* One request with a 20 ms allowance, submitted at `*clock`, that starts at its pool deadline and
 * takes `took_ns` to its reply; advances the clock past it. True if its reply was late. */
static bool serve_one(uint64_t *clock, uint64_t took_ns)
{
    uint64_t due = *clock + DUE_MS * MS, start = http_work_start_by_ns(due, DUE_MS);
    uint64_t written = start + took_ns;
    *clock = written;
    return http_reserve_learn_at(due, written);
}

/* splitmix64: a fixed sequence, so every run of this test sees the same replies. */
static uint64_t rng_state = 42;
static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Run-and-write times with a tail: 1 ms of work, plus 0-2 ms mostly, plus 2-6 ms one time in 50. */
static uint64_t took_sample(void)
{
    uint64_t t = 1 * MS + rng() % (2 * MS);
    if (rng() % 50 == 0)
        t += 2 * MS + rng() % (4 * MS);
    return t;
}

static int cmp64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Settles where 1 reply in HTTP_LATE_PER is late, from the 1 ms it starts with. */
static void settles_at_the_late_share(void)
{
    reset(1 * MS);
    uint64_t clock = 1000 * MS;
    enum { WARM = 100000, MEASURED = 400000 };
    static uint64_t took[MEASURED];
    for (int i = 0; i < WARM; i++)
        serve_one(&clock, took_sample());
    unsigned late = 0;
    for (int i = 0; i < MEASURED; i++) {
        took[i] = took_sample();
        late += serve_one(&clock, took[i]);
    }
    double share = (double)late / MEASURED;
    qsort(took, MEASURED, sizeof took[0], cmp64);
    uint64_t q998 = took[(size_t)MEASURED * 998 / 1000], q9995 = took[(size_t)MEASURED * 9995 / 10000];
    printf("settles: %u of %d replies late (%.4f%%, target %.4f%%); reserve %.3f ms, run-and-write p99.8 %.3f ms, "
           "p99.95 %.3f ms\n",
           late, MEASURED, 100 * share, 100.0 / HTTP_LATE_PER, http_work_reserve_ns / 1e6, q998 / 1e6, q9995 / 1e6);
    CHECK(share >= 0.5 / HTTP_LATE_PER && share <= 2.0 / HTTP_LATE_PER, "late share %.5f", share);
    CHECK(http_work_reserve_ns >= q998 - 100 * US && http_work_reserve_ns <= q9995 + 100 * US, "reserve %llu",
          (unsigned long long)http_work_reserve_ns);
}

/* A step up in the run-and-write time is caught within a few late replies: each raises the reserve by
 * a quarter of how late it was (at least HTTP_RESERVE_STEP_NS). */
static void catches_up_in_a_few_late_replies(void)
{
    reset(1 * MS);
    uint64_t clock = 1000 * MS;
    unsigned late = 0;
    for (int i = 0; i < 1000; i++)
        late += serve_one(&clock, 5 * MS);
    printf("catches up: from 1 ms to a 5 ms run-and-write in %u late replies; reserve %.3f ms\n", late,
           http_work_reserve_ns / 1e6);
    CHECK(late <= 24, "%u late replies", late);
    CHECK(http_work_reserve_ns >= 5 * MS && http_work_reserve_ns <= 5 * MS + 2 * HTTP_RESERVE_STEP_NS, "reserve %llu",
          (unsigned long long)http_work_reserve_ns);
}

/* Every reply late (the work alone takes longer than the allowance): the reserve stops at half the
 * allowance, so a request that waited less than that still runs, and it comes back down once the
 * work is quick again. */
static void never_reserves_more_than_half_the_allowance(void)
{
    reset(1 * MS);
    uint64_t clock = 1000 * MS;
    for (int i = 0; i < 10000; i++)
        CHECK(serve_one(&clock, 30 * MS), "reply %d on time", i);
    uint64_t due = clock + DUE_MS * MS;
    printf("ceiling: all late -> reserve %.3f ms, start-by %.3f ms before due\n", http_work_reserve_ns / 1e6,
           (due - http_work_start_by_ns(due, DUE_MS)) / 1e6);
    CHECK(http_work_reserve_ns == DUE_MS * MS / 2, "reserve %llu", (unsigned long long)http_work_reserve_ns);
    CHECK(due - http_work_start_by_ns(due, DUE_MS) == DUE_MS * MS / 2, "start-by");
    /* A shorter allowance gets half of its own. */
    CHECK(due - http_work_start_by_ns(due, 4) == 2 * MS, "4 ms allowance");
    unsigned n = 0;
    while (http_work_reserve_ns > 2 * MS && n < 1000000) {
        CHECK(!serve_one(&clock, 1 * MS), "quick reply %u late", n);
        n++;
    }
    uint64_t down = HTTP_RESERVE_STEP_NS / (HTTP_LATE_PER - 1);
    printf("ceiling: back to 2 ms after %u on-time replies (%llu ns each)\n", n, (unsigned long long)down);
    CHECK(n == (DUE_MS * MS / 2 - 2 * MS + down - 1) / down, "%u replies", n);
}

/* Replies that teach nothing (0: not /work with a deadline, or not served) leave it as it was. */
static void other_replies_teach_nothing(void)
{
    reset(3 * MS);
    CHECK(!http_reserve_learn_at(0, 1000 * MS), "a reply without a due time counted late");
    CHECK(http_work_reserve_ns == 3 * MS, "reserve %llu", (unsigned long long)http_work_reserve_ns);
}

int main(void)
{
    settles_at_the_late_share();
    catches_up_in_a_few_late_replies();
    never_reserves_more_than_half_the_allowance();
    other_replies_teach_nothing();
    if (failures) {
        fprintf(stderr, "test_deadline_reserve: %d failed\n", failures);
        return 1;
    }
    printf("test_deadline_reserve: all passed\n");
    return 0;
}
