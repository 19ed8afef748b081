/*
 * Bad input: every public call with NULL pointers, out-of-range values and misuse must return
 * the specific error code, leave a message (coll_get_last_error) that names the offending
 * argument or value, never crash, and leave a communicator usable (argument errors are found
 * before any byte moves).
 *
 * Each case runs in its own forked process with a fresh 1-rank communicator, so that a crash in
 * one case does not hide the others; a 2-rank part checks the same on a real communicator.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_ARG   COLL_ERR_INVALID_ARGUMENT
#define E_USAGE COLL_ERR_INVALID_USAGE
#define NONE    ((coll_result_t)-1)

#define BAD_DT ((coll_datatype_t)99)
#define BAD_OP ((coll_op_t)99)

/*
 * rc must be exp1 (or exp2 where the header is ambiguous; NONE otherwise), and the last error
 * must be non-empty and contain one of the NULL-terminated keywords (case-insensitive).
 */
static void expect_v(const char *file, int line, coll_result_t rc, coll_result_t exp1,
                     coll_result_t exp2, const char *what, va_list kw)
{
    const char *msg = coll_get_last_error();
    int code_ok = rc == exp1 || (exp2 != NONE && rc == exp2);
    char kws[256] = "";
    int found = 0;
    size_t len = 0;
    const char *k;
    while ((k = va_arg(kw, const char *)) != NULL) {
        if (mp_contains(msg, k))
            found = 1;
        len += (size_t)snprintf(kws + len, len < sizeof(kws) ? sizeof(kws) - len : 0, "%s\"%s\"",
                                len ? " or " : "", k);
    }
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (!code_ok) {
        mp_fail("%s:%d: %s: expected %s%s%s, got %s (%d); last error: \"%s\"", base, line, what,
                mp_result_name(exp1), exp2 != NONE ? " or " : "",
                exp2 != NONE ? mp_result_name(exp2) : "", mp_result_name(rc), (int)rc,
                msg ? msg : "(NULL)");
        return;
    }
    if (!msg || !*msg) {
        mp_fail("%s:%d: %s: returned %s but coll_get_last_error() is empty", base, line, what,
                mp_result_name(rc));
        return;
    }
    if (!found) {
        mp_fail("%s:%d: %s: returned %s but the message does not mention %s: \"%s\"", base, line,
                what, mp_result_name(rc), kws, msg);
        return;
    }
    mp_pass();
}

static void expect_at(const char *file, int line, coll_result_t rc, coll_result_t exp1,
                      coll_result_t exp2, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    expect_v(file, line, rc, exp1, exp2, what, ap);
    va_end(ap);
}

/* EXPECT(rc, code, "what", "keyword", ...): keywords end with NULL implicitly */
#define EXPECT(rc, code, ...)    expect_at(__FILE__, __LINE__, (rc), (code), NONE, __VA_ARGS__, NULL)
#define EXPECT2(rc, c1, c2, ...) expect_at(__FILE__, __LINE__, (rc), (c1), (c2), __VA_ARGS__, NULL)

static char sbuf[4096], rbuf[4096];
static coll_stream_t const FAKE_STREAM = (coll_stream_t)(uintptr_t)0x1000;

/* ---- cases on a 1-rank communicator (ctx->comm valid) ---- */

static void c_null_comm(mp_ctx_t *ctx)
{
    (void)ctx;
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, NULL, NULL), E_ARG,
           "all_reduce with comm NULL", "comm");
    EXPECT(coll_broadcast(sbuf, rbuf, 4, COLL_FLOAT32, 0, NULL, NULL), E_ARG,
           "broadcast with comm NULL", "comm");
    EXPECT(coll_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, 0, NULL, NULL), E_ARG,
           "reduce with comm NULL", "comm");
    EXPECT(coll_all_gather(sbuf, rbuf, 4, COLL_FLOAT32, NULL, NULL), E_ARG,
           "all_gather with comm NULL", "comm");
    EXPECT(coll_reduce_scatter(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, NULL, NULL), E_ARG,
           "reduce_scatter with comm NULL", "comm");
    EXPECT(coll_all_to_all(sbuf, rbuf, 4, COLL_FLOAT32, NULL, NULL), E_ARG,
           "all_to_all with comm NULL", "comm");
    EXPECT(coll_send(sbuf, 4, COLL_FLOAT32, 0, NULL, NULL), E_ARG, "send with comm NULL", "comm");
    EXPECT(coll_recv(rbuf, 4, COLL_FLOAT32, 0, NULL, NULL), E_ARG, "recv with comm NULL", "comm");
    EXPECT(coll_comm_destroy(NULL), E_ARG, "coll_comm_destroy(NULL)", "comm");
    EXPECT(coll_comm_abort(NULL), E_ARG, "coll_comm_abort(NULL)", "comm");
    int v;
    coll_result_t ae;
    EXPECT(coll_comm_count(NULL, &v), E_ARG, "coll_comm_count(NULL, ...)", "comm");
    EXPECT(coll_comm_user_rank(NULL, &v), E_ARG, "coll_comm_user_rank(NULL, ...)", "comm");
    EXPECT(coll_comm_get_async_error(NULL, &ae), E_ARG, "coll_comm_get_async_error(NULL, ...)",
           "comm");
}

