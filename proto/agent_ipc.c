/* The coll-agent <-> libcoll socket protocol (agent_ipc.h), with jansson. */
#include "agent_ipc.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

static const char *const phase_names[] = {"Pending", "Bootstrapping", "Ready", "Degraded",
                                          "Failed"};
static const char *const cond_names[COLLI_PROTO_NCOND] = {"VersionsConsistent", "NetworkConsistent",
                                                          "Reachable", "Healthy"};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

uint32_t colli_proto_frame_length(const unsigned char hdr[COLLI_PROTO_FRAME_HEADER])
{
    return (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
}

unsigned char *colli_proto_frame_encode(const json_t *msg, size_t *len)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    unsigned char *frame;
    size_t n;
    if (!s)
        return NULL;
    n = strlen(s);
    frame = malloc(COLLI_PROTO_FRAME_HEADER + n);
    if (frame) {
        frame[0] = (unsigned char)(n >> 24);
        frame[1] = (unsigned char)(n >> 16);
        frame[2] = (unsigned char)(n >> 8);
        frame[3] = (unsigned char)n;
        memcpy(frame + COLLI_PROTO_FRAME_HEADER, s, n);
        *len = COLLI_PROTO_FRAME_HEADER + n;
    }
    free(s);
    return frame;
}

int colli_proto_header(const json_t *msg, long long *v, const char **type)
{
    const json_t *jv = json_object_get(msg, COLLI_PROTO_KEY_V);
    const char *t = colli_proto_type(msg);
    if (!json_is_integer(jv) || !t)
        return -1;
    *v = (long long)json_integer_value(jv);
    *type = t;
    return 0;
}

const char *colli_proto_type(const json_t *msg)
{
    return json_string_value(json_object_get(msg, COLLI_PROTO_KEY_TYPE));
}

colli_proto_code_class_t colli_proto_code_class(const char *code)
{
    static const char *const network[] = {
        COLLI_PROTO_CODE_INTERFACE_MISSING, COLLI_PROTO_CODE_ADDRESS_MISSING,
        COLLI_PROTO_CODE_NETWORK_NOT_ATTACHED, COLLI_PROTO_CODE_NETWORK_STATUS_MISSING,
        COLLI_PROTO_CODE_NETWORK_STATUS_INCOMPLETE};
    if (!code)
        return COLLI_PROTO_CLASS_USAGE;
    for (size_t i = 0; i < sizeof(network) / sizeof(network[0]); i++)
        if (strcmp(code, network[i]) == 0)
            return COLLI_PROTO_CLASS_NETWORK;
    if (strcmp(code, COLLI_PROTO_CODE_NOT_READY) == 0 ||
        strcmp(code, COLLI_PROTO_CODE_RENDEZVOUS_TIMEOUT) == 0)
        return COLLI_PROTO_CLASS_TIMEOUT;
    if (strcmp(code, COLLI_PROTO_CODE_API_UNAVAILABLE) == 0)
        return COLLI_PROTO_CLASS_SYSTEM;
    return COLLI_PROTO_CLASS_USAGE;
}

json_t *colli_proto_error_reply(const char *code, const char *text)
{
    return json_pack("{si ss sb ss ss}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION,
                     COLLI_PROTO_KEY_TYPE, COLLI_PROTO_TYPE_ERROR, COLLI_PROTO_KEY_OK, 0,
                     COLLI_PROTO_KEY_CODE, code, COLLI_PROTO_KEY_ERROR, text);
}

void colli_proto_error_fields(const json_t *reply, const char **code, const char **text)
{
    *code = json_string_value(json_object_get(reply, COLLI_PROTO_KEY_CODE));
    *text = json_string_value(json_object_get(reply, COLLI_PROTO_KEY_ERROR));
}

json_t *colli_proto_ack(void)
{
    return json_pack("{si ss sb}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION, COLLI_PROTO_KEY_TYPE,
                     COLLI_PROTO_TYPE_ACK, COLLI_PROTO_KEY_OK, 1);
}

