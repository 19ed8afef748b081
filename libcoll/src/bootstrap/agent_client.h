/*
 * Library side of the coll-agent socket protocol (docs/agent.md): ask the pod's agent for this
 * rank's facts (hello) and report state and errors back (report).
 *
 * The protocol itself (frames, messages, the facts) is proto/agent_ipc.h. Every
 * call has a deadline (timeout_ms covers connect, the agent's wait for rendezvous, and the reply).
 * On failure the functions return a code and leave a message naming the socket, the agent's
 * condition and what to do in colli_agent_last_error() (thread-local); outputs are written only
 * on success.
 */
#ifndef COLLI_AGENT_CLIENT_H
#define COLLI_AGENT_CLIENT_H

#include <stdbool.h>

#include "agent_ipc.h" /* proto/: facts, phases, the protocol */
#include "peer_ipc.h"  /* proto/: the peer question */
#include "coll.h"

/** Environment variable naming the agent's socket (set by the webhook). */
#define COLL_ENV_AGENT_SOCKET "COLL_AGENT_SOCKET"

/**
 * Connect to the agent at socket_path and ask for this pod's facts; the agent answers once it
 * resolved rank and root endpoint (or with its named condition). Returns COLL_SUCCESS,
 * COLL_ERR_TIMEOUT, COLL_ERR_SYSTEM (no agent on the socket), COLL_ERR_NETWORK (the agent reports
 * a network condition such as InterfaceMissing), COLL_ERR_INVALID_USAGE (other agent conditions,
 * malformed replies) or COLL_ERR_UNSUPPORTED (built without jansson).
 */
coll_result_t colli_agent_hello(const char *socket_path, int timeout_ms, colli_proto_facts_t *out);

/**
 * Report this rank's phase and, when error_message is non-NULL, an error of this rank (the agent
 * adds pod and node, updates the Communicator status and emits a pod Event). The agent
 * acknowledges at once; the API writes happen in the background.
 */
coll_result_t colli_agent_report(const char *socket_path, int timeout_ms, colli_proto_phase_t phase,
                                 const char *error_message);

/**
 * As colli_agent_report, for a rank-0 report with detail: ready_ranks (or -1), an error naming
 * another rank (err_rank, or -1 for this rank; err_pod/err_node name its pod and node when
 * known, else NULL), and one condition (cond_type NULL for none:
 * "VersionsConsistent", "NetworkConsistent", "Reachable" or "Healthy"; cond_ok true/false).
 */
coll_result_t colli_agent_report_ex(const char *socket_path, int timeout_ms,
                                    colli_proto_phase_t phase, int ready_ranks, int err_rank,
                                    const char *err_pod, const char *err_node,
                                    const char *error_message, const char *cond_type, int cond_ok,
                                    const char *cond_reason, const char *cond_message);

/** Several ranks per pod: the variables a hello takes the process's place in its pod from (as
 * torchrun sets them): its local rank, the number of local ranks, the launcher's restart count. */
#define COLL_ENV_LOCAL_RANK_POD   "LOCAL_RANK"
#define COLL_ENV_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"
#define COLL_ENV_RESTART_COUNT    "TORCHELASTIC_RESTART_COUNT"

/**
 * When the last colli_agent_hello on this thread failed with an error that carried the job's
 * facts (a pod whose local ranks did not all start, a local rank claimed twice or out of range):
 * 0 with those facts and how to tell the job's other ranks (colli_proto_failure_t: host the
 * bootstrap root, report as out->rank or as no rank, and for which missing ranks); -1 otherwise.
 */
int colli_agent_failed_facts(colli_proto_facts_t *out, colli_proto_failure_t *how);

/**
 * Report Ready with the transports this rank uses (transport: "InfiniBand, shared memory"; the
 * rank-0 agent shows its rank's in the Communicator's status.transport) and, from rank 0, where
 * the ranks run (places[nplaces], more: pods left out; status.placement).
 */
coll_result_t colli_agent_report_ready(const char *socket_path, int timeout_ms,
                                       const char *transport, const colli_proto_place_t *places,
                                       int nplaces, int more);

/**
 * One request of another kind (e.g. proto/nccl_ipc.h's nccl_init): sends req (not consumed) and
 * returns the reply of type want_type in *reply (a new reference), or, like colli_agent_hello,
 * a code with colli_agent_last_error() saying why (an error reply's condition included).
 */
coll_result_t colli_agent_request(const char *socket_path, int timeout_ms, const struct json_t *req,
                                  const char *want_type, struct json_t **reply);

/**
 * The "peer" question (proto/peer_ipc.h): does Kubernetes say one of q's ranks ended? On
 * COLL_SUCCESS, *ended is the first such rank (-1: none) with its cause in cause, and *pending
 * says that the agent is reading a pod now (ask again in a few seconds). An agent that does not
 * know the question (an older one) answers with an error: a code, colli_agent_last_error() why.
 */
coll_result_t colli_agent_ask_peers(const char *socket_path, int timeout_ms,
                                    const colli_proto_peer_msg_t *q, int *ended, char *cause,
                                    size_t len, bool *pending);

/** The message of the last failed colli_agent_* call on this thread ("" if none). */
const char *colli_agent_last_error(void);

#endif /* COLLI_AGENT_CLIENT_H */