static void c_null_out(mp_ctx_t *ctx)
{
    EXPECT(coll_comm_count(ctx->comm, NULL), E_ARG, "coll_comm_count(comm, NULL)", "count");
    EXPECT(coll_comm_user_rank(ctx->comm, NULL), E_ARG, "coll_comm_user_rank(comm, NULL)", "rank");
    EXPECT(coll_comm_get_async_error(ctx->comm, NULL), E_ARG,
           "coll_comm_get_async_error(comm, NULL)", "async");
    EXPECT(coll_get_version(NULL), E_ARG, "coll_get_version(NULL)", "version");
    EXPECT(coll_get_unique_id(NULL), E_ARG, "coll_get_unique_id(NULL)", "id");
    EXPECT(coll_get_unique_id_ifname(NULL, "lo"), E_ARG, "coll_get_unique_id_ifname(NULL, lo)",
           "id");
    /* coll_mem_alloc / coll_mem_free */
    void *p = sbuf;
    EXPECT(coll_mem_alloc(NULL, 64), E_ARG, "coll_mem_alloc(NULL, 64)", "ptr");
    EXPECT(coll_mem_alloc(&p, 0), E_ARG, "coll_mem_alloc(&p, 0)", "size", "zero");
    CHECK(p == NULL, "a failed coll_mem_alloc leaves *ptr NULL");
    EXPECT(coll_mem_alloc(&p, SIZE_MAX), E_ARG, "coll_mem_alloc(&p, SIZE_MAX)", "too large");
    EXPECT(coll_mem_free(sbuf), E_ARG, "coll_mem_free of a static buffer", "coll_mem_alloc");
    CHECK_RC(coll_mem_free(NULL), COLL_SUCCESS, "coll_mem_free(NULL)");
    CHECK_RC(coll_mem_alloc(&p, 5000), COLL_SUCCESS, "coll_mem_alloc(&p, 5000)");
    if (p != NULL) {
        unsigned char *b = p;
        CHECK(b[0] == 0 && b[4999] == 0 && ((uintptr_t)p & 4095) == 0,
              "coll_mem_alloc memory is zeroed and page aligned");
        b[4999] = 1;
        EXPECT(coll_mem_free(b + 1), E_ARG, "coll_mem_free of an inner pointer", "coll_mem_alloc");
        CHECK_RC(coll_mem_free(p), COLL_SUCCESS, "coll_mem_free(p)");
        EXPECT(coll_mem_free(p), E_ARG, "coll_mem_free twice", "freed already");
    }
}

static void c_null_buffers(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    EXPECT(coll_all_reduce(NULL, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, NULL), E_ARG,
           "all_reduce sendbuf NULL", "sendbuf");
    EXPECT(coll_all_reduce(sbuf, NULL, 4, COLL_FLOAT32, COLL_SUM, c, NULL), E_ARG,
           "all_reduce recvbuf NULL", "recvbuf");
    /* rank 0 is the root: its sendbuf (broadcast) and recvbuf (reduce) are required */
    EXPECT(coll_broadcast(NULL, rbuf, 4, COLL_FLOAT32, 0, c, NULL), E_ARG,
           "broadcast root sendbuf NULL", "sendbuf");
    EXPECT(coll_broadcast(sbuf, NULL, 4, COLL_FLOAT32, 0, c, NULL), E_ARG, "broadcast recvbuf NULL",
           "recvbuf");
    EXPECT(coll_reduce(NULL, rbuf, 4, COLL_FLOAT32, COLL_SUM, 0, c, NULL), E_ARG,
           "reduce sendbuf NULL", "sendbuf");
    EXPECT(coll_reduce(sbuf, NULL, 4, COLL_FLOAT32, COLL_SUM, 0, c, NULL), E_ARG,
           "reduce root recvbuf NULL", "recvbuf");
    EXPECT(coll_all_gather(NULL, rbuf, 4, COLL_FLOAT32, c, NULL), E_ARG, "all_gather sendbuf NULL",
           "sendbuf");
    EXPECT(coll_all_gather(sbuf, NULL, 4, COLL_FLOAT32, c, NULL), E_ARG, "all_gather recvbuf NULL",
           "recvbuf");
    EXPECT(coll_reduce_scatter(NULL, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, NULL), E_ARG,
           "reduce_scatter sendbuf NULL", "sendbuf");
    EXPECT(coll_reduce_scatter(sbuf, NULL, 4, COLL_FLOAT32, COLL_SUM, c, NULL), E_ARG,
           "reduce_scatter recvbuf NULL", "recvbuf");
    EXPECT(coll_all_to_all(NULL, rbuf, 4, COLL_FLOAT32, c, NULL), E_ARG, "all_to_all sendbuf NULL",
           "sendbuf");
    EXPECT(coll_all_to_all(sbuf, NULL, 4, COLL_FLOAT32, c, NULL), E_ARG, "all_to_all recvbuf NULL",
           "recvbuf");
    EXPECT(coll_send(NULL, 4, COLL_FLOAT32, 0, c, NULL), E_ARG, "send sendbuf NULL", "sendbuf",
           "buf");
    EXPECT(coll_recv(NULL, 4, COLL_FLOAT32, 0, c, NULL), E_ARG, "recv recvbuf NULL", "recvbuf",
           "buf");
}

static void c_count_overflow(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    size_t big = SIZE_MAX / 4 + 1; /* big * 4 overflows size_t */
    size_t big8 = SIZE_MAX / 8 + 1;
    EXPECT(coll_all_reduce(sbuf, rbuf, big, COLL_FLOAT32, COLL_SUM, c, NULL), E_ARG,
           "all_reduce count*size overflows", "count", "overflow");
    EXPECT(coll_all_reduce(sbuf, rbuf, SIZE_MAX, COLL_INT64, COLL_SUM, c, NULL), E_ARG,
           "all_reduce count SIZE_MAX", "count", "overflow");
    EXPECT(coll_broadcast(sbuf, rbuf, big8, COLL_FLOAT64, 0, c, NULL), E_ARG,
           "broadcast count*size overflows", "count", "overflow");
    EXPECT(coll_reduce(sbuf, rbuf, big, COLL_UINT32, COLL_MAX, 0, c, NULL), E_ARG,
           "reduce count*size overflows", "count", "overflow");
    EXPECT(coll_all_gather(sbuf, rbuf, big8, COLL_UINT64, c, NULL), E_ARG,
           "all_gather sendcount*size overflows", "count", "overflow");
    EXPECT(coll_reduce_scatter(sbuf, rbuf, SIZE_MAX / 2 + 1, COLL_FLOAT16, COLL_SUM, c, NULL),
           E_ARG, "reduce_scatter recvcount*size overflows", "count", "overflow");
    EXPECT(coll_all_to_all(sbuf, rbuf, big, COLL_INT32, c, NULL), E_ARG,
           "all_to_all count*size overflows", "count", "overflow");
    EXPECT(coll_send(sbuf, big8, COLL_INT64, 0, c, NULL), E_ARG, "send count*size overflows",
           "count", "overflow");
    EXPECT(coll_recv(rbuf, big8, COLL_INT64, 0, c, NULL), E_ARG, "recv count*size overflows",
           "count", "overflow");
}

