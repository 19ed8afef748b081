/* The "nccl_init" exchange (nccl_ipc.h), with jansson. */
#include "nccl_ipc.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "agent_ipc.h"

/* err is required by the parsers of this file (nccl_ipc.h) */
#define set_err(err, errlen, ...) snprintf((err), (errlen), __VA_ARGS__)

int colli_proto_nccl_version_parse(const char *s, int v[3])
{
    int out[3] = {0, 0, 0};
    if (!s)
        return -1;
    for (int part = 0; part < 3; part++) {
        int digits = 0;
        while (*s >= '0' && *s <= '9') {
            out[part] = out[part] * 10 + (*s - '0');
            if (++digits > 5 || out[part] > 65535)
                return -1;
            s++;
        }
        if (digits == 0 || (part < 2 && *s++ != '.'))
            return -1;
    }
    if (*s != '\0')
        return -1;
    memcpy(v, out, sizeof(out));
    return 0;
}

int colli_proto_nccl_policy_valid(const char *policy)
{
    return policy && (strcmp(policy, COLLI_PROTO_NCCL_POLICY_EXACT) == 0 ||
                      strcmp(policy, COLLI_PROTO_NCCL_POLICY_SAME_MINOR) == 0);
}

int colli_proto_nccl_versions_agree(const char *a, const char *b, const char *policy)
{
    int va[3], vb[3];
    if (colli_proto_nccl_version_parse(a, va) != 0 || colli_proto_nccl_version_parse(b, vb) != 0)
        return 0;
    if (policy && strcmp(policy, COLLI_PROTO_NCCL_POLICY_SAME_MINOR) == 0)
        return va[0] == vb[0] && va[1] == vb[1];
    return va[0] == vb[0] && va[1] == vb[1] && va[2] == vb[2];
}

/* A string member into dst (len bytes): -1 when required and absent, or too long, or holding a
 * byte outside allowed (NULL: any printable byte). */
static int take(const json_t *o, const char *key, char *dst, size_t len, int required,
                const char *allowed)
{
    const char *v = json_string_value(json_object_get(o, key));
    size_t n;
    if (!v) {
        dst[0] = '\0';
        return required ? -1 : 0;
    }
    n = strlen(v);
    if (n >= len)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (allowed ? !strchr(allowed, c) : (c < 0x20 || c == 0x7f))
            return -1;
    }
    memcpy(dst, v, n + 1);
    return 0;
}

#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"

static int int_member(const json_t *o, const char *key, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < INT_MIN || json_integer_value(v) > INT_MAX)
        return -1;
    *out = (int)json_integer_value(v);
    return 0;
}

json_t *colli_proto_nccl_init_request(const colli_proto_nccl_init_t *r, int timeout_ms)
{
    return json_pack("{si ss si ss ss ss si si ss si}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION,
                     COLLI_PROTO_KEY_TYPE, COLLI_PROTO_TYPE_NCCL_INIT, COLLI_PROTO_KEY_TIMEOUT_MS,
                     timeout_ms, COLLI_PROTO_KEY_NCCL_VERSION, r->version,
                     COLLI_PROTO_KEY_NCCL_SUFFIX, r->suffix, COLLI_PROTO_KEY_HOST, r->host,
                     COLLI_PROTO_KEY_PID, r->pid, COLLI_PROTO_KEY_CUDA_DRIVER, r->cuda_driver,
                     COLLI_PROTO_KEY_GPU, r->gpu, COLLI_PROTO_KEY_LOCAL_RANK, r->local_rank);
}

