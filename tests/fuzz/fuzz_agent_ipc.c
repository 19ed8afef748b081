/*
 * Bytes from the coll-agent socket (proto/agent_ipc.c), both directions: a frame header's length,
 * then the JSON through every decoder a side runs on what it receives (colli_proto_header,
 * hello_wait_ms, hello_local and report_parse on the agent's side; hello_decode, error_fields,
 * code_class and hello_failure_facts on the library's), and the peer question both ways
 * (peer_ipc.c). Whatever a decoder accepts must survive its encoder unchanged: decode(encode(x))
 * gives x back, so that no field is truncated or widened on the way.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <string.h>

#include "agent_ipc.h"
#include "fuzz.h"
#include "peer_ipc.h"

static int same_str(const char *a, const char *b)
{
    return (a == NULL || a[0] == '\0') ? (b == NULL || b[0] == '\0')
                                       : (b != NULL && strcmp(a, b) == 0);
}

static void frame(const json_t *msg)
{
    size_t len = 0;
    unsigned char *buf = colli_proto_frame_encode(msg, &len);
    if (buf == NULL)
        return;
    if (len < COLLI_PROTO_FRAME_HEADER ||
        colli_proto_frame_length(buf) != len - COLLI_PROTO_FRAME_HEADER)
        fuzz_fail("frame header does not announce the JSON's length");
    json_t *back = json_loadb((const char *)buf + COLLI_PROTO_FRAME_HEADER,
                              len - COLLI_PROTO_FRAME_HEADER, 0, NULL);
    if (back == NULL || !json_equal(back, msg))
        fuzz_fail("an encoded frame does not load back to the message");
    json_decref(back);
    free(buf);
}

static void hello(const json_t *msg)
{
    int64_t wait = colli_proto_hello_wait_ms(msg);
    if (wait < 0 || wait > COLLI_PROTO_HELLO_MAX_WAIT_MS)
        fuzz_fail("hello wait outside 0..MAX");

    colli_proto_facts_t f, g;
    char err[256] = "";
    if (colli_proto_hello_decode(msg, &f, err, sizeof(err)) != 0) {
        if (err[0] == '\0')
            fuzz_fail("hello decode rejected a reply without saying why");
        return;
    }
    if (f.nranks <= 0 || f.rank < 0 || f.rank >= f.nranks || f.root_port <= 0 ||
        f.root_port > 65535 || f.is_root != (f.rank == 0))
        fuzz_fail("hello decode accepted inconsistent facts");
    if (json_integer_value(json_object_get(msg, COLLI_PROTO_KEY_RANK)) != f.rank ||
        json_integer_value(json_object_get(msg, COLLI_PROTO_KEY_NRANKS)) != f.nranks ||
        json_integer_value(json_object_get(msg, COLLI_PROTO_KEY_BOOTSTRAP_TIMEOUT_S)) !=
            f.bootstrap_timeout_s ||
        json_integer_value(json_object_get(msg, COLLI_PROTO_KEY_TIMEOUT_S)) != f.timeout_s)
        fuzz_fail("hello decode changed an integer (truncated to int?)");
    json_t *reply = colli_proto_hello_reply(&f, "fuzz");
    if (reply == NULL)
        fuzz_fail("accepted facts cannot be encoded");
    memset(&g, 0x5a, sizeof(g));
    if (colli_proto_hello_decode(reply, &g, err, sizeof(err)) != 0)
        fuzz_fail("a reply made of accepted facts is rejected");
    if (memcmp(&f, &g, sizeof(f)) != 0)
        fuzz_fail("hello facts differ after encode and decode");
    json_decref(reply);
}

static void report(const json_t *msg)
{
    colli_proto_report_t r, s;
    char err[256] = "";
    if (colli_proto_report_parse(msg, &r, err, sizeof(err)) != 0) {
        if (err[0] == '\0')
            fuzz_fail("report parse rejected a message without saying why");
        return;
    }
    if (r.has_ready_ranks &&
        json_integer_value(json_object_get(msg, COLLI_PROTO_KEY_READY_RANKS)) != r.ready_ranks)
        fuzz_fail("report parse changed ready_ranks (truncated to int?)");
    json_t *built = colli_proto_report_build(&r);
    if (built == NULL) {
        if (colli_proto_phase_name(r.phase) != NULL)
            fuzz_fail("a parsed report with a phase cannot be built");
        return;
    }
    if (colli_proto_report_parse(built, &s, err, sizeof(err)) != 0)
        fuzz_fail("a built report does not parse");
    if (s.phase != r.phase || !same_str(s.progress, r.progress) ||
        s.has_ready_ranks != r.has_ready_ranks || s.ready_ranks != r.ready_ranks ||
        s.has_error != r.has_error || s.has_err_rank != r.has_err_rank ||
        s.err_rank != r.err_rank || !same_str(s.err_pod, r.err_pod) ||
        !same_str(s.err_node, r.err_node) || !same_str(s.err_message, r.err_message) ||
        s.pid != r.pid)
        fuzz_fail("report fields differ after build and parse");
    for (int k = 0; k < COLLI_PROTO_NCOND; k++)
        if ((s.conds[k].type == NULL) != (r.conds[k].type == NULL) ||
            (r.conds[k].type && (strcmp(s.conds[k].status, r.conds[k].status) != 0 ||
                                 !same_str(s.conds[k].reason, r.conds[k].reason) ||
                                 !same_str(s.conds[k].message, r.conds[k].message))))
            fuzz_fail("report conditions differ after build and parse");
    if (s.nplaces != r.nplaces)
        fuzz_fail("report placement entries differ in number after build and parse");
    for (int k = 0; k < r.nplaces && k < s.nplaces; k++)
        if (!same_str(s.places[k].pod, r.places[k].pod) ||
            !same_str(s.places[k].node, r.places[k].node) ||
            !same_str(s.places[k].gpus, r.places[k].gpus) ||
            s.places[k].first != r.places[k].first || s.places[k].count != r.places[k].count ||
            r.places[k].first < 0 || r.places[k].count < 1 || r.places[k].pod == NULL ||
            !r.places[k].pod[0])
            fuzz_fail("report placement differs after build and parse, or kept a bad entry");
    json_decref(built);
}

/* A hello's local rank, local world size and restart count (several ranks per pod). */
static void local(const json_t *msg)
{
    int lr, lws, rc, a, b, c;
    char err[256] = "";
    if (colli_proto_hello_local(msg, &lr, &lws, &rc, err, sizeof(err)) != 0) {
        if (err[0] == '\0')
            fuzz_fail("hello local fields rejected without saying why");
        return;
    }
    if (lr < -1 || lr > 65535 || lws < -1 || lws > 65535 || rc < -1 || rc > 65535)
        fuzz_fail("hello local fields outside -1..65535");
    json_t *req = colli_proto_hello_request(1000, "fuzz", 1);
    if (req == NULL || colli_proto_hello_set_local(req, lr, lws, rc) != 0 ||
        colli_proto_hello_local(req, &a, &b, &c, err, sizeof(err)) != 0 || a != lr || b != lws ||
        c != rc)
        fuzz_fail("hello local fields differ after set and read");
    json_decref(req);
}