static void c_bad_datatype(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, BAD_DT, COLL_SUM, c, NULL), E_ARG,
           "all_reduce datatype 99", "datatype", "99");
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, COLL_NUM_DATATYPES, COLL_SUM, c, NULL), E_ARG,
           "all_reduce datatype COLL_NUM_DATATYPES", "datatype", "12");
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, (coll_datatype_t)-1, COLL_SUM, c, NULL), E_ARG,
           "all_reduce datatype -1", "datatype", "-1");
    EXPECT(coll_broadcast(sbuf, rbuf, 4, BAD_DT, 0, c, NULL), E_ARG, "broadcast datatype 99",
           "datatype", "99");
    EXPECT(coll_reduce(sbuf, rbuf, 4, BAD_DT, COLL_SUM, 0, c, NULL), E_ARG, "reduce datatype 99",
           "datatype", "99");
    EXPECT(coll_all_gather(sbuf, rbuf, 4, BAD_DT, c, NULL), E_ARG, "all_gather datatype 99",
           "datatype", "99");
    EXPECT(coll_reduce_scatter(sbuf, rbuf, 4, BAD_DT, COLL_SUM, c, NULL), E_ARG,
           "reduce_scatter datatype 99", "datatype", "99");
    EXPECT(coll_all_to_all(sbuf, rbuf, 4, BAD_DT, c, NULL), E_ARG, "all_to_all datatype 99",
           "datatype", "99");
    EXPECT(coll_send(sbuf, 4, BAD_DT, 0, c, NULL), E_ARG, "send datatype 99", "datatype", "99");
    EXPECT(coll_recv(rbuf, 4, BAD_DT, 0, c, NULL), E_ARG, "recv datatype 99", "datatype", "99");
    /* count 0 does not excuse a bad datatype */
    EXPECT(coll_all_reduce(sbuf, rbuf, 0, BAD_DT, COLL_SUM, c, NULL), E_ARG,
           "all_reduce count 0 datatype 99", "datatype", "99");
}

static void c_bad_op(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, BAD_OP, c, NULL), E_ARG, "all_reduce op 99",
           "99", "operator", "op ", "op=", "op:");
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, COLL_INT32, COLL_NUM_OPS, c, NULL), E_ARG,
           "all_reduce op COLL_NUM_OPS", "5", "operator", "op ", "op=", "op:");
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, COLL_INT32, (coll_op_t)-1, c, NULL), E_ARG,
           "all_reduce op -1", "-1", "operator", "op ", "op=", "op:");
    EXPECT(coll_reduce(sbuf, rbuf, 4, COLL_FLOAT32, BAD_OP, 0, c, NULL), E_ARG, "reduce op 99",
           "99", "operator", "op ", "op=", "op:");
    EXPECT(coll_reduce_scatter(sbuf, rbuf, 4, COLL_FLOAT32, BAD_OP, c, NULL), E_ARG,
           "reduce_scatter op 99", "99", "operator", "op ", "op=", "op:");
    EXPECT(coll_all_reduce(sbuf, rbuf, 0, COLL_FLOAT32, BAD_OP, c, NULL), E_ARG,
           "all_reduce count 0 op 99", "99", "operator", "op ", "op=", "op:");
}

static void c_bad_root_peer(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    EXPECT(coll_broadcast(sbuf, rbuf, 4, COLL_FLOAT32, 1, c, NULL), E_ARG,
           "broadcast root 1 of 1 rank", "root");
    EXPECT(coll_broadcast(sbuf, rbuf, 4, COLL_FLOAT32, -1, c, NULL), E_ARG, "broadcast root -1",
           "root");
    EXPECT(coll_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, 1, c, NULL), E_ARG,
           "reduce root 1 of 1 rank", "root");
    EXPECT(coll_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, -5, c, NULL), E_ARG, "reduce root -5",
           "root");
    EXPECT(coll_send(sbuf, 4, COLL_FLOAT32, 1, c, NULL), E_ARG, "send peer 1 of 1 rank", "peer");
    EXPECT(coll_send(sbuf, 4, COLL_FLOAT32, -1, c, NULL), E_ARG, "send peer -1", "peer");
    EXPECT(coll_recv(rbuf, 4, COLL_FLOAT32, 1, c, NULL), E_ARG, "recv peer 1 of 1 rank", "peer");
    EXPECT(coll_recv(rbuf, 4, COLL_FLOAT32, 1000, c, NULL), E_ARG, "recv peer 1000", "peer");
}

/* The header says "stream must be NULL for host buffers" without naming the code: a non-NULL
 * stream with host buffers is accepted as INVALID_ARGUMENT or INVALID_USAGE. */
