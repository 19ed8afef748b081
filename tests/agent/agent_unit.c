/* Unit tests of coll-agent internals: label selectors, YAML loading, kubeconfig parsing,
 * base64/hex helpers and interface checks. */
#define _GNU_SOURCE
#include "expect.h"
#include "kube.h"
#include "pod_ranks.h"
#include "text.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int sel(const char *selector, const char *labels)
{
    char err[256];
    json_t *s = json_loads(selector, 0, NULL), *l = json_loads(labels, 0, NULL);
    int r = agent_selector_matches(s, l, err, sizeof(err));
    json_decref(s);
    json_decref(l);
    return r;
}

static void test_selectors(void)
{
    const char *pod = "{\"app\":\"train\",\"tier\":\"gpu\"}";
    EXPECT(sel("{}", pod) == 1);
    EXPECT(sel("null", pod) == 1);
    EXPECT(sel("{\"matchLabels\":{\"app\":\"train\"}}", pod) == 1);
    EXPECT(sel("{\"matchLabels\":{\"app\":\"serve\"}}", pod) == 0);
    EXPECT(sel("{\"matchLabels\":{\"missing\":\"x\"}}", pod) == 0);
    EXPECT(sel("{\"matchExpressions\":[{\"key\":\"tier\",\"operator\":\"In\",\"values\":[\"cpu\","
               "\"gpu\"]}]}",
               pod) == 1);
    EXPECT(sel("{\"matchExpressions\":[{\"key\":\"tier\",\"operator\":\"NotIn\",\"values\":["
               "\"gpu\"]}]}",
               pod) == 0);
    EXPECT(sel("{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":\"NotIn\",\"values\":["
               "\"a\"]}]}",
               pod) == 1);
    EXPECT(sel("{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"Exists\"}]}", pod) == 1);
    EXPECT(sel("{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"DoesNotExist\"}]}", pod) ==
           0);
    EXPECT(sel("{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"Near\"}]}", pod) == -1);
    EXPECT(sel("{\"matchExpressions\":[{\"operator\":\"Exists\"}]}", pod) == -1);
    EXPECT(sel("{\"matchLabels\":{\"app\":3}}", pod) == -1);
    EXPECT(sel("{\"matchLabels\":{\"app\":\"train\"},\"matchExpressions\":[{\"key\":\"tier\","
               "\"operator\":\"In\",\"values\":[\"cpu\"]}]}",
               pod) == 0);
}

static void test_yaml(void)
{
    char err[256];
    const char *y = "a: 1\nb: \"2\"\nc: true\nd: [x, 07, ~]\ne: {f: g}\n";
    json_t *j = agent_yaml_load(y, strlen(y), err, sizeof(err));
    EXPECT(j != NULL);
    EXPECT(json_integer_value(json_object_get(j, "a")) == 1);
    EXPECT(json_is_string(json_object_get(j, "b")));
    EXPECT(json_is_true(json_object_get(j, "c")));
    EXPECT(json_is_string(json_array_get(json_object_get(j, "d"), 1))); /* 07 stays a string */
    EXPECT(json_is_null(json_array_get(json_object_get(j, "d"), 2)));
    EXPECT(strcmp(json_string_value(agent_json_path(j, "e.f")), "g") == 0);
    json_decref(j);
    j = agent_yaml_load("{\"k\": [1,2]}", 12, err, sizeof(err));
    EXPECT(j && json_array_size(json_object_get(j, "k")) == 2);
    json_decref(j);
    j = agent_yaml_load("a: [1, 2\n", 9, err, sizeof(err));
    EXPECT(j == NULL && strstr(err, "YAML error") != NULL);
}

