/* Wire formats: connection hellos (authenticated with the secret), the communicator tag, the
 * names of collective kinds. */
#include <stddef.h>
#include <string.h>

#include "base/util.h"
#include "base/wire.h"

uint64_t colli_comm_tag(const uint8_t secret[16])
{
    static const char label[] = "kcoll-comm-tag";
    return colli_siphash64(secret, label, sizeof(label) - 1);
}

coll_result_t colli_hello_make(colli_hello_t *h, const uint8_t secret[16], uint8_t kind, int from,
                               int to, uint32_t stream, uint32_t nranks)
{
    memset(h, 0, sizeof(*h));
    h->magic = COLLI_HELLO_MAGIC;
    h->proto = COLLI_PROTO_VERSION;
    h->kind = kind;
    h->comm_tag = colli_comm_tag(secret);
    h->from_rank = from;
    h->to_rank = to;
    h->stream = stream;
    h->nranks = nranks;
    coll_result_t status = colli_random_bytes(h->nonce, sizeof(h->nonce));
    if (status != COLL_SUCCESS)
        return status;
    colli_siphash128(secret, h, offsetof(colli_hello_t, mac), h->mac);
    return COLL_SUCCESS;
}

bool colli_hello_verify(const colli_hello_t *h, const uint8_t secret[16], const char **why)
{
    return colli_hello_verify_ex(h, secret, true, why);
}

bool colli_hello_verify_ex(const colli_hello_t *h, const uint8_t secret[16], bool check_proto,
                           const char **why)
{
    if (h->magic != COLLI_HELLO_MAGIC) {
        *why = "not a kcoll connection (bad magic)";
        return false;
    }
    if (check_proto && h->proto != COLLI_PROTO_VERSION) {
        *why = "different kcoll wire-protocol version (mixed library versions in one job?)";
        return false;
    }
    uint8_t mac[16];
    colli_siphash128(secret, h, offsetof(colli_hello_t, mac), mac);
    if (!colli_mem_equal(mac, h->mac, sizeof(mac))) {
        *why = "authentication failed (the peer does not hold this communicator's secret)";
        return false;
    }
    if (h->comm_tag != colli_comm_tag(secret)) {
        *why = "communicator tag does not match";
        return false;
    }
    return true;
}

const char *colli_coll_name(int coll)
{
    switch (coll) {
    case COLLI_COLL_ALL_REDUCE:
        return "all_reduce";
    case COLLI_COLL_BROADCAST:
        return "broadcast";
    case COLLI_COLL_REDUCE:
        return "reduce";
    case COLLI_COLL_ALL_GATHER:
        return "all_gather";
    case COLLI_COLL_REDUCE_SCATTER:
        return "reduce_scatter";
    case COLLI_COLL_ALL_TO_ALL:
        return "all_to_all";
    case COLLI_COLL_SEND_RECV:
        return "send/recv";
    default:
        return "unknown collective";
    }
}