int colli_proto_transport_valid(const char *t)
{
    return t && (strcmp(t, COLLI_PROTO_TRANSPORT_REQUIRE_IB) == 0 ||
                 strcmp(t, COLLI_PROTO_TRANSPORT_PREFER_IB) == 0 ||
                 strcmp(t, COLLI_PROTO_TRANSPORT_SOCKET) == 0);
}

/* ---- hello ---- */

json_t *colli_proto_hello_request(int timeout_ms, const char *library_version, int pid)
{
    return json_pack("{si ss si ss si}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION,
                     COLLI_PROTO_KEY_TYPE, COLLI_PROTO_TYPE_HELLO, COLLI_PROTO_KEY_TIMEOUT_MS,
                     timeout_ms, COLLI_PROTO_KEY_LIBRARY_VERSION, library_version,
                     COLLI_PROTO_KEY_PID, pid);
}

int colli_proto_hello_set_local(json_t *req, int local_rank, int local_world_size,
                                int restart_count)
{
    const struct {
        const char *key;
        int v;
    } f[] = {{COLLI_PROTO_KEY_LOCAL_RANK, local_rank},
             {COLLI_PROTO_KEY_LOCAL_WORLD_SIZE, local_world_size},
             {COLLI_PROTO_KEY_RESTART_COUNT, restart_count}};
    if (!json_is_object(req))
        return -1;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].v >= 0 && json_object_set_new(req, f[i].key, json_integer(f[i].v)) != 0)
            return -1;
    return 0;
}

int colli_proto_hello_local(const json_t *req, int *local_rank, int *local_world_size,
                            int *restart_count, char *err, size_t errlen)
{
    const char *keys[] = {COLLI_PROTO_KEY_LOCAL_RANK, COLLI_PROTO_KEY_LOCAL_WORLD_SIZE,
                          COLLI_PROTO_KEY_RESTART_COUNT};
    int *dst[] = {local_rank, local_world_size, restart_count};
    for (size_t i = 0; i < 3; i++) {
        const json_t *v = json_object_get(req, keys[i]);
        *dst[i] = -1;
        if (v == NULL || json_is_null(v))
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535) {
            set_err(err, errlen, "hello's \"%s\" must be an integer in 0..65535", keys[i]);
            return -1;
        }
        *dst[i] = (int)json_integer_value(v);
    }
    return 0;
}

int64_t colli_proto_hello_wait_ms(const json_t *req)
{
    const json_t *t = json_object_get(req, COLLI_PROTO_KEY_TIMEOUT_MS);
    int64_t wait =
        json_is_integer(t) ? (int64_t)json_integer_value(t) : COLLI_PROTO_HELLO_DEFAULT_WAIT_MS;
    if (wait < 0)
        wait = 0;
    if (wait > COLLI_PROTO_HELLO_MAX_WAIT_MS)
        wait = COLLI_PROTO_HELLO_MAX_WAIT_MS;
    return wait;
}

