/* A classic thread pool: one queue (a growable ring) behind one mutex, a
 * condition variable to wake workers, 2 worker threads. The baseline of
 * seed 001. It cannot run W2/W4 (a task waiting for its children would hold
 * a worker and deadlock the pool), so it reports W1, W3, W5, W7 and W4 with detached children. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>

#include "common.h"

typedef struct {
    void (*fn)(void *);
    void *arg;
} item;

typedef struct {
    pthread_mutex_t m;
    pthread_cond_t cv;
    item *ring;
    size_t cap, head, len;
    int stop;
    pthread_t th[2];
} mpool;

static void *worker(void *p_) {
    mpool *p = p_;
    pthread_mutex_lock(&p->m);
    for (;;) {
        while (p->len == 0 && !p->stop) pthread_cond_wait(&p->cv, &p->m);
        if (p->len == 0) break;
        item it = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->len--;
        pthread_mutex_unlock(&p->m);
        it.fn(it.arg);
        pthread_mutex_lock(&p->m);
    }
    pthread_mutex_unlock(&p->m);
    return NULL;
}

static void mp_submit(mpool *p, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&p->m);
    if (p->len == p->cap) {
        size_t ncap = p->cap * 2;
        item *n = malloc(ncap * sizeof *n);
        for (size_t i = 0; i < p->len; i++) n[i] = p->ring[(p->head + i) % p->cap];
        free(p->ring);
        p->ring = n;
        p->cap = ncap;
        p->head = 0;
    }
    p->ring[(p->head + p->len) % p->cap] = (item){fn, arg};
    p->len++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->m);
}

/* A batch: one lock and one broadcast for up to n items. */
static void mp_submit_batch(mpool *p, const item *items, size_t n) {
    pthread_mutex_lock(&p->m);
    while (p->len + n > p->cap) {
        size_t ncap = p->cap * 2;
        item *nr = malloc(ncap * sizeof *nr);
        for (size_t i = 0; i < p->len; i++) nr[i] = p->ring[(p->head + i) % p->cap];
        free(p->ring);
        p->ring = nr;
        p->cap = ncap;
        p->head = 0;
    }
    for (size_t i = 0; i < n; i++) p->ring[(p->head + p->len + i) % p->cap] = items[i];
    p->len += n;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->m);
}

static void mp_init(mpool *p) {
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->m, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->cap = 1024;
    p->ring = malloc(p->cap * sizeof *p->ring);
    for (int i = 0; i < 2; i++) pthread_create(&p->th[i], NULL, worker, p);
}

static void mp_destroy(mpool *p) {
    pthread_mutex_lock(&p->m);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->m);
    for (int i = 0; i < 2; i++) pthread_join(p->th[i], NULL);
    free(p->ring);
}

#include "flood_task.h"

static void post(void *arg) { sem_post((sem_t *)arg); }

/* W4 detached: a root submits its children to the pool it runs on (no
 * root waits, so the pool cannot deadlock); the flood count posts `done`. */
static mpool *w4d_pool;
static void root_detached(void *unused) {
    (void)unused;
    for (int j = 0; j < W4_CHILDREN; j++) mp_submit(w4d_pool, tiny, NULL);
}

static double run_w4d(void *p) {
    w4d_pool = p;
    flood_arm((long)W4_ROOTS * W4_CHILDREN);
    uint64_t t0 = now_ns();
    for (int i = 0; i < W4_ROOTS; i++) mp_submit(p, root_detached, NULL);
    sem_wait(&done);
    return W4_ROOTS * (W4_CHILDREN + 1.0) / ((now_ns() - t0) / 1e9) / 1e6;
}

/* W7: one producer's submissions. */
static void w7_produce(void *p) {
    for (int i = 0; i < W7_TASKS_EACH; i++) mp_submit(p, tiny, NULL);
}

int main(void) {
    mpool p;
    mp_init(&p);
    sem_init(&done, 0, 0);
    flood_arm(W1_TASKS);
    uint64_t t0 = now_ns();
    for (int i = 0; i < W1_TASKS; i++) mp_submit(&p, tiny, NULL);
    sem_wait(&done);
    uint64_t t1 = now_ns();
    printf("W1_mtps %.2f\n", W1_TASKS / ((t1 - t0) / 1e9) / 1e6);
    /* W1 in batches */
    item batch[W1_BATCH];
    for (int i = 0; i < W1_BATCH; i++) batch[i] = (item){tiny, NULL};
    flood_arm(W1_TASKS);
    t0 = now_ns();
    for (int i = 0; i < W1_TASKS; i += W1_BATCH)
        mp_submit_batch(&p, batch, (size_t)(W1_TASKS - i < W1_BATCH ? W1_TASKS - i : W1_BATCH));
    sem_wait(&done);
    t1 = now_ns();
    printf("W1b_mtps %.2f\n", W1_TASKS / ((t1 - t0) / 1e9) / 1e6);
    /* W5 right after the floods */
    report_idle();

    uint64_t *lat = malloc(sizeof(uint64_t) * W3_ROUNDS);
    sem_t one;
    sem_init(&one, 0, 0);
    for (int i = 0; i < W3_ROUNDS; i++) {
        uint64_t a = now_ns();
        mp_submit(&p, post, &one);
        sem_wait(&one);
        lat[i] = now_ns() - a;
    }
    report_latency(lat, W3_ROUNDS);
    free(lat);

    printf("W4d_mtps %.2f\n", warm_median(run_w4d, &p));

    w7_producers w7;
    flood_arm((long)W7_PRODUCERS * W7_TASKS_EACH);
    uint64_t w7_t0 = w7_start(&w7, w7_produce, &p);
    sem_wait(&done);
    report_w7(w7_t0, now_ns());
    w7_join(&w7);
    mp_destroy(&p);
    return 0;
}
