/*
 * Mismatched collectives: at the same point of the program, ranks call collectives that differ
 * in kind, count, datatype, op or root, or a send and a recv that differ in count, datatype or
 * tag (coll_send_tagged: the messages between two ranks are matched in issue order, and a tag
 * that differs is a mismatch, not a reason to take another message).
 * (A call of count 0 does nothing, as in NCCL, so one rank's extra zero-count call is no
 * mismatch.) Every frame carries the caller's fingerprint, so the receiver reports
 * COLL_ERR_MISMATCH describing both sides, and its abort notice makes every other rank fail with
 * COLL_ERR_REMOTE carrying that text -- within seconds, not at COLL_TIMEOUT (20 s here).
 *
 * A rank that only sends (a broadcast root, a coll_send) hands its data to the network and
 * returns before anyone has looked at it; it learns of the mismatch at its next call, which
 * must then fail with the mismatch text. Each rank therefore makes the call under test and,
 * when that succeeds, one follow-up all_reduce.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dh.h"

enum { K_NONE, K_ALL_REDUCE, K_ALL_GATHER, K_BROADCAST, K_SEND, K_RECV };

typedef struct call {
    int kind;
    size_t count;
    coll_datatype_t dt;
    coll_op_t op;
    int root_or_peer;
    int tag; /* send/recv: coll_send_tagged/coll_recv_tagged when not 0 */
} call_t;

typedef struct mcase {
    const char *name;
    int n;
    call_t c[4];
    /* the descriptions the library must print for each rank's call ("" = not checked) */
    const char *desc[4];
    int late_ok[4]; /* this rank may complete the call and fail only at its follow-up */
} mcase_t;

#define FOLLOW(r) (DH_MAX_RANKS / 2 + (r)) /* record slot of rank r's follow-up call */
#define DONE_CTR  0                        /* user[] counter of ranks done with their calls */

static coll_result_t do_call(const call_t *c, dh_ctx_t *ctx, coll_comm_t comm, void *s, void *r)
{
    switch (c->kind) {
    case K_ALL_REDUCE:
        return coll_all_reduce(s, r, c->count, c->dt, c->op, comm, NULL);
    case K_ALL_GATHER:
        return coll_all_gather(s, r, c->count, c->dt, comm, NULL);
    case K_BROADCAST:
        return coll_broadcast(s, r, c->count, c->dt, c->root_or_peer, comm, NULL);
    case K_SEND:
        if (c->tag != 0)
            return coll_send_tagged(s, c->count, c->dt, c->root_or_peer, c->tag, comm, NULL);
        return coll_send(s, c->count, c->dt, c->root_or_peer, comm, NULL);
    case K_RECV:
        if (c->tag != 0)
            return coll_recv_tagged(r, c->count, c->dt, c->root_or_peer, c->tag, comm, NULL);
        return coll_recv(r, c->count, c->dt, c->root_or_peer, comm, NULL);
    default:
        return COLL_SUCCESS;
    }
}

static void body(dh_ctx_t *ctx)
{
    const mcase_t *m = ctx->arg;
    const call_t *c = &m->c[ctx->rank];
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    size_t bytes = (c->count + 16) * 8 * (size_t)ctx->nranks;
    char *s = calloc(1, bytes), *r = calloc(1, bytes);
    dh_begin(ctx, ctx->rank);
    rc = do_call(c, ctx, comm, s, r);
    dh_record(ctx, "call under test", rc);
    if (rc == COLL_SUCCESS) {
        int32_t one = 1, sum = 0;
        dh_begin(ctx, FOLLOW(ctx->rank));
        rc = coll_all_reduce(&one, &sum, 1, COLL_INT32, COLL_SUM, comm, NULL);
        dh_record_slot(ctx, FOLLOW(ctx->rank), "follow-up all_reduce", rc);
    }
    /* stay until every rank made its calls, so that no error is caused by an early exit */
    dh_add(&ctx->sh->user[DONE_CTR], 1);
    double end = dh_now() + 30;
    while (dh_load(&ctx->sh->user[DONE_CTR]) < ctx->nranks && dh_now() < end)
        dh_sleep(0.01);
    if (rc == COLL_SUCCESS)
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    else
        CHECK_RC(coll_comm_abort(comm), COLL_SUCCESS, coll_get_last_error(), "abort");
    free(s);
    free(r);
}