static void test_kubeconfig(void)
{
    char dir[] = "/tmp/agent-unit-XXXXXX", path[256], err[1024];
    agent_kube_creds_t c;
    FILE *f;
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/config", dir);
    f = fopen(path, "w");
    EXPECT(f != NULL);
    if (!f)
        return;
    fprintf(f, "apiVersion: v1\nkind: Config\ncurrent-context: b\n"
               "contexts:\n- name: a\n  context: {cluster: c1, user: u1}\n"
               "- name: b\n  context: {cluster: c2, user: u2, namespace: ns2}\n"
               "clusters:\n- name: c1\n  cluster: {server: https://one:6443}\n"
               "- name: c2\n  cluster:\n    server: https://two:6443/\n"
               "    certificate-authority-data: aGVsbG8=\n"
               "users:\n- name: u2\n  user:\n    client-certificate: certs/u2.crt\n"
               "    client-key-data: a2V5\n");
    fclose(f);
    EXPECT(agent_creds_kubeconfig(path, &c, err, sizeof(err)) == 0);
    EXPECT(strcmp(c.server, "https://two:6443") == 0);
    EXPECT(c.ca_len == 5 && memcmp(c.ca_data, "hello", 5) == 0);
    EXPECT(c.key_len == 3 && memcmp(c.key_data, "key", 3) == 0);
    EXPECT(strstr(c.cert_file, "/certs/u2.crt") != NULL && c.cert_file[0] == '/');
    EXPECT(strcmp(c.namespace_, "ns2") == 0);
    agent_creds_free(&c);

    f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\n"
               "clusters:\n- name: c\n  cluster: {server: 'https://x', insecure-skip-tls-verify: "
               "true}\nusers:\n- name: u\n  user: {token: t}\n");
    fclose(f);
    EXPECT(agent_creds_kubeconfig(path, &c, err, sizeof(err)) != 0);
    EXPECT(strstr(err, "always verifies TLS") != NULL);

    f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\n"
               "clusters:\n- name: c\n  cluster: {server: 'http://x'}\n");
    fclose(f);
    EXPECT(agent_creds_kubeconfig(path, &c, err, sizeof(err)) != 0);
    EXPECT(strstr(err, "https://") != NULL);

    f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\n"
               "clusters:\n- name: c\n  cluster: {server: 'https://x'}\n"
               "users:\n- name: u\n  user:\n    exec: {command: aws}\n");
    fclose(f);
    EXPECT(agent_creds_kubeconfig(path, &c, err, sizeof(err)) != 0);
    EXPECT(strstr(err, "exec") != NULL);
    unlink(path);
    rmdir(dir);
}

/* agent_utf8_clean: what json_string takes afterwards, and valid text left as it was */
static void test_utf8_clean(void)
{
    struct {
        const char *in, *want;
    } cases[] = {
        {"plain ascii", "plain ascii"},
        {"\xce\xa6 and \xe2\x82\xac and \xf0\x9f\x98\x80",
         "\xce\xa6 and \xe2\x82\xac and \xf0\x9f\x98\x80"},
        {"near '\"4b\\\xce'", "near '\"4b\\?'"}, /* jansson's error, a character cut short */
        {"cut \xe2\x82", "cut ??"},
        {"\xc0\xaf overlong", "?? overlong"},
        {"\xed\xa0\x80 surrogate", "??? surrogate"},
        {"\xf4\x90\x80\x80 past U+10FFFF", "???? past U+10FFFF"},
        {"\xff\xfe", "??"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%s", cases[i].in);
        agent_utf8_clean(buf);
        EXPECT(strcmp(buf, cases[i].want) == 0);
        json_t *j = json_string(buf);
        EXPECT(j != NULL);
        json_decref(j);
    }
}

static void test_helpers(void)
{
    unsigned char b[16], *dec = NULL;
    char hex[33];
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)(i * 17);
    colli_proto_hex_encode(b, 16, hex);
    EXPECT(strcmp(hex, "00112233445566778899aabbccddeeff") == 0);
    memset(b, 0, sizeof(b));
    EXPECT(colli_proto_hex_decode(hex, b, 16) == 0 && b[15] == 0xff);
    EXPECT(colli_proto_hex_decode("00112233445566778899AABBCCDDEEFF", b, 16) == 0 && b[10] == 0xaa);
    EXPECT(colli_proto_hex_decode("zz112233445566778899aabbccddeeff", b, 16) != 0);
    EXPECT(colli_proto_hex_decode("0011", b, 16) != 0);
    EXPECT(colli_proto_hex_decode(NULL, b, 16) != 0);
    EXPECT(agent_base64_decode("a2NvbGw=", &dec) == 5 && memcmp(dec, "kcoll", 5) == 0);
    free(dec);
    EXPECT(agent_base64_decode("a2N*", &dec) == -1);
    {
        char found[64] = "", list[512];
        EXPECT(agent_check_interface("lo", "", found, sizeof(found)) == 0);
        EXPECT(strcmp(found, "127.0.0.1") == 0 || strcmp(found, "::1") == 0);
        EXPECT(agent_check_interface("lo", "127.0.0.1", NULL, 0) == 0);
        EXPECT(agent_check_interface("lo", "10.255.255.254", NULL, 0) == 2);
        EXPECT(agent_check_interface("kcollnosuch9", "", NULL, 0) == 1);
        agent_list_interfaces(list, sizeof(list));
        EXPECT(strstr(list, "lo 127.0.0.1") != NULL);
    }
}