json_t *colli_proto_hello_reply(const colli_proto_facts_t *f, const char *agent_version)
{
    char secret[2 * COLLI_PROTO_SECRET_BYTES + 1], root[140];
    colli_proto_hex_encode(f->secret, sizeof(f->secret), secret);
    if (strchr(f->root_host, ':'))
        snprintf(root, sizeof(root), "[%s]:%d", f->root_host, f->root_port);
    else
        snprintf(root, sizeof(root), "%s:%d", f->root_host, f->root_port);
    json_t *r = json_pack(
        "{si ss sb si si ss ss si ss sb ss ss ss ss ss si si ss ss ss ss ss ss ss}",
        COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION, COLLI_PROTO_KEY_TYPE, COLLI_PROTO_TYPE_HELLO,
        COLLI_PROTO_KEY_OK, 1, COLLI_PROTO_KEY_RANK, f->rank, COLLI_PROTO_KEY_NRANKS, f->nranks,
        COLLI_PROTO_KEY_ROOT, root, COLLI_PROTO_KEY_ROOT_HOST, f->root_host,
        COLLI_PROTO_KEY_ROOT_PORT, f->root_port, COLLI_PROTO_KEY_SECRET, secret,
        COLLI_PROTO_KEY_IS_ROOT, f->is_root, COLLI_PROTO_KEY_INTERFACE, f->ifname,
        COLLI_PROTO_KEY_ADDRESS, f->address, COLLI_PROTO_KEY_IB_DEVICE, f->ib_device,
        COLLI_PROTO_KEY_TRANSPORT, f->transport, COLLI_PROTO_KEY_LIBRARY_VERSION,
        f->library_version, COLLI_PROTO_KEY_BOOTSTRAP_TIMEOUT_S, f->bootstrap_timeout_s,
        COLLI_PROTO_KEY_TIMEOUT_S, f->timeout_s, COLLI_PROTO_KEY_POD, f->pod, COLLI_PROTO_KEY_NODE,
        f->node, COLLI_PROTO_KEY_NAMESPACE, f->ns, COLLI_PROTO_KEY_JOB, f->job,
        COLLI_PROTO_KEY_TOPOLOGY, f->topology, COLLI_PROTO_KEY_GROUP, f->group,
        COLLI_PROTO_KEY_AGENT_VERSION, agent_version);
    /* several ranks per pod; a one-rank pod's facts (local_size 0 or 1) are local 0 of 1 */
    int lsize = f->local_size > 0 ? f->local_size : 1;
    if (r && (json_object_set_new(r, COLLI_PROTO_KEY_LOCAL_RANK, json_integer(f->local_rank)) ||
              json_object_set_new(r, COLLI_PROTO_KEY_LOCAL_WORLD_SIZE, json_integer(lsize)) ||
              json_object_set_new(r, COLLI_PROTO_KEY_POD_RANK,
                                  json_integer(f->local_size > 0 ? f->pod_rank : f->rank)) ||
              json_object_set_new(r, COLLI_PROTO_KEY_PODS,
                                  json_integer(f->local_size > 0 ? f->npods : f->nranks)) ||
              json_object_set_new(r, COLLI_PROTO_KEY_GPU,
                                  json_integer(f->local_size > 0 ? f->gpu : -1)))) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* 1 with *out when j is an integer that an int holds, else 0. */
static int int_value(const json_t *j, int *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < INT_MIN || json_integer_value(j) > INT_MAX)
        return 0;
    *out = (int)json_integer_value(j);
    return 1;
}

