/* hello.c: the smallest complete use of libwspool: create a pool, submit
 * tasks, wait for one, print the stats, destroy. */
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

    /* and many we do not */
    for (int i = 0; i < 100000; i++) {
        if (wspool_submit(pool, count, NULL) != WSPOOL_OK) {
            fprintf(stderr, "submit: %s\n", wspool_last_error());
            return 1;
        }
    }
    wspool_shutdown(pool, WSPOOL_SHUTDOWN_DRAIN, -1);

    wspool_stats st = {.struct_size = sizeof st};
    wspool_stats_get(pool, &st);
    printf("ran %ld tasks: threads=%u submitted=%llu completed=%llu local=%llu global=%llu steals=%llu\n",
           atomic_load(&done), st.threads, (unsigned long long)st.submitted,
           (unsigned long long)st.completed, (unsigned long long)st.local_pops,
           (unsigned long long)st.global_pops, (unsigned long long)st.steals);
    wspool_destroy(pool);
    return atomic_load(&done) == 100001 ? 0 : 1;
}