/* One interface address of a hand-made getifaddrs list. */
typedef struct {
    struct ifaddrs ifa;
    struct sockaddr_storage addr, mask;
} fake_if_t;

static void fake_if(fake_if_t *f, const char *name, const char *addr, const char *mask,
                    fake_if_t *next)
{
    memset(f, 0, sizeof(*f));
    int v6 = strchr(addr, ':') != NULL;
    f->addr.ss_family = f->mask.ss_family = v6 ? AF_INET6 : AF_INET;
    if (v6) {
        EXPECT(inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&f->addr)->sin6_addr) == 1);
        EXPECT(inet_pton(AF_INET6, mask, &((struct sockaddr_in6 *)&f->mask)->sin6_addr) == 1);
    } else {
        EXPECT(inet_pton(AF_INET, addr, &((struct sockaddr_in *)&f->addr)->sin_addr) == 1);
        EXPECT(inet_pton(AF_INET, mask, &((struct sockaddr_in *)&f->mask)->sin_addr) == 1);
    }
    f->ifa.ifa_name = (char *)name;
    f->ifa.ifa_addr = (struct sockaddr *)&f->addr;
    f->ifa.ifa_netmask = (struct sockaddr *)&f->mask;
    f->ifa.ifa_next = next ? &next->ifa : NULL;
}

/* The seed's spare server B: bond0 on the management network, eth2 on the backend network of
 * the bootstrap root. */
static void test_root_network(void)
{
    fake_if_t lo, bond0, eth2, v6a, v6b;
    char msg[700];
    fake_if(&v6b, "eth2", "fd00:8::78", "ffff:ffff:ffff:ffff::", NULL);
    fake_if(&v6a, "bond0", "fd00:12::78", "ffff:ffff:ffff:ffff::", &v6b);
    fake_if(&eth2, "eth2", "10.37.8.78", "255.255.255.0", &v6a);
    fake_if(&bond0, "bond0", "10.37.12.78", "255.255.255.0", &eth2);
    fake_if(&lo, "lo", "127.0.0.1", "255.0.0.0", &bond0);
    EXPECT(agent_root_network(&lo.ifa, "10.37.12.78", "10.37.8.72", msg, sizeof(msg)) == 1);
    EXPECT(strstr(msg,
                  "pinned interface bond0 (10.37.12.78/24) is not on the network of the "
                  "bootstrap root 10.37.8.72, but this host's eth2 (10.37.8.78/24) is") != NULL);
    EXPECT(strstr(msg, "pin eth2 or its network 10.37.8.0/24 for this rank") != NULL);
    EXPECT(agent_root_network(&lo.ifa, "10.37.8.78", "10.37.8.72", msg, sizeof(msg)) == 0);
    EXPECT(agent_root_network(&lo.ifa, "127.0.0.1", "127.0.0.1", msg, sizeof(msg)) == 0);
    EXPECT(agent_root_network(&lo.ifa, "fd00:12::78", "fd00:8::72", msg, sizeof(msg)) == 1);
    EXPECT(strstr(msg, "bond0 (fd00:12::78/64)") && strstr(msg, "eth2 (fd00:8::78/64) is") &&
           strstr(msg, "its network fd00:8::/64"));
    /* not judged: a host name, an address on no interface */
    EXPECT(agent_root_network(&lo.ifa, "10.37.12.78", "root.example", msg, sizeof(msg)) == 0);
    EXPECT(agent_root_network(&lo.ifa, "10.1.1.1", "10.37.8.72", msg, sizeof(msg)) == 0);
    /* no interface on the root's network: routed, said once */
    bond0.ifa.ifa_next = NULL;
    EXPECT(agent_root_network(&lo.ifa, "10.37.12.78", "10.37.8.72", msg, sizeof(msg)) == 2);
    EXPECT(strstr(msg, "no interface of this host is") != NULL);
}

