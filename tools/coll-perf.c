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

/* --json -: the JSON rows take stdout, and the table and the header are left out. */
static int json_to_stdout(const struct opts *o)
{
    return o->json != NULL && strcmp(o->json, "-") == 0;
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
    if (c->rank == 0 && !json_to_stdout(c->o)) {
        printf("# coll-perf:");
        for (int i = 1; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\n# kcoll %s (version code %d, header %d), nranks %d, host %s\n",
               coll_get_version_string(), version, COLL_VERSION, c->nranks, mine.host);
        if (c->agent_socket != NULL)
            printf("# communicator: coll_comm_init_agent; rank, world size (%d), root and pins "
                   "supplied by the kcoll agent at %s (rank 0's)\n",
                   c->nranks, c->agent_socket);
        else if (c->master)
            printf("# communicator: coll_comm_init_env from MASTER_ADDR=%s, MASTER_PORT, RANK, "
                   "WORLD_SIZE (%d)\n",
                   getenv("MASTER_ADDR"), c->nranks);
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
        if (c->o->graph > 0)
            printf("# CUDA graphs: the %d timed calls captured into one graph, launched %d "
                   "times\n",
                   c->o->iters, c->o->graph);
        for (char **e = environ; *e != NULL; e++) {
            if (strncmp(*e, "COLL_", 5) != 0)
                continue;
            if (strncmp(*e, "COLL_UNIQUE_ID=", 15) == 0)
                printf("# env: COLL_UNIQUE_ID=(set)\n");
            else
                printf("# env: %s\n", *e);
        }
        for (int i = 0; i < c->nranks; i++) {
            coll_rank_place_t pl;
            if (coll_comm_rank_place(c->comm, i, &pl) == COLL_SUCCESS && pl.pod[0] != '\0') {
                char gpu[16] = "-";
                if (pl.gpu >= 0)
                    snprintf(gpu, sizeof(gpu), "%d", pl.gpu);
                /* as the agent placed it: pod, local rank of the pod's ranks, GPU */
                printf("#  Rank %3d Pid %7d on %s pod %s local %d/%d node %s gpu %s\n",
                       (int)all[i].rank, (int)all[i].pid, all[i].host, pl.pod, pl.local_rank,
                       pl.local_size, pl.node[0] ? pl.node : "?", gpu);
            } else {
                printf("#  Rank %3d Pid %7d on %s\n", (int)all[i].rank, (int)all[i].pid,
                       all[i].host);
            }
        }
        fflush(stdout);
    }
    free(all);
}

/* As in a pod: rank, world size, root endpoint and pins come from the agent. */
static void open_comm_agent(struct ctx *c, const char *agent_sock)
{
    c->agent_socket = agent_sock;
    CHECK(c, coll_comm_init_agent(&c->comm));
    c->fatal_comm = c->comm;
    CHECK(c, coll_comm_count(c->comm, &c->nranks));
    CHECK(c, coll_comm_user_rank(c->comm, &c->rank));
    c->fatal_rank = c->rank;
}

/* torchrun's variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): coll_comm_init_env. */
static void open_comm_master(struct ctx *c)
{
    c->master = 1;
    CHECK(c, coll_comm_init_env(&c->comm));
    c->fatal_comm = c->comm;
    CHECK(c, coll_comm_count(c->comm, &c->nranks));
    CHECK(c, coll_comm_user_rank(c->comm, &c->rank));
    c->fatal_rank = c->rank;
}

/* From the variables coll-run sets; a wrong one exits 2 (bad usage) before any communicator. */
static void open_comm_env(struct ctx *c)
{
    const char *id_str = need_env(COLL_ENV_UNIQUE_ID);
    if (perf_parse_int(need_env(COLL_ENV_RANK), 0, &c->rank) ||
        perf_parse_int(need_env(COLL_ENV_NRANKS), 1, &c->nranks) || c->rank >= c->nranks) {
        fprintf(stderr, "coll-perf: COLL_RANK=%s / COLL_NRANKS=%s are not a valid rank and size\n",
                getenv(COLL_ENV_RANK), getenv(COLL_ENV_NRANKS));
        exit(2);
    }
    c->fatal_rank = c->rank;
    if (c->o->root >= c->nranks) {
        fprintf(stderr, "coll-perf: root %d is not a rank of %d\n", c->o->root, c->nranks);
        exit(2);
    }
    coll_unique_id_t id;
    CHECK(c, coll_unique_id_from_string(&id, id_str));
    CHECK(c, coll_comm_init_rank(&c->comm, c->nranks, id, c->rank));
    c->fatal_comm = c->comm;
    int n = 0, r = -1;
    CHECK(c, coll_comm_count(c->comm, &n));
    CHECK(c, coll_comm_user_rank(c->comm, &r));
    if (n != c->nranks || r != c->rank)
        perf_fatal(c, "communicator reports rank %d of %d, the environment says %d of %d", r, n,
                   c->rank, c->nranks);
}