/* The error a rank saw for a mismatch: its own detection, or a peer's, carried by an abort
 * notice. Returns 1 when the message has the expected shape. */
static void check_error(const mcase_t *m, dh_job_t *j, int r, const dh_out_t *o, const char *when)
{
    const char *msg = o->msg;
    int p2p = m->c[r].kind == K_SEND || m->c[r].kind == K_RECV;
    const char *head = p2p ? "send/recv mismatch: rank " : "collective mismatch: rank ";
    char want[256];
    if (p2p && m->c[0].tag != m->c[1].tag)
        CHECK_HAS(msg, "a tag checks the match but does not choose the message",
                  "rank %d (%s): says how tags are matched", r, when);
    if (o->rc == COLL_ERR_MISMATCH) {
        snprintf(want, sizeof(want), "%s%d ", head, r);
        CHECK(strncmp(msg, want, strlen(want)) == 0,
              "rank %d (%s): MISMATCH message starts with "
              "\"%s\": \"%s\"",
              r, when, want, msg);
    } else if (o->rc == COLL_ERR_REMOTE) {
        /* "rank P (pid N on host, addr) reported: <the mismatch text>" */
        int from = -1;
        for (int p = 0; p < m->n; p++) {
            snprintf(want, sizeof(want), "rank %d (pid %d on ", p, (int)dh_pid(j, p));
            if (strncmp(msg, want, strlen(want)) == 0)
                from = p;
        }
        CHECK(from >= 0 && from != r,
              "rank %d (%s): REMOTE message starts with the reporting "
              "rank and its pid: \"%s\"",
              r, when, msg);
        CHECK_HAS(msg, ") reported: ", "rank %d (%s)", r, when);
        CHECK_HAS(msg, head, "rank %d (%s): carries the mismatch text", r, when);
    } else {
        dh_fail("%s: rank %d (%s): expected COLL_ERR_MISMATCH or COLL_ERR_REMOTE, got %s: \"%s\"",
                m->name, r, when, dh_rc_name(o->rc), msg);
        return;
    }
    for (int p = 0; p < m->n; p++)
        if (m->desc[p] && m->desc[p][0])
            CHECK_HAS(msg, m->desc[p], "rank %d (%s): describes rank %d's call", r, when, p);
    CHECK(o->t - o->t0 < 5.0,
          "rank %d (%s): failed %.1f s after the call (want < 5 s; "
          "COLL_TIMEOUT is 20)",
          r, when, o->t - o->t0);
}

static void run_case(const mcase_t *m)
{
    dh_log("--- %s", m->name);
    dh_opts_t o = {
        .name = m->name, .nranks = m->n, .deadline_s = 40, .body = body, .arg = (void *)m};
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    int detected = 0;
    for (int r = 0; r < m->n; r++) {
        const dh_out_t *o1 = &dh_shared(j)->out[r], *o2 = &dh_shared(j)->out[FOLLOW(r)];
        dh_log("rank %d: call under test: %s%s%s", r, dh_rc_name(o1->rc),
               o1->rc == COLL_SUCCESS ? "; follow-up: " : "",
               o1->rc == COLL_SUCCESS ? dh_rc_name(o2->rc) : "");
        detected += o1->rc == COLL_ERR_MISMATCH;
        if (o1->rc != COLL_SUCCESS) {
            check_error(m, j, r, o1, "call under test");
            continue;
        }
        CHECK(m->late_ok[r], "rank %d: the mismatched call succeeded", r);
        if (CHECK(o2->done && o2->rc != COLL_SUCCESS,
                  "rank %d: the follow-up all_reduce after a mismatched call succeeded", r))
            check_error(m, j, r, o2, "follow-up");
    }
    CHECK(detected > 0 || m->late_ok[0] || m->late_ok[1],
          "no rank returned COLL_ERR_MISMATCH from the call under test");
    dh_free(j);
}

#define F32 COLL_FLOAT32