/* proto/agent_ipc.h: what one side encodes the other decodes. */
static void test_proto(void)
{
    colli_proto_facts_t f, g;
    colli_proto_report_t rep = {.phase = COLLI_PROTO_PHASE_FAILED,
                                .has_error = 1,
                                .has_err_rank = 1,
                                .err_rank = 3,
                                .err_pod = "p-3",
                                .err_node = "",
                                .err_message = "peer gone",
                                .conds = {{"Healthy", "False", "MemberUnhealthy", "rank 3"}}},
                         back;
    unsigned char *frame;
    size_t n;
    char err[256];
    json_t *m;

    memset(&f, 0, sizeof(f));
    f.rank = 1;
    f.nranks = 4;
    snprintf(f.root_host, sizeof(f.root_host), "fd00::1");
    f.root_port = 29555;
    for (int i = 0; i < COLLI_PROTO_SECRET_BYTES; i++)
        f.secret[i] = (unsigned char)(0xf0 + i);
    snprintf(f.ifname, sizeof(f.ifname), "net1");
    snprintf(f.address, sizeof(f.address), "fd00::2");
    snprintf(f.transport, sizeof(f.transport), "%s", COLLI_PROTO_TRANSPORT_SOCKET);
    snprintf(f.ns, sizeof(f.ns), "team-a");
    snprintf(f.group, sizeof(f.group), "rack-1");
    f.bootstrap_timeout_s = 300;
    f.timeout_s = 1800;
    f.local_size = 1; /* one rank per pod: local 0 of 1, pod rank = rank */
    f.pod_rank = 1;
    f.npods = 4;
    f.gpu = -1;
    m = colli_proto_hello_reply(&f, AGENT_VERSION);
    EXPECT(m && strcmp(json_string_value(json_object_get(m, "root")), "[fd00::1]:29555") == 0);
    EXPECT(colli_proto_hello_decode(m, &g, err, sizeof(err)) == 0 &&
           memcmp(&f, &g, sizeof(f)) == 0);
    frame = colli_proto_frame_encode(m, &n);
    EXPECT(frame && n > COLLI_PROTO_FRAME_HEADER &&
           colli_proto_frame_length(frame) == n - COLLI_PROTO_FRAME_HEADER && frame[4] == '{');
    free(frame);
    json_object_set_new(m, "rank", json_integer(1 + (1ll << 32))); /* would wrap to rank 1 */
    EXPECT(colli_proto_hello_decode(m, &g, err, sizeof(err)) != 0 &&
           strcmp(err, "hello reply's \"rank\" is out of range") == 0);
    json_object_set_new(m, "rank", json_integer(1));
    json_object_set_new(m, "is_root", json_true()); /* rank 1 cannot be the root */
    EXPECT(colli_proto_hello_decode(m, &g, err, sizeof(err)) != 0 &&
           strcmp(err, "inconsistent facts (rank 1 of 4, root port 29555)") == 0);
    json_object_del(m, "nranks");
    EXPECT(colli_proto_hello_decode(m, &g, err, sizeof(err)) != 0 &&
           strcmp(err, "hello reply lacks integer \"nranks\"") == 0);
    json_decref(m);

    m = colli_proto_report_build(&rep);
    EXPECT(m && colli_proto_report_parse(m, &back, err, sizeof(err)) == 0);
    EXPECT(back.phase == COLLI_PROTO_PHASE_FAILED && back.has_error && back.has_err_rank &&
           back.err_rank == 3 && strcmp(back.err_pod, "p-3") == 0 && back.err_node == NULL &&
           strcmp(back.err_message, "peer gone") == 0 && !back.has_ready_ranks);
    EXPECT(back.conds[COLLI_PROTO_COND_HEALTHY].type &&
           strcmp(back.conds[COLLI_PROTO_COND_HEALTHY].status, "False") == 0 &&
           strcmp(back.conds[COLLI_PROTO_COND_HEALTHY].reason, "MemberUnhealthy") == 0 &&
           !back.conds[COLLI_PROTO_COND_VERSIONS].type);
    json_object_set_new(m, "ready_ranks", json_integer(1ll << 40)); /* not an int */
    EXPECT(colli_proto_report_parse(m, &back, err, sizeof(err)) != 0 && err[0] != '\0');
    json_object_set_new(m, "ready_ranks", json_integer(4));
    EXPECT(colli_proto_report_parse(m, &back, err, sizeof(err)) == 0 && back.has_ready_ranks &&
           back.ready_ranks == 4);
    json_object_set_new(m, "error", json_string("x"));
    EXPECT(colli_proto_report_parse(m, &back, err, sizeof(err)) != 0);
    json_decref(m);
    /* Ready with the transports in use */
    colli_proto_report_t ready = {.phase = COLLI_PROTO_PHASE_READY,
                                  .transport = "InfiniBand (3 peers), shared memory (1)"};
    m = colli_proto_report_build(&ready);
    EXPECT(m && colli_proto_report_parse(m, &back, err, sizeof(err)) == 0 &&
           back.phase == COLLI_PROTO_PHASE_READY && back.transport &&
           strcmp(back.transport, "InfiniBand (3 peers), shared memory (1)") == 0);
    json_decref(m);
    /* ... and rank 0's placement: kept entry by entry; hostile ones dropped and counted */
    ready.nplaces = 2;
    ready.places_more = 5;
    ready.places[0] = (colli_proto_place_t){"job-0", "node-a", "0-7", 0, 8};
    ready.places[1] = (colli_proto_place_t){"job-1", NULL, NULL, 8, 8};
    m = colli_proto_report_build(&ready);
    EXPECT(m && colli_proto_report_parse(m, &back, err, sizeof(err)) == 0 && back.nplaces == 2 &&
           back.places_more == 5 && strcmp(back.places[0].pod, "job-0") == 0 &&
           strcmp(back.places[0].node, "node-a") == 0 && strcmp(back.places[0].gpus, "0-7") == 0 &&
           back.places[1].first == 8 && back.places[1].count == 8 && back.places[1].node == NULL);
    json_t *list = json_object_get(m, "placement");
    json_array_append_new(list, json_pack("{ss si si}", "pod", "x", "first", -1, "count", 1));
    json_array_append_new(list, json_pack("{ss si si}", "pod", "", "first", 0, "count", 1));
    json_array_append_new(
        list, json_pack("{ss sI si}", "pod", "x", "first", (json_int_t)1 << 40, "count", 1));
    json_array_append_new(list, json_pack("{ss si si}", "pod", "x", "first", 0, "count", 0));
    json_array_append_new(list, json_string("not an object"));
    for (int k = 0; k < COLLI_PROTO_MAX_PLACES; k++) /* more than fit */
        json_array_append_new(list,
                              json_pack("{ss si si}", "pod", "y", "first", 16 + k, "count", 1));
    EXPECT(colli_proto_report_parse(m, &back, err, sizeof(err)) == 0 &&
           back.nplaces == COLLI_PROTO_MAX_PLACES && back.places_more == 5 + 5 + 2);
    json_decref(m);
    rep.phase = COLLI_PROTO_PHASE_NONE;
    EXPECT(colli_proto_report_build(&rep) == NULL);

    EXPECT(colli_proto_phase_parse("ready") == COLLI_PROTO_PHASE_READY);
    EXPECT(colli_proto_phase_parse("Sleeping") == COLLI_PROTO_PHASE_NONE);
    EXPECT(colli_proto_code_class("InterfaceMissing") == COLLI_PROTO_CLASS_NETWORK);
    EXPECT(colli_proto_code_class("NotReady") == COLLI_PROTO_CLASS_TIMEOUT);
    EXPECT(colli_proto_code_class("APIUnavailable") == COLLI_PROTO_CLASS_SYSTEM);
    EXPECT(colli_proto_code_class("TopologyAmbiguous") == COLLI_PROTO_CLASS_USAGE);
    EXPECT(colli_proto_code_class(NULL) == COLLI_PROTO_CLASS_USAGE);
}

