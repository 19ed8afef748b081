/* Probing a peer this rank waits to hear from before the peer opened its connection to it
 * (probe.c). The socket transport's data connections and InfiniBand's exchange links are opened
 * by one side only (the sender; the lower rank), so the other side has nothing of a peer that
 * died before that: no connection to break, no end of stream, and its wait ran the whole
 * COLL_TIMEOUT (300 s by default, none under libnccl.so.2) before it blamed a rank that "sent
 * no data and no status", as if it were stopped. A zeroed colli_probe_t is a probe at rest. */
#ifndef COLLI_PROBE_H
#define COLLI_PROBE_H

#include <stdbool.h>
#include <sys/socket.h>

#include "base/comm.h"
#include "base/error.h"

typedef struct colli_probe {
    bool inflight; /* a probe's connect is in flight on fd */
    int fd;
    int refused;    /* probes refused in a row */
    double since;   /* when this rank began to wait for the peer (0: it does not) */
    double next_at; /* the next probe */
    double started; /* the probe in flight began */
    double every;   /* the interval between probes now */
} colli_probe_t;

/* This rank waits for peer to connect (a lane of comm->cur_op needs it): after a second of
 * waiting (a quarter of a shorter COLL_TIMEOUT), connect to the peer's listener from bind_addr
 * and close at once, then again at doubling intervals up to 30 s. Two refusals in a row: the
 * listener, which lives as long as its communicator, is gone, and so is the peer: an abort
 * notice that arrives meanwhile, else COLL_ERR_REMOTE naming the peer. A probe that is
 * accepted (the peer lives, busy or stopped) or gets no answer (a network cut, which
 * COLL_TIMEOUT finds) proves nothing. Does not block. */
coll_result_t colli_probe_step(struct coll_comm *comm, colli_probe_t *p, int peer,
                               const struct sockaddr_storage *bind_addr);
/* The peer connected, or the wait is over: close a probe in flight and rest. */
void colli_probe_reset(colli_probe_t *p);

#endif
