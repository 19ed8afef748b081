/* InfiniBand pieces that run without an HCA: the dlopen'd verbs table (every symbol in this
 * machine's libibverbs.so.1; a missing library and a missing symbol give clear errors), port
 * listing and the probe over a stand-in verbs library with two fake devices, COLL_IB_HCA
 * matching and checking, RoCE GID selection over fake tables, the registration cache with fake
 * registrations, the COLL_IB_* parameters, and the transport policy (RequireIB fails naming the
 * reason, PreferIB falls back with exactly one WARN). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/error.h"
#include "transport/ib/ib.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stdout, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stdout, __VA_ARGS__);                                                          \
            fprintf(stdout, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define HAS(s, sub) (strstr((s), (sub)) != NULL)

/* ---- stderr capture (WARN lines) ---- */

static int saved_fd = -1;
static FILE *cap;

static void capture_start(void)
{
    fflush(stderr);
    cap = tmpfile();
    saved_fd = dup(2);
    if (cap != NULL && saved_fd >= 0)
        dup2(fileno(cap), 2);
}

/* Stop capturing; returns what was written (static buffer). */
static const char *capture_end(void)
{
    static char buf[8192];
    buf[0] = '\0';
    fflush(stderr);
    if (saved_fd >= 0) {
        dup2(saved_fd, 2);
        close(saved_fd);
        saved_fd = -1;
    }
    if (cap != NULL) {
        rewind(cap);
        size_t n = fread(buf, 1, sizeof(buf) - 1, cap);
        buf[n] = '\0';
        fclose(cap);
        cap = NULL;
    }
    return buf;
}

static int count_lines(const char *text, const char *a, const char *b)
{
    int n = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1), l);
        if (HAS(line, a) && (b == NULL || HAS(line, b)))
            n++;
        l += len + (e != NULL);
    }
    return n;
}

/* ---- the verbs table ---- */

static void test_symbols(void)
{
    char why[512] = "";
    colli_ib_verbs_t v;
#ifdef COLLI_HAVE_VERBS
    CHECK(colli_ib_verbs_nsyms() >= 20, "%d symbols", colli_ib_verbs_nsyms());
    bool ok = colli_ib_verbs_open(NULL, &v, why, sizeof(why));
    CHECK(ok, "the real libibverbs.so.1 loads with every symbol: %s", why);
    if (ok) {
        for (int i = 0; i < colli_ib_verbs_nsyms(); i++) {
            void *p;
            /* every slot after the handle is filled, in table order */
            memcpy(&p, (char *)&v + sizeof(void *) * (size_t)(i + 1), sizeof(p));
            CHECK(p != NULL, "symbol %s not filled", colli_ib_verbs_sym(i));
        }
        CHECK(v.query_gid_ex != NULL, "rdma-core here exports _ibv_query_gid_ex");
        int n = -1;
        struct ibv_device **list = v.get_device_list(&n);
        printf("libibverbs.so.1 lists %d device(s) here\n", n);
        if (list != NULL)
            v.free_device_list(list);
        colli_ib_verbs_close(&v);
    }
    CHECK(v.handle == NULL, "closed");
#endif
    /* a library that does not exist */
    ok = colli_ib_verbs_open("/nonexistent/libibverbs.so.1", &v, why, sizeof(why));
    CHECK(!ok && v.handle == NULL, "a missing library fails");
    CHECK(HAS(why, "/nonexistent/libibverbs.so.1 cannot be loaded (") && HAS(why, "No such file") &&
              HAS(why, "COLL_TRANSPORT=Socket"),
          "names the library, dlerror and the fix: %s", why);
#ifdef COLLI_HAVE_VERBS
    /* a library without ibv_dereg_mr and the symbols after it */
    ok = colli_ib_verbs_open(IB_STUB_PARTIAL, &v, why, sizeof(why));
    CHECK(!ok && v.handle == NULL && v.get_device_list == NULL, "partial library refused");
    CHECK(HAS(why, "lacks the symbol ibv_dereg_mr") && HAS(why, "ib_stub_partial"),
          "names the first missing symbol and the library: %s", why);
    ok = colli_ib_verbs_open(IB_STUB_FULL, &v, why, sizeof(why));
    CHECK(ok, "the complete stand-in loads: %s", why);
    if (ok)
        colli_ib_verbs_close(&v);
#endif
}

/* ---- ports and the probe over the stand-in library ---- */

