/*
 * The "peer" exchange of the agent socket (docs/agent.md, "Silent peers"): a rank that has waited
 * without progress on some ranks asks its pod's agent whether Kubernetes says they ended (their
 * pod deleted or its container terminated, their node NotReady). The agent answers at once from
 * what it last read (it reads the pods again in the background, at most every few seconds, and
 * says "pending" while a read it started is not back), so the question never blocks the rank for
 * an API round trip. A message kind of its own beside hello and report (agent_ipc.h), on the same
 * frames and header.
 *
 * Pure functions over jansson values (peer_ipc.c, in coll_proto when jansson was found), so that
 * the agent, the library and the fuzz harness share one parser of each direction.
 */
#ifndef COLLI_PROTO_PEER_IPC_H
#define COLLI_PROTO_PEER_IPC_H

#include <stddef.h>

#include "agent_ipc.h"

struct json_t;

#define COLLI_PROTO_TYPE_PEER "peer" /* request and reply */

/* request: [{rank, pod, node}]; reply: [{rank, cause}], cause saying why that rank ended */
#define COLLI_PROTO_KEY_PEERS "peers"
#define COLLI_PROTO_KEY_CAUSE "cause"
/* reply: a read the agent started is not back yet: ask again soon */
#define COLLI_PROTO_KEY_PENDING "pending"

#define COLLI_PROTO_MAX_PEERS 8 /* ranks one question names, at most */

/* One rank asked about (request) or said to have ended (reply). Borrowed strings. */
typedef struct {
    int rank;
    const char *pod;   /* request: the rank's pod (a DNS-1123 name) */
    const char *node;  /* request: its node, NULL or "" when unknown */
    const char *cause; /* reply: why it ended */
} colli_proto_peer_t;

typedef struct {
    int pid; /* the asking process (0 = absent) */
    int npeers;
    colli_proto_peer_t peers[COLLI_PROTO_MAX_PEERS];
    int pending; /* reply */
} colli_proto_peer_msg_t;

/* {"v", "type": "peer", "pid", "peers": [{rank, pod, node}]} */
struct json_t *colli_proto_peer_request(const colli_proto_peer_msg_t *m);
/* Reads a request: the peers with an integer rank >= 0 and a pod of 1-253 characters (others are
 * dropped; the agent checks the names before they enter a URL), at most COLLI_PROTO_MAX_PEERS;
 * -1 with err when "peers" is not an array. */
int colli_proto_peer_request_parse(const struct json_t *msg, colli_proto_peer_msg_t *out, char *err,
                                   size_t errlen);
/* {"v", "type": "peer", "ok": true, "peers": [{rank, cause}], "pending"} */
struct json_t *colli_proto_peer_reply(const colli_proto_peer_msg_t *m);
/* Reads a reply: the ranks said to have ended with a non-empty cause; -1 with err when the
 * reply is not one. */
int colli_proto_peer_reply_parse(const struct json_t *msg, colli_proto_peer_msg_t *out, char *err,
                                 size_t errlen);

#endif /* COLLI_PROTO_PEER_IPC_H */