static void open_comm(struct ctx *c)
{
    const char *id_str = getenv(COLL_ENV_UNIQUE_ID);
    const char *agent_sock = getenv("COLL_AGENT_SOCKET");
    const char *master = getenv("MASTER_ADDR");
    if ((id_str == NULL || *id_str == '\0') && agent_sock != NULL && *agent_sock != '\0')
        open_comm_agent(c, agent_sock);
    else if ((id_str == NULL || *id_str == '\0') && master != NULL && *master != '\0')
        open_comm_master(c);
    else
        open_comm_env(c);
    if (c->o->root >= c->nranks) /* the agent's world size is known only now; every rank agrees */
        perf_fatal(c, "root %d is not a rank of %d", c->o->root, c->nranks);
}

/* Sized once for the largest size, so that the sweep never allocates. */
static void alloc_buffers(struct ctx *c)
{
    size_t alloc = c->o->maxbytes + 64;
    c->alloc = alloc;
    if (c->o->device)
        perf_device_open(c, alloc);
    if (c->o->registered) {
        void *sb = NULL, *rb = NULL;
        CHECK(c, coll_mem_alloc(&sb, alloc));
        CHECK(c, coll_mem_alloc(&rb, alloc));
        c->sbuf = sb;
        c->rbuf = rb;
    } else {
        c->sbuf = malloc(alloc);
        c->rbuf = malloc(alloc);
        if (c->sbuf == NULL || c->rbuf == NULL)
            perf_fatal(c, "cannot allocate 2 x %zu bytes", alloc);
    }
}

static void free_buffers(struct ctx *c)
{
    if (c->o->registered) {
        CHECK(c, coll_mem_free(c->sbuf));
        CHECK(c, coll_mem_free(c->rbuf));
    } else {
        free(c->sbuf);
        free(c->rbuf);
    }
}

/* Where the rows go, and the totals of the summary; only rank 0 prints. */
struct report {
    int table;  /* rank 0 prints the table */
    FILE *json; /* rank 0 with --json: the file or stdout */
    int json_first;
    int64_t total_wrong;
    double bw_sum;
    int bw_rows;
};

/* One size of one collective, type and op, out of place and in place. */
struct row {
    enum kind k;
    int dt, op;
    struct shape s;
    struct result out, in;
};

/* Rank 0 with --json: the file and the fields before the rows. */
static void open_json(const struct ctx *c, struct report *rep)
{
    if (c->rank != 0 || c->o->json == NULL)
        return;
    rep->json = json_to_stdout(c->o) ? stdout : fopen(c->o->json, "w");
    if (rep->json == NULL)
        perf_fatal(c, "cannot open %s: %s", c->o->json, strerror(errno));
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    fprintf(rep->json, "{\"tool\": \"coll-perf\", \"version\": ");
    perf_json_string(rep->json, coll_get_version_string());
    fprintf(rep->json, ", \"nranks\": %d, \"host\": ", c->nranks);
    perf_json_string(rep->json, host);
    fprintf(rep->json,
            ", \"warmup\": %d, \"iters\": %d, \"check\": %d, \"registered\": %d, "
            "\"rows\": [",
            c->o->warmup, c->o->iters, c->o->check, c->o->registered);
}

static void close_json(struct report *rep)
{
    if (rep->json == NULL)
        return;
    fprintf(rep->json, "\n]}\n");
    if (rep->json != stdout)
        fclose(rep->json);
}

static void measure_row(struct ctx *c, struct row *w)
{
    if (c->o->do_out)
        perf_measure(c, w->k, &w->s, w->dt, w->op, 0, &w->out);
    if (c->o->do_in && perf_kinds[w->k].inplace_ok)
        perf_measure(c, w->k, &w->s, w->dt, w->op, 1, &w->in);
}

