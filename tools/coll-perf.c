/*
 * coll-perf: kcoll's benchmark, in the style of nccl-tests.
 *
 * Run one process per rank under coll-run (which sets COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS):
 *   coll-run -n 4 coll-perf -C all_reduce -b 8 -e 64M -f 2 -d float32 -o sum -c 1
 * or, as in a pod, with the rank, world size and root from the kcoll agent (COLL_AGENT_SOCKET,
 * coll_comm_init_agent), which coll-run --agent sets up:
 *   coll-run -n 4 --agent coll-perf -C all_reduce -b 8 -e 64M -f 2 -c 1
 *
 * Flags follow nccl-tests where nccl-tests has them (-b -e -f -i -n -w -c -d -o -r -z); nccl-tests
 * has one binary per collective, so the collective is coll-perf's own -C/--collective.
 *
 * Sizes follow nccl-tests: "size" is the total buffer (for all_gather, reduce_scatter and
 * all_to_all nranks * the per-rank count), "count" the count passed to the call. Bus bandwidth
 * uses nccl-tests' factors so that figures are comparable between libraries and rank counts.
 *
 * Every result is checked (unless --check 0) against a value computed here, independently of the
 * library, from each rank's known input pattern: small integers whose sums, products, minima,
 * maxima and averages are exact in every datatype, so the check is bit-exact.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* environ */
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_perf.h"

void perf_fatal(const struct ctx *c, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "coll-perf[rank %d]: ", c->fatal_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (c->fatal_comm != NULL)
        coll_comm_abort(c->fatal_comm);
    exit(1);
}

static const char *need_env(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') {
        fprintf(stderr,
                "coll-perf: %s is not set: run under coll-run (or coll-run --agent), set "
                "COLL_UNIQUE_ID/COLL_RANK/COLL_NRANKS, or set COLL_AGENT_SOCKET to the kcoll "
                "agent's socket\n",
                name);
        exit(2);
    }
    return v;
}

struct rank_info {
    char host[56];
    int32_t pid;
    int32_t rank;
};

static void print_header(struct ctx *c, int argc, char **argv)
{
    struct rank_info mine = {.pid = (int32_t)getpid(), .rank = c->rank};
    gethostname(mine.host, sizeof(mine.host) - 1);
    struct rank_info *all = calloc((size_t)c->nranks, sizeof(*all));
    if (all == NULL)
        perf_fatal(c, "out of memory");
    CHECK(c, coll_all_gather(&mine, all, sizeof(mine), COLL_UINT8, c->comm, NULL));
    int version = 0;
    CHECK(c, coll_get_version(&version));
    if (c->rank == 0 && !(c->o->json && strcmp(c->o->json, "-") == 0)) {
        printf("# coll-perf:");
        for (int i = 1; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\n# kcoll %s (version code %d, header %d), nranks %d, host %s\n",
               coll_get_version_string(), version, COLL_VERSION, c->nranks, mine.host);
        if (c->agent_socket != NULL)
            printf("# communicator: coll_comm_init_agent; rank, world size (%d), root and pins "
                   "supplied by the kcoll agent at %s (rank 0's)\n",
                   c->nranks, c->agent_socket);
        else
            printf("# communicator: coll_comm_init_rank from COLL_UNIQUE_ID, COLL_RANK, "
                   "COLL_NRANKS\n");
        printf("# minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d check: %d "
               "placement: %s buffers: %s\n",
               c->o->minbytes, c->o->maxbytes,
               c->o->stepbytes ? (double)c->o->stepbytes : c->o->stepfactor,
               c->o->stepbytes ? "bytes" : "factor", c->o->warmup, c->o->iters, c->o->check,
               c->o->do_out && c->o->do_in ? "both" : (c->o->do_out ? "out" : "in"),
               c->o->device       ? "GPU memory (--device cuda)"
               : c->o->registered ? "coll_mem_alloc"
                                  : "malloc");
        for (char **e = environ; *e != NULL; e++) {
            if (strncmp(*e, "COLL_", 5) != 0)
                continue;
            if (strncmp(*e, "COLL_UNIQUE_ID=", 15) == 0)
                printf("# env: COLL_UNIQUE_ID=(set)\n");
            else
                printf("# env: %s\n", *e);
        }
        for (int i = 0; i < c->nranks; i++)
            printf("#  Rank %3d Pid %7d on %s\n", (int)all[i].rank, (int)all[i].pid, all[i].host);
        fflush(stdout);
    }
    free(all);
}

