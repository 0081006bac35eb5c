/* pipeline.c: per-key ordering with serial queues. Events for 8 accounts
 * arrive interleaved. Each account has a serial queue: its events are parsed
 * and then applied in arrival order, at most one at a time, without a lock,
 * while different accounts proceed in parallel on the pool (a queued serial
 * task occupies no worker). The program checks order and balances. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "libwspool.h"

enum { ACCOUNTS = 8 };

typedef struct {
    wspool_serial *queue;
    int64_t balance;   /* touched only by this account's serial tasks */
    uint32_t next_seq; /* the order check */
    uint32_t out_of_order;
} account;

typedef struct {
    account *acct;
    uint32_t seq;
    int64_t amount;
    char text[24]; /* the "wire" form, parsed on the pool */
} event;

static account accounts[ACCOUNTS];
static atomic_long parsed;

static void apply(void *arg) { /* stage 2, on the account's queue */
    event *e = arg;
    account *a = e->acct;
    if (e->seq != a->next_seq) a->out_of_order++;
    a->next_seq = e->seq + 1;
    a->balance += e->amount;
    free(e);
}

static void parse(void *arg) { /* stage 1, on the account's queue */
    event *e = arg;
    e->amount = strtoll(e->text, NULL, 10);
    atomic_fetch_add(&parsed, 1);
    /* stage 2: appended to the same queue, so applies keep the parse order */
    if (wspool_serial_submit(e->acct->queue, apply, e) != WSPOOL_OK) free(e);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200000;
    wspool_config cfg;
    wspool_config_init(&cfg);
    cfg.name = "pipeline";
    wspool *pool = NULL;
    if (wspool_create(&cfg, &pool) != WSPOOL_OK) {
        fprintf(stderr, "wspool_create: %s\n", wspool_last_error());
        return 1;
    }
    for (int i = 0; i < ACCOUNTS; i++) wspool_serial_create(pool, &accounts[i].queue);

    int64_t expect[ACCOUNTS] = {0};
    uint32_t seq[ACCOUNTS] = {0};
    for (int i = 0; i < n; i++) {
        int k = (int)((i * 2654435761u) % ACCOUNTS);
        event *e = malloc(sizeof *e);
        e->acct = &accounts[k];
        e->seq = seq[k]++;
        int64_t amount = (i % 7) - 3;
        snprintf(e->text, sizeof e->text, "%lld", (long long)amount);
        expect[k] += amount;
        if (wspool_serial_submit(accounts[k].queue, parse, e) != WSPOOL_OK) {
            fprintf(stderr, "submit: %s\n", wspool_last_error());
            free(e);
            return 1;
        }
    }
    /* drain first: the queued parse tasks still use the queue handles */
    wspool_destroy(pool);
    for (int i = 0; i < ACCOUNTS; i++) wspool_serial_destroy(accounts[i].queue);

    int ok = 1;
    for (int i = 0; i < ACCOUNTS; i++) {
        int good = accounts[i].balance == expect[i] && accounts[i].out_of_order == 0 &&
                   accounts[i].next_seq == seq[i];
        ok &= good;
        printf("account %d: %6u events (expected %u, %u out of order), balance %6lld (expected %lld), %s\n", i, accounts[i].next_seq, seq[i], accounts[i].out_of_order,
               (long long)accounts[i].balance, (long long)expect[i], good ? "in order" : "WRONG");
    }
    printf("%ld events parsed, per-account order %s\n", atomic_load(&parsed), ok ? "kept" : "BROKEN");
    return ok ? 0 : 1;
}
