/* The bootstrap root: one detached thread per communicator. It gathers every member record,
 * checks that ranks agree (world size, versions, no duplicates), and answers each rank with the
 * table or with one error that names the ranks at fault. It exits after answering, or at its
 * deadline (answering the ranks that arrived with the list of those that never did). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/comm.h"
#include "base/error.h"
#include "base/util.h"
#include "base/handshake.h"
#include "bootstrap/bootstrap.h"
#include "base/sockutil.h"

#define ROOT_MSG_MAX     4096
#define ROOT_MAX_PENDING 1024
#define ROOT_MAX_RANKS   (1 << 20)
/* Unauthenticated connections from one address held at once once the table is half full: a
 * flood from one address cannot take every slot from the ranks of other hosts. */
#define ROOT_MAX_PER_SOURCE 256
/* A rank sends its hello at once: a connection silent for ROOT_HELLO_S is dropped (its slot is
 * needed). The rest of the exchange (challenge, response, record) waits on the rank's side too,
 * which a loaded host may deschedule: ROOT_EXCHANGE_S, cut to ROOT_HELLO_S once the table of
 * pending connections is half full. */
#define ROOT_HELLO_S    2.0
#define ROOT_EXCHANGE_S 10.0

/* A connection until its rank is admitted. Wire protocol 3: hello, our challenge, the response,
 * the member record (or a BOOT_ERROR text of the same size) and its MAC by the connection key.
 * An older rank sends hello and record at once: read as far as its version fields, so that the
 * version check names it, and never admitted further. */
typedef struct {
    int fd;
    size_t got; /* bytes read: hello, then `in` */
    double since;
    struct sockaddr_storage from;
    colli_hello_t hello;
    colli_challenge_t chal;
    struct {
        uint8_t resp[COLLI_RESPONSE_SIZE];
        colli_wire_member_t rec;
        uint8_t mac[16];
    } in;
} pending_t;

/* What authenticates the answer to a rank: the connection key, or (a rank of wire protocol 1
 * or 2) its hello's nonce, in the form that rank checks. */
typedef struct {
    bool legacy;
    uint8_t key[16];
} answer_key_t;

typedef struct {
    int fd;
    answer_key_t ak;
    colli_wire_member_t rec;
    bool present;
} slot_t;

typedef struct {
    int listen_fd;
    struct sockaddr_storage self; /* listen_fd's address, which a forked child closes */
    uint8_t secret[16];
    double deadline;
    double timeout; /* what set the deadline, for the message */
    int nranks;     /* from the first valid record */
    int arrived;
    slot_t *slots;
    pending_t *pend;
    int npend, pend_cap;
    struct pollfd *pfd;
    char failure[ROOT_MSG_MAX];
    coll_result_t fail_code;
    /* strangers: connections dropped before a valid hello, and the WARNs said about them */
    unsigned long dropped, warned;
    double warn_at;
    char last_stranger[80];
    char notice[1024];  /* version differences that do not stop the job, told to the ranks */
    uint8_t digest[16]; /* of the member table, once every rank is in (colli_digest_step) */
    bool have_digest;
} root_t;

