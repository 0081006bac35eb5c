/* hello.c: the smallest complete use of libwspool: create a pool, submit
 * tasks, wait for one and for a group of them, print the stats of the live
 * pool, shut down, destroy. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "libwspool.h"

static atomic_long done;

static void greet(void *arg) {
    int n = *(int *)arg;
    printf("hello from task %d on worker %d\n", n, wspool_current_index());
    free(arg); /* the pool owned arg since submit returned WSPOOL_OK */
    atomic_fetch_add(&done, 1);
}

static void count(void *arg) {
    (void)arg;
    atomic_fetch_add(&done, 1);
}

int main(void) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.name = "hello";

    wspool *pool = NULL;
    int rc = wspool_create(&cfg, &pool);
    if (rc != WSPOOL_OK) {
        fprintf(stderr, "wspool_create: %s (%s)\n", wspool_strerror(rc), wspool_last_error());
        return 1;
    }
    printf("libwspool %u.%u.%u\n", wspool_version() >> 16, (wspool_version() >> 8) & 0xff,
           wspool_version() & 0xff);

    /* one task we wait for */
    int *arg = malloc(sizeof *arg);
    *arg = 1;
    wspool_task *task = NULL;
    rc = wspool_submit_ex(pool, greet, arg, NULL, &task);
    if (rc != WSPOOL_OK) {
        free(arg); /* refused: still ours */
        fprintf(stderr, "submit: %s\n", wspool_last_error());
        return 1;
    }
    rc = wspool_task_wait(task, -1);
    printf("task 1: %s\n", wspool_strerror(rc));
    wspool_task_release(task);

    /* and many we do not wait for one by one: a group waits for them all */
    wspool_group *group = NULL;
    if (wspool_group_create(pool, &group) != WSPOOL_OK) {
        fprintf(stderr, "group: %s\n", wspool_last_error());
        return 1;
    }
    for (int i = 0; i < 100000; i++) {
        if (wspool_group_submit(group, count, NULL) != WSPOOL_OK) {
            fprintf(stderr, "submit: %s\n", wspool_last_error());
            return 1;
        }
    }
    wspool_group_wait(group, -1);
    wspool_group_destroy(group);

    /* Stats describe a live pool: read them before shutting it down
     * (after shutdown every worker has exited and threads reads 0). */
    wspool_stats st = {.struct_size = sizeof st};
    wspool_stats_get(pool, &st);
    printf("ran %ld tasks\n", atomic_load(&done));
    printf("  threads %u (peak %u)   submitted %llu   completed %llu\n", st.threads, st.peak_threads,
           (unsigned long long)st.submitted, (unsigned long long)st.completed);
    printf("  taken from: own deque %llu   global queue %llu   stolen %llu\n",
           (unsigned long long)st.local_pops, (unsigned long long)st.global_pops,
           (unsigned long long)st.steals);
    wspool_shutdown(pool, WSPOOL_SHUTDOWN_DRAIN, -1);
    wspool_destroy(pool);
    return atomic_load(&done) == 100001 ? 0 : 1;
}
