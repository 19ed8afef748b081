/*
 * Startup diagnostics over loopback: interface choice (COLL_SOCKET_IFNAME, COLL_SOCKET_FAMILY)
 * and transport policy (COLL_TRANSPORT); one data address on two machines (sameaddr).
 *   test_startup ifname | transport | sameaddr
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dh.h"

#define COUNT 1000

typedef struct scase {
    const char *env[4]; /* "NAME=value" set in the ranks of env_mask (0: every rank) */
    unsigned env_mask;
} scase_t;

/* Join, record the result of coll_comm_init_rank, and on success check one all_reduce. */
static void init_body(dh_ctx_t *ctx)
{
    const scase_t *c = ctx->arg;
    if (c->env_mask == 0 || (c->env_mask & (1u << ctx->rank))) {
        for (int i = 0; i < 4 && c->env[i]; i++) {
            char *kv = strdup(c->env[i]);
            char *eq = strchr(kv, '=');
            *eq = '\0';
            dh_setenv(kv, eq + 1);
            free(kv);
        }
    }
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    dh_record(ctx, "coll_comm_init_rank", rc);
    if (rc != COLL_SUCCESS)
        return;
    int32_t *s = malloc(COUNT * sizeof(int32_t)), *r = malloc(COUNT * sizeof(int32_t));
    for (int i = 0; i < COUNT; i++)
        s[i] = (ctx->rank + 1) * (i + 1);
    rc = coll_all_reduce(s, r, COUNT, COLL_INT32, COLL_SUM, comm, NULL);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "all_reduce after a successful init");
    long bad = 0, tri = (long)ctx->nranks * (ctx->nranks + 1) / 2;
    for (int i = 0; rc == COLL_SUCCESS && i < COUNT; i++)
        bad += r[i] != tri * (i + 1);
    CHECK(bad == 0, "all_reduce: %ld wrong elements", bad);
    ctx->sh->out[ctx->rank].checked = rc == COLL_SUCCESS && bad == 0;
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    free(s);
    free(r);
}

static dh_job_t *run(const char *name, int n, scase_t *c)
{
    dh_log("--- %s", name);
    dh_opts_t o = {.name = name, .nranks = n, .deadline_s = 40, .body = init_body, .arg = c};
    dh_job_t *j = dh_start(&o);
    if (j)
        dh_wait(j);
    return j;
}

/* Every rank initialised, ran a correct all_reduce, and logged that it listens on ifname with
 * an address starting with addr_prefix (needs COLL_DEBUG=INFO). */
static void expect_ok(dh_job_t *j, int n, const char *ifname, const char *addr_prefix)
{
    for (int r = 0; r < n; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        CHECK_RC(o->rc, COLL_SUCCESS, o->msg, "rank %d: coll_comm_init_rank", r);
        CHECK(o->checked, "rank %d: no checked all_reduce", r);
        char want[128];
        snprintf(want, sizeof(want), "rank %d of %d: %s", r, n, addr_prefix);
        CHECK_HAS(dh_output(j, r), want, "rank %d logs its listener address", r);
        snprintf(want, sizeof(want), " on %s, kcoll ", ifname);
        CHECK(dh_count_lines(dh_output(j, r), "kcoll INFO INIT rank ", want) == 1,
              "rank %d: one INFO line saying it chose interface %s", r, ifname);
    }
}

/* The first interface that COLL_SOCKET_IFNAME=^eth,ens selects (the library's order). */
static int first_not_eth_ens(char *name, size_t len)
{
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *a = list; a && !found; a = a->ifa_next) {
        if (!a->ifa_addr || !(a->ifa_flags & IFF_UP))
            continue;
        int f = a->ifa_addr->sa_family;
        if (f != AF_INET && f != AF_INET6)
            continue;
        if (f == AF_INET6 &&
            IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr))
            continue;
        if (strncmp(a->ifa_name, "eth", 3) == 0 || strncmp(a->ifa_name, "ens", 3) == 0)
            continue;
        snprintf(name, len, "%s", a->ifa_name);
        found = 1;
    }
    freeifaddrs(list);
    return found;
}

static int lo_has_ipv6(void)
{
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *a = list; a; a = a->ifa_next)
        if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET6 && strcmp(a->ifa_name, "lo") == 0 &&
            (a->ifa_flags & IFF_UP) &&
            IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr))
            found = 1;
    freeifaddrs(list);
    return found;
}

static void check_no_match_msg(const char *msg, const char *spec, const char *who)
{
    char want[160];
    snprintf(want, sizeof(want), "no network interface matches COLL_SOCKET_IFNAME=\"%s\"", spec);
    CHECK_HAS(msg, want, "%s: names the pin", who);
    CHECK_HAS(msg, "this process has: ", "%s: lists the interfaces", who);
    CHECK_HAS(msg, "lo 127.0.0.1", "%s: the list shows lo with 127.0.0.1", who);
    CHECK_HAS(msg, "CIDR such as 10.0.0.0/24", "%s: says how to pin", who);
}