static void c_stream_with_host(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    EXPECT2(coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, FAKE_STREAM), E_ARG, E_USAGE,
            "all_reduce host buffers with a stream", "stream");
    EXPECT2(coll_broadcast(sbuf, rbuf, 4, COLL_FLOAT32, 0, c, FAKE_STREAM), E_ARG, E_USAGE,
            "broadcast host buffers with a stream", "stream");
    EXPECT2(coll_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, 0, c, FAKE_STREAM), E_ARG, E_USAGE,
            "reduce host buffers with a stream", "stream");
    EXPECT2(coll_all_gather(sbuf, rbuf, 4, COLL_FLOAT32, c, FAKE_STREAM), E_ARG, E_USAGE,
            "all_gather host buffers with a stream", "stream");
    EXPECT2(coll_reduce_scatter(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, FAKE_STREAM), E_ARG,
            E_USAGE, "reduce_scatter host buffers with a stream", "stream");
    EXPECT2(coll_all_to_all(sbuf, rbuf, 4, COLL_FLOAT32, c, FAKE_STREAM), E_ARG, E_USAGE,
            "all_to_all host buffers with a stream", "stream");
    EXPECT2(coll_send(sbuf, 4, COLL_FLOAT32, 0, c, FAKE_STREAM), E_ARG, E_USAGE,
            "send host buffer with a stream", "stream");
    EXPECT2(coll_recv(rbuf, 4, COLL_FLOAT32, 0, c, FAKE_STREAM), E_ARG, E_USAGE,
            "recv host buffer with a stream", "stream");
}

/* The header says a destroyed handle "is detected, never dereferenced" without naming the code:
 * INVALID_ARGUMENT or INVALID_USAGE are accepted. Under ASan a dereference is reported. */
static void c_use_after_destroy(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    if (!CHECK_RC(coll_comm_destroy(c), COLL_SUCCESS, "coll_comm_destroy"))
        return;
    ctx->comm = NULL;
    int v;
    coll_result_t ae;
    EXPECT2(coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, NULL), E_ARG, E_USAGE,
            "all_reduce on a destroyed communicator", "comm", "destroyed");
    EXPECT2(coll_broadcast(sbuf, rbuf, 4, COLL_FLOAT32, 0, c, NULL), E_ARG, E_USAGE,
            "broadcast on a destroyed communicator", "comm", "destroyed");
    EXPECT2(coll_send(sbuf, 4, COLL_FLOAT32, 0, c, NULL), E_ARG, E_USAGE,
            "send on a destroyed communicator", "comm", "destroyed");
    EXPECT2(coll_comm_count(c, &v), E_ARG, E_USAGE, "coll_comm_count on a destroyed communicator",
            "comm", "destroyed");
    EXPECT2(coll_comm_user_rank(c, &v), E_ARG, E_USAGE,
            "coll_comm_user_rank on a destroyed communicator", "comm", "destroyed");
    EXPECT2(coll_comm_get_async_error(c, &ae), E_ARG, E_USAGE,
            "coll_comm_get_async_error on a destroyed communicator", "comm", "destroyed");
    EXPECT2(coll_comm_destroy(c), E_ARG, E_USAGE, "coll_comm_destroy twice", "comm", "destroyed");
    EXPECT2(coll_comm_abort(c), E_ARG, E_USAGE, "coll_comm_abort after destroy", "comm",
            "destroyed");
    /* a made-up handle naming a slot never used (generation 1, no communicator in it) */
    coll_comm_t forged = (coll_comm_t)(uintptr_t)((1ull << 32) | 15u);
    EXPECT2(coll_comm_destroy(forged), E_ARG, E_USAGE, "coll_comm_destroy of a made-up handle",
            "comm", "destroyed");
    EXPECT2(coll_comm_abort(forged), E_ARG, E_USAGE, "coll_comm_abort of a made-up handle", "comm",
            "destroyed");
}

static void c_use_after_abort(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    if (!CHECK_RC(coll_comm_abort(c), COLL_SUCCESS, "coll_comm_abort"))
        return;
    ctx->comm = NULL;
    int v;
    EXPECT2(coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, NULL), E_ARG, E_USAGE,
            "all_reduce on an aborted (freed) communicator", "comm", "destroyed", "abort");
    EXPECT2(coll_comm_count(c, &v), E_ARG, E_USAGE, "coll_comm_count on an aborted communicator",
            "comm", "destroyed", "abort");
    EXPECT2(coll_comm_destroy(c), E_ARG, E_USAGE, "coll_comm_destroy after abort", "comm",
            "destroyed", "abort");
}

static void c_group_misuse(mp_ctx_t *ctx)
{
    (void)ctx;
    EXPECT(coll_group_end(), E_USAGE, "coll_group_end without coll_group_start", "group");
    /* balanced nesting works, one end too many fails again */
    CHECK_RC(coll_group_start(), COLL_SUCCESS, "coll_group_start");
    CHECK_RC(coll_group_start(), COLL_SUCCESS, "nested coll_group_start");
    CHECK_RC(coll_group_end(), COLL_SUCCESS, "nested coll_group_end");
    CHECK_RC(coll_group_end(), COLL_SUCCESS, "coll_group_end");
    EXPECT(coll_group_end(), E_USAGE, "coll_group_end after the group was closed", "group");
}

/* Invalid arguments inside a group are reported at the call, and fail the group as in NCCL:
 * coll_group_end runs none of its calls and returns the first error again; the next group runs. */
