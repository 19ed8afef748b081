/* The "peer" exchange (peer_ipc.h): both directions, built and read. */
#include "peer_ipc.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

static json_t *header(void)
{
    return json_pack("{si ss}", COLLI_PROTO_KEY_V, COLLI_PROTO_IPC_VERSION, COLLI_PROTO_KEY_TYPE,
                     COLLI_PROTO_TYPE_PEER);
}

/* A string of 1..max characters, else NULL. */
static const char *str(const json_t *o, const char *key, size_t max)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max)
        return NULL;
    return json_string_value(v);
}

/* An integer rank in 0..INT_MAX, else -1. */
static int rank_of(const json_t *o)
{
    const json_t *r = json_object_get(o, COLLI_PROTO_KEY_RANK);
    if (!json_is_integer(r) || json_integer_value(r) < 0 || json_integer_value(r) > INT_MAX)
        return -1;
    return (int)json_integer_value(r);
}

/* The question (reply 0: peers with rank, pod, node) or the answer (reply 1: peers with rank,
 * cause; ok and pending). */
static json_t *encode(const colli_proto_peer_msg_t *m, int reply)
{
    json_t *msg = header(), *peers = json_array();
    if (!msg || !peers) {
        json_decref(msg);
        json_decref(peers);
        return NULL;
    }
    for (int i = 0; i < m->npeers && i < COLLI_PROTO_MAX_PEERS; i++) {
        const colli_proto_peer_t *p = &m->peers[i];
        const char *v = reply ? p->cause : p->pod;
        json_t *o = json_pack("{si ss}", COLLI_PROTO_KEY_RANK, p->rank,
                              reply ? COLLI_PROTO_KEY_CAUSE : COLLI_PROTO_KEY_POD, v ? v : "");
        if (o && !reply && p->node && p->node[0])
            json_object_set_new(o, COLLI_PROTO_KEY_NODE, json_string(p->node));
        if (!o || json_array_append_new(peers, o) != 0) {
            json_decref(msg);
            json_decref(peers);
            return NULL;
        }
    }
    if (reply) {
        json_object_set_new(msg, COLLI_PROTO_KEY_OK, json_true());
        json_object_set_new(msg, COLLI_PROTO_KEY_PENDING, json_boolean(m->pending));
    } else if (m->pid > 0) {
        json_object_set_new(msg, COLLI_PROTO_KEY_PID, json_integer(m->pid));
    }
    json_object_set_new(msg, COLLI_PROTO_KEY_PEERS, peers);
    return msg;
}

json_t *colli_proto_peer_request(const colli_proto_peer_msg_t *m)
{
    return encode(m, 0);
}

int colli_proto_peer_request_parse(const json_t *msg, colli_proto_peer_msg_t *out, char *err,
                                   size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const json_t *peers = json_object_get(msg, COLLI_PROTO_KEY_PEERS), *pid, *p;
    size_t i;
    if (!json_is_array(peers)) {
        snprintf(err, errlen, "a peer question needs an array \"%s\"", COLLI_PROTO_KEY_PEERS);
        return -1;
    }
    pid = json_object_get(msg, COLLI_PROTO_KEY_PID);
    if (json_is_integer(pid) && json_integer_value(pid) > 0 && json_integer_value(pid) <= INT_MAX)
        out->pid = (int)json_integer_value(pid);
    json_array_foreach(peers, i, p)
    {
        if (out->npeers == COLLI_PROTO_MAX_PEERS)
            break;
        int rank = rank_of(p);
        const char *pod = str(p, COLLI_PROTO_KEY_POD, 253);
        if (rank < 0 || !pod)
            continue;
        colli_proto_peer_t *q = &out->peers[out->npeers++];
        q->rank = rank;
        q->pod = pod;
        q->node = str(p, COLLI_PROTO_KEY_NODE, 253);
    }
    return 0;
}

json_t *colli_proto_peer_reply(const colli_proto_peer_msg_t *m)
{
    return encode(m, 1);
}

int colli_proto_peer_reply_parse(const json_t *msg, colli_proto_peer_msg_t *out, char *err,
                                 size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const json_t *peers = json_object_get(msg, COLLI_PROTO_KEY_PEERS), *p;
    size_t i;
    if (!json_is_array(peers)) {
        snprintf(err, errlen, "the agent's answer to a peer question has no array \"%s\"",
                 COLLI_PROTO_KEY_PEERS);
        return -1;
    }
    out->pending = json_is_true(json_object_get(msg, COLLI_PROTO_KEY_PENDING));
    json_array_foreach(peers, i, p)
    {
        if (out->npeers == COLLI_PROTO_MAX_PEERS)
            break;
        int rank = rank_of(p);
        const char *cause = str(p, COLLI_PROTO_KEY_CAUSE, 4096);
        if (rank < 0 || !cause)
            continue;
        out->peers[out->npeers].rank = rank;
        out->peers[out->npeers++].cause = cause;
    }
    return 0;
}