static void reply(root_t *r, int fd, const answer_key_t *ak, coll_result_t code, const char *msg)
{
    colli_root_reply_t h;
    memset(&h, 0, sizeof(h));
    h.magic = COLLI_FRAME_MAGIC;
    h.status = (uint32_t)code;
    h.nranks = code == COLL_SUCCESS ? (uint32_t)r->nranks : 0;
    h.msg_len = (uint32_t)strnlen(msg, ROOT_MSG_MAX - 1);
    if (ak->legacy) {
        uint8_t buf[16 + 4];
        memcpy(buf, ak->key, 16);
        memcpy(buf + 16, "root", 4);
        colli_siphash128(r->secret, buf, sizeof(buf), h.mac);
    } else {
        if (code == COLL_SUCCESS && !r->have_digest) {
            memset(r->digest, 0, sizeof(r->digest));
            for (int i = 0; i < r->nranks; i++)
                colli_digest_step(r->secret, r->digest, &r->slots[i].rec,
                                  sizeof(colli_wire_member_t));
            r->have_digest = true;
        }
        colli_reply_mac(ak->key, &h, msg, code == COLL_SUCCESS ? r->digest : NULL, h.mac);
    }
    double dl = colli_now() + 10.0;
    int io = colli_sock_write_all(fd, &h, sizeof(h), dl);
    if (io == COLLI_IO_OK && h.msg_len)
        io = colli_sock_write_all(fd, msg, h.msg_len, dl);
    if (io == COLLI_IO_OK && code == COLL_SUCCESS)
        for (int i = 0; i < r->nranks && io == COLLI_IO_OK; i++)
            io = colli_sock_write_all(fd, &r->slots[i].rec, sizeof(colli_wire_member_t), dl);
    if (io != COLLI_IO_OK)
        coll_warn(BOOT, "bootstrap root: could not answer a rank: %s", colli_io_str(io, errno));
}

static void fail_all(root_t *r, coll_result_t code, const char *msg)
{
    if (r->fail_code == COLL_SUCCESS) {
        r->fail_code = code;
        snprintf(r->failure, sizeof(r->failure), "%s", msg);
        coll_warn(BOOT, "bootstrap root: %s", msg);
    }
    for (int i = 0; r->slots && i < r->nranks; i++)
        if (r->slots[i].present && r->slots[i].fd >= 0) {
            reply(r, r->slots[i].fd, &r->slots[i].ak, r->fail_code, r->failure);
            close(r->slots[i].fd);
            r->slots[i].fd = -1;
        }
}

/* A connection that is not a rank's: closed; the first few are named, then one line every
 * 10 s counts them (a flood must not flood the log). */
static void drop_stranger(root_t *r, int fd, const struct sockaddr_storage *from, const char *why)
{
    char a[80];
    colli_sockaddr_str(from, a, sizeof(a));
    snprintf(r->last_stranger, sizeof(r->last_stranger), "%s", a);
    r->dropped++;
    const double now = colli_now();
    if (r->warned < 8) {
        coll_warn(BOOT, "bootstrap root: dropped connection from %s: %s", a, why);
        r->warned++;
        r->warn_at = now;
    } else if (now - r->warn_at >= 10.0) {
        coll_warn(BOOT,
                  "bootstrap root: %lu connections dropped so far that were not ranks (the "
                  "last from %s: %s); something else connects to this port",
                  r->dropped, a, why);
        r->warn_at = now;
    }
    close(fd);
}

static void drop_r(root_t *r, pending_t *p, const char *why)
{
    drop_stranger(r, p->fd, &p->from, why);
    p->fd = -1;
}

/* 127.0.0.1 and ::1: the ranks of a one-host job, never capped by address (a stranger from
 * 127.0.0.2 or another host is) */
static bool loopback(const struct sockaddr_storage *a)
{
    static const uint8_t v6[16] = {[15] = 1};
    return a->ss_family == AF_INET
               ? ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_LOOPBACK)
               : memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, v6, 16) == 0;
}

static int pending_from(const root_t *r, const struct sockaddr_storage *a)
{
    int n = 0;
    for (int i = 0; i < r->npend; i++) {
        const struct sockaddr_storage *b = &r->pend[i].from;
        if (a->ss_family != b->ss_family || r->pend[i].fd < 0)
            continue;
        if (a->ss_family == AF_INET ? memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                                             &((const struct sockaddr_in *)b)->sin_addr, 4) == 0
                                    : memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                                             &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0)
            n++;
    }
    return n;
}

/* A rank of wire protocol 1 or 2: no handshake, its record follows its hello at once. */
static bool legacy(const pending_t *p)
{
    return p->got >= sizeof(colli_hello_t) && p->hello.proto < 3;
}