static void c_bad_arg_in_group(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    float s[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8] = {0};
    CHECK_RC(coll_group_start(), COLL_SUCCESS, "coll_group_start");
    CHECK_RC(coll_send(s, 8, COLL_FLOAT32, 0, c, NULL), COLL_SUCCESS, "self send in a group");
    EXPECT(coll_send(s, 8, BAD_DT, 0, c, NULL), E_ARG, "send datatype 99 inside a group",
           "datatype", "99");
    EXPECT(coll_send(s, 8, COLL_FLOAT32, 3, c, NULL), E_ARG, "send peer 3 inside a group", "peer");
    CHECK_RC(coll_recv(r, 8, COLL_FLOAT32, 0, c, NULL), COLL_SUCCESS, "self recv in a group");
    EXPECT(coll_group_end(), E_ARG, "coll_group_end after rejected calls",
           "nothing in this group ran (2 calls", "datatype 99");
    const float zero[8] = {0};
    CHECK(memcmp(r, zero, sizeof(r)) == 0, "a call of a failed group ran");
    CHECK_RC(coll_group_start(), COLL_SUCCESS, "the next coll_group_start");
    CHECK_RC(coll_send(s, 8, COLL_FLOAT32, 0, c, NULL), COLL_SUCCESS, "self send, next group");
    CHECK_RC(coll_recv(r, 8, COLL_FLOAT32, 0, c, NULL), COLL_SUCCESS, "self recv, next group");
    if (CHECK_RC(coll_group_end(), COLL_SUCCESS, "the next coll_group_end"))
        CHECK(memcmp(s, r, sizeof(s)) == 0, "self send/recv inside a group delivered wrong data");
}

/* coll_comm_set_timeout: 0 (none) to a year; a bad value or communicator is refused by name. */
static void c_set_timeout(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    EXPECT(coll_comm_set_timeout(c, -1), E_ARG, "a negative deadline", "-1 seconds");
    EXPECT(coll_comm_set_timeout(c, 1e12), E_ARG, "a deadline beyond a year", "up to a year");
    EXPECT(coll_comm_set_timeout(NULL, 5), E_ARG, "no communicator", "NULL");
    CHECK_RC(coll_comm_set_timeout(c, 0), COLL_SUCCESS, "no deadline");
    CHECK_RC(coll_comm_set_timeout(c, 30), COLL_SUCCESS, "30 s");
    CHECK_RC(coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, NULL), COLL_SUCCESS,
             "an all_reduce after");
}

/* Argument errors must not poison the communicator: the next valid call works. */
static void c_comm_usable_after_errors(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    (void)coll_all_reduce(sbuf, rbuf, 4, BAD_DT, COLL_SUM, c, NULL);
    (void)coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, BAD_OP, c, NULL);
    (void)coll_broadcast(sbuf, rbuf, 4, COLL_FLOAT32, 7, c, NULL);
    (void)coll_all_reduce(sbuf, rbuf, SIZE_MAX, COLL_FLOAT32, COLL_SUM, c, NULL);
    (void)coll_send(sbuf, 4, COLL_FLOAT32, 5, c, NULL);
    coll_result_t ae = COLL_ERR_INTERNAL;
    CHECK_RC(coll_comm_get_async_error(c, &ae), COLL_SUCCESS, "coll_comm_get_async_error");
    CHECK(ae == COLL_SUCCESS, "argument errors set the async error to %s", mp_result_name(ae));
    int32_t s[5] = {1, -2, 3, -4, 5}, r[5] = {0};
    if (CHECK_RC(coll_all_reduce(s, r, 5, COLL_INT32, COLL_SUM, c, NULL), COLL_SUCCESS,
                 "valid all_reduce after argument errors"))
        CHECK(memcmp(s, r, sizeof(s)) == 0, "1-rank all_reduce after argument errors: wrong data");
}

static void *thread_last_error(void *arg)
{
    const char **out = arg;
    *out = coll_get_last_error();
    return NULL;
}

/* Per-thread last error: empty in a thread where no call failed; a success keeps it readable. */
static void c_last_error_per_thread(mp_ctx_t *ctx)
{
    pthread_t t;
    const char *msg = "unset";
    (void)ctx;
    /* a fresh thread, before any failure on it */
    if (pthread_create(&t, NULL, thread_last_error, &msg) == 0) {
        pthread_join(t, NULL);
        CHECK(msg && msg[0] == '\0', "coll_get_last_error in a fresh thread: \"%s\"",
              msg ? msg : "(NULL)");
    }
    (void)coll_all_reduce(sbuf, rbuf, 4, BAD_DT, COLL_SUM, ctx->comm, NULL);
    const char *mine = coll_get_last_error();
    CHECK(mine && *mine, "coll_get_last_error after a failure is empty");
    msg = "unset";
    if (pthread_create(&t, NULL, thread_last_error, &msg) == 0) {
        pthread_join(t, NULL);
        CHECK(msg && msg[0] == '\0',
              "another thread sees this thread's last error (must be per thread): \"%s\"",
              msg ? msg : "(NULL)");
    }
}

/* ---- init (manual_init: ctx->comm is NULL, ctx->id is a real id) ---- */

static void c_init_bad(mp_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    EXPECT(coll_comm_init_rank(NULL, 1, ctx->id, 0), E_ARG, "coll_comm_init_rank(comm NULL)",
           "comm");
    EXPECT(coll_comm_init_rank(&comm, 0, ctx->id, 0), E_ARG, "coll_comm_init_rank nranks 0",
           "nranks");
    EXPECT(coll_comm_init_rank(&comm, -3, ctx->id, 0), E_ARG, "coll_comm_init_rank nranks -3",
           "nranks");
    EXPECT(coll_comm_init_rank(&comm, 1, ctx->id, 1), E_ARG,
           "coll_comm_init_rank rank 1 >= nranks 1", "rank");
    EXPECT(coll_comm_init_rank(&comm, 4, ctx->id, 4), E_ARG,
           "coll_comm_init_rank rank 4 >= nranks 4", "rank");
    EXPECT(coll_comm_init_rank(&comm, 4, ctx->id, -1), E_ARG, "coll_comm_init_rank rank -1",
           "rank");
    EXPECT(coll_comm_init_rank_timeout(&comm, 1, ctx->id, 0, -1.0), E_ARG,
           "coll_comm_init_rank_timeout(-1 s)", "seconds");
    EXPECT(coll_comm_init_rank_timeout(&comm, 1, ctx->id, 0, NAN), E_ARG,
           "coll_comm_init_rank_timeout(NaN s)", "seconds");
    EXPECT(coll_comm_init_agent_timeout(&comm, -2.0), E_ARG, "coll_comm_init_agent_timeout(-2 s)",
           "seconds");
    EXPECT(coll_comm_init_agent_timeout(&comm, NAN), E_ARG, "coll_comm_init_agent_timeout(NaN s)",
           "seconds");
    coll_unique_id_t unused;
    EXPECT(coll_get_unique_id_timeout(NULL, 1.0), E_ARG, "coll_get_unique_id_timeout(NULL)", "id");
    EXPECT(coll_get_unique_id_timeout(&unused, -0.5), E_ARG, "coll_get_unique_id_timeout(-0.5 s)",
           "seconds");
    CHECK(comm == NULL, "coll_comm_init_rank wrote its output on failure");
    /* the id is untouched by the rejected calls: a valid init still works (bounded, with a
     * bound it does not reach) */
    if (CHECK_RC(coll_comm_init_rank_timeout(&comm, 1, ctx->id, 0, 30.0), COLL_SUCCESS,
                 "valid coll_comm_init_rank_timeout after rejected ones"))
        ctx->comm = comm;
}