/* Several ranks per pod: the hello's local fields, the reply's, and an error reply's facts. */
static void test_local_ranks(void)
{
    agent_facts_t pod, f, g;
    colli_proto_failure_t how = {.host_root = 0, .own_rank = 1, .nmissing = 2, .missing = {7, 6}},
                          back;
    char err[256];
    int lr, lws, rc;
    json_t *req = colli_proto_hello_request(1000, "0.1.0", 42), *m;

    EXPECT(colli_proto_hello_local(req, &lr, &lws, &rc, err, sizeof(err)) == 0 && lr == -1 &&
           lws == -1 && rc == -1); /* an older library: no local fields */
    EXPECT(colli_proto_hello_set_local(req, 3, 4, -1) == 0 &&
           colli_proto_hello_local(req, &lr, &lws, &rc, err, sizeof(err)) == 0 && lr == 3 &&
           lws == 4 && rc == -1);
    json_object_set_new(req, "local_rank", json_string("3"));
    EXPECT(colli_proto_hello_local(req, &lr, &lws, &rc, err, sizeof(err)) != 0 &&
           strstr(err, "\"local_rank\" must be an integer") != NULL);
    json_object_set_new(req, "local_rank", json_integer(70000));
    EXPECT(colli_proto_hello_local(req, &lr, &lws, &rc, err, sizeof(err)) != 0);
    json_decref(req);

    /* pod 1 of 3 with 4 ranks and 4 GPUs: local rank 2 is rank 6 of 12 on GPU 2 */
    memset(&pod, 0, sizeof(pod));
    pod.rank = 1;
    pod.nranks = 3;
    pod.local_size = 4;
    pod.gpu = 4;
    snprintf(pod.root_host, sizeof(pod.root_host), "10.0.0.1");
    pod.root_port = 4000;
    snprintf(pod.ifname, sizeof(pod.ifname), "eth0");
    snprintf(pod.address, sizeof(pod.address), "10.0.0.2");
    snprintf(pod.transport, sizeof(pod.transport), "%s", COLLI_PROTO_TRANSPORT_SOCKET);
    agent_rank_facts(&pod, 2, &f);
    EXPECT(f.rank == 6 && f.nranks == 12 && !f.is_root && f.local_rank == 2 && f.local_size == 4 &&
           f.pod_rank == 1 && f.npods == 3 && f.gpu == 2);
    m = colli_proto_hello_reply(&f, AGENT_VERSION);
    EXPECT(colli_proto_hello_decode(m, &g, err, sizeof(err)) == 0 &&
           memcmp(&f, &g, sizeof(f)) == 0);
    json_object_set_new(m, "local_rank", json_integer(4)); /* not below local_world_size */
    EXPECT(colli_proto_hello_decode(m, &g, err, sizeof(err)) != 0 &&
           strstr(err, "is not local rank 4 of 4 in pod 1 of 3") != NULL);
    json_object_set_new(m, "local_rank", json_integer(1)); /* 1*4+1 is not rank 6 */
    EXPECT(colli_proto_hello_decode(m, &g, err, sizeof(err)) != 0);
    json_decref(m);
    pod.rank = 0; /* pod 0: only local rank 0 is the root */
    pod.is_root = 1;
    agent_rank_facts(&pod, 0, &f);
    EXPECT(f.rank == 0 && f.is_root);
    agent_rank_facts(&pod, 3, &f);
    EXPECT(f.rank == 3 && !f.is_root && f.gpu == 3);
    pod.gpu = 0;
    agent_rank_facts(&pod, 3, &f);
    EXPECT(f.gpu == -1); /* a pod without GPUs */

    m = colli_proto_hello_failure("LocalRanksMissing", "pod p-1 ...", &f, &how, AGENT_VERSION);
    EXPECT(m && strcmp(json_string_value(json_object_get(m, "type")), "error") == 0);
    EXPECT(colli_proto_hello_failure_facts(m, &g, &back) == 0 && g.rank == 3 &&
           back.own_rank == 1 && back.host_root == 0 && back.nmissing == 2 &&
           back.missing[0] == 7 && back.missing[1] == 6);
    json_object_set_new(m, "missing_ranks", json_pack("[i i]", 5, 99)); /* 99: not a rank */
    EXPECT(colli_proto_hello_failure_facts(m, &g, &back) == 0 && back.nmissing == 1);
    json_object_del(m, "facts");
    EXPECT(colli_proto_hello_failure_facts(m, &g, &back) != 0);
    json_decref(m);
}