/* Bytes to read in all (a wire protocol 1 rank sends a shorter record). */
static size_t pending_want(const pending_t *p)
{
    if (!legacy(p))
        return sizeof(colli_hello_t) + sizeof(p->in);
    return sizeof(colli_hello_t) +
           (p->hello.proto == 1 ? COLLI_WIRE_MEMBER_V1_SIZE : sizeof(colli_wire_member_t));
}

static char *pending_dst(pending_t *p)
{
    const size_t hl = sizeof(colli_hello_t);
    if (p->got < hl)
        return (char *)&p->hello + p->got;
    return legacy(p) ? (char *)&p->in.rec + (p->got - hl) : (char *)&p->in + (p->got - hl);
}

/* The hello is whole: check it and challenge its sender (wire protocol 3). */
static void hello_arrived(root_t *r, pending_t *p)
{
    const char *why = NULL;
    const colli_hello_t *h = &p->hello;
    if (!colli_hello_verify_ex(h, r->secret, false, &why)) {
        drop_r(r, p, why);
        return;
    }
    if (h->kind != COLLI_HELLO_BOOTSTRAP && h->kind != COLLI_HELLO_BOOT_ERROR) {
        drop_r(r, p, "not a bootstrap hello");
        return;
    }
    if (legacy(p)) {
        if (h->kind != COLLI_HELLO_BOOTSTRAP)
            drop_r(r, p, "an error report of an older wire protocol (not authenticated)");
        return;
    }
    if (!colli_challenge_send(p->fd, r->secret, h, &p->chal, &why))
        drop_r(r, p, why);
}

/* Bytes arrived on p: act at the end of the hello, of the response, and of the whole. */
static void pending_check(root_t *r, pending_t *p)
{
    const size_t hl = sizeof(colli_hello_t);
    if (p->got >= 4 && p->hello.magic != COLLI_HELLO_MAGIC) {
        drop_r(r, p, "not a kcoll connection (bad magic)");
        return;
    }
    if (p->got == hl) {
        hello_arrived(r, p);
        return;
    }
    if (legacy(p))
        return;
    if (p->got == hl + COLLI_RESPONSE_SIZE &&
        !colli_response_ok(r->secret, &p->hello, &p->chal, p->in.resp)) {
        drop_r(r, p,
               "wrong answer to the challenge: a replayed hello (recorded off the network and "
               "sent again), not a rank");
        return;
    }
    if (p->got == pending_want(p)) {
        uint8_t key[16], mac[16];
        colli_conn_key(r->secret, &p->hello, &p->chal, key);
        colli_siphash128(key, &p->in.rec, sizeof(p->in.rec), mac);
        if (!colli_mem_equal(mac, p->in.mac, sizeof(mac)))
            drop_r(r, p, "its member record failed authentication (altered on the way)");
    }
}