static void test_ifname(void)
{
    /* The log level is read once per process, at the first kcoll call: set it before any, so
     * that the forked ranks log which interface they chose (INIT lines only). */
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", "INIT");
    /* the unique id itself */
    coll_unique_id_t id;
    coll_result_t rc = coll_get_unique_id_ifname(&id, "doesnotexist0");
    char msg[DH_MSG_BYTES];
    snprintf(msg, sizeof(msg), "%s", coll_get_last_error());
    CHECK_RC(rc, COLL_ERR_NETWORK, msg, "coll_get_unique_id_ifname(\"doesnotexist0\")");
    check_no_match_msg(msg, "doesnotexist0", "unique id");
    rc = coll_get_unique_id_ifname(&id, "10.255.255.0/24");
    snprintf(msg, sizeof(msg), "%s", coll_get_last_error());
    CHECK_RC(rc, COLL_ERR_NETWORK, msg, "coll_get_unique_id_ifname(\"10.255.255.0/24\")");
    check_no_match_msg(msg, "10.255.255.0/24", "unique id, CIDR");
    rc = coll_get_unique_id_ifname(&id, "=l");
    snprintf(msg, sizeof(msg), "%s", coll_get_last_error());
    CHECK_RC(rc, COLL_ERR_NETWORK, msg, "coll_get_unique_id_ifname(\"=l\"): exact names only");

    /* every rank pinned to a missing interface */
    scase_t bad_all = {{"COLL_SOCKET_IFNAME=doesnotexist0"}, 0};
    dh_job_t *j = run("COLL_SOCKET_IFNAME=doesnotexist0 on every rank", 2, &bad_all);
    for (int r = 0; j && r < 2; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        CHECK_RC(o->rc, COLL_ERR_NETWORK, o->msg, "rank %d: coll_comm_init_rank", r);
        check_no_match_msg(o->msg, "doesnotexist0", "rank");
        CHECK(o->t - dh_t_start(j) < 5.0, "rank %d failed after %.1f s (want < 5)", r,
              o->t - dh_t_start(j));
    }
    dh_free(j);

    /* one rank pinned to a missing interface: the root fails the others at once, by name */
    scase_t bad_one = {{"COLL_SOCKET_IFNAME=doesnotexist0"}, 1u << 1};
    j = run("COLL_SOCKET_IFNAME=doesnotexist0 on rank 1 of 3", 3, &bad_one);
    for (int r = 0; j && r < 3; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        CHECK(o->t - dh_t_start(j) < 5.0, "rank %d failed after %.1f s (want < 5)", r,
              o->t - dh_t_start(j));
        if (r == 1) {
            CHECK_RC(o->rc, COLL_ERR_NETWORK, o->msg, "rank 1: coll_comm_init_rank");
            check_no_match_msg(o->msg, "doesnotexist0", "rank 1");
            continue;
        }
        CHECK_RC(o->rc, COLL_ERR_REMOTE, o->msg, "rank %d: coll_comm_init_rank", r);
        char want[96];
        snprintf(want, sizeof(want), "rank 1 (pid %d on ", (int)dh_pid(j, 1));
        CHECK_HAS(o->msg, want, "rank %d: names rank 1 and its pid", r);
        CHECK_HAS(o->msg, ") cannot start: no network interface matches COLL_SOCKET_IFNAME",
                  "rank %d: carries rank 1's reason", r);
    }
    dh_free(j);

    scase_t exact = {{"COLL_SOCKET_IFNAME==lo"}, 0};
    j = run("COLL_SOCKET_IFNAME==lo", 2, &exact);
    if (j)
        expect_ok(j, 2, "lo", "127.0.0.1:");
    dh_free(j);

    char first[IF_NAMESIZE + 1] = "";
    if (!first_not_eth_ens(first, sizeof(first)) || strcmp(first, "lo") != 0) {
        dh_log("SKIP COLL_SOCKET_IFNAME=^eth,ens: it selects \"%s\" here, not lo (only loopback "
               "is used outside network namespaces)",
               first);
    } else {
        scase_t excl = {{"COLL_SOCKET_IFNAME=^eth,ens"}, 0};
        j = run("COLL_SOCKET_IFNAME=^eth,ens", 2, &excl);
        if (j)
            expect_ok(j, 2, "lo", "127.0.0.1:");
        dh_free(j);
    }

    scase_t cidr = {{"COLL_SOCKET_IFNAME=127.0.0.0/8"}, 0};
    j = run("COLL_SOCKET_IFNAME=127.0.0.0/8", 2, &cidr);
    if (j)
        expect_ok(j, 2, "lo", "127.0.0.1:");
    dh_free(j);

    if (!lo_has_ipv6()) {
        dh_log("SKIP COLL_SOCKET_FAMILY=AF_INET6: lo has no ::1 here");
        return;
    }
    /* the root (created in this process) and the ranks all on [::1] */
    dh_setenv("COLL_SOCKET_FAMILY", "AF_INET6");
    scase_t v6 = {{"COLL_SOCKET_IFNAME=lo", "COLL_SOCKET_FAMILY=AF_INET6"}, 0};
    j = run("COLL_SOCKET_FAMILY=AF_INET6 COLL_SOCKET_IFNAME=lo", 2, &v6);
    dh_setenv("COLL_SOCKET_FAMILY", NULL);
    if (j) {
        CHECK_HAS(dh_id_string(j), "kcoll1:[::1]:", "the unique id names the IPv6 root");
        expect_ok(j, 2, "lo", "[::1]:");
    }
    dh_free(j);
}