static void test_ports(void)
{
#ifdef COLLI_HAVE_VERBS
    char why[512];
    colli_ib_verbs_t v;
    if (!colli_ib_verbs_open(IB_STUB_FULL, &v, why, sizeof(why))) {
        CHECK(0, "stand-in: %s", why);
        return;
    }
    ib_port_t ports[8];
    int ndev, nmatch;
    int n = ib_port_list(&v, "", ports, 8, &ndev, &nmatch);
    CHECK(n == 2 && ndev == 2 && nmatch == 3, "all: %d active of %d matching, %d devs", n, nmatch,
          ndev);
    if (n == 2) {
        CHECK(strcmp(ports[0].dev, "mlx5_0") == 0 && ports[0].port == 1 && ports[0].lid == 7 &&
                  ports[0].link_layer == IBV_LINK_LAYER_INFINIBAND && ports[0].rc,
              "mlx5_0:1 IB");
        CHECK(strcmp(ports[1].dev, "mlx5_1") == 0 && ports[1].port == 1 &&
                  ports[1].link_layer == IBV_LINK_LAYER_ETHERNET && ports[1].rc,
              "mlx5_1:1 RoCE");
    }
    n = ib_port_list(&v, "^mlx5_0", ports, 8, &ndev, &nmatch);
    CHECK(n == 1 && strcmp(ports[0].dev, "mlx5_1") == 0, "^mlx5_0 leaves mlx5_1 (%d)", n);
    n = ib_port_list(&v, "mlx5_0:2", ports, 8, &ndev, &nmatch);
    CHECK(n == 0 && nmatch == 1, "mlx5_0:2 matches a DOWN port (%d, %d)", n, nmatch);

    /* the RoCE port's GID table, read through the table (types from _ibv_query_gid_ex) */
    struct ibv_context *ctx = v.open_device(v.get_device_list(&n)[1]);
    colli_ib_gid_t *tab = NULL;
    int ng = 0;
    CHECK(ctx && ib_gid_table(&v, ctx, "mlx5_1", 1, 4, &tab, &ng) && ng == 4, "GID table (%d)", ng);
    if (ng == 4)
        CHECK(colli_ib_gid_select(tab, ng, -1, why, sizeof(why)) == 3,
              "RoCE v2 IPv4-mapped entry chosen");
    free(tab);
    if (ctx)
        v.close_device(ctx);
    colli_ib_verbs_close(&v);

    colli_ib_probe_t pr;
    colli_ib_probe(IB_STUB_FULL, "", &pr);
    CHECK(pr.usable && !pr.no_rc && strcmp(pr.devices, "mlx5_0:1, mlx5_1:1") == 0, "probe: %s",
          pr.devices);
    colli_ib_probe(IB_STUB_FULL, "=mlx5", &pr);
    CHECK(!pr.usable && HAS(pr.reason, "2 RDMA device(s) found but no port matches the HCA list") &&
              HAS(pr.reason, "COLL_IB_HCA=\"=mlx5\""),
          "=mlx5 matches nothing: %s", pr.reason);
    colli_ib_probe(IB_STUB_FULL, "mlx5_0:2", &pr);
    CHECK(!pr.usable && HAS(pr.reason, "no matching port is ACTIVE"), "down port: %s", pr.reason);
    colli_ib_probe(NULL, "", &pr);
    printf("probe of this machine: usable=%d %s%s\n", pr.usable, pr.devices, pr.reason);
    if (!pr.usable)
        CHECK(HAS(pr.reason, "libibverbs"), "names libibverbs: %s", pr.reason);
#endif
}

/* ---- COLL_IB_HCA ---- */