static void report_row(const struct ctx *c, struct report *rep, const struct row *w)
{
    const char *opname = perf_kinds[w->k].has_op ? perf_op_names[w->op] : "none";
    int root = perf_kinds[w->k].has_root ? c->o->root : -1;
    if (rep->table) {
        printf("  %10zu %12zu %8s %6s %6d", w->s.bytes, w->s.count, perf_dt_names[w->dt], opname,
               root);
        perf_print_result(&w->out);
        perf_print_result(&w->in);
        printf("\n");
        fflush(stdout);
    }
    if (rep->json != NULL) {
        perf_json_row(rep->json, &rep->json_first, perf_kinds[w->k].name, c->nranks, &w->s,
                      perf_dt_names[w->dt], opname, root, "out", &w->out);
        perf_json_row(rep->json, &rep->json_first, perf_kinds[w->k].name, c->nranks, &w->s,
                      perf_dt_names[w->dt], opname, root, "in", &w->in);
    }
    const struct result *rs[2] = {&w->out, &w->in};
    for (int j = 0; j < 2; j++) {
        if (!rs[j]->done)
            continue;
        rep->total_wrong += rs[j]->wrong > 0 ? rs[j]->wrong : 0;
        rep->bw_sum += rs[j]->busbw;
        rep->bw_rows++;
    }
}

static size_t next_size(const struct opts *o, size_t bytes)
{
    size_t next = o->stepbytes ? bytes + o->stepbytes : (size_t)((double)bytes * o->stepfactor);
    /* A factor that rounds a small size back to itself must still move on. */
    return next > bytes ? next : bytes + 1;
}

/* Every size from -b up to -e (and -e itself when the steps land on it). */
static void sweep_sizes(struct ctx *c, struct report *rep, enum kind k, int dt, int op)
{
    size_t bytes = c->o->minbytes;
    for (;;) {
        struct row w = {.k = k, .dt = dt, .op = op};
        w.s = perf_shape_of(k, bytes, perf_dt_sizes[dt], c->nranks);
        measure_row(c, &w);
        report_row(c, rep, &w);
        if (bytes >= c->o->maxbytes)
            break;
        bytes = next_size(c->o, bytes);
        if (bytes > c->o->maxbytes)
            break;
    }
}

static void sweep(struct ctx *c, struct report *rep)
{
    const struct opts *o = c->o;
    for (int k = 0; k < K_NUM; k++) {
        if (!(o->kind_mask & (1 << k)))
            continue;
        if (k == K_ISENDRECV && o->device) { /* requests take host buffers (coll.h) */
            if (c->rank == 0 && !json_to_stdout(o))
                printf("# isendrecv skipped: coll_isend/coll_irecv take host buffers\n");
            continue;
        }
        if (rep->table)
            perf_print_table_header(perf_kinds[k].name);
        for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
            if (!(o->dt_mask & (1 << dt)))
                continue;
            for (int op = 0; op < COLL_NUM_OPS; op++) {
                /* Collectives without an op run once, not once per op. */
                if (perf_kinds[k].has_op ? !(o->op_mask & (1 << op)) : op != 0)
                    continue;
                sweep_sizes(c, rep, k, dt, op);
            }
        }
    }
}

static void print_summary(const struct ctx *c, const struct report *rep)
{
    if (!rep->table)
        return;
    printf("# Out of bounds values : %" PRId64 " %s\n", rep->total_wrong,
           rep->total_wrong ? "FAILED" : (c->o->check ? "OK" : "(not checked)"));
    printf("# Avg bus bandwidth    : %g\n#\n", rep->bw_rows ? rep->bw_sum / rep->bw_rows : 0.0);
}

int main(int argc, char **argv)
{
    struct opts o;
    perf_parse_args(argc, argv, &o);

    struct ctx c = {.o = &o, .fatal_rank = -1};
    open_comm(&c);
    alloc_buffers(&c);
    struct report rep = {.table = c.rank == 0 && !json_to_stdout(&o), .json_first = 1};
    open_json(&c, &rep);
    print_header(&c, argc, argv);
    sweep(&c, &rep);
    close_json(&rep);
    print_summary(&c, &rep);

    free_buffers(&c);
    c.fatal_comm = NULL;
    CHECK(&c, coll_comm_destroy(c.comm));
    perf_device_close(&c);
    return rep.total_wrong > 0 ? 1 : 0;
}