static int copy_str(const json_t *r, const char *key, char *dst, size_t len, int required)
{
    const char *v = json_string_value(json_object_get(r, key));
    if (!v) {
        dst[0] = '\0';
        return required ? -1 : 0;
    }
    if (strlen(v) >= len)
        return -1;
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

int colli_proto_hello_decode(const json_t *r, colli_proto_facts_t *out, char *err, size_t errlen)
{
    colli_proto_facts_t f;
    const struct {
        const char *key;
        int *dst;
    } ints[] = {
        {COLLI_PROTO_KEY_RANK, &f.rank},
        {COLLI_PROTO_KEY_NRANKS, &f.nranks},
        {COLLI_PROTO_KEY_ROOT_PORT, &f.root_port},
        {COLLI_PROTO_KEY_BOOTSTRAP_TIMEOUT_S, &f.bootstrap_timeout_s},
        {COLLI_PROTO_KEY_TIMEOUT_S, &f.timeout_s},
    };
    const char *secret;

    memset(&f, 0, sizeof(f));
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        const json_t *v = json_object_get(r, ints[i].key);
        if (!int_value(v, ints[i].dst)) {
            set_err(err, errlen,
                    json_is_integer(v) ? "hello reply's \"%s\" is out of range"
                                       : "hello reply lacks integer \"%s\"",
                    ints[i].key);
            return -1;
        }
    }
    f.is_root = json_is_true(json_object_get(r, COLLI_PROTO_KEY_IS_ROOT));
    if (copy_str(r, COLLI_PROTO_KEY_ROOT_HOST, f.root_host, sizeof(f.root_host), 1) ||
        copy_str(r, COLLI_PROTO_KEY_INTERFACE, f.ifname, sizeof(f.ifname), 1) ||
        copy_str(r, COLLI_PROTO_KEY_ADDRESS, f.address, sizeof(f.address), 1) ||
        copy_str(r, COLLI_PROTO_KEY_TRANSPORT, f.transport, sizeof(f.transport), 1) ||
        copy_str(r, COLLI_PROTO_KEY_IB_DEVICE, f.ib_device, sizeof(f.ib_device), 0) ||
        copy_str(r, COLLI_PROTO_KEY_LIBRARY_VERSION, f.library_version, sizeof(f.library_version),
                 0) ||
        copy_str(r, COLLI_PROTO_KEY_POD, f.pod, sizeof(f.pod), 0) ||
        copy_str(r, COLLI_PROTO_KEY_NODE, f.node, sizeof(f.node), 0) ||
        copy_str(r, COLLI_PROTO_KEY_NAMESPACE, f.ns, sizeof(f.ns), 0) ||
        copy_str(r, COLLI_PROTO_KEY_JOB, f.job, sizeof(f.job), 0) ||
        copy_str(r, COLLI_PROTO_KEY_TOPOLOGY, f.topology, sizeof(f.topology), 0) ||
        copy_str(r, COLLI_PROTO_KEY_GROUP, f.group, sizeof(f.group), 0)) {
        set_err(err, errlen, "hello reply has a missing or oversized string field");
        return -1;
    }
    secret = json_string_value(json_object_get(r, COLLI_PROTO_KEY_SECRET));
    if (!secret || strlen(secret) != 2 * COLLI_PROTO_SECRET_BYTES) {
        set_err(err, errlen, "hello reply has no %d-hex-digit secret",
                2 * COLLI_PROTO_SECRET_BYTES);
        return -1;
    }
    if (colli_proto_hex_decode(secret, f.secret, sizeof(f.secret)) != 0) {
        set_err(err, errlen, "secret is not hex");
        return -1;
    }
    if (f.nranks <= 0 || f.rank < 0 || f.rank >= f.nranks || f.root_port <= 0 ||
        f.root_port > 65535 || f.is_root != (f.rank == 0)) {
        set_err(err, errlen, "inconsistent facts (rank %d of %d, root port %d)", f.rank, f.nranks,
                f.root_port);
        return -1;
    }
    /* several ranks per pod (an agent before them sends none: local 0 of 1) */
    const struct {
        const char *key;
        int *dst;
        int def;
    } local[] = {{COLLI_PROTO_KEY_LOCAL_RANK, &f.local_rank, 0},
                 {COLLI_PROTO_KEY_LOCAL_WORLD_SIZE, &f.local_size, 1},
                 {COLLI_PROTO_KEY_POD_RANK, &f.pod_rank, f.rank},
                 {COLLI_PROTO_KEY_PODS, &f.npods, f.nranks},
                 {COLLI_PROTO_KEY_GPU, &f.gpu, -1}};
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++) {
        const json_t *v = json_object_get(r, local[i].key);
        *local[i].dst = local[i].def;
        if (v != NULL && !int_value(v, local[i].dst)) {
            set_err(err, errlen, "hello reply's \"%s\" is not an integer", local[i].key);
            return -1;
        }
    }
    if (f.local_size < 1 || f.local_rank < 0 || f.local_rank >= f.local_size || f.pod_rank < 0 ||
        f.npods < 1 || f.gpu < -1 || (long long)f.npods * f.local_size != f.nranks ||
        (long long)f.pod_rank * f.local_size + f.local_rank != f.rank) {
        set_err(err, errlen,
                "inconsistent facts (rank %d of %d is not local rank %d of %d in pod %d of %d)",
                f.rank, f.nranks, f.local_rank, f.local_size, f.pod_rank, f.npods);
        return -1;
    }
    *out = f;
    return 0;
}

