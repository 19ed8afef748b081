/* InfiniBand detection and selection for the transport policy and the ib transport: libibverbs
 * is reached only through dlopen (ib_verbs.h), so the library loads and runs where it is
 * absent. The selection rules (HCA lists, GID choice) are pure functions over plain data, so
 * they are tested without an HCA. */
#ifndef COLLI_IB_PROBE_H
#define COLLI_IB_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/spec.h"
#include "coll.h"

typedef struct colli_ib_probe {
    bool usable;       /* a device with an active InfiniBand or RoCE port matches the HCA list */
    bool no_rc;        /* active ports match, but none says InfiniBand or Ethernet (AWS EFA's say
                        * UNSPECIFIED): no reliable-connected QPs, which kcoll's InfiniBand transport
                        * and NCCL's IB transport need */
    char reason[512];  /* why not, when !usable */
    char devices[256]; /* "mlx5_0:1, mlx5_1:1" active ports found */
} colli_ib_probe_t;

struct coll_comm;

/* The transport's probe (ib_policy.c): COLL_TRANSPORT decides whether this rank offers
 * InfiniBand (Socket: no; auto, PreferIB and RequireIB: when a port is active). RequireIB fails
 * naming the reason, PreferIB falls back to sockets with one WARN line, auto with one INFO line.
 * The verbs library is libibverbs.so.1, or COLL_TEST_IB_VERBS_LIB in tests. */
coll_result_t ib_policy_probe(struct coll_comm *comm, bool *use);

/* Probe the verbs library (lib: NULL = libibverbs.so.1), the devices and their ports.
 * hca_spec: COLL_IB_HCA syntax ("" = all). */
void colli_ib_probe(const char *lib, const char *hca_spec, colli_ib_probe_t *out);

/* ---- RoCE GID selection ---- */

enum {
    COLLI_IB_GID_IB = 0, /* an InfiniBand GID (link layer IB) */
    COLLI_IB_GID_ROCE_V1 = 1,
    COLLI_IB_GID_ROCE_V2 = 2,
    COLLI_IB_GID_UNKNOWN = 3, /* the type could not be read */
};

typedef struct colli_ib_gid {
    int index;
    uint8_t gid[16];
    int type;      /* COLLI_IB_GID_* */
    char ndev[16]; /* the network interface of a RoCE entry ("" when unknown or InfiniBand) */
} colli_ib_gid_t;

/* The GID index a RoCE port should use, from its table of n entries. want >= 0: that index
 * (COLL_IB_GID_INDEX), which must exist and not be all zeros. want < 0: automatic, as NCCL
 * does: RoCE v2 before v1 (before an unknown type), then an IPv4-mapped address before a global
 * IPv6 one before a link-local (fe80::/10) one, then the lowest index; all-zero entries are
 * skipped. Returns the index, or -1 with the reason in why. */
int colli_ib_gid_select(const colli_ib_gid_t *tab, int n, int want, char *why, size_t whylen);

/* "::ffff:10.0.0.1", "fe80::1234:..": printable form of a GID. */
void colli_ib_gid_str(const uint8_t gid[16], char *buf, size_t len);

/* Which GID entries a RoCE port may use under COLL_TRANSPORT=auto: those of the interface the
 * communicator runs on (ifname). Moves them to the front of tab and returns their count. */
int colli_ib_gid_on_ifname(colli_ib_gid_t *tab, int n, const char *ifname);

/* Can two ranks' RoCE GIDs reach each other? false with the reason in why when one is an
 * IPv4-mapped address and the other an IPv6 one, or their RoCE versions (both known) differ:
 * the packets of such a pair are dropped silently and the QPs only time out. */
bool colli_ib_gid_compatible(const uint8_t mine[16], int my_type, const uint8_t theirs[16],
                             int their_type, char *why, size_t whylen);

#endif
