/*
 * One measurement (fill, one checked call, warm-up, timed iterations, the slowest rank's time and
 * nccl-tests' bandwidth factors) and the table and JSON output of its result.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>

#include "coll_perf.h"
#include "gpu_plugin.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- one measurement ---- */

struct shape perf_shape_of(enum kind k, size_t bytes, size_t ts, int nranks)
{
    struct shape s;
    size_t count = bytes / ts;
    size_t per = count / (size_t)nranks;
    switch (k) {
    case K_ALL_GATHER:
        s = (struct shape){per, per, per * nranks, per * nranks * ts};
        break;
    case K_REDUCE_SCATTER:
        s = (struct shape){per, per * nranks, per, per * nranks * ts};
        break;
    case K_ALL_TO_ALL:
        s = (struct shape){per, per * nranks, per * nranks, per * nranks * ts};
        break;
    default:
        s = (struct shape){count, count, count, count * ts};
        break;
    }
    return s;
}

static double bus_factor(enum kind k, int n)
{
    switch (k) {
    case K_ALL_REDUCE:
        return 2.0 * (n - 1) / n;
    case K_ALL_GATHER:
    case K_REDUCE_SCATTER:
    case K_ALL_TO_ALL:
        return (double)(n - 1) / n;
    default:
        return 1.0;
    }
}

static void barrier(struct ctx *c)
{
    int32_t x = 1, y = 0;
    CHECK(c, coll_all_reduce(&x, &y, 1, COLL_INT32, COLL_SUM, c->comm, NULL));
    if (y != c->nranks)
        perf_fatal(c, "barrier all_reduce returned %d, expected %d", (int)y, c->nranks);
}

static void run_once(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                     coll_op_t op, const void *send, void *recv)
{
    int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    void *st = c->stream;
    switch (k) {
    case K_ALL_REDUCE:
        CHECK(c, coll_all_reduce(send, recv, s->count, dt, op, c->comm, st));
        break;
    case K_ALL_GATHER:
        CHECK(c, coll_all_gather(send, recv, s->count, dt, c->comm, st));
        break;
    case K_REDUCE_SCATTER:
        CHECK(c, coll_reduce_scatter(send, recv, s->count, dt, op, c->comm, st));
        break;
    case K_BROADCAST:
        CHECK(c, coll_broadcast(send, recv, s->count, dt, c->o->root, c->comm, st));
        break;
    case K_REDUCE:
        CHECK(c, coll_reduce(send, recv, s->count, dt, op, c->o->root, c->comm, st));
        break;
    case K_ALL_TO_ALL:
        CHECK(c, coll_all_to_all(send, recv, s->count, dt, c->comm, st));
        break;
    case K_ISENDRECV: {
        coll_request_t out = NULL, in = NULL;
        CHECK(c, coll_isend(send, s->count, dt, next, 0, c->comm, &out));
        CHECK(c, coll_irecv(recv, s->count, dt, prev, 0, c->comm, &in));
        CHECK(c, coll_wait(in));
        CHECK(c, coll_wait(out));
        coll_request_free(in);
        coll_request_free(out);
        break;
    }
    default:
        CHECK(c, coll_group_start());
        CHECK(c, coll_send(send, s->count, dt, next, c->comm, st));
        CHECK(c, coll_recv(recv, s->count, dt, prev, c->comm, st));
        CHECK(c, coll_group_end());
        break;
    }
}

/* -G: the iters timed calls captured into a CUDA graph on the calls' stream, launched once
 * (the first launch of a graph uploads it); its executable graph. */
static void *captured(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                      coll_op_t op, void *send, void *recv)
{
    const struct colli_gpu_ops *o = c->gpu;
    void *exec = NULL;
    int err = o->capture(c->stream, 1, NULL);
    for (int i = 0; i < c->o->iters && err == 0; i++)
        run_once(c, k, s, dt, op, send, recv);
    if (err == 0)
        err = o->capture(c->stream, 0, &exec);
    if (err == 0)
        err = o->graph_launch(exec, c->stream);
    if (err != 0)
        perf_fatal(c, "-G: capturing the calls into a CUDA graph: %s", o->error_string(err));
    perf_device_sync(c);
    return exec;
}