static void test_transport(void)
{
    /* RequireIB where there is no usable HCA: fails at init, saying why */
    scase_t req = {{"COLL_TRANSPORT=RequireIB"}, 0};
    dh_job_t *j = run("COLL_TRANSPORT=RequireIB", 2, &req);
    for (int r = 0; j && r < 2; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        if (o->rc == COLL_SUCCESS)
            continue; /* an active HCA exists here: RequireIB is satisfied (the ranks share a
                       * host, so they talk over shared memory) */
        CHECK_RC(o->rc, COLL_ERR_NETWORK, o->msg, "rank %d: coll_comm_init_rank", r);
        CHECK_HAS(o->msg, "COLL_TRANSPORT=RequireIB, but InfiniBand is not usable here: ",
                  "rank %d: names the policy", r);
        CHECK(dh_contains(o->msg, "libibverbs") &&
                  (dh_contains(o->msg, "device") || dh_contains(o->msg, "cannot be loaded") ||
                   dh_contains(o->msg, "port")),
              "rank %d: names libibverbs and what it lacks: \"%s\"", r, o->msg);
        CHECK(o->t - dh_t_start(j) < 5.0, "rank %d failed after %.1f s", r, o->t - dh_t_start(j));
    }
    dh_free(j);

    /* PreferIB: works over sockets, with exactly one WARN line saying why */
    scase_t pref = {{"COLL_TRANSPORT=PreferIB"}, 0};
    j = run("COLL_TRANSPORT=PreferIB", 2, &pref);
    for (int r = 0; j && r < 2; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        CHECK_RC(o->rc, COLL_SUCCESS, o->msg, "rank %d: coll_comm_init_rank", r);
        CHECK(o->checked, "rank %d: no checked all_reduce", r);
        int warns = dh_count_lines(dh_output(j, r), "kcoll WARN", "PreferIB");
        CHECK(warns == 1, "rank %d: %d WARN lines about PreferIB (want exactly 1):\n%s", r, warns,
              dh_output(j, r));
        CHECK(dh_count_lines(dh_output(j, r), "COLL_TRANSPORT=PreferIB: ", "using sockets") == 1,
              "rank %d: the WARN says it falls back to sockets", r);
        CHECK(dh_count_lines(dh_output(j, r), "kcoll WARN", NULL) == 1,
              "rank %d: no other WARN lines:\n%s", r, dh_output(j, r));
    }
    dh_free(j);

    /* Socket: no InfiniBand probing, no warnings */
    scase_t sock = {{"COLL_TRANSPORT=Socket"}, 0};
    j = run("COLL_TRANSPORT=Socket", 2, &sock);
    for (int r = 0; j && r < 2; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        CHECK_RC(o->rc, COLL_SUCCESS, o->msg, "rank %d: coll_comm_init_rank", r);
        CHECK(dh_count_lines(dh_output(j, r), "kcoll WARN", NULL) == 0,
              "rank %d: WARN lines with COLL_TRANSPORT=Socket:\n%s", r, dh_output(j, r));
    }
    dh_free(j);

    /* a value that is not a policy */
    scase_t badv = {{"COLL_TRANSPORT=Infiniband"}, 0};
    j = run("COLL_TRANSPORT=Infiniband", 2, &badv);
    for (int r = 0; j && r < 2; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        CHECK_RC(o->rc, COLL_ERR_INVALID_ARGUMENT, o->msg, "rank %d: coll_comm_init_rank", r);
        CHECK_HAS(o->msg, "COLL_TRANSPORT=\"Infiniband\" is not valid: ", "rank %d", r);
        CHECK_HAS(o->msg, "RequireIB, PreferIB, Socket or auto", "rank %d: lists the values", r);
    }
    dh_free(j);

    /* one rank with RequireIB among 4: every rank fails quickly, naming it */
    scase_t one = {{"COLL_TRANSPORT=RequireIB"}, 1u << 2};
    j = run("COLL_TRANSPORT=RequireIB on rank 2 of 4", 4, &one);
    for (int r = 0; j && r < 4; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        double dt = o->t - dh_t_start(j);
        CHECK(o->done && dt < 5.0, "rank %d failed after %.1f s (want < 5)", r, dt);
        if (r == 2) {
            CHECK(o->rc == COLL_ERR_NETWORK || o->rc == COLL_ERR_UNSUPPORTED, "rank 2: %s: \"%s\"",
                  dh_rc_name(o->rc), o->msg);
            continue;
        }
        CHECK_RC(o->rc, COLL_ERR_REMOTE, o->msg, "rank %d: coll_comm_init_rank", r);
        char want[96];
        snprintf(want, sizeof(want), "rank 2 (pid %d on ", (int)dh_pid(j, 2));
        CHECK_HAS(o->msg, want, "rank %d: names rank 2", r);
        CHECK_HAS(o->msg, ") cannot start: COLL_TRANSPORT=RequireIB", "rank %d: says why", r);
    }
    dh_free(j);
}