json_t *colli_proto_hello_failure(const char *code, const char *text, const colli_proto_facts_t *f,
                                  const colli_proto_failure_t *how, const char *agent_version)
{
    json_t *r = colli_proto_error_reply(code, text);
    json_t *facts = f ? colli_proto_hello_reply(f, agent_version) : NULL;
    json_t *missing = json_array();
    int bad = !r || !missing;
    for (int i = 0; !bad && how && i < how->nmissing && i < COLLI_PROTO_MAX_MISSING; i++)
        bad = json_array_append_new(missing, json_integer(how->missing[i])) != 0;
    if (!bad && facts && how)
        bad = json_object_set_new(r, COLLI_PROTO_KEY_FACTS, facts) ||
              json_object_set_new(r, COLLI_PROTO_KEY_HOST_ROOT, json_boolean(how->host_root)) ||
              json_object_set_new(r, COLLI_PROTO_KEY_OWN_RANK, json_boolean(how->own_rank)) ||
              json_object_set_new(r, COLLI_PROTO_KEY_MISSING_RANKS, json_incref(missing));
    else
        json_decref(facts);
    json_decref(missing);
    if (bad) {
        json_decref(r);
        return NULL;
    }
    return r;
}

int colli_proto_hello_failure_facts(const json_t *reply, colli_proto_facts_t *out,
                                    colli_proto_failure_t *how)
{
    const json_t *facts = json_object_get(reply, COLLI_PROTO_KEY_FACTS);
    const json_t *missing = json_object_get(reply, COLLI_PROTO_KEY_MISSING_RANKS), *m;
    colli_proto_facts_t f;
    char err[160];
    size_t i;
    if (!json_is_object(facts) || colli_proto_hello_decode(facts, &f, err, sizeof(err)) != 0)
        return -1;
    memset(how, 0, sizeof(*how));
    how->host_root = json_is_true(json_object_get(reply, COLLI_PROTO_KEY_HOST_ROOT));
    how->own_rank = json_is_true(json_object_get(reply, COLLI_PROTO_KEY_OWN_RANK));
    json_array_foreach(missing, i, m)
    {
        int r;
        if (how->nmissing == COLLI_PROTO_MAX_MISSING || !int_value(m, &r) || r < 0 || r >= f.nranks)
            break; /* at most the ranks of one pod, each a rank of the job */
        how->missing[how->nmissing++] = r;
    }
    *out = f;
    return 0;
}

/* ---- report ---- */

const char *colli_proto_phase_name(colli_proto_phase_t p)
{
    if ((int)p < 0 || (size_t)p >= sizeof(phase_names) / sizeof(phase_names[0]))
        return NULL;
    return phase_names[p];
}

colli_proto_phase_t colli_proto_phase_parse(const char *name)
{
    for (size_t i = 0; name && i < sizeof(phase_names) / sizeof(phase_names[0]); i++)
        if (strcasecmp(name, phase_names[i]) == 0)
            return (colli_proto_phase_t)i;
    return COLLI_PROTO_PHASE_NONE;
}

const char *colli_proto_cond_name(colli_proto_cond_t c)
{
    if ((int)c < 0 || c >= COLLI_PROTO_NCOND)
        return NULL;
    return cond_names[c];
}

