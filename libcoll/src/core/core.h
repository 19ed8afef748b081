/* Internal to core/ (the API entry layer): a checked call waiting to run, and the functions that
 * run it now (dispatch.c) or queue it in the caller's group (group.c). */
#ifndef COLLI_CORE_H
#define COLLI_CORE_H

#include <sys/socket.h>

#include "algo/algos.h"
#include "device/device.h"

enum { COLLI_ITEM_COLL = 0, COLLI_ITEM_SEND = 1, COLLI_ITEM_RECV = 2 };

/* One checked collective, send or receive (send/recv: the buffer in a.sendbuf or a.recvbuf). */
typedef struct colli_item {
    int kind;
    coll_comm_t handle;
    colli_coll_args_t a;
    int peer;
    int device;   /* the GPU of its buffers, -1 for host buffers */
    void *stream; /* device buffers: the caller's stream */
} colli_item_t;

/* group.c: is the calling thread inside coll_group_start/coll_group_end? */
bool colli_group_active(void);
/* Queue a checked call until the group ends. */
coll_result_t colli_group_enqueue(const colli_item_t *it);

/* dispatch.c: run a collective now (device buffers: queued for the communicator's progress
 * thread; host buffers: after the device calls queued before it). */
coll_result_t colli_dispatch_collective(struct coll_comm *comm, const colli_item_t *it);
/* Run the sends and receives of handle among items[0..n) as one operation. */
coll_result_t colli_dispatch_p2p(coll_comm_t handle, const colli_item_t *items, int n);

/* comm.c: create a communicator member from a root address and secret (every init path ends
 * here); pins (agent mode) apply over the environment. */
coll_result_t colli_comm_create(coll_comm_t *out, int nranks, int rank,
                                const struct sockaddr_storage *root, const uint8_t secret[16],
                                const colli_pin_t *pins, int npins, const char *agent_socket,
                                const colli_ident_t *ident);

/* agent_init.c: tell the pod's agent (if any) that this rank failed; bounded, best effort. */
void colli_agent_notify_failure(struct coll_comm *comm, const char *msg);

#endif