/* An interface that is up with an IPv4 address other than loopback, in name/addr; 0: none. */
static int first_ipv4_not_lo(char *name, size_t nlen, char *addr, size_t alen)
{
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *a = list; a && !found; a = a->ifa_next) {
        if (!a->ifa_addr || !(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK) ||
            a->ifa_addr->sa_family != AF_INET)
            continue;
        snprintf(name, nlen, "%s", a->ifa_name);
        inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, addr, (socklen_t)alen);
        found = 1;
    }
    freeifaddrs(list);
    return found;
}

/* Ranks on two machines (COLL_TEST_BOOT_ID) with one data address, as host-local IPAM or a
 * docker0 pinned gives them: every rank's creation fails at once naming two of them and the
 * fix. Ranks of one machine with one address (pods with hostNetwork, each in an IPC namespace of
 * its own: other "hosts" for kcoll) still work. */
static void test_sameaddr(void)
{
    char ifname[IF_NAMESIZE + 1], addr[INET_ADDRSTRLEN];
    if (!first_ipv4_not_lo(ifname, sizeof(ifname), addr, sizeof(addr)))
        dh_skip("no interface other than loopback is up with an IPv4 address");
    char pin[64];
    snprintf(pin, sizeof(pin), "COLL_SOCKET_IFNAME=%s", ifname);
    scase_t two = {.env = {pin, "COLL_TEST_BOOT_ID=m0,m1,m0"}};
    dh_job_t *j = run("ranks 0 and 2 on one machine, rank 1 on another, one address", 3, &two);
    char want[160];
    for (int r = 0; j != NULL && r < 3; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        dh_log("rank %d: %s", r, o->msg);
        CHECK_RC(o->rc, COLL_ERR_NETWORK, o->msg, "rank %d: coll_comm_init_rank", r);
        CHECK_HAS(o->msg, "are on different machines but have the same data address",
                  "rank %d: says what is wrong", r);
        snprintf(want, sizeof(want), "rank 0 (pid %d on ", (int)dh_pid(j, 0));
        CHECK_HAS(o->msg, want, "rank %d: names rank 0", r);
        snprintf(want, sizeof(want), " and rank 1 (pid %d on ", (int)dh_pid(j, 1));
        CHECK_HAS(o->msg, want, "rank %d: names rank 1, of the other machine", r);
        CHECK_HAS(o->msg, addr, "rank %d: names the address", r);
        CHECK_HAS(o->msg, "whereabouts", "rank %d: says what to change", r);
    }
    dh_free(j);
    scase_t one = {.env = {pin, "COLL_TEST_BOOT_ID=m0", "COLL_TEST_HOST_ID_SUFFIX=a,b,c"}};
    j = run("three IPC namespaces of one machine, one address (hostNetwork pods)", 3, &one);
    for (int r = 0; j != NULL && r < 3; r++) {
        const dh_out_t *o = &dh_shared(j)->out[r];
        CHECK_RC(o->rc, COLL_SUCCESS, o->msg, "rank %d: coll_comm_init_rank", r);
        CHECK(o->checked, "rank %d: no checked all_reduce", r);
    }
    dh_free(j);
}

int main(int argc, char **argv)
{
    dh_init();
    if (argc == 2 && strcmp(argv[1], "ifname") == 0)
        test_ifname();
    else if (argc == 2 && strcmp(argv[1], "transport") == 0)
        test_transport();
    else if (argc == 2 && strcmp(argv[1], "sameaddr") == 0)
        test_sameaddr();
    else {
        printf("usage: test_startup ifname|transport|sameaddr\n");
        return 2;
    }
    return dh_finish();
}