/* A creation bounded by the caller (1 s, COLL_BOOTSTRAP_TIMEOUT being 5 s here) whose rank 1
 * never comes: COLL_ERR_TIMEOUT after the caller's bound, naming rank 1 and the limit. */
static void c_init_bound(mp_ctx_t *ctx)
{
    coll_unique_id_t id;
    if (!CHECK_RC(coll_get_unique_id_timeout(&id, 1.0), COLL_SUCCESS,
                  "coll_get_unique_id_timeout(1 s)"))
        return;
    coll_comm_t comm = NULL;
    double t0 = mp_now();
    coll_result_t rc = coll_comm_init_rank_timeout(&comm, 2, id, 0, 1.0);
    double dt = mp_now() - t0;
    EXPECT(rc, COLL_ERR_TIMEOUT, "a 1 s creation whose rank 1 never comes", "missing: rank 1");
    CHECK(strstr(coll_get_last_error(), "the limit, 1 s") != NULL,
          "the message gives the caller's limit: %s", coll_get_last_error());
    CHECK(dt >= 0.9 && dt < 4.0, "the bounded creation failed after %.2f s (bound 1 s)", dt);
    CHECK(comm == NULL, "a failed creation left *comm NULL");
}

/* An id that no coll_get_unique_id produced (all zero): rejected (the header does not say with
 * which code; any error within the deadline is accepted, with a message). */
static void c_init_zero_id(mp_ctx_t *ctx)
{
    coll_unique_id_t zero;
    memset(&zero, 0, sizeof(zero));
    coll_comm_t comm = NULL;
    double t0 = mp_now();
    coll_result_t rc = coll_comm_init_rank(&comm, 1, zero, 0);
    double dt = mp_now() - t0;
    const char *msg = coll_get_last_error();
    CHECK(rc != COLL_SUCCESS, "coll_comm_init_rank with an all-zero unique id succeeded");
    CHECK(msg && *msg, "all-zero unique id: %s with an empty last error", mp_result_name(rc));
    mp_log("all-zero unique id: %s after %.2f s: \"%s\"", mp_result_name(rc), dt, msg);
    if (rc == COLL_SUCCESS)
        ctx->comm = comm;
}

/* ---- unique id strings ---- */

static void c_unique_id_strings(mp_ctx_t *ctx)
{
    char s[COLL_UNIQUE_ID_STRLEN], s2[COLL_UNIQUE_ID_STRLEN];
    coll_unique_id_t id, back;
    id = ctx->id;
    if (!CHECK_RC(coll_unique_id_to_string(&id, s, sizeof(s)), COLL_SUCCESS,
                  "coll_unique_id_to_string"))
        return;
    CHECK(strncmp(s, "kcoll1:", 7) == 0, "printable id \"%s\" does not start with kcoll1:", s);
    CHECK(strlen(s) < COLL_UNIQUE_ID_STRLEN, "printable id too long");
    if (CHECK_RC(coll_unique_id_from_string(&back, s), COLL_SUCCESS,
                 "coll_unique_id_from_string(valid \"%s\")", s) &&
        CHECK_RC(coll_unique_id_to_string(&back, s2, sizeof(s2)), COLL_SUCCESS,
                 "coll_unique_id_to_string(parsed)"))
        CHECK(strcmp(s, s2) == 0, "round trip changed the id: \"%s\" -> \"%s\"", s, s2);

    const char *kw[] = {"unique id", "unique_id", "kcoll1", "id string", "str"};
#define EXPECT_PARSE(str, what)                                                                    \
    EXPECT(coll_unique_id_from_string(&back, (str)), E_ARG, what, kw[0], kw[1], kw[2], kw[3], kw[4])
    EXPECT_PARSE("garbage", "from_string(\"garbage\")");
    EXPECT_PARSE("", "from_string(\"\")");
    EXPECT_PARSE("kcoll1:", "from_string(\"kcoll1:\")");
    EXPECT_PARSE("kcoll1:127.0.0.1", "from_string(\"kcoll1:127.0.0.1\")");
    EXPECT_PARSE("kcoll1:127.0.0.1:notaport:00", "from_string(port not a number)");
    EXPECT_PARSE("kcoll1:127.0.0.1:99999:0011", "from_string(port 99999)");
    EXPECT_PARSE("kcoll9:127.0.0.1:1234:0011", "from_string(unknown version prefix kcoll9)");
    /* truncated: the valid string cut in the middle of the secret */
    char trunc[COLL_UNIQUE_ID_STRLEN];
    size_t half = strlen(s) - 5;
    memcpy(trunc, s, half);
    trunc[half] = '\0';
    EXPECT_PARSE(trunc, "from_string(truncated secret)");
    /* a non-hex character in the secret */
    char nonhex[COLL_UNIQUE_ID_STRLEN];
    strcpy(nonhex, s);
    nonhex[strlen(nonhex) - 1] = 'g';
    EXPECT_PARSE(nonhex, "from_string(secret with a non-hex digit)");
    /* overlong: longer than COLL_UNIQUE_ID_STRLEN */
    char longs[400];
    snprintf(longs, sizeof(longs), "%s", s);
    size_t l = strlen(longs);
    while (l < sizeof(longs) - 1)
        longs[l++] = 'a';
    longs[l] = '\0';
    EXPECT_PARSE(longs, "from_string(overlong, 399 characters)");
    /* trailing junk after a valid id */
    char junk[COLL_UNIQUE_ID_STRLEN + 8];
    snprintf(junk, sizeof(junk), "%s:x", s);
    EXPECT_PARSE(junk, "from_string(valid id + \":x\")");
    EXPECT(coll_unique_id_from_string(&back, NULL), E_ARG, "from_string(NULL)", "str", "NULL",
           "string");
    EXPECT(coll_unique_id_from_string(NULL, s), E_ARG, "from_string(id NULL)", "id");
    EXPECT(coll_unique_id_to_string(NULL, s2, sizeof(s2)), E_ARG, "to_string(id NULL)", "id");
    EXPECT(coll_unique_id_to_string(&id, NULL, sizeof(s2)), E_ARG, "to_string(buf NULL)", "buf");
    EXPECT(coll_unique_id_to_string(&id, s2, 8), E_ARG, "to_string(len 8)", "len", "buf", "small",
           "short");
    EXPECT(coll_unique_id_to_string(&id, s2, 0), E_ARG, "to_string(len 0)", "len", "buf", "small",
           "short");
    /* exactly strlen(s)+1 is enough */
    CHECK_RC(coll_unique_id_to_string(&id, s2, strlen(s) + 1), COLL_SUCCESS,
             "to_string with len = strlen + 1");
#undef EXPECT_PARSE
}

