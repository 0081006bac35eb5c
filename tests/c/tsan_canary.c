/* TSan canary: two pool tasks write a plain int at the same time. Under
 * `make test-c` TSan MUST report this race; it proves the suppressions file
 * and the library's happens-before annotations do not blind TSan to races
 * in C code running on the pool. (Exit 0 = TSan saw nothing = test failure.) */
#include <stdatomic.h>
#include <stdio.h>

#include "libwspool.h"

static int shared_plain;
static atomic_int started;

static void racy(void *arg) {
    (void)arg;
    atomic_fetch_add(&started, 1);
    while (atomic_load(&started) < 2) {
    } /* both tasks are running now */
    shared_plain++;
}

int main(void) {
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.min_threads = 2;
    cfg.growth = WSPOOL_GROWTH_FIXED;
    wspool *p = NULL;
    if (wspool_create(&cfg, &p) != WSPOOL_OK) return 2;
    wspool_submit(p, racy, NULL);
    wspool_submit(p, racy, NULL);
    wspool_destroy(p);
    printf("shared_plain = %d\n", shared_plain);
    return 0;
}