/* A complete hello + record arrived on p. */
static void admit(root_t *r, pending_t *p)
{
    const colli_hello_t *h = &p->hello;
    const colli_wire_member_t *rec = &p->in.rec;
    /* A rank of another wire protocol is admitted as far as its version fields (which every
     * protocol keeps first) so that check_versions names it; its record goes no further. The
     * hello, the response and the record were checked as they arrived (pending_check). */
    answer_key_t ak = {.legacy = legacy(p)};
    if (ak.legacy)
        memcpy(ak.key, h->nonce, 16);
    else
        colli_conn_key(r->secret, h, &p->chal, ak.key);
    if (h->kind == COLLI_HELLO_BOOT_ERROR) {
        char text[sizeof(colli_wire_member_t) + 1];
        memcpy(text, rec, sizeof(colli_wire_member_t));
        text[sizeof(colli_wire_member_t)] = '\0';
        if (r->nranks == 0 && h->nranks >= 1 && h->nranks <= ROOT_MAX_RANKS) {
            r->slots = calloc(h->nranks, sizeof(slot_t));
            if (r->slots != NULL) {
                r->nranks = (int)h->nranks;
                for (int i = 0; i < r->nranks; i++)
                    r->slots[i].fd = -1;
            }
        }
        close(p->fd);
        p->fd = -1;
        /* the reporting rank is accounted for: it will not check in, and once every rank has
         * checked in or reported, the root is done (it does not wait for its deadline) */
        if (r->slots != NULL && h->from_rank >= 0 && h->from_rank < r->nranks &&
            !r->slots[h->from_rank].present) {
            r->slots[h->from_rank].present = true;
            r->arrived++;
        }
        fail_all(r, COLL_ERR_REMOTE, text);
        return;
    }
    if (h->from_rank != rec->rank) {
        drop_r(r, p, "its hello and its member record name different ranks");
        return;
    }
    if (rec->nranks < 1 || rec->nranks > ROOT_MAX_RANKS || rec->rank < 0 ||
        rec->rank >= rec->nranks) {
        drop_r(r, p, "invalid rank or world size in the member record");
        return;
    }
    if (r->nranks == 0) {
        r->nranks = rec->nranks;
        r->slots = calloc((size_t)r->nranks, sizeof(slot_t));
        if (r->slots == NULL) {
            r->nranks = 0;
            drop_r(r, p, "out of memory");
            return;
        }
        for (int i = 0; i < r->nranks; i++)
            r->slots[i].fd = -1;
    }
    char msg[ROOT_MSG_MAX];
    if (rec->nranks != r->nranks) {
        snprintf(msg, sizeof(msg),
                 "ranks disagree on the world size: rank %d (pid %d on %.64s) says %d, an earlier "
                 "rank said %d. Pass the same nranks to coll_comm_init_rank on every rank.",
                 rec->rank, rec->pid, rec->hostname, rec->nranks, r->nranks);
        reply(r, p->fd, &ak, COLL_ERR_INVALID_USAGE, msg);
        close(p->fd);
        p->fd = -1;
        fail_all(r, COLL_ERR_INVALID_USAGE, msg);
        return;
    }
    slot_t *s = &r->slots[rec->rank];
    if (s->present) {
        snprintf(msg, sizeof(msg),
                 "two processes claim rank %d: pid %d on %.64s and pid %d on %.64s. Give every "
                 "process a distinct rank.",
                 rec->rank, s->rec.pid, s->rec.hostname, rec->pid, rec->hostname);
        reply(r, p->fd, &ak, COLL_ERR_INVALID_USAGE, msg);
        close(p->fd);
        p->fd = -1;
        fail_all(r, COLL_ERR_INVALID_USAGE, msg);
        return;
    }
    s->present = true;
    s->fd = p->fd;
    s->ak = ak;
    s->rec = *rec;
    s->rec.version[sizeof(s->rec.version) - 1] = '\0';
    s->rec.hostname[sizeof(s->rec.hostname) - 1] = '\0';
    p->fd = -1;
    r->arrived++;
    if (r->fail_code != COLL_SUCCESS) {
        reply(r, s->fd, &s->ak, r->fail_code, r->failure);
        close(s->fd);
        s->fd = -1;
    }
}

static void check_versions(root_t *r)
{
    const colli_wire_member_t **recs = malloc(sizeof(*recs) * (size_t)r->nranks);
    if (recs == NULL) {
        fail_all(r, COLL_ERR_SYSTEM, "bootstrap root: out of memory checking versions");
        return;
    }
    for (int i = 0; i < r->nranks; i++)
        recs[i] = &r->slots[i].rec;
    char msg[ROOT_MSG_MAX];
    coll_result_t st =
        colli_versions_check(recs, r->nranks, msg, sizeof(msg), r->notice, sizeof(r->notice));
    if (st == COLL_SUCCESS) /* one build everywhere: then one address per machine */
        st = colli_addrs_check(recs, r->nranks, msg, sizeof(msg));
    free(recs);
    if (st != COLL_SUCCESS)
        fail_all(r, st, msg);
}