json_t *colli_proto_report_build(const colli_proto_report_t *r)
{
    const char *phase = colli_proto_phase_name(r->phase);
    json_t *msg, *conds = NULL;
    if (!phase)
        return NULL;
    msg = json_pack("{si ss ss}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION, COLLI_PROTO_KEY_TYPE,
                    COLLI_PROTO_TYPE_REPORT, COLLI_PROTO_KEY_PHASE, phase);
    if (!msg)
        return NULL;
    if (r->progress)
        json_object_set_new(msg, COLLI_PROTO_KEY_PROGRESS, json_string(r->progress));
    if (r->transport)
        json_object_set_new(msg, COLLI_PROTO_KEY_TRANSPORT, json_string(r->transport));
    if (r->has_ready_ranks)
        json_object_set_new(msg, COLLI_PROTO_KEY_READY_RANKS, json_integer(r->ready_ranks));
    if (r->pid > 0)
        json_object_set_new(msg, COLLI_PROTO_KEY_PID, json_integer(r->pid));
    if (r->has_error) {
        json_t *e =
            json_pack("{ss}", COLLI_PROTO_KEY_MESSAGE, r->err_message ? r->err_message : "");
        if (e && r->has_err_rank)
            json_object_set_new(e, COLLI_PROTO_KEY_RANK, json_integer(r->err_rank));
        if (e && r->err_pod && r->err_pod[0])
            json_object_set_new(e, COLLI_PROTO_KEY_POD, json_string(r->err_pod));
        if (e && r->err_node && r->err_node[0])
            json_object_set_new(e, COLLI_PROTO_KEY_NODE, json_string(r->err_node));
        json_object_set_new(msg, COLLI_PROTO_KEY_ERROR, e);
    }
    for (int k = 0; k < COLLI_PROTO_NCOND; k++) {
        const colli_proto_condition_t *c = &r->conds[k];
        if (!c->type)
            continue;
        if (!conds)
            conds = json_array();
        json_array_append_new(
            conds, json_pack("{ss ss ss ss}", COLLI_PROTO_KEY_TYPE, c->type, COLLI_PROTO_KEY_STATUS,
                             c->status ? c->status : COLLI_PROTO_STATUS_UNKNOWN,
                             COLLI_PROTO_KEY_REASON, c->reason ? c->reason : "",
                             COLLI_PROTO_KEY_MESSAGE, c->message ? c->message : ""));
    }
    if (conds)
        json_object_set_new(msg, COLLI_PROTO_KEY_CONDITIONS, conds);
    if (r->nplaces > 0) {
        json_t *places = json_array();
        for (int k = 0; places && k < r->nplaces && k < COLLI_PROTO_MAX_PLACES; k++) {
            const colli_proto_place_t *pl = &r->places[k];
            json_t *o =
                json_pack("{ss si si}", COLLI_PROTO_KEY_POD, pl->pod ? pl->pod : "",
                          COLLI_PROTO_KEY_FIRST, pl->first, COLLI_PROTO_KEY_COUNT, pl->count);
            if (o && pl->node)
                json_object_set_new(o, COLLI_PROTO_KEY_NODE, json_string(pl->node));
            if (o && pl->gpus)
                json_object_set_new(o, COLLI_PROTO_KEY_GPUS, json_string(pl->gpus));
            json_array_append_new(places, o);
        }
        json_object_set_new(msg, COLLI_PROTO_KEY_PLACEMENT, places);
        if (r->places_more > 0)
            json_object_set_new(msg, COLLI_PROTO_KEY_PLACEMENT_MORE, json_integer(r->places_more));
    }
    return msg;
}