static void test_hca(void)
{
    CHECK(colli_ib_hca_match("", "mlx5_0", 1), "empty matches all");
    CHECK(colli_ib_hca_match("mlx5", "mlx5_3", 1), "prefix");
    CHECK(!colli_ib_hca_match("=mlx5", "mlx5_3", 1), "= is exact");
    CHECK(colli_ib_hca_match("=mlx5_3", "mlx5_3", 2), "= exact hit");
    CHECK(colli_ib_hca_match("mlx5_0:1,mlx5_1", "mlx5_0", 1), "entry with port");
    CHECK(!colli_ib_hca_match("mlx5_0:1,mlx5_1", "mlx5_0", 2), "other port");
    CHECK(colli_ib_hca_match("mlx5_0:1,mlx5_1", "mlx5_1", 2), "entry without port: every port");
    CHECK(!colli_ib_hca_match("^mlx5_0", "mlx5_0", 1), "^ excludes");
    CHECK(colli_ib_hca_match("^mlx5_0", "mlx5_1", 1), "^ keeps the others");
    CHECK(!colli_ib_hca_match("^mlx5_0:1", "mlx5_0", 1), "^ with a port");
    CHECK(colli_ib_hca_match("^mlx5_0:1", "mlx5_0", 2), "^ with a port keeps other ports");
    CHECK(!colli_ib_hca_match("^=mlx5_0", "mlx5_0", 1), "^= exact exclusion");
    CHECK(colli_ib_hca_match("^=mlx5_0", "mlx5_01", 1), "^= keeps a longer name");

    static const char *good[] = {"",        "mlx5_0",     "mlx5_0:1,mlx5_1", "^mlx5_2",
                                 "=mlx5_0", "^=mlx5_0:1", "mlx5_0:255",      "bnxt_re0,mlx4_0:2"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char why[200] = "";
        CHECK(colli_ib_hca_check(good[i], why, sizeof(why)), "\"%s\" is good: %s", good[i], why);
    }
    static const struct {
        const char *spec, *why;
    } bad[] = {
        {"^", "no device follows \"^\""},
        {"=", "no device follows \"=\""},
        {"^=", "no device follows \"^=\""},
        {"mlx5_0,,mlx5_1", "entry 2 is empty"},
        {"mlx5_0,", "entry 2 is empty"},
        {",mlx5_0", "entry 1 is empty"},
        {":1", "no device name before ':'"},
        {"mlx5_0:", "integer from 1 to 255"},
        {"mlx5_0:0", "integer from 1 to 255"},
        {"mlx5_0:256", "integer from 1 to 255"},
        {"mlx5_0:x", "integer from 1 to 255"},
        {"mlx5_0:1:2", "integer from 1 to 255"},
        {"mlx5_0,^mlx5_1", "may only start the list"},
        {"mlx5 0", "blank"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char why[200] = "";
        bool ok = colli_ib_hca_check(bad[i].spec, why, sizeof(why));
        CHECK(!ok && HAS(why, bad[i].why), "\"%s\" refused with \"%s\": got %d \"%s\"", bad[i].spec,
              bad[i].why, ok, why);
    }
}

/* ---- RoCE GID selection ---- */

static colli_ib_gid_t gid(int index, int type, const char *kind)
{
    colli_ib_gid_t g = {.index = index, .type = type};
    if (strcmp(kind, "v4") == 0) {
        g.gid[10] = g.gid[11] = 0xff;
        g.gid[12] = 192;
        g.gid[13] = 168;
        g.gid[15] = (uint8_t)index;
    } else if (strcmp(kind, "ll") == 0) {
        g.gid[0] = 0xfe;
        g.gid[1] = 0x80;
        g.gid[15] = (uint8_t)index;
    } else if (strcmp(kind, "v6") == 0) {
        g.gid[0] = 0x20;
        g.gid[1] = 0x01;
        g.gid[15] = (uint8_t)index;
    } /* "zero": all zero */
    return g;
}

static void test_gid(void)
{
    char why[300];
    enum { V1 = COLLI_IB_GID_ROCE_V1, V2 = COLLI_IB_GID_ROCE_V2, UNK = COLLI_IB_GID_UNKNOWN };
    /* the usual mlx5 RoCE table: v1 and v2 link-local, v1 and v2 IPv4 */
    colli_ib_gid_t t1[] = {gid(0, V1, "ll"), gid(1, V2, "ll"), gid(2, V1, "v4"), gid(3, V2, "v4")};
    CHECK(colli_ib_gid_select(t1, 4, -1, why, sizeof(why)) == 3, "v2 IPv4 wins");
    /* v2 before v1 even when v1 has the better address */
    colli_ib_gid_t t2[] = {gid(0, V1, "v4"), gid(1, V2, "ll")};
    CHECK(colli_ib_gid_select(t2, 2, -1, why, sizeof(why)) == 1, "v2 link-local over v1 IPv4");
    /* IPv4-mapped before global IPv6 before link-local, within one version */
    colli_ib_gid_t t3[] = {gid(0, V2, "ll"), gid(1, V2, "v6"), gid(2, V2, "v4"), gid(3, V2, "v6")};
    CHECK(colli_ib_gid_select(t3, 4, -1, why, sizeof(why)) == 2, "IPv4-mapped");
    colli_ib_gid_t t4[] = {gid(0, V2, "ll"), gid(5, V2, "v6"), gid(4, V2, "v6")};
    CHECK(colli_ib_gid_select(t4, 3, -1, why, sizeof(why)) == 4, "global IPv6, lowest index");
    /* zero entries are skipped, even as the only v2 entries */
    colli_ib_gid_t t5[] = {gid(0, V2, "zero"), gid(1, V1, "ll"), gid(2, V2, "zero")};
    CHECK(colli_ib_gid_select(t5, 3, -1, why, sizeof(why)) == 1, "zero v2 skipped");
    /* unknown types (no verbs query, no sysfs) rank below v1 but still work */
    colli_ib_gid_t t6[] = {gid(0, UNK, "v4"), gid(1, V1, "ll")};
    CHECK(colli_ib_gid_select(t6, 2, -1, why, sizeof(why)) == 1, "v1 before unknown");
    colli_ib_gid_t t7[] = {gid(0, UNK, "ll"), gid(1, UNK, "v4")};
    CHECK(colli_ib_gid_select(t7, 2, -1, why, sizeof(why)) == 1, "unknown: by address");
    /* nothing usable */
    colli_ib_gid_t t8[] = {gid(0, V2, "zero"), gid(1, V1, "zero")};
    CHECK(colli_ib_gid_select(t8, 2, -1, why, sizeof(why)) == -1 &&
              HAS(why, "no configured entry") && HAS(why, "COLL_IB_GID_INDEX"),
          "all zero: %s", why);
    CHECK(colli_ib_gid_select(NULL, 0, -1, why, sizeof(why)) == -1, "empty table");
    /* explicit COLL_IB_GID_INDEX */
    CHECK(colli_ib_gid_select(t1, 4, 0, why, sizeof(why)) == 0, "explicit 0 honoured");
    CHECK(colli_ib_gid_select(t1, 4, 9, why, sizeof(why)) == -1 &&
              HAS(why, "COLL_IB_GID_INDEX=9 is not in the port's GID table (4 entries)"),
          "explicit missing: %s", why);
    CHECK(colli_ib_gid_select(t5, 3, 2, why, sizeof(why)) == -1 && HAS(why, "all-zero"),
          "explicit zero: %s", why);
    char s[64];
    colli_ib_gid_str(t1[3].gid, s, sizeof(s));
    CHECK(strcmp(s, "::ffff:192.168.0.3") == 0, "gid string %s", s);
}

/* ---- registration cache ---- */

typedef struct {
    int regs, deregs, live;
    bool fail;
} fake_hca_t;

static void *fake_reg(void *ctx, void *addr, size_t len, uint32_t *lkey, uint32_t *rkey)
{
    fake_hca_t *h = ctx;
    if (h->fail)
        return NULL;
    h->regs++;
    h->live++;
    *lkey = (uint32_t)h->regs;
    *rkey = (uint32_t)h->regs + 1000;
    return malloc(1);
}

static void fake_dereg(void *ctx, void *mr)
{
    fake_hca_t *h = ctx;
    h->deregs++;
    h->live--;
    free(mr);
}

static void test_mr_cache(void)
{
    fake_hca_t h = {0};
    ib_mr_cache_t c = {.max_idle = 2, .reg = fake_reg, .dereg = fake_dereg, .ctx = &h};
    char why[300];
    long pg = sysconf(_SC_PAGESIZE);
    char *buf = aligned_alloc((size_t)pg, (size_t)pg * 64);
    if (buf == NULL)
        return;
    ib_mr_ent_t *a = ib_mr_get(&c, buf + 100, 1000, why, sizeof(why));
    CHECK(a && h.regs == 1 && a->start == (uintptr_t)buf && a->end == (uintptr_t)buf + (size_t)pg,
          "page-aligned registration");
    ib_mr_ent_t *b = ib_mr_get(&c, buf + 10, 50, why, sizeof(why));
    CHECK(b == a && h.regs == 1 && a->refs == 2 && c.hits == 1, "covered range reused");
    ib_mr_ent_t *d = ib_mr_get(&c, buf + pg - 10, 20, why, sizeof(why));
    CHECK(d && d != a && h.regs == 2, "range across the end: a new registration");
    ib_mr_put(&c, a);
    ib_mr_put(&c, b);
    ib_mr_put(&c, d);
    CHECK(h.live == 2 && h.deregs == 0, "idle entries stay cached (%d live)", h.live);
    ib_mr_ent_t *e = ib_mr_get(&c, buf + 200, 8, why, sizeof(why));
    CHECK(e == a && h.regs == 2, "reused after put");
    ib_mr_put(&c, e);
    /* a third idle entry: the least recently used one (d) goes */
    ib_mr_ent_t *f = ib_mr_get(&c, buf + 10 * pg, 100, why, sizeof(why));
    ib_mr_put(&c, f);
    CHECK(h.live == 2 && h.deregs == 1, "LRU eviction beyond max_idle (%d live)", h.live);
    /* held entries are never evicted, however many */
    ib_mr_ent_t *held[6];
    for (int i = 0; i < 6; i++)
        held[i] = ib_mr_get(&c, buf + (size_t)(20 + 2 * i) * (size_t)pg, 10, why, sizeof(why));
    CHECK(h.live == 8, "6 held + 2 idle (%d)", h.live);
    for (int i = 0; i < 6; i++)
        CHECK(held[i] && held[i]->refs == 1 && held[i]->lkey > 0, "held %d intact", i);
    /* invalidation drops unreferenced overlapping entries only */
    ib_mr_invalidate(&c, buf, (size_t)pg * 64);
    CHECK(h.live == 6, "invalidate leaves held ones (%d)", h.live);
    for (int i = 0; i < 6; i++)
        ib_mr_put(&c, held[i]);
    CHECK(h.live == 2, "trimmed to max_idle (%d)", h.live);
    h.fail = true;
    errno = ENOMEM;
    CHECK(ib_mr_get(&c, buf + 60 * pg, 10, why, sizeof(why)) == NULL && HAS(why, "ibv_reg_mr"),
          "failure: %s", why);
    ib_mr_cache_fini(&c);
    CHECK(h.live == 0 && c.n == 0, "fini deregisters all");
    free(buf);
}

/* ---- configuration and policy ---- */

static void test_config(void)
{
    colli_config_t cfg;
    CHECK(colli_config_load(&cfg) == COLL_SUCCESS, "defaults");
    CHECK(cfg.ib_gid_index == -1 && cfg.ib_nqps == 2 && cfg.ib_timeout == 20, "IB defaults");
    CHECK(colli_config_pin(&cfg, "COLL_IB_GID_INDEX", "3", COLLI_SRC_ENV) == COLL_SUCCESS &&
              cfg.ib_gid_index == 3,
          "gid index");
    CHECK(colli_config_pin(&cfg, "COLL_IB_GID_INDEX", "auto", COLLI_SRC_ENV) == COLL_SUCCESS &&
              cfg.ib_gid_index == -1,
          "gid index auto");
    capture_start();
    coll_result_t r1 = colli_config_pin(&cfg, "COLL_IB_GID_INDEX", "300", COLLI_SRC_AGENT);
    coll_result_t r2 = colli_config_pin(&cfg, "COLL_IB_NQPS", "9", COLLI_SRC_AGENT);
    coll_result_t r3 = colli_config_pin(&cfg, "COLL_IB_HCA", "mlx5_0,,mlx5_1", COLLI_SRC_AGENT);
    const char *err = colli_last_error();
    char last[512];
    snprintf(last, sizeof(last), "%s", err);
    capture_end();
    CHECK(r1 == COLL_ERR_INVALID_ARGUMENT && r2 == COLL_ERR_INVALID_ARGUMENT &&
              r3 == COLL_ERR_INVALID_ARGUMENT,
          "bad values refused (%d %d %d)", r1, r2, r3);
    CHECK(HAS(last, "COLL_IB_HCA=\"mlx5_0,,mlx5_1\"") && HAS(last, "entry 2 is empty"),
          "names the variable and the fault: %s", last);
    CHECK(colli_config_pin(&cfg, "COLL_IB_HCA", "^=mlx5_0:1", COLLI_SRC_ENV) == COLL_SUCCESS &&
              strcmp(cfg.ib_hca, "^=mlx5_0:1") == 0,
          "good HCA list kept");
}

/* The transport's probe, as a communicator with cfg and the verbs library lib would run it. */
static coll_result_t apply_policy(const colli_config_t *cfg, const char *lib, bool *use)
{
    struct coll_comm *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return COLL_ERR_SYSTEM;
    comm->cfg = *cfg;
    snprintf(comm->test.ib_verbs_lib, sizeof(comm->test.ib_verbs_lib), "%s", lib);
    coll_result_t status = ib_policy_probe(comm, use);
    free(comm);
    return status;
}

static void test_policy(void)
{
    colli_config_t cfg;
    bool use_ib = true;
    const char *lib = "";
    if (colli_config_load(&cfg) != COLL_SUCCESS)
        return;
    cfg.transport = COLLI_TP_SOCKET;
    CHECK(apply_policy(&cfg, lib, &use_ib) == COLL_SUCCESS && !use_ib, "Socket");

    colli_ib_probe_t pr;
    colli_ib_probe(NULL, "", &pr);
    /* auto offers InfiniBand exactly where a port is usable (whether the job uses it is decided
     * with every rank's record, in can_connect) */
    cfg.transport = COLLI_TP_AUTO;
    use_ib = !pr.usable;
    CHECK(apply_policy(&cfg, lib, &use_ib) == COLL_SUCCESS && use_ib == pr.usable,
          "auto: InfiniBand offered %d, a port usable %d", use_ib, pr.usable);
    if (!pr.usable) {
        /* this machine: libibverbs loads but lists no devices */
        cfg.transport = COLLI_TP_REQUIRE_IB;
        capture_start();
        coll_result_t r = apply_policy(&cfg, lib, &use_ib);
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", colli_last_error());
        const char *out = capture_end();
        CHECK(r == COLL_ERR_NETWORK, "RequireIB fails: %d", r);
        CHECK(HAS(msg, "COLL_TRANSPORT=RequireIB, but InfiniBand is not usable here: ") &&
                  HAS(msg, pr.reason),
              "names the reason: %s", msg);
        CHECK(count_lines(out, "kcoll WARN", "RequireIB") == 1, "logged once:\n%s", out);

        cfg.transport = COLLI_TP_PREFER_IB;
        use_ib = true;
        capture_start();
        r = apply_policy(&cfg, lib, &use_ib);
        out = capture_end();
        CHECK(r == COLL_SUCCESS && !use_ib, "PreferIB falls back");
        CHECK(count_lines(out, "kcoll WARN", NULL) == 1 &&
                  count_lines(out, "COLL_TRANSPORT=PreferIB: using sockets because", NULL) == 1,
              "exactly one WARN:\n%s", out);
    } else {
        printf("SKIP policy without devices: this machine has usable ports %s\n", pr.devices);
    }
#ifdef COLLI_HAVE_VERBS
    /* a verbs library lacking a symbol: RequireIB names it */
    cfg.transport = COLLI_TP_REQUIRE_IB;
    lib = IB_STUB_PARTIAL;
    capture_start();
    coll_result_t r = apply_policy(&cfg, lib, &use_ib);
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", colli_last_error());
    capture_end();
    CHECK(r == COLL_ERR_NETWORK && HAS(msg, "lacks the symbol ibv_dereg_mr"), "%s", msg);
    /* the stand-in with active ports: the policy starts InfiniBand */
    lib = IB_STUB_FULL;
    use_ib = false;
    CHECK(apply_policy(&cfg, lib, &use_ib) == COLL_SUCCESS && use_ib,
          "RequireIB with active ports");
    cfg.transport = COLLI_TP_PREFER_IB;
    snprintf(cfg.ib_hca, sizeof(cfg.ib_hca), "mlx5_9");
    capture_start();
    r = apply_policy(&cfg, lib, &use_ib);
    const char *out = capture_end();
    CHECK(r == COLL_SUCCESS && !use_ib && count_lines(out, "kcoll WARN", "no port matches") == 1,
          "PreferIB, no matching port: one WARN:\n%s", out);
    /* auto: sockets without a WARN (its INFO line is checked in tests/ib-rxe, faults) */
    cfg.transport = COLLI_TP_AUTO;
    use_ib = true;
    capture_start();
    r = apply_policy(&cfg, lib, &use_ib);
    out = capture_end();
    CHECK(r == COLL_SUCCESS && !use_ib && count_lines(out, "kcoll WARN", NULL) == 0,
          "auto, no matching port: no WARN:\n%s", out);
    cfg.ib_hca[0] = '\0';
    use_ib = false;
    CHECK(apply_policy(&cfg, lib, &use_ib) == COLL_SUCCESS && use_ib, "auto with active ports");
#endif
}

int main(void)
{
    test_symbols();
    test_ports();
    test_hca();
    test_gid();
    test_mr_cache();
    test_config();
    test_policy();
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