/* ---- static descriptions ---- */

static void c_strings(mp_ctx_t *ctx)
{
    (void)ctx;
#define STR_(name, val, str)                                                                       \
    {                                                                                              \
        const char *got = coll_get_error_string(COLL_##name);                                      \
        CHECK(got &&strcmp(got, str) == 0, "coll_get_error_string(%s) = \"%s\", expected \"%s\"",  \
              "COLL_" #name, got ? got : "(NULL)", str);                                           \
    }
    COLL_RESULT_MAP(STR_)
#undef STR_
    const coll_result_t bad[] = {COLL_NUM_RESULTS, (coll_result_t)-1, (coll_result_t)1000};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *got = coll_get_error_string(bad[i]);
        CHECK(got && strcmp(got, "unknown result") == 0,
              "coll_get_error_string(%d) = \"%s\", expected \"unknown result\"", (int)bad[i],
              got ? got : "(NULL)");
    }
    static const char *const dtn[] = {"int8",    "uint8",   "int32",       "uint32",
                                      "int64",   "uint64",  "float16",     "bfloat16",
                                      "float32", "float64", "float8_e4m3", "float8_e5m2"};
    static const size_t dts[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};
    for (int d = 0; d < COLL_NUM_DATATYPES; d++) {
        const char *got = coll_datatype_name((coll_datatype_t)d);
        CHECK(got && strcmp(got, dtn[d]) == 0, "coll_datatype_name(%d) = \"%s\", expected \"%s\"",
              d, got ? got : "(NULL)", dtn[d]);
        CHECK(coll_datatype_size((coll_datatype_t)d) == dts[d],
              "coll_datatype_size(%s) = %zu, expected %zu", dtn[d],
              coll_datatype_size((coll_datatype_t)d), dts[d]);
    }
    const int bad_dt[] = {COLL_NUM_DATATYPES, 99, -1};
    for (size_t i = 0; i < 3; i++) {
        const char *got = coll_datatype_name((coll_datatype_t)bad_dt[i]);
        CHECK(got && strcmp(got, "invalid") == 0, "coll_datatype_name(%d) = \"%s\"", bad_dt[i],
              got ? got : "(NULL)");
        CHECK(coll_datatype_size((coll_datatype_t)bad_dt[i]) == 0, "coll_datatype_size(%d) = %zu",
              bad_dt[i], coll_datatype_size((coll_datatype_t)bad_dt[i]));
    }
    static const char *const opn[] = {"sum", "prod", "min", "max", "avg"};
    for (int o = 0; o < COLL_NUM_OPS; o++) {
        const char *got = coll_op_name((coll_op_t)o);
        CHECK(got && strcmp(got, opn[o]) == 0, "coll_op_name(%d) = \"%s\", expected \"%s\"", o,
              got ? got : "(NULL)", opn[o]);
    }
    const int bad_op[] = {COLL_NUM_OPS, 99, -1};
    for (size_t i = 0; i < 3; i++) {
        const char *got = coll_op_name((coll_op_t)bad_op[i]);
        CHECK(got && strcmp(got, "invalid") == 0, "coll_op_name(%d) = \"%s\"", bad_op[i],
              got ? got : "(NULL)");
    }
    int v = -1;
    CHECK_RC(coll_get_version(&v), COLL_SUCCESS, "coll_get_version");
    CHECK(v == COLL_VERSION, "coll_get_version = %d, header says %d", v, COLL_VERSION);
    const char *vs = coll_get_version_string();
    int a, b, c;
    CHECK(vs && sscanf(vs, "%d.%d.%d", &a, &b, &c) == 3, "coll_get_version_string = \"%s\"",
          vs ? vs : "(NULL)");
}

/* ---- 2 ranks: argument errors are local (no hang) and do not break the communicator ---- */

static void c_two_ranks(mp_ctx_t *ctx)
{
    coll_comm_t c = ctx->comm;
    int other = 1 - ctx->rank;
    (void)other;
    double t0 = mp_now();
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, BAD_DT, COLL_SUM, c, NULL), E_ARG,
           "2 ranks: all_reduce datatype 99", "datatype", "99");
    EXPECT(coll_all_reduce(sbuf, rbuf, 4, COLL_INT8, BAD_OP, c, NULL), E_ARG,
           "2 ranks: all_reduce op 99", "99", "operator", "op ", "op=", "op:");
    EXPECT(coll_broadcast(sbuf, rbuf, 4, COLL_FLOAT32, 2, c, NULL), E_ARG,
           "2 ranks: broadcast root 2", "root");
    EXPECT(coll_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, -1, c, NULL), E_ARG,
           "2 ranks: reduce root -1", "root");
    EXPECT(coll_send(sbuf, 4, COLL_FLOAT32, 2, c, NULL), E_ARG, "2 ranks: send peer 2", "peer");
    EXPECT(coll_recv(rbuf, 4, COLL_FLOAT32, -1, c, NULL), E_ARG, "2 ranks: recv peer -1", "peer");
    /* sendcount*size fits, times nranks does not */
    EXPECT(coll_all_gather(sbuf, rbuf, SIZE_MAX / 2 + 1, COLL_INT8, c, NULL), E_ARG,
           "2 ranks: all_gather nranks*sendcount overflows", "count", "overflow");
    EXPECT(coll_reduce_scatter(sbuf, rbuf, SIZE_MAX / 2 + 1, COLL_UINT8, COLL_SUM, c, NULL), E_ARG,
           "2 ranks: reduce_scatter nranks*recvcount overflows", "count", "overflow");
    EXPECT(coll_all_to_all(sbuf, rbuf, SIZE_MAX / 2 + 1, COLL_INT8, c, NULL), E_ARG,
           "2 ranks: all_to_all nranks*count overflows", "count", "overflow");
    EXPECT2(coll_all_reduce(sbuf, rbuf, 4, COLL_FLOAT32, COLL_SUM, c, FAKE_STREAM), E_ARG, E_USAGE,
            "2 ranks: all_reduce host buffers with a stream", "stream");
    double dt = mp_now() - t0;
    CHECK(dt < 2.0, "argument checks took %.1f s (must be local, no communication)", dt);
    coll_result_t ae = COLL_ERR_INTERNAL;
    CHECK_RC(coll_comm_get_async_error(c, &ae), COLL_SUCCESS, "coll_comm_get_async_error");
    CHECK(ae == COLL_SUCCESS, "2 ranks: argument errors set the async error to %s",
          mp_result_name(ae));
    int64_t s[3] = {ctx->rank + 1, 10 * (ctx->rank + 1), -1}, r[3] = {0};
    if (CHECK_RC(coll_all_reduce(s, r, 3, COLL_INT64, COLL_SUM, c, NULL), COLL_SUCCESS,
                 "2 ranks: valid all_reduce after argument errors"))
        CHECK(r[0] == 3 && r[1] == 30 && r[2] == -2,
              "2 ranks: all_reduce after argument errors gave %lld %lld %lld", (long long)r[0],
              (long long)r[1], (long long)r[2]);
}