int main(int argc, char **argv)
{
    struct opts o;
    perf_parse_args(argc, argv, &o);

    struct ctx c = {.o = &o, .fatal_rank = -1};
    const char *id_str = getenv(COLL_ENV_UNIQUE_ID);
    const char *agent_sock = getenv("COLL_AGENT_SOCKET");
    if ((id_str == NULL || *id_str == '\0') && agent_sock != NULL && *agent_sock != '\0') {
        /* As in a pod: rank, world size, root endpoint and pins come from the agent. */
        c.agent_socket = agent_sock;
        CHECK(&c, coll_comm_init_agent(&c.comm));
        c.fatal_comm = c.comm;
        CHECK(&c, coll_comm_count(c.comm, &c.nranks));
        CHECK(&c, coll_comm_user_rank(c.comm, &c.rank));
        c.fatal_rank = c.rank;
    } else {
        id_str = need_env(COLL_ENV_UNIQUE_ID);
        if (perf_parse_int(need_env(COLL_ENV_RANK), 0, &c.rank) ||
            perf_parse_int(need_env(COLL_ENV_NRANKS), 1, &c.nranks) || c.rank >= c.nranks) {
            fprintf(stderr,
                    "coll-perf: COLL_RANK=%s / COLL_NRANKS=%s are not a valid rank and size\n",
                    getenv(COLL_ENV_RANK), getenv(COLL_ENV_NRANKS));
            return 2;
        }
        c.fatal_rank = c.rank;
        if (o.root >= c.nranks) {
            fprintf(stderr, "coll-perf: root %d is not a rank of %d\n", o.root, c.nranks);
            return 2;
        }
        coll_unique_id_t id;
        CHECK(&c, coll_unique_id_from_string(&id, id_str));
        CHECK(&c, coll_comm_init_rank(&c.comm, c.nranks, id, c.rank));
        c.fatal_comm = c.comm;
        int n = 0, r = -1;
        CHECK(&c, coll_comm_count(c.comm, &n));
        CHECK(&c, coll_comm_user_rank(c.comm, &r));
        if (n != c.nranks || r != c.rank)
            perf_fatal(&c, "communicator reports rank %d of %d, the environment says %d of %d", r,
                       n, c.rank, c.nranks);
    }
    if (o.root >= c.nranks) /* the agent's world size is known only now; every rank agrees */
        perf_fatal(&c, "root %d is not a rank of %d", o.root, c.nranks);

    size_t alloc = o.maxbytes + 64;
    c.alloc = alloc;
    if (o.device)
        perf_device_open(&c, alloc);
    if (o.registered) {
        void *sb = NULL, *rb = NULL;
        CHECK(&c, coll_mem_alloc(&sb, alloc));
        CHECK(&c, coll_mem_alloc(&rb, alloc));
        c.sbuf = sb;
        c.rbuf = rb;
    } else {
        c.sbuf = malloc(alloc);
        c.rbuf = malloc(alloc);
        if (c.sbuf == NULL || c.rbuf == NULL)
            perf_fatal(&c, "cannot allocate 2 x %zu bytes", alloc);
    }

    FILE *json = NULL;
    int json_first = 1;
    int table = !(o.json && strcmp(o.json, "-") == 0);
    if (c.rank == 0 && o.json != NULL) {
        json = table ? fopen(o.json, "w") : stdout;
        if (json == NULL)
            perf_fatal(&c, "cannot open %s: %s", o.json, strerror(errno));
        char host[64] = "";
        gethostname(host, sizeof(host) - 1);
        fprintf(json, "{\"tool\": \"coll-perf\", \"version\": ");
        perf_json_string(json, coll_get_version_string());
        fprintf(json, ", \"nranks\": %d, \"host\": ", c.nranks);
        perf_json_string(json, host);
        fprintf(json,
                ", \"warmup\": %d, \"iters\": %d, \"check\": %d, \"registered\": %d, "
                "\"rows\": [",
                o.warmup, o.iters, o.check, o.registered);
    }
    print_header(&c, argc, argv);

    int64_t total_wrong = 0;
    double bw_sum = 0;
    int bw_rows = 0;
    for (int k = 0; k < K_NUM; k++) {
        if (!(o.kind_mask & (1 << k)))
            continue;
        if (c.rank == 0 && table)
            perf_print_table_header(perf_kinds[k].name);
        for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
            if (!(o.dt_mask & (1 << dt)))
                continue;
            for (int op = 0; op < COLL_NUM_OPS; op++) {
                if (perf_kinds[k].has_op ? !(o.op_mask & (1 << op)) : op != 0)
                    continue;
                size_t bytes = o.minbytes;
                for (;;) {
                    struct shape s = perf_shape_of(k, bytes, perf_dt_sizes[dt], c.nranks);
                    struct result out = {0}, in = {0};
                    if (o.do_out)
                        perf_measure(&c, k, &s, dt, op, 0, &out);
                    if (o.do_in && perf_kinds[k].inplace_ok)
                        perf_measure(&c, k, &s, dt, op, 1, &in);
                    const char *opname = perf_kinds[k].has_op ? perf_op_names[op] : "none";
                    int root = perf_kinds[k].has_root ? o.root : -1;
                    if (c.rank == 0 && table) {
                        printf("  %10zu %12zu %8s %6s %6d", s.bytes, s.count, perf_dt_names[dt],
                               opname, root);
                        perf_print_result(&out);
                        perf_print_result(&in);
                        printf("\n");
                        fflush(stdout);
                    }
                    if (json != NULL) {
                        perf_json_row(json, &json_first, perf_kinds[k].name, c.nranks, &s,
                                      perf_dt_names[dt], opname, root, "out", &out);
                        perf_json_row(json, &json_first, perf_kinds[k].name, c.nranks, &s,
                                      perf_dt_names[dt], opname, root, "in", &in);
                    }
                    const struct result *rs[2] = {&out, &in};
                    for (int j = 0; j < 2; j++) {
                        if (!rs[j]->done)
                            continue;
                        total_wrong += rs[j]->wrong > 0 ? rs[j]->wrong : 0;
                        bw_sum += rs[j]->busbw;
                        bw_rows++;
                    }
                    if (bytes >= o.maxbytes)
                        break;
                    size_t next =
                        o.stepbytes ? bytes + o.stepbytes : (size_t)((double)bytes * o.stepfactor);
                    bytes = next > bytes ? next : bytes + 1;
                    if (bytes > o.maxbytes)
                        break;
                }
            }
        }
    }

    if (json != NULL) {
        fprintf(json, "\n]}\n");
        if (json != stdout)
            fclose(json);
    }
    if (c.rank == 0 && table) {
        printf("# Out of bounds values : %" PRId64 " %s\n", total_wrong,
               total_wrong ? "FAILED" : (o.check ? "OK" : "(not checked)"));
        printf("# Avg bus bandwidth    : %g\n#\n", bw_rows ? bw_sum / bw_rows : 0.0);
    }
    if (o.registered) {
        CHECK(&c, coll_mem_free(c.sbuf));
        CHECK(&c, coll_mem_free(c.rbuf));
    } else {
        free(c.sbuf);
        free(c.rbuf);
    }
    c.fatal_comm = NULL;
    CHECK(&c, coll_comm_destroy(c.comm));
    perf_device_close(&c);
    return total_wrong > 0 ? 1 : 0;
}