/* The facts an error reply to a refused hello carries. */
static void failure(const json_t *msg)
{
    colli_proto_facts_t f, g;
    colli_proto_failure_t how, back;
    if (colli_proto_hello_failure_facts(msg, &f, &how) != 0)
        return;
    if (how.nmissing < 0 || how.nmissing > COLLI_PROTO_MAX_MISSING)
        fuzz_fail("more missing ranks than the bound");
    for (int i = 0; i < how.nmissing; i++)
        if (how.missing[i] < 0 || how.missing[i] >= f.nranks)
            fuzz_fail("a missing rank outside the job");
    json_t *r = colli_proto_hello_failure("LocalRanksMissing", "fuzz", &f, &how, "fuzz");
    memset(&g, 0x5a, sizeof(g));
    if (r == NULL || colli_proto_hello_failure_facts(r, &g, &back) != 0)
        fuzz_fail("a failure reply made of accepted facts is rejected");
    if (memcmp(&f, &g, sizeof(f)) != 0 || back.nmissing != how.nmissing ||
        back.host_root != how.host_root || back.own_rank != how.own_rank ||
        memcmp(back.missing, how.missing, sizeof(int) * (size_t)how.nmissing) != 0)
        fuzz_fail("failure facts differ after encode and decode");
    json_decref(r);
}