/* Every rank is in and agrees on versions: do their data addresses reach each other? */
static void check_reach(root_t *r)
{
    colli_reach_rank_t *ranks = calloc((size_t)r->nranks, sizeof(*ranks));
    if (ranks == NULL)
        return;
    for (int i = 0; i < r->nranks; i++)
        ranks[i] = (colli_reach_rank_t){
            .fd = r->slots[i].fd, .key = r->slots[i].ak.key, .rec = &r->slots[i].rec};
    struct sockaddr_storage self;
    socklen_t sl = sizeof(self);
    memset(&self, 0, sizeof(self));
    if (getsockname(r->listen_fd, (struct sockaddr *)&self, &sl) != 0)
        self.ss_family = AF_UNSPEC;
    char msg[ROOT_MSG_MAX];
    coll_result_t st = colli_reach_check(ranks, r->nranks, r->secret, &self, msg, sizeof(msg));
    free(ranks);
    if (st != COLL_SUCCESS)
        fail_all(r, st, msg);
}

static void timeout_fail(root_t *r)
{
    char msg[ROOT_MSG_MAX];
    if (r->nranks == 0) {
        coll_warn(BOOT, "bootstrap root: no rank checked in before the bootstrap timeout: this "
                        "process made a unique id that no rank used (harmless when the job runs "
                        "on another one, as with the extra ids of ncclCommInitRankScalable, of "
                        "which kcoll takes the first; else the id never reached the ranks, or "
                        "they cannot reach this host)");
        return;
    }
    size_t used = 0;
    if (r->dropped > 0)
        used = (size_t)snprintf(msg, sizeof(msg),
                                "while %lu connections that were not ranks came to the root "
                                "(the last from %s; they were dropped): ",
                                r->dropped, r->last_stranger);
    used += (size_t)snprintf(msg + used, sizeof(msg) - used,
                             "bootstrap timeout: %d of %d ranks checked in; missing: ", r->arrived,
                             r->nranks);
    int listed = 0;
    for (int i = 0; i < r->nranks && used < sizeof(msg) - 64; i++) {
        if (r->slots[i].present)
            continue;
        if (listed++ == 32) {
            used += (size_t)snprintf(msg + used, sizeof(msg) - used, ", ...");
            break;
        }
        used += (size_t)snprintf(msg + used, sizeof(msg) - used, "%srank %d",
                                 listed > 1 ? ", " : "", i);
    }
    if (used < sizeof(msg))
        snprintf(msg + used, sizeof(msg) - used,
                 ". Check that those processes started, reached their communicator's creation "
                 "with this job's id, and can reach the root (the limit, %.0f s, is "
                 "COLL_BOOTSTRAP_TIMEOUT, or the kcoll agent's pin, or the caller's shorter one: "
                 "PyTorch's process group timeout).",
                 r->timeout);
    fail_all(r, COLL_ERR_TIMEOUT, msg);
}