typedef struct bcase {
    const char *name;
    void (*fn)(mp_ctx_t *);
    int manual_init;
    int nranks;
    int no_id;
} bcase_t;

/* The case whose unique id is never used (its root thread lingers until
 * COLL_BOOTSTRAP_TIMEOUT) runs last, so that no later fork happens beside a live root thread. */
static const bcase_t cases[] = {
    {"null_comm", c_null_comm, 0, 1, 0},
    {"null_out_params", c_null_out, 0, 1, 0},
    {"null_buffers", c_null_buffers, 0, 1, 0},
    {"count_overflow", c_count_overflow, 0, 1, 0},
    {"bad_datatype", c_bad_datatype, 0, 1, 0},
    {"bad_op", c_bad_op, 0, 1, 0},
    {"bad_root_peer", c_bad_root_peer, 0, 1, 0},
    {"stream_with_host_buffers", c_stream_with_host, 0, 1, 0},
    {"use_after_destroy", c_use_after_destroy, 0, 1, 0},
    {"use_after_abort", c_use_after_abort, 0, 1, 0},
    {"group_misuse", c_group_misuse, 0, 1, 0},
    {"bad_arg_in_group", c_bad_arg_in_group, 0, 1, 0},
    {"set_timeout", c_set_timeout, 0, 1, 0},
    {"comm_usable_after_errors", c_comm_usable_after_errors, 0, 1, 0},
    {"last_error_per_thread", c_last_error_per_thread, 0, 1, 0},
    {"init_bad_args", c_init_bad, 1, 1, 0},
    {"init_zero_id", c_init_zero_id, 1, 1, 1},
    {"strings", c_strings, 1, 1, 1},
    {"init_bound", c_init_bound, 1, 1, 1},
    {"two_ranks", c_two_ranks, 0, 2, 0},
    {"unique_id_strings", c_unique_id_strings, 1, 1, 0},
};

int main(int argc, char **argv)
{
    mp_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (only && strcmp(only, cases[i].name) != 0)
            continue;
        long f0 = mp_failed, p0 = mp_passed;
        mp_opts_t o;
        memset(&o, 0, sizeof(o));
        o.name = cases[i].name;
        o.nranks = cases[i].nranks;
        o.deadline_s = 30;
        o.manual_init = cases[i].manual_init;
        o.no_id = cases[i].no_id;
        o.expect_sigkill_rank = -1;
        o.body = cases[i].fn;
        mp_run(&o);
        printf("%-28s %s (%ld checks passed, %ld failed)\n", cases[i].name,
               mp_failed == f0 ? "ok" : "FAILED", mp_passed - p0, mp_failed - f0);
    }
    return mp_finish();
}