int colli_proto_nccl_init_parse(const json_t *msg, colli_proto_nccl_init_t *out, char *err,
                                size_t errlen)
{
    colli_proto_nccl_init_t r;
    int v[3];
    memset(&r, 0, sizeof(r));
    r.local_rank = -1;
    if (take(msg, COLLI_PROTO_KEY_NCCL_VERSION, r.version, sizeof(r.version), 1, "0123456789.") ||
        colli_proto_nccl_version_parse(r.version, v) != 0) {
        set_err(err, errlen,
                "\"" COLLI_PROTO_KEY_NCCL_VERSION "\" must be NCCL's version as MAJOR.MINOR.PATCH");
        return -1;
    }
    if (take(msg, COLLI_PROTO_KEY_NCCL_SUFFIX, r.suffix, sizeof(r.suffix), 0, NULL) ||
        take(msg, COLLI_PROTO_KEY_HOST, r.host, sizeof(r.host), 0, NULL) ||
        take(msg, COLLI_PROTO_KEY_GPU, r.gpu, sizeof(r.gpu), 0, NULL)) {
        set_err(err, errlen,
                "\"" COLLI_PROTO_KEY_NCCL_SUFFIX "\", \"" COLLI_PROTO_KEY_HOST
                "\" or \"" COLLI_PROTO_KEY_GPU "\" is not a printable string within its limit "
                "(%zu, %zu, %zu bytes)",
                sizeof(r.suffix) - 1, sizeof(r.host) - 1, sizeof(r.gpu) - 1);
        return -1;
    }
    if (json_object_get(msg, COLLI_PROTO_KEY_LOCAL_RANK) &&
        (int_member(msg, COLLI_PROTO_KEY_LOCAL_RANK, &r.local_rank) || r.local_rank < -1)) {
        set_err(err, errlen, "\"" COLLI_PROTO_KEY_LOCAL_RANK "\" must be an integer >= -1");
        return -1;
    }
    if (json_object_get(msg, COLLI_PROTO_KEY_PID) && int_member(msg, COLLI_PROTO_KEY_PID, &r.pid)) {
        set_err(err, errlen, "\"" COLLI_PROTO_KEY_PID "\" must be an integer");
        return -1;
    }
    if (json_object_get(msg, COLLI_PROTO_KEY_CUDA_DRIVER) &&
        (int_member(msg, COLLI_PROTO_KEY_CUDA_DRIVER, &r.cuda_driver) || r.cuda_driver < 0)) {
        set_err(err, errlen, "\"" COLLI_PROTO_KEY_CUDA_DRIVER "\" must be a non-negative integer");
        return -1;
    }
    *out = r;
    return 0;
}

json_t *colli_proto_nccl_init_reply(const colli_proto_nccl_facts_t *f)
{
    return json_pack("{si ss sb si si ss ss ss ss ss ss ss ss ss ss}", COLLI_PROTO_KEY_V,
                     COLLI_PROTO_IPC_VERSION, COLLI_PROTO_KEY_TYPE, COLLI_PROTO_TYPE_NCCL_INIT,
                     COLLI_PROTO_KEY_OK, 1, COLLI_PROTO_KEY_RANK, f->rank, COLLI_PROTO_KEY_NRANKS,
                     f->nranks, COLLI_PROTO_KEY_INTERFACE, f->ifname, COLLI_PROTO_KEY_ADDRESS,
                     f->address, COLLI_PROTO_KEY_IB_DEVICE, f->ib_device, COLLI_PROTO_KEY_TRANSPORT,
                     f->transport, COLLI_PROTO_KEY_POD, f->pod, COLLI_PROTO_KEY_NODE, f->node,
                     COLLI_PROTO_KEY_TOPOLOGY, f->topology, COLLI_PROTO_KEY_NCCL_PIN,
                     f->version_pin, COLLI_PROTO_KEY_NCCL_POLICY, f->policy,
                     COLLI_PROTO_KEY_NCCL_REFERENCE, f->reference);
}