/* ranksPerPod from a pod: `spec` is the JSON of its containers, `ann` its annotation (or NULL). */
static int per_pod(const char *containers, const char *ann, int topo, char *source, char *error)
{
    agent_pod_ranks_t pr;
    char pod[2048];
    json_t *p;
    int n = -1;
    snprintf(pod, sizeof(pod),
             "{\"metadata\": {\"annotations\": {%s%s%s}}, \"spec\": {\"containers\": %s}}",
             ann ? "\"kcoll.io/ranks-per-pod\": \"" : "", ann ? ann : "", ann ? "\"" : "",
             containers);
    p = json_loads(pod, 0, NULL);
    error[0] = '\0';
    if (p && agent_pod_ranks_read(p, &pr) != 0 && topo == 0)
        snprintf(error, 300, "%s", pr.error);
    else if (p)
        n = agent_pod_ranks_choose(topo, "topo", &pr, source, 240);
    json_decref(p);
    return n;
}

static void test_pod_ranks(void)
{
    char src[240], err[300];
    EXPECT(per_pod("[{\"name\": \"t\", \"command\": [\"torchrun\", \"--nproc-per-node\", \"8\", "
                   "\"train.py\"]}]",
                   NULL, 0, src, err) == 8 &&
           strcmp(src, "torchrun --nproc-per-node 8 in container t") == 0);
    EXPECT(per_pod("[{\"name\": \"t\", \"command\": [\"bash\", \"-c\", \"python -m "
                   "torch.distributed.run --nproc_per_node=4 --nnodes 3 x.py\"]}]",
                   NULL, 0, src, err) == 4);
    EXPECT(per_pod("[{\"name\": \"t\", \"args\": [\"--nproc-per-node=gpu\"], \"resources\": "
                   "{\"limits\": {\"nvidia.com/gpu\": \"2\"}}}]",
                   NULL, 0, src, err) == 2);
    EXPECT(per_pod("[{\"name\": \"t\", \"env\": [{\"name\": \"PET_NPROC_PER_NODE\", \"value\": "
                   "\"6\"}]}]",
                   NULL, 0, src, err) == 6 &&
           strstr(src, "PET_NPROC_PER_NODE=6") != NULL);
    EXPECT(per_pod("[{\"name\": \"t\", \"resources\": {\"limits\": {\"nvidia.com/gpu\": 8}}}]",
                   NULL, 0, src, err) == 8 &&
           strstr(src, "nvidia.com/gpu limit") != NULL);
    EXPECT(per_pod("[{\"name\": \"t\"}]", NULL, 0, src, err) == 1);
    EXPECT(per_pod("[{\"name\": \"t\", \"resources\": {\"limits\": {\"nvidia.com/gpu\": 8}}}]", "4",
                   0, src, err) == 4); /* the annotation over the GPU count */
    EXPECT(per_pod("[{\"name\": \"t\"}]", "4", 2, src, err) == 2 &&
           strcmp(src, "CollectiveTopology topo spec.ranksPerPod") == 0);
    EXPECT(per_pod("[{\"name\": \"t\", \"command\": [\"torchrun\", \"--nproc-per-node\", "
                   "\"eight\"]}]",
                   NULL, 0, src, err) == -1 &&
           strstr(err, "--nproc-per-node \"eight\" is not a count") != NULL);
    EXPECT(per_pod("[{\"name\": \"t\", \"args\": [\"--nproc-per-node\", \"gpu\"]}]", NULL, 0, src,
                   err) == -1 &&
           strstr(err, "no nvidia.com/gpu limit") != NULL);
    EXPECT(per_pod("[{\"name\": \"t\"}]", "0", 0, src, err) == -1 &&
           strstr(err, "kcoll.io/ranks-per-pod is \"0\"") != NULL);
    EXPECT(per_pod("[{\"name\": \"t\"}]", "9999", 0, src, err) == -1);
}