int colli_proto_report_parse(const json_t *msg, colli_proto_report_t *out, char *err, size_t errlen)
{
    const json_t *e = json_object_get(msg, COLLI_PROTO_KEY_ERROR);
    const json_t *phase = json_object_get(msg, COLLI_PROTO_KEY_PHASE);
    const json_t *rr = json_object_get(msg, COLLI_PROTO_KEY_READY_RANKS), *c, *r;
    size_t i;
    int ready = 0, rank = 0;
    r = json_object_get(e, COLLI_PROTO_KEY_RANK);
    if ((e && !json_is_object(e) && !json_is_null(e)) || (phase && !json_is_string(phase)) ||
        (json_is_integer(rr) && !int_value(rr, &ready)) ||
        (json_is_integer(r) && !int_value(r, &rank))) {
        set_err(
            err, errlen,
            "report: \"" COLLI_PROTO_KEY_PHASE "\" must be a string, \"" COLLI_PROTO_KEY_READY_RANKS
            "\" an int and \"" COLLI_PROTO_KEY_ERROR "\" an object {" COLLI_PROTO_KEY_RANK
            ", " COLLI_PROTO_KEY_POD ", " COLLI_PROTO_KEY_NODE ", " COLLI_PROTO_KEY_MESSAGE "}");
        return -1;
    }
    memset(out, 0, sizeof(*out));
    out->phase = colli_proto_phase_parse(json_string_value(phase));
    out->progress = json_string_value(json_object_get(msg, COLLI_PROTO_KEY_PROGRESS));
    out->transport = json_string_value(json_object_get(msg, COLLI_PROTO_KEY_TRANSPORT));
    out->has_ready_ranks = json_is_integer(rr);
    out->ready_ranks = ready;
    {
        const json_t *pid = json_object_get(msg, COLLI_PROTO_KEY_PID);
        out->pid = json_is_integer(pid) && json_integer_value(pid) > 0 &&
                           json_integer_value(pid) < (1 << 30)
                       ? (int)json_integer_value(pid)
                       : 0;
    }
    out->has_error = json_is_object(e);
    out->has_err_rank = out->has_error && json_is_integer(r);
    out->err_rank = out->has_err_rank ? rank : 0;
    out->err_pod = json_string_value(json_object_get(e, COLLI_PROTO_KEY_POD));
    out->err_node = json_string_value(json_object_get(e, COLLI_PROTO_KEY_NODE));
    out->err_message = json_string_value(json_object_get(e, COLLI_PROTO_KEY_MESSAGE));
    json_array_foreach(json_object_get(msg, COLLI_PROTO_KEY_CONDITIONS), i, c)
    {
        const char *t = json_string_value(json_object_get(c, COLLI_PROTO_KEY_TYPE));
        const char *s = json_string_value(json_object_get(c, COLLI_PROTO_KEY_STATUS));
        for (int k = 0; t && s && k < COLLI_PROTO_NCOND; k++) {
            if (strcmp(t, cond_names[k]) != 0)
                continue;
            out->conds[k].type = cond_names[k];
            out->conds[k].status = strcmp(s, COLLI_PROTO_STATUS_TRUE) == 0 ? COLLI_PROTO_STATUS_TRUE
                                   : strcmp(s, COLLI_PROTO_STATUS_FALSE) == 0
                                       ? COLLI_PROTO_STATUS_FALSE
                                       : COLLI_PROTO_STATUS_UNKNOWN;
            out->conds[k].reason = json_string_value(json_object_get(c, COLLI_PROTO_KEY_REASON));
            out->conds[k].message = json_string_value(json_object_get(c, COLLI_PROTO_KEY_MESSAGE));
        }
    }
    json_array_foreach(json_object_get(msg, COLLI_PROTO_KEY_PLACEMENT), i, c)
    {
        colli_proto_place_t pl = {
            .pod = json_string_value(json_object_get(c, COLLI_PROTO_KEY_POD)),
            .node = json_string_value(json_object_get(c, COLLI_PROTO_KEY_NODE)),
            .gpus = json_string_value(json_object_get(c, COLLI_PROTO_KEY_GPUS))};
        if (out->nplaces < COLLI_PROTO_MAX_PLACES && pl.pod != NULL && pl.pod[0] &&
            int_value(json_object_get(c, COLLI_PROTO_KEY_FIRST), &pl.first) &&
            int_value(json_object_get(c, COLLI_PROTO_KEY_COUNT), &pl.count) && pl.first >= 0 &&
            pl.count >= 1)
            out->places[out->nplaces++] = pl;
        else
            out->places_more++; /* beyond the cap, or not a pod and a rank range */
    }
    {
        const json_t *more = json_object_get(msg, COLLI_PROTO_KEY_PLACEMENT_MORE);
        int n = 0;
        if (out->nplaces > 0 && int_value(more, &n) && n > 0 && n <= (1 << 20))
            out->places_more += n;
    }
    return 0;
}
