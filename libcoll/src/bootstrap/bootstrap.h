/* Bootstrap: unique ids, hello authentication, the root server and the rank side. */
#ifndef COLLI_BOOTSTRAP_H
#define COLLI_BOOTSTRAP_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/comm.h"
#include "base/member.h"
#include "base/wire.h"

#define COLLI_UID_MAGIC 0x3149434bu /* "KCI1" */

/* Layout of coll_unique_id_t.internal. */
typedef struct colli_uid {
    uint32_t magic;
    uint16_t family;
    uint16_t port;
    uint8_t addr[16];
    uint8_t secret[16];
    uint8_t flags; /* COLLI_UID_* (0 in ids of builds before it: a root that already runs) */
} colli_uid_t;
/* No root runs yet: rank 0 hosts it at the id's address while it creates its member (ids that
 * every process makes alike, coll_unique_id_from_address). */
#define COLLI_UID_ROOT_AT_INIT 1u
_Static_assert(sizeof(colli_uid_t) <= COLL_UNIQUE_ID_BYTES, "uid fits");

/* Validate and decode an id; a garbage id gets COLL_ERR_INVALID_ARGUMENT naming what is wrong. */
coll_result_t colli_uid_decode(const coll_unique_id_t *id, struct sockaddr_storage *root,
                               uint8_t secret[16]);
/* "<host>:<port>" (an IPv6 address in brackets, which are dropped) into host (NUL-terminated,
 * fewer than hostlen bytes) and *port (1..65535); false when malformed. For NCCL_COMM_ID. */
bool colli_split_host_port(const char *in, char *host, size_t hostlen, long *port);
/* The flags of an id colli_uid_decode accepts. */
unsigned colli_uid_flags(const coll_unique_id_t *id);

/* Start the root server for one communicator on addr (port 0: any) in a thread that exits after
 * answering every rank or after timeout seconds. *bound gets the listening address. joinable
 * NULL: the thread is detached (the process that made the unique id outlives the bootstrap);
 * else *joinable gets it, and the caller joins it before it may exit: a rank that hosts the root
 * gets its own answer first, and leaving then would cut the others' answers off. */
coll_result_t colli_root_start(const struct sockaddr_storage *addr, const uint8_t secret[16],
                               double timeout, struct sockaddr_storage *bound, pthread_t *joinable);

/* A root on an existing listening socket (duplicated: the caller keeps its own descriptor),
 * for coll_comm_shrink: the survivors find it at the lowest survivor's member address. */
coll_result_t colli_root_start_on(int listen_fd, const uint8_t secret[16], double timeout,
                                  pthread_t *joinable);

/* The rank that hosts the root, after its own creation ended with status: on success the root
 * has answered every rank (or does so now) and is joined; on failure it is left to finish on its
 * own, so that the error returns at once. */
void colli_root_finish(pthread_t root, coll_result_t status);
/* The rank that hosts the root failed (msg says why) while the root may still be waiting for
 * ranks: it reports itself to the root (at addr), which then fails every rank that checks in,
 * and stays until each rank checked in or was reported (at most the root's deadline), so that no
 * rank is left to find the root gone and wait for its bootstrap timeout. Returns at once when the
 * root has already finished. */
void colli_root_finish_failed(pthread_t root, const struct sockaddr_storage *addr,
                              const uint8_t secret[16], int rank, int nranks, const char *msg);

/* Rank side: send self to the root at `root`, receive the table into comm->members.
 * shared_root: the root shares another communicator's listener (coll_comm_shrink), so a
 * connection closed before the answer is made again until the deadline. */
coll_result_t colli_bootstrap_exchange(struct coll_comm *comm, const struct sockaddr_storage *root,
                                       const colli_member_t *self,
                                       const struct sockaddr_storage *bind_addr, bool shared_root);

/* The root's check of the member records (bootstrap/versions.c): COLL_ERR_VERSION with msg when
 * ranks run different kcoll builds (version, wire protocol) or a rank's driver is of an older
 * CUDA major version than its runtime; else COLL_SUCCESS, with differences that do not matter
 * (drivers, CUDA toolkits, minor-version compatibility) described in notice ("" when none). */
coll_result_t colli_versions_check(const colli_wire_member_t *const *recs, int n, char *msg,
                                   size_t len, char *notice, size_t nlen);

/* The root's address check (bootstrap/addrs.c): COLL_ERR_NETWORK with msg when ranks on
 * different machines (boot ids) have one data address that is not loopback (host-local IPAM, a
 * docker0 pinned), naming two of them and what to change; else COLL_SUCCESS. */
coll_result_t colli_addrs_check(const colli_wire_member_t *const *recs, int n, char *msg,
                                size_t len);

/* The root's network check (bootstrap/reach.c), once every rank checked in: where the ranks'
 * data addresses are on several networks, ranks of the main one probe the others' (over their
 * open bootstrap connections, a few seconds at most); COLL_ERR_NETWORK with msg naming an
 * address none of them reaches and the CIDR pin that fixes it, else COLL_SUCCESS (also when
 * nothing could be probed). root: the root's own address, for the message. */
typedef struct {
    int fd;             /* the rank's bootstrap connection */
    const uint8_t *key; /* its connection key */
    const colli_wire_member_t *rec;
} colli_reach_rank_t;
coll_result_t colli_reach_check(const colli_reach_rank_t *ranks, int n, const uint8_t secret[16],
                                const struct sockaddr_storage *root, char *msg, size_t len);
/* The rank's side: a probe request h (COLLI_ROOT_PROBE) arrived on the root's connection fd;
 * read its entries, connect to each from address `from` (port 0) within COLLI_PROBE_SECS, answer.
 * Returns COLLI_IO_* or COLLI_HS_BADAUTH (the request failed authentication). */
int colli_reach_answer(int fd, const colli_root_reply_t *h, const uint8_t key[16],
                       const uint8_t secret[16], const struct sockaddr_storage *from, int rank,
                       double deadline);

/* Tell the root that this rank cannot start (bounded, best effort), so that every rank fails at
 * once with msg instead of waiting for the bootstrap timeout. */
void colli_bootstrap_report_error(const struct sockaddr_storage *root, const uint8_t secret[16],
                                  int rank, int nranks, const char *msg);
/* The text that report sends: "rank R (pid P on HOST) cannot start: msg" (rank -1: "a process
 * of this job ... was refused: msg"); the reporting process says the same of itself. */
void colli_bootstrap_error_text(int rank, const char *msg, char *buf, size_t len);

#endif