int colli_proto_nccl_init_decode(const json_t *r, colli_proto_nccl_facts_t *out, char *err,
                                 size_t errlen)
{
    colli_proto_nccl_facts_t f;
    int v[3];
    memset(&f, 0, sizeof(f));
    if (int_member(r, COLLI_PROTO_KEY_RANK, &f.rank) ||
        int_member(r, COLLI_PROTO_KEY_NRANKS, &f.nranks) || f.nranks <= 0 || f.rank < 0 ||
        f.rank >= f.nranks) {
        set_err(err, errlen, "nccl_init reply lacks a rank within nranks");
        return -1;
    }
    if (take(r, COLLI_PROTO_KEY_INTERFACE, f.ifname, sizeof(f.ifname), 1, NAME_CHARS) ||
        f.ifname[0] == '\0') {
        set_err(err, errlen,
                "nccl_init reply's interface is missing, longer than %d characters or not an "
                "interface name",
                COLLI_PROTO_NCCL_IFNAME_MAX - 1);
        return -1;
    }
    if (take(r, COLLI_PROTO_KEY_IB_DEVICE, f.ib_device, sizeof(f.ib_device), 0, NAME_CHARS ":")) {
        set_err(err, errlen,
                "nccl_init reply's ib_device is longer than %zu characters or not a device name",
                sizeof(f.ib_device) - 1);
        return -1;
    }
    if (take(r, COLLI_PROTO_KEY_TRANSPORT, f.transport, sizeof(f.transport), 1, NULL) ||
        !colli_proto_transport_valid(f.transport)) {
        set_err(err, errlen, "nccl_init reply's transport is not RequireIB, PreferIB or Socket");
        return -1;
    }
    if (take(r, COLLI_PROTO_KEY_NCCL_POLICY, f.policy, sizeof(f.policy), 1, NULL) ||
        !colli_proto_nccl_policy_valid(f.policy)) {
        set_err(err, errlen, "nccl_init reply's version policy is not Exact or SameMinor");
        return -1;
    }
    if (take(r, COLLI_PROTO_KEY_NCCL_PIN, f.version_pin, sizeof(f.version_pin), 0, NULL) ||
        (f.version_pin[0] && colli_proto_nccl_version_parse(f.version_pin, v) != 0)) {
        set_err(err, errlen, "nccl_init reply's version pin is not MAJOR.MINOR.PATCH");
        return -1;
    }
    if (take(r, COLLI_PROTO_KEY_ADDRESS, f.address, sizeof(f.address), 0, NULL) ||
        take(r, COLLI_PROTO_KEY_POD, f.pod, sizeof(f.pod), 0, NULL) ||
        take(r, COLLI_PROTO_KEY_NODE, f.node, sizeof(f.node), 0, NULL) ||
        take(r, COLLI_PROTO_KEY_TOPOLOGY, f.topology, sizeof(f.topology), 0, NULL) ||
        take(r, COLLI_PROTO_KEY_NCCL_REFERENCE, f.reference, sizeof(f.reference), 0, NULL)) {
        set_err(err, errlen, "nccl_init reply has an oversized or unprintable string field");
        return -1;
    }
    *out = f;
    return 0;
}

json_t *colli_proto_nccl_ended_request(long long since)
{
    return json_pack("{si ss sI}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION, COLLI_PROTO_KEY_TYPE,
                     COLLI_PROTO_TYPE_NCCL_ENDED, COLLI_PROTO_KEY_SINCE, (json_int_t)since);
}

long long colli_proto_nccl_ended_since(const json_t *req)
{
    const json_t *v = json_object_get(req, COLLI_PROTO_KEY_SINCE);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (long long)json_integer_value(v) : 0;
}

json_t *colli_proto_nccl_ended_reply(const colli_proto_nccl_ended_t *e, int n)
{
    json_t *list = json_array();
    for (int i = 0; list && i < n && i < COLLI_PROTO_NCCL_MAX_ENDED; i++) {
        json_t *o =
            json_pack("{si ss ss ss}", COLLI_PROTO_KEY_RANK, e[i].rank, COLLI_PROTO_KEY_POD,
                      e[i].pod, COLLI_PROTO_KEY_NODE, e[i].node, COLLI_PROTO_KEY_WHAT, e[i].what);
        if (!o || json_array_append_new(list, o) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    if (!list)
        return NULL;
    return json_pack("{si ss sb so}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION,
                     COLLI_PROTO_KEY_TYPE, COLLI_PROTO_TYPE_NCCL_ENDED, COLLI_PROTO_KEY_OK, 1,
                     COLLI_PROTO_KEY_ENDED, list);
}

int colli_proto_nccl_ended_decode(const json_t *r, colli_proto_nccl_ended_t *out, int max, int *n,
                                  char *err, size_t errlen)
{
    const json_t *list = json_object_get(r, COLLI_PROTO_KEY_ENDED);
    size_t i;
    const json_t *it;
    *n = 0;
    if (!json_is_array(list)) {
        set_err(err, errlen, "nccl_ended reply lacks the array \"" COLLI_PROTO_KEY_ENDED "\"");
        return -1;
    }
    json_array_foreach(list, i, it)
    {
        colli_proto_nccl_ended_t e;
        memset(&e, 0, sizeof(e));
        if (int_member(it, COLLI_PROTO_KEY_RANK, &e.rank) || e.rank < 0 ||
            take(it, COLLI_PROTO_KEY_POD, e.pod, sizeof(e.pod), 1, NAME_CHARS) || !e.pod[0] ||
            take(it, COLLI_PROTO_KEY_NODE, e.node, sizeof(e.node), 0, NAME_CHARS) ||
            take(it, COLLI_PROTO_KEY_WHAT, e.what, sizeof(e.what), 1, NULL) || !e.what[0]) {
            set_err(err, errlen,
                    "nccl_ended reply's entry %zu is not {rank >= 0, pod, node, what} with "
                    "names and a printable text within their limits",
                    i);
            *n = 0;
            return -1;
        }
        if (*n < max)
            out[(*n)++] = e;
    }
    return 0;
}