static void serve(root_t *r)
{
    while (colli_now() < r->deadline) {
        if (r->nranks > 0 && r->arrived == r->nranks)
            break;
        if (r->npend + 65 > r->pend_cap) {
            int cap = r->pend_cap ? r->pend_cap * 2 : 128;
            pending_t *np = realloc(r->pend, (size_t)cap * sizeof(*np));
            struct pollfd *nf = realloc(r->pfd, (size_t)(cap + 1) * sizeof(*nf));
            if (np)
                r->pend = np;
            if (nf)
                r->pfd = nf;
            if (np == NULL || nf == NULL)
                break;
            r->pend_cap = cap;
        }
        struct pollfd *pfd = r->pfd;
        int n = 0;
        /* at the cap the listener is not watched (its backlog would wake every poll at once:
         * a busy loop); the held connections time out and make room */
        pfd[n++] = (struct pollfd){.fd = r->npend < ROOT_MAX_PENDING ? r->listen_fd : -1,
                                   .events = POLLIN};
        for (int i = 0; i < r->npend; i++)
            pfd[n++] = (struct pollfd){.fd = r->pend[i].fd, .events = POLLIN};
        double left = r->deadline - colli_now();
        int rc = poll(pfd, (nfds_t)n, left > 0.2 ? 200 : (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN) {
            for (int k = 0; k < 64 && r->npend < ROOT_MAX_PENDING; k++) {
                pending_t *p = &r->pend[r->npend];
                socklen_t sl = sizeof(p->from);
                int fd = accept4(r->listen_fd, (struct sockaddr *)&p->from, &sl,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break;
                if (r->npend >= ROOT_MAX_PENDING / 2 && !loopback(&p->from) &&
                    pending_from(r, &p->from) >= ROOT_MAX_PER_SOURCE) {
                    drop_stranger(r, fd, &p->from, "too many connections from one address");
                    continue;
                }
                colli_sock_tune(fd);
                memset(&p->hello, 0, sizeof(p->hello));
                memset(&p->in, 0, sizeof(p->in));
                p->fd = fd;
                p->got = 0;
                p->since = colli_now();
                r->npend++;
            }
        }
        for (int i = 0; i < r->npend; i++) {
            pending_t *p = &r->pend[i];
            while (p->fd >= 0 && p->got < pending_want(p)) {
                /* up to the next point to check: the magic, the hello, the response, the end */
                const size_t hl = sizeof(colli_hello_t);
                size_t upto = p->got < 4    ? 4
                              : p->got < hl ? hl
                              : !legacy(p) && p->got < hl + COLLI_RESPONSE_SIZE
                                  ? hl + COLLI_RESPONSE_SIZE
                                  : pending_want(p);
                ssize_t got = recv(p->fd, pending_dst(p), upto - p->got, 0);
                if (got > 0) {
                    p->got += (size_t)got;
                    /* A stranger is recognised by its first bytes; do not wait for more. */
                    pending_check(r, p);
                } else if (got == 0) {
                    drop_r(r, p, "closed before sending a complete hello");
                } else if (errno != EAGAIN && errno != EINTR) {
                    drop_r(r, p, strerror(errno));
                } else {
                    break;
                }
            }
            if (p->fd >= 0 && p->got == pending_want(p))
                admit(r, p);
            else if (p->fd >= 0 && p->got == 0 && colli_now() - p->since > ROOT_HELLO_S)
                drop_r(r, p, "sent nothing within 2 s");
            else if (p->fd >= 0 &&
                     colli_now() - p->since >
                         (r->npend >= ROOT_MAX_PENDING / 2 ? ROOT_HELLO_S : ROOT_EXCHANGE_S))
                drop_r(r, p,
                       r->npend >= ROOT_MAX_PENDING / 2
                           ? "no complete exchange within 2 s while the root is crowded"
                           : "no complete exchange within 10 s");
        }
        int k = 0;
        for (int i = 0; i < r->npend; i++)
            if (r->pend[i].fd >= 0)
                r->pend[k++] = r->pend[i];
        r->npend = k;
    }
    if (r->nranks > 0 && r->arrived == r->nranks && r->fail_code == COLL_SUCCESS)
        check_versions(r);
    if (r->nranks > 0 && r->arrived == r->nranks && r->fail_code == COLL_SUCCESS)
        check_reach(r);
    if (r->fail_code == COLL_SUCCESS && (r->nranks == 0 || r->arrived < r->nranks))
        timeout_fail(r);
    if (r->fail_code == COLL_SUCCESS) {
        for (int i = 0; i < r->nranks; i++) {
            reply(r, r->slots[i].fd, &r->slots[i].ak, COLL_SUCCESS, r->notice);
            close(r->slots[i].fd);
            r->slots[i].fd = -1;
        }
    }
}

static void *root_main(void *arg)
{
    root_t *r = arg;
    serve(r);
    for (int i = 0; i < r->npend; i++)
        close(r->pend[i].fd);
    for (int i = 0; r->slots && i < r->nranks; i++)
        if (r->slots[i].fd >= 0)
            close(r->slots[i].fd);
    colli_fork_unwatch(&r->self);
    close(r->listen_fd);
    free(r->pend);
    free(r->pfd);
    free(r->slots);
    free(r);
    return NULL;
}

/* The root on r->listen_fd (a listening socket it owns from now on). */
static coll_result_t start(root_t *r, pthread_t *joinable)
{
    coll_result_t status;
    pthread_t tid;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) {
        status = COLLI_ERR(BOOT, COLL_ERR_SYSTEM, "pthread_attr_init failed");
        goto err_close;
    }
    pthread_attr_setdetachstate(&attr,
                                joinable ? PTHREAD_CREATE_JOINABLE : PTHREAD_CREATE_DETACHED);
    socklen_t sl = sizeof(r->self);
    if (getsockname(r->listen_fd, (struct sockaddr *)&r->self, &sl) != 0)
        memset(&r->self, 0, sizeof(r->self)); /* no family: the fork handler matches nothing */
    colli_fork_watch(&r->self);
    int rc = pthread_create(&tid, &attr, root_main, r);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        colli_fork_unwatch(&r->self);
        status = COLLI_ERR(BOOT, COLL_ERR_SYSTEM, "cannot start the bootstrap root thread: %s",
                           strerror(rc));
        goto err_close;
    }
    if (joinable != NULL)
        *joinable = tid;
    return COLL_SUCCESS;
err_close:
    close(r->listen_fd);
    free(r);
    return status;
}

