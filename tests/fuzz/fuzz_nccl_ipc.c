/*
 * The "nccl_init" exchange of the agent socket (proto/nccl_ipc.c), both directions: a frame
 * header, then the JSON through the agent's request parser (colli_proto_nccl_init_parse, bytes
 * from NCCL's environment plugin in a training container) and the plugin's reply decoder
 * (colli_proto_nccl_init_decode, bytes from the agent), and the version rules. Whatever a side
 * accepts must survive its encoder unchanged, and a decoded reply never holds a name NCCL cannot
 * take (an interface over 15 characters, a separator in a name). The same bytes as an
 * "nccl_ended" reply (colli_proto_nccl_ended_decode, bytes from the agent that the plugin prints
 * on the training process's stderr): names without separators, texts without line breaks, each
 * entry unchanged through the encoder.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <string.h>

#include "agent_ipc.h"
#include "fuzz.h"
#include "nccl_ipc.h"

static void request(const json_t *msg)
{
    colli_proto_nccl_init_t r, s;
    char err[256] = "";
    int v[3];
    if (colli_proto_nccl_init_parse(msg, &r, err, sizeof(err)) != 0) {
        if (err[0] == '\0')
            fuzz_fail("nccl_init parse rejected a request without saying why");
        return;
    }
    if (colli_proto_nccl_version_parse(r.version, v) != 0)
        fuzz_fail("nccl_init parse accepted a version that does not parse");
    if (r.cuda_driver < 0 || r.local_rank < -1)
        fuzz_fail("nccl_init parse accepted a negative CUDA driver version or local rank");
    json_t *built = colli_proto_nccl_init_request(&r, 1000);
    if (built == NULL)
        fuzz_fail("an accepted request cannot be encoded");
    memset(&s, 0x5a, sizeof(s));
    if (colli_proto_nccl_init_parse(built, &s, err, sizeof(err)) != 0)
        fuzz_fail("an encoded request does not parse");
    if (strcmp(r.version, s.version) != 0 || strcmp(r.suffix, s.suffix) != 0 ||
        strcmp(r.host, s.host) != 0 || strcmp(r.gpu, s.gpu) != 0 || r.pid != s.pid ||
        r.cuda_driver != s.cuda_driver || r.local_rank != s.local_rank)
        fuzz_fail("nccl_init request differs after encode and parse");
    json_decref(built);
}

static void reply(const json_t *msg)
{
    colli_proto_nccl_facts_t f, g;
    char err[256] = "";
    if (colli_proto_nccl_init_decode(msg, &f, err, sizeof(err)) != 0) {
        if (err[0] == '\0')
            fuzz_fail("nccl_init decode rejected a reply without saying why");
        return;
    }
    if (f.nranks <= 0 || f.rank < 0 || f.rank >= f.nranks)
        fuzz_fail("nccl_init decode accepted a rank outside nranks");
    if (f.ifname[0] == '\0' || strlen(f.ifname) >= COLLI_PROTO_NCCL_IFNAME_MAX ||
        strpbrk(f.ifname, ",^= :/") != NULL || strpbrk(f.ib_device, ",^= /") != NULL)
        fuzz_fail("nccl_init decode accepted a name NCCL cannot hold as one name");
    if (!colli_proto_transport_valid(f.transport) || !colli_proto_nccl_policy_valid(f.policy))
        fuzz_fail("nccl_init decode accepted an unknown transport or policy");
    json_t *built = colli_proto_nccl_init_reply(&f);
    if (built == NULL)
        fuzz_fail("accepted facts cannot be encoded");
    memset(&g, 0x5a, sizeof(g));
    if (colli_proto_nccl_init_decode(built, &g, err, sizeof(err)) != 0)
        fuzz_fail("a reply made of accepted facts is rejected");
    if (memcmp(&f, &g, sizeof(f)) != 0)
        fuzz_fail("nccl_init facts differ after encode and decode");
    json_decref(built);
}

static void ended(const json_t *msg)
{
    colli_proto_nccl_ended_t e[COLLI_PROTO_NCCL_MAX_ENDED], g[COLLI_PROTO_NCCL_MAX_ENDED];
    char err[256] = "";
    int n = -1, m = -1;
    if (colli_proto_nccl_ended_since(msg) < 0)
        fuzz_fail("nccl_ended since is negative");
    memset(e, 0, sizeof(e));
    if (colli_proto_nccl_ended_decode(msg, e, COLLI_PROTO_NCCL_MAX_ENDED, &n, err, sizeof(err)) !=
        0) {
        if (err[0] == '\0' || n != 0)
            fuzz_fail("nccl_ended decode rejected a reply without saying why, or kept entries");
        return;
    }
    if (n < 0 || n > COLLI_PROTO_NCCL_MAX_ENDED)
        fuzz_fail("nccl_ended decode returned a count out of range");
    for (int i = 0; i < n; i++)
        if (e[i].rank < 0 || !e[i].pod[0] || !e[i].what[0] || strpbrk(e[i].pod, " /\n") ||
            strpbrk(e[i].node, " /\n") || strpbrk(e[i].what, "\n\r"))
            fuzz_fail("nccl_ended decode accepted a name with a separator or a line break");
    json_t *built = colli_proto_nccl_ended_reply(e, n);
    if (built == NULL)
        fuzz_fail("accepted ends cannot be encoded");
    memset(g, 0x5a, sizeof(g));
    if (colli_proto_nccl_ended_decode(built, g, COLLI_PROTO_NCCL_MAX_ENDED, &m, err, sizeof(err)) !=
            0 ||
        m != n)
        fuzz_fail("a reply made of accepted ends is rejected");
    for (int i = 0; i < n; i++)
        if (memcmp(&e[i], &g[i], sizeof(e[i])) != 0)
            fuzz_fail("an end differs after encode and decode");
    json_decref(built);
}

static void versions(const json_t *msg)
{
    const char *a = json_string_value(json_object_get(msg, COLLI_PROTO_KEY_NCCL_VERSION));
    const char *b = json_string_value(json_object_get(msg, COLLI_PROTO_KEY_NCCL_PIN));
    int va[3];
    if (a && colli_proto_nccl_version_parse(a, va) == 0) {
        if (!colli_proto_nccl_versions_agree(a, a, COLLI_PROTO_NCCL_POLICY_EXACT))
            fuzz_fail("a version does not agree with itself");
        if (va[0] < 0 || va[0] > 65535 || va[1] < 0 || va[1] > 65535 || va[2] < 0 || va[2] > 65535)
            fuzz_fail("a parsed version part is out of range");
    }
    if (a && b && colli_proto_nccl_versions_agree(a, b, COLLI_PROTO_NCCL_POLICY_EXACT) &&
        !colli_proto_nccl_versions_agree(a, b, COLLI_PROTO_NCCL_POLICY_SAME_MINOR))
        fuzz_fail("versions that agree exactly disagree under SameMinor");
    if (a && b &&
        colli_proto_nccl_versions_agree(a, b, NULL) != colli_proto_nccl_versions_agree(b, a, NULL))
        fuzz_fail("agreement is not symmetric");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < COLLI_PROTO_FRAME_HEADER)
        return 0;
    json_t *msg = json_loadb((const char *)data + COLLI_PROTO_FRAME_HEADER,
                             size - COLLI_PROTO_FRAME_HEADER, 0, NULL);
    if (msg == NULL)
        return 0;
    request(msg);
    reply(msg);
    ended(msg);
    versions(msg);
    json_decref(msg);
    return 0;
}
