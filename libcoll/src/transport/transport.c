/* Transport registry: built once; fills missing operations with "unsupported" stubs. */
#include <pthread.h>
#include <string.h>

#include "transport/transport.h"

static coll_result_t stub_comm_init(struct coll_comm *c, const colli_netif_t *n, colli_member_t *s)
{
    return COLLI_ERR(NET, COLL_ERR_UNSUPPORTED, "transport has no comm_init");
}
static coll_result_t stub_comm_ready(struct coll_comm *c)
{
    return COLL_SUCCESS;
}
static coll_result_t stub_progress(struct coll_comm *c, colli_op_t *op, bool *p)
{
    return COLLI_ERR(NET, COLL_ERR_UNSUPPORTED, "transport cannot move data");
}
static coll_result_t stub_wait(struct coll_comm *c, colli_op_t *op, int ms)
{
    return COLLI_ERR(NET, COLL_ERR_UNSUPPORTED, "transport cannot wait");
}
static void stub_notify(struct coll_comm *c, const char *reason) {}
static void stub_stuck(struct coll_comm *c, const char *w) {}
static void stub_fini(struct coll_comm *c) {}

static const colli_transport_t *const builtin[] = {&colli_socket_transport};
#define NTRANSPORTS (sizeof(builtin) / sizeof(builtin[0]))

static struct {
    pthread_once_t once;
    colli_transport_t filled[NTRANSPORTS];
} registry = {PTHREAD_ONCE_INIT, {{0}}};

static void registry_init(void)
{
    for (size_t i = 0; i < NTRANSPORTS; i++) {
        colli_transport_t *t = &registry.filled[i];
        memset(t, 0, sizeof(*t));
        size_t n = builtin[i]->struct_size < sizeof(*t) ? builtin[i]->struct_size : sizeof(*t);
        memcpy(t, builtin[i], n);
        t->struct_size = sizeof(*t);
        if (!t->comm_init)
            t->comm_init = stub_comm_init;
        if (!t->comm_ready)
            t->comm_ready = stub_comm_ready;
        if (!t->progress)
            t->progress = stub_progress;
        if (!t->wait)
            t->wait = stub_wait;
        if (!t->notify_abort)
            t->notify_abort = stub_notify;
        if (!t->notify_stuck)
            t->notify_stuck = stub_stuck;
        if (!t->comm_fini)
            t->comm_fini = stub_fini;
    }
}

const colli_transport_t *colli_transport_get(const char *name)
{
    pthread_once(&registry.once, registry_init);
    for (size_t i = 0; i < NTRANSPORTS; i++)
        if (strcmp(registry.filled[i].name, name) == 0)
            return &registry.filled[i];
    return NULL;
}