static root_t *root_new(const uint8_t secret[16], double timeout)
{
    root_t *r = calloc(1, sizeof(*r));
    if (r != NULL) {
        memcpy(r->secret, secret, 16);
        r->deadline = colli_now() + timeout;
        r->timeout = timeout;
        r->listen_fd = -1;
    }
    return r;
}

coll_result_t colli_root_start(const struct sockaddr_storage *addr, const uint8_t secret[16],
                               double timeout, struct sockaddr_storage *bound, pthread_t *joinable)
{
    root_t *r = root_new(secret, timeout);
    if (r == NULL)
        return COLLI_ERR(BOOT, COLL_ERR_SYSTEM, "out of memory starting the bootstrap root");
    coll_result_t status = colli_sock_listen(addr, &r->listen_fd, bound);
    if (status != COLL_SUCCESS) {
        free(r);
        return status;
    }
    return start(r, joinable);
}

coll_result_t colli_root_start_on(int listen_fd, const uint8_t secret[16], double timeout,
                                  pthread_t *joinable)
{
    int fd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return COLLI_ERR(BOOT, COLL_ERR_SYSTEM,
                         "cannot share the listening socket with a bootstrap root: %s",
                         strerror(errno));
    root_t *r = root_new(secret, timeout);
    if (r == NULL) {
        close(fd);
        return COLLI_ERR(BOOT, COLL_ERR_SYSTEM, "out of memory starting the bootstrap root");
    }
    r->listen_fd = fd;
    return start(r, joinable);
}

void colli_root_finish_failed(pthread_t root, const struct sockaddr_storage *addr,
                              const uint8_t secret[16], int rank, int nranks, const char *msg)
{
    if (pthread_tryjoin_np(root, NULL) == 0)
        return;
    colli_bootstrap_report_error(addr, secret, rank, nranks, msg);
    pthread_join(root, NULL);
}

void colli_root_finish(pthread_t root, coll_result_t status)
{
    if (status == COLL_SUCCESS)
        pthread_join(root, NULL);
    else
        pthread_detach(root);
}
