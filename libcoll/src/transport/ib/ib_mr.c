/* Registration cache: memory registrations keyed by address range and reused (see ib.h). A
 * lookup is a linear scan: a communicator holds a few entries per InfiniBand peer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "transport/ib/ib.h"

static uintptr_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uintptr_t)p : 4096;
}

/* Entries are allocated one by one and handed out by address: they never move. */
static void drop(ib_mr_cache_t *c, int i)
{
    c->dereg(c->ctx, c->ents[i]->mr);
    free(c->ents[i]);
    c->ents[i] = c->ents[--c->n];
}

/* Keep at most max_idle unreferenced entries: evict the least recently used ones. */
static void trim(ib_mr_cache_t *c)
{
    for (;;) {
        int idle = 0, lru = -1;
        for (int i = 0; i < c->n; i++) {
            if (c->ents[i]->refs > 0)
                continue;
            idle++;
            if (lru < 0 || c->ents[i]->used < c->ents[lru]->used)
                lru = i;
        }
        if (idle <= c->max_idle || lru < 0)
            return;
        drop(c, lru);
    }
}

ib_mr_ent_t *ib_mr_get(ib_mr_cache_t *c, const void *addr, size_t len, char *why, size_t whylen)
{
    uintptr_t a = (uintptr_t)addr, e = a + (len ? len : 1);
    c->tick++;
    for (int i = 0; i < c->n; i++) {
        ib_mr_ent_t *x = c->ents[i];
        if (x->start <= a && e <= x->end) {
            x->refs++;
            x->used = c->tick;
            c->hits++;
            return x;
        }
    }
    c->misses++;
    const uintptr_t pg = page_size();
    uintptr_t start = a & ~(pg - 1), end = (e + pg - 1) & ~(pg - 1);
    ib_mr_ent_t *ent = malloc(sizeof(*ent));
    if (ent != NULL && c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        ib_mr_ent_t **n = realloc(c->ents, (size_t)cap * sizeof(*n));
        if (n == NULL) {
            free(ent);
            ent = NULL;
        } else {
            c->ents = n;
            c->cap = cap;
        }
    }
    if (ent == NULL) {
        snprintf(why, whylen, "out of memory for the registration cache");
        return NULL;
    }
    uint32_t lkey = 0, rkey = 0;
    errno = 0;
    void *mr = c->reg(c->ctx, (void *)start, (size_t)(end - start), &lkey, &rkey);
    if (mr == NULL) {
        int err = errno;
        free(ent);
        char lim[320] = "";
        struct rlimit rl;
        if ((err == ENOMEM || err == EPERM || err == EFAULT) &&
            getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
            char cur[32];
            if (rl.rlim_cur == RLIM_INFINITY)
                snprintf(cur, sizeof(cur), "unlimited");
            else
                snprintf(cur, sizeof(cur), "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
            snprintf(lim, sizeof(lim),
                     " (the locked-memory limit, ulimit -l, is %s%s: raise it to unlimited for "
                     "the process or the container, e.g. docker --ulimit memlock=-1, or a "
                     "Kubernetes container with CAP_IPC_LOCK)",
                     cur, rl.rlim_cur == RLIM_INFINITY ? ", so the HCA itself ran out" : "");
        }
        snprintf(why, whylen, "ibv_reg_mr of %zu bytes at %p failed: %s%s", (size_t)(end - start),
                 (void *)start, err ? strerror(err) : "unknown error", lim);
        return NULL;
    }
    *ent = (ib_mr_ent_t){start, end, mr, lkey, rkey, 1, c->tick};
    c->ents[c->n++] = ent;
    trim(c);
    return ent;
}

void ib_mr_put(ib_mr_cache_t *c, ib_mr_ent_t *e)
{
    if (e == NULL)
        return;
    if (e->refs > 0)
        e->refs--;
    trim(c);
}

void ib_mr_invalidate(ib_mr_cache_t *c, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, e = a + len;
    for (int i = 0; i < c->n;) {
        if (c->ents[i]->refs == 0 && c->ents[i]->start < e && a < c->ents[i]->end)
            drop(c, i);
        else
            i++;
    }
}

void ib_mr_cache_fini(ib_mr_cache_t *c)
{
    while (c->n > 0)
        drop(c, c->n - 1);
    free(c->ents);
    c->ents = NULL;
    c->cap = 0;
}