/* The Event queue: occurrences of one (object, reason) fold into one entry; the 65th distinct
 * Event finds the queue full and is dropped and counted, never blocking. */
static void test_events_queue(void)
{
    agent_ctx_t *ctx = calloc(1, sizeof(*ctx));
    agent_events_t *q = ctx ? agent_events_new(ctx) : NULL;
    char name[32];
    EXPECT(q != NULL);
    if (!q) {
        free(ctx);
        return;
    }
    EXPECT(agent_events_next_ms(q) == -1);
    for (int i = 0; i < 10; i++)
        agent_events_add(q, "Warning", "KcollCollectiveFailed", "rank 3 died", "Communicator",
                         "kcoll.io/v1alpha1", "job", "uid-1");
    int64_t next = agent_events_next_ms(q);
    EXPECT(next > 0 && next <= 500); /* one entry, sent after the linger */
    for (int i = 0; i < 63; i++) {
        snprintf(name, sizeof(name), "pod-%d", i);
        agent_events_add(q, "Warning", "KcollCollectiveFailed", "m", "Pod", "v1", name, "");
    }
    EXPECT(ctx->metrics.events_dropped == 0);
    agent_events_add(q, "Warning", "KcollCollectiveFailed", "m", "Pod", "v1", "pod-63", "");
    agent_events_add(q, "Warning", "KcollCollectiveFailed", "m", "Pod", "v1", "pod-64", "");
    EXPECT(ctx->metrics.events_dropped == 2);
    /* a repeat of a queued one still folds in */
    agent_events_add(q, "Warning", "KcollCollectiveFailed", "again", "Pod", "v1", "pod-0", "");
    EXPECT(ctx->metrics.events_dropped == 2);
    agent_events_add(q, "Warning", "KcollCollectiveFailed", "m", "Pod", "v1", "", "");
    EXPECT(ctx->metrics.events_dropped == 2); /* no object: nothing queued, nothing dropped */
    agent_events_free(q);
    free(ctx);
}

int main(void)
{
    agent_log_init("error", NULL);
    test_selectors();
    test_yaml();
    test_kubeconfig();
    test_helpers();
    test_root_network();
    test_proto();
    test_local_ranks();
    test_pod_ranks();
    test_utf8_clean();
    test_events_queue();
    if (failures) {
        fprintf(stderr, "%d expectation(s) failed\n", failures);
        return 1;
    }
    printf("agent_unit: all passed\n");
    return 0;
}