/* The peer question (peer_ipc.c), both directions: what a decoder keeps survives its encoder. */
static void peer(const json_t *msg)
{
    colli_proto_peer_msg_t q, r;
    char err[256] = "";
    if (colli_proto_peer_request_parse(msg, &q, err, sizeof(err)) == 0) {
        if (q.npeers < 0 || q.npeers > COLLI_PROTO_MAX_PEERS)
            fuzz_fail("a peer question with a count outside 0..MAX");
        json_t *again = colli_proto_peer_request(&q);
        if (again == NULL || colli_proto_peer_request_parse(again, &r, err, sizeof(err)) != 0 ||
            r.npeers != q.npeers || r.pid != q.pid)
            fuzz_fail("an accepted peer question does not survive its encoder");
        for (int i = 0; again != NULL && i < q.npeers && i < r.npeers; i++)
            if (q.peers[i].rank < 0 || r.peers[i].rank != q.peers[i].rank ||
                !same_str(r.peers[i].pod, q.peers[i].pod) ||
                !same_str(r.peers[i].node, q.peers[i].node))
                fuzz_fail("a peer of a question changed on the way");
        json_decref(again);
    } else if (err[0] == '\0') {
        fuzz_fail("a peer question refused without saying why");
    }
    err[0] = '\0';
    if (colli_proto_peer_reply_parse(msg, &q, err, sizeof(err)) == 0) {
        json_t *again = colli_proto_peer_reply(&q);
        if (again == NULL || colli_proto_peer_reply_parse(again, &r, err, sizeof(err)) != 0 ||
            r.npeers != q.npeers || r.pending != q.pending)
            fuzz_fail("an accepted peer answer does not survive its encoder");
        for (int i = 0; again != NULL && i < q.npeers && i < r.npeers; i++)
            if (q.peers[i].cause == NULL || q.peers[i].cause[0] == '\0' ||
                r.peers[i].rank != q.peers[i].rank || !same_str(r.peers[i].cause, q.peers[i].cause))
                fuzz_fail("a peer of an answer changed on the way, or has no cause");
        json_decref(again);
    } else if (err[0] == '\0') {
        fuzz_fail("a peer answer refused without saying why");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < COLLI_PROTO_FRAME_HEADER)
        return 0;
    (void)colli_proto_frame_length(data);
    json_t *msg = json_loadb((const char *)data + COLLI_PROTO_FRAME_HEADER,
                             size - COLLI_PROTO_FRAME_HEADER, 0, NULL);
    if (msg == NULL)
        return 0;
    long long v;
    const char *type = NULL;
    if (colli_proto_header(msg, &v, &type) == 0 && type == NULL)
        fuzz_fail("header accepted without a type");
    const char *code, *text;
    colli_proto_error_fields(msg, &code, &text);
    colli_proto_code_class_t cls = colli_proto_code_class(code);
    if (cls < COLLI_PROTO_CLASS_USAGE || cls > COLLI_PROTO_CLASS_SYSTEM)
        fuzz_fail("code class outside the enum");
    (void)colli_proto_type(msg);
    frame(msg);
    hello(msg);
    local(msg);
    failure(msg);
    report(msg);
    peer(msg);
    json_decref(msg);
    return 0;
}