void perf_measure(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                  coll_op_t op, int inplace, struct result *res)
{
    struct pattern pt;
    void *send, *recv;
    perf_prepare(c, k, s, dt, op, inplace, &pt, &send, &recv);
    const size_t ts = perf_dt_sizes[dt];
    const size_t rbytes = (s->send_elems > s->recv_elems ? s->send_elems : s->recv_elems) * ts;
    perf_device_upload(c, inplace ? 0 : s->send_elems * ts, rbytes);
    void *dsend = perf_device_ptr(c, send), *drecv = perf_device_ptr(c, recv);
    barrier(c);
    int64_t wrong = -1;
    run_once(c, k, s, dt, op, dsend, drecv);
    if (c->o->check) {
        perf_device_download(c, rbytes);
        int64_t mine = perf_verify(c, k, s, dt, &pt, recv);
        CHECK(c, coll_all_reduce(&mine, &wrong, 1, COLL_INT64, COLL_SUM, c->comm, NULL));
    }
    for (int i = 0; i < c->o->warmup; i++)
        run_once(c, k, s, dt, op, dsend, drecv);
    perf_device_sync(c);
    void *exec = c->o->graph > 0 ? captured(c, k, s, dt, op, dsend, drecv) : NULL;
    barrier(c);
    double t0 = now_s();
    for (int i = 0; i < (exec != NULL ? c->o->graph : c->o->iters); i++) {
        const int err = exec != NULL ? c->gpu->graph_launch(exec, c->stream) : 0;
        if (exec == NULL)
            run_once(c, k, s, dt, op, dsend, drecv);
        else if (err != 0)
            perf_fatal(c, "-G: launching the CUDA graph: %s", c->gpu->error_string(err));
    }
    perf_device_sync(c);
    const int calls = c->o->iters * (exec != NULL ? c->o->graph : 1);
    double mine = (now_s() - t0) / (calls > 0 ? calls : 1), worst = 0;
    const int err = exec != NULL ? c->gpu->graph_destroy(exec) : 0;
    if (err != 0)
        perf_fatal(c, "-G: destroying the CUDA graph: %s", c->gpu->error_string(err));
    CHECK(c, coll_all_reduce(&mine, &worst, 1, COLL_FLOAT64, COLL_MAX, c->comm, NULL));
    res->time_us = worst * 1e6;
    res->algbw = worst > 0 ? (double)s->bytes / 1e9 / worst : 0;
    res->busbw = res->algbw * bus_factor(k, c->nranks);
    res->wrong = wrong;
    res->done = 1;
}

/* ---- output ---- */

void perf_print_table_header(const char *coll)
{
    printf("#\n# Collective: %s\n#\n", coll);
    printf("# %10s %12s %8s %6s %6s  %30s  %30s\n", "", "", "", "", "",
           "------------ out-of-place ----", "-------------- in-place ------");
    printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type",
           "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

void perf_print_result(const struct result *r)
{
    if (!r->done) {
        printf(" %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    printf(" %9.2f %7.3f %7.3f", r->time_us, r->algbw, r->busbw);
    if (r->wrong < 0)
        printf(" %6s", "N/A");
    else
        printf(" %6" PRId64, r->wrong);
}

void perf_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

void perf_json_row(FILE *f, int *first, const char *coll, int nranks, const struct shape *s,
                   const char *type, const char *op, int root, const char *placement,
                   const struct result *r)
{
    if (!r->done)
        return;
    fprintf(f,
            "%s\n  {\"collective\": \"%s\", \"nranks\": %d, \"size\": %zu, \"count\": %zu, "
            "\"type\": \"%s\", \"op\": \"%s\", \"root\": %d, \"placement\": \"%s\", "
            "\"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, \"wrong\": ",
            *first ? "" : ",", coll, nranks, s->bytes, s->count, type, op, root, placement,
            r->time_us, r->algbw, r->busbw);
    if (r->wrong < 0)
        fprintf(f, "null}");
    else
        fprintf(f, "%" PRId64 "}", r->wrong);
    *first = 0;
}