int main(void)
{
    dh_init();
    static const mcase_t cases[] = {
        {"kind: all_reduce vs all_gather",
         2,
         {{K_ALL_REDUCE, 1024, F32, COLL_SUM, 0, 0}, {K_ALL_GATHER, 1024, F32, COLL_SUM, 0, 0}},
         {"all_reduce(count 1024, float32, sum)", "all_gather(count 1024, float32)"},
         {0, 0}},
        {"count: 1024 vs 2048",
         2,
         {{K_ALL_REDUCE, 1024, F32, COLL_SUM, 0, 0}, {K_ALL_REDUCE, 2048, F32, COLL_SUM, 0, 0}},
         {"all_reduce(count 1024, float32, sum)", "all_reduce(count 2048, float32, sum)"},
         {0, 0}},
        {"count, ring sizes: 300000 vs 300001",
         2,
         {{K_ALL_REDUCE, 300000, F32, COLL_SUM, 0, 0}, {K_ALL_REDUCE, 300001, F32, COLL_SUM, 0, 0}},
         {"all_reduce(count 300000, float32, sum)", "all_reduce(count 300001, float32, sum)"},
         {0, 0}},
        {"datatype: float32 vs int32",
         2,
         {{K_ALL_REDUCE, 1024, F32, COLL_SUM, 0, 0},
          {K_ALL_REDUCE, 1024, COLL_INT32, COLL_SUM, 0, 0}},
         {"all_reduce(count 1024, float32, sum)", "all_reduce(count 1024, int32, sum)"},
         {0, 0}},
        {"op: sum vs max",
         2,
         {{K_ALL_REDUCE, 1024, F32, COLL_SUM, 0, 0}, {K_ALL_REDUCE, 1024, F32, COLL_MAX, 0, 0}},
         {"all_reduce(count 1024, float32, sum)", "all_reduce(count 1024, float32, max)"},
         {0, 0}},
        {"root: broadcast with root 0 on ranks 0-1, root 1 on rank 2",
         3,
         {{K_BROADCAST, 1024, F32, COLL_SUM, 0, 0},
          {K_BROADCAST, 1024, F32, COLL_SUM, 0, 0},
          {K_BROADCAST, 1024, F32, COLL_SUM, 1, 0}},
         {"broadcast(count 1024, float32, root 0)", "", "broadcast(count 1024, float32, root 1)"},
         {1, 1, 0}},
        {"root: broadcast with two roots (each rank thinks it is the root)",
         2,
         {{K_BROADCAST, 1024, F32, COLL_SUM, 0, 0}, {K_BROADCAST, 1024, F32, COLL_SUM, 1, 0}},
         {"", ""},
         {1, 1}},
        {"p2p count: send 10 vs recv 20",
         2,
         {{K_SEND, 10, F32, COLL_SUM, 1, 0}, {K_RECV, 20, F32, COLL_SUM, 0, 0}},
         {"send/recv(count 10, float32)", "send/recv(count 20, float32)"},
         {1, 0}},
        {"p2p datatype: send float32 vs recv int32",
         2,
         {{K_SEND, 10, F32, COLL_SUM, 1, 0}, {K_RECV, 10, COLL_INT32, COLL_SUM, 0, 0}},
         {"send/recv(count 10, float32)", "send/recv(count 10, int32)"},
         {1, 0}},
        /* torch.distributed's isend(tag=1), isend(tag=2) against irecv(tag=2), irecv(tag=1): Gloo
         * matches by tag; kcoll matches in order, so the first recv meets the tag-1 message and
         * must fail, not return its data (it did, silently, before tags were carried) */
        {"p2p tag: send tag 1 vs recv tag 2",
         2,
         {{K_SEND, 10, F32, COLL_SUM, 1, 1}, {K_RECV, 10, F32, COLL_SUM, 0, 2}},
         {"send/recv(count 10, float32, tag 1)", "send/recv(count 10, float32, tag 2)"},
         {1, 0}},
        {"p2p tag: send tag 7 vs coll_recv (tag 0)",
         2,
         {{K_SEND, 10, F32, COLL_SUM, 1, 7}, {K_RECV, 10, F32, COLL_SUM, 0, 0}},
         {"send/recv(count 10, float32, tag 7)", "send/recv(count 10, float32)"},
         {1, 0}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(&cases[i]);
    return dh_finish();
}
