/* Socket transport: listener, lazy authenticated connections, abort notices. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "transport/socket/socket.h"

static coll_result_t sock_comm_init(struct coll_comm *comm, int tp, const colli_netif_t *nif,
                                    colli_member_t *self)
{
    coll_result_t status;
    sock_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return COLLI_ERR(NET, COLL_ERR_SYSTEM, "out of memory for the socket transport");
    s->tp = tp;
    s->listen_fd = -1;
    s->bind_addr = nif->addr;
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s->spare_fd < 0) {
        status = COLLI_ERR(NET, COLL_ERR_SYSTEM,
                           "rank %d cannot open /dev/null (the descriptor kept for abort "
                           "notices): %s",
                           comm->rank, strerror(errno));
        goto err_free;
    }
    COLL_CHECK_GOTO(colli_sock_listen(&nif->addr, &s->listen_fd, &self->addr), err_free);
    comm->tp[tp].state = s;
    return COLL_SUCCESS;
err_free:
    if (s->spare_fd >= 0)
        close(s->spare_fd);
    free(s);
    return status;
}

/* Sockets reach any peer: the last resort of the selection loop. */
static coll_result_t sock_can_connect(struct coll_comm *comm, int tp, const colli_member_t *peer,
                                      bool *yes)
{
    *yes = true;
    return COLL_SUCCESS;
}

/* Every peer may need a connection each way per stream (all-to-all): check the descriptor limit
 * up front (colli_fd_need, the one estimate), raise the soft limit if the hard one allows, and
 * say how many are needed if not. */
static void check_fd_limit(const struct coll_comm *comm)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)colli_fd_need(comm, NULL, NULL, NULL);
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    struct rlimit nrl = {want, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &nrl) == 0 && want >= need) {
        coll_info(NET, "raised the open-file limit from %llu to %llu for %d ranks",
                  (unsigned long long)rl.rlim_cur, (unsigned long long)want, comm->nranks);
        return;
    }
    char advice[512];
    colli_fd_advice(comm, EMFILE, advice, sizeof(advice));
    coll_warn(NET, "%s; until then collectives that reach every peer (all_to_all) will fail",
              advice);
}

static coll_result_t sock_comm_ready(struct coll_comm *comm, int tp)
{
    sock_state_t *s = comm->tp[tp].state;
    s->nstreams = (int)comm->members[0].nstreams;
    check_fd_limit(comm);
    size_t n = (size_t)comm->nranks * (size_t)s->nstreams;
    s->out = calloc(n, sizeof(sock_conn_t));
    s->in = calloc(n, sizeof(sock_conn_t));
    s->probe = calloc((size_t)comm->nranks, sizeof(colli_probe_t));
    if (s->out == NULL || s->in == NULL || s->probe == NULL)
        return COLLI_ERR(NET, COLL_ERR_SYSTEM, "out of memory for %zu connections", 2 * n);
    for (size_t i = 0; i < n; i++)
        s->out[i].fd = s->in[i].fd = -1;
    return COLL_SUCCESS;
}

void sock_close_conn(sock_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = SOCK_CLOSED;
}

static void sock_comm_fini(struct coll_comm *comm, int tp)
{
    sock_state_t *s = comm->tp[tp].state;
    if (s == NULL)
        return;
    size_t n = (size_t)comm->nranks * (size_t)s->nstreams;
    for (size_t i = 0; s->out && i < n; i++)
        sock_close_conn(&s->out[i]);
    for (size_t i = 0; s->in && i < n; i++)
        sock_close_conn(&s->in[i]);
    for (int i = 0; i < s->npend; i++)
        close(s->pend[i].fd);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
    for (int i = 0; s->probe && i < comm->nranks; i++)
        colli_probe_reset(&s->probe[i]);
    free(s->probe);
    free(s->out);
    free(s->in);
    free(s->pend);
    free(s);
    comm->tp[tp].state = NULL;
}

/* A connection that is not a peer's: closed; the first few are named, then one line every 10 s
 * counts them (a flood must not flood the log). */
static void drop_fd(sock_state_t *s, int fd, const struct sockaddr_storage *from, const char *why)
{
    char a[80];
    colli_sockaddr_str(from, a, sizeof(a));
    s->dropped++;
    const double now = colli_now();
    if (s->warned < 8) {
        coll_warn(NET, "dropped connection from %s: %s", a, why);
        s->warned++;
        s->warn_at = now;
    } else if (now - s->warn_at >= 10.0) {
        coll_warn(NET,
                  "%lu connections dropped so far that were not peers of this communicator (the "
                  "last from %s: %s)",
                  s->dropped, a, why);
        s->warn_at = now;
    }
    close(fd);
}

static void drop_pending_s(sock_state_t *s, sock_pending_t *p, const char *why)
{
    drop_fd(s, p->fd, &p->from, why);
    p->fd = -1;
}

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    return a->ss_family == AF_INET ? memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                                            &((const struct sockaddr_in *)b)->sin_addr, 4) == 0
                                   : memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                                            &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

/* Is a the address of a member of this communicator (a peer, never capped by address)? */
static bool member_ip(const struct coll_comm *comm, const struct sockaddr_storage *a)
{
    for (int r = 0; r < comm->nranks; r++)
        if (same_ip(&comm->members[r].addr, a))
            return true;
    return false;
}

static int pending_from(const sock_state_t *s, const struct sockaddr_storage *a)
{
    int n = 0;
    for (int i = 0; i < s->npend; i++) {
        if (s->pend[i].fd >= 0 && same_ip(a, &s->pend[i].from))
            n++;
    }
    return n;
}

static void send_notices(struct coll_comm *comm, sock_state_t *s, uint8_t kind, const char *reason,
                         int only);

/* Kinds whose handshake is the whole preamble (no length and text follow). */
static bool hello_only(uint8_t kind)
{
    return kind == COLLI_HELLO_DATA || kind == COLLI_HELLO_LINK || kind == COLLI_HELLO_IB;
}

/* A pending connection has its complete hello (and abort text): act on it. */
static coll_result_t admit(struct coll_comm *comm, sock_state_t *s, sock_pending_t *p)
{
    const colli_hello_t *h = &p->hello;
    if (!hello_only(h->kind)) {
        uint8_t mac[16];
        colli_notice_mac(comm->secret, h, p->abort_msg, p->abort_len, mac);
        if (!colli_mem_equal(mac, p->resp, sizeof(mac))) {
            drop_pending_s(s, p, "a notice whose text failed authentication (altered on the way)");
            return COLL_SUCCESS;
        }
        const unsigned kept = sizeof(s->notice_seen) / sizeof(s->notice_seen[0]);
        for (unsigned i = 0; i < s->notices && i < kept; i++)
            if (memcmp(s->notice_seen[i], h->nonce, 16) == 0) {
                drop_pending_s(s, p, "a notice that arrived before, sent again (a replay)");
                return COLL_SUCCESS;
            }
        memcpy(s->notice_seen[s->notices++ % kept], h->nonce, 16);
    }
    if (h->kind == COLLI_HELLO_STUCK || h->kind == COLLI_HELLO_STATUS) {
        if (h->kind == COLLI_HELLO_STUCK) {
            /* Answer at once with whom we wait on, so that the asking rank can tell a live but
             * waiting rank from a silent one. */
            char waits[512] = "";
            if (comm->cur_op != NULL)
                colli_op_waits(comm->cur_op, NULL, waits, sizeof(waits));
            send_notices(comm, s, COLLI_HELLO_STATUS, waits, h->from_rank);
        }
        if (comm->stuck_reported != NULL) {
            comm->stuck_reported[h->from_rank] = 1;
            char list[sizeof(p->abort_msg) + 1];
            memcpy(list, p->abort_msg, p->abort_len);
            list[p->abort_len] = '\0';
            char *save = NULL;
            for (char *t = strtok_r(list, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                long r;
                if (colli_parse_long(t, 0, comm->nranks - 1, &r))
                    comm->stuck_waits[r] = 1;
            }
        }
        close(p->fd);
        p->fd = -1;
        return COLL_SUCCESS;
    }
    if (h->kind == COLLI_HELLO_ABORT) {
        char who[200];
        colli_member_desc(comm, h->from_rank, who, sizeof(who));
        if (!s->aborted) {
            s->aborted = true;
            /* A notice that relays another rank's report already names its origin: passed on
             * as it is, not nested ("rank 1 reported: rank 2 reported: ..."). */
            char text[sizeof(p->abort_msg) + 1];
            memcpy(text, p->abort_msg, p->abort_len);
            text[p->abort_len] = '\0';
            if (strncmp(text, "rank ", 5) == 0 && strstr(text, " reported: ") != NULL)
                snprintf(s->abort_msg, sizeof(s->abort_msg), "%s", text);
            else
                snprintf(s->abort_msg, sizeof(s->abort_msg), "%s reported: %s", who, text);
            /* the sender names the rank it blames (1 + rank), or none: then the sender itself */
            colli_comm_blame(comm, h->stream > 0 && h->stream <= (uint32_t)comm->nranks
                                       ? (int)h->stream - 1
                                       : h->from_rank);
        }
        close(p->fd);
        p->fd = -1;
        return COLL_SUCCESS;
    }
    if (h->kind == COLLI_HELLO_LINK || h->kind == COLLI_HELLO_IB) {
        int fd = p->fd;
        p->fd = -1;
        return colli_tp_adopt(comm, h, fd);
    }
    sock_conn_t *c = &s->in[(size_t)h->from_rank * (size_t)s->nstreams + h->stream];
    if (c->fd >= 0) {
        /* An established stream is never replaced: its frames are numbered and keyed on this
         * connection, and a second one can only be a fault or an attack. */
        drop_pending_s(s, p,
                       "a second connection for a stream that is already open (kept the "
                       "first)");
        return COLL_SUCCESS;
    }
    c->fd = p->fd;
    c->state = SOCK_READY;
    c->frames = 0;
    colli_conn_key(comm->secret, h, &p->chal, c->hs.key);
    if (s->probe != NULL) /* the peer is there: no more probes of it */
        colli_probe_reset(&s->probe[h->from_rank]);
    p->fd = -1;
    return COLL_SUCCESS;
}

/* Where the bytes of a pending connection go: the hello, the response to our challenge, then
 * (notices) a u32 length and the text. */
#define PEND_HELLO ((size_t)sizeof(colli_hello_t))
#define PEND_RESP  (PEND_HELLO + COLLI_RESPONSE_SIZE)
#define PEND_LEN   (PEND_RESP + 4)

/* The hello is whole: check it and challenge its sender. */
static void hello_arrived(struct coll_comm *comm, sock_state_t *s, sock_pending_t *p)
{
    const char *why = NULL;
    const colli_hello_t *h = &p->hello;
    if (!colli_hello_verify(h, comm->secret, &why)) {
        drop_pending_s(s, p, why);
        return;
    }
    if (h->kind < COLLI_HELLO_DATA || h->kind > COLLI_HELLO_IB ||
        h->kind == COLLI_HELLO_BOOT_ERROR || h->to_rank != comm->rank || h->from_rank < 0 ||
        h->from_rank >= comm->nranks || h->from_rank == comm->rank ||
        (h->kind == COLLI_HELLO_DATA && h->stream >= (uint32_t)s->nstreams)) {
        drop_pending_s(s, p, "hello for another rank or stream of this communicator");
        return;
    }
    if (!hello_only(h->kind))
        return; /* a notice: its MAC over the text follows, checked once it is whole */
    if (!colli_challenge_send(p->fd, comm->secret, h, &p->chal, &why))
        drop_pending_s(s, p, why);
}

static void read_pending(struct coll_comm *comm, sock_state_t *s, sock_pending_t *p)
{
    while (p->fd >= 0) {
        size_t want;
        char *dst;
        if (p->got < PEND_HELLO) {
            dst = (char *)&p->hello + p->got;
            want = PEND_HELLO - p->got;
        } else if (p->got < PEND_RESP) {
            dst = (char *)p->resp + (p->got - PEND_HELLO);
            want = PEND_RESP - p->got;
        } else if (hello_only(p->hello.kind)) {
            return;
        } else if (p->got < PEND_LEN) {
            dst = (char *)&p->abort_len + (p->got - PEND_RESP);
            want = PEND_LEN - p->got;
        } else {
            size_t text = p->got - PEND_LEN;
            if (text >= p->abort_len)
                return;
            dst = p->abort_msg + text;
            want = p->abort_len - text;
        }
        ssize_t n = recv(p->fd, dst, want, 0);
        if (n == 0 && p->got == 0) {
            /* connected and closed without a byte: another rank's reachability probe at
             * bootstrap (bootstrap/reach.c) or a port check; no stranger worth a WARN */
            char a[80];
            colli_sockaddr_str(&p->from, a, sizeof(a));
            coll_debug(NET,
                       "a connection from %s closed without sending anything (a rank's "
                       "reachability probe, or a port check)",
                       a);
            close(p->fd);
            p->fd = -1;
            return;
        }
        if (n == 0) {
            drop_pending_s(s, p,
                           p->got < PEND_HELLO ? "closed before completing its hello"
                                               : "closed before answering the challenge");
            return;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                drop_pending_s(s, p, strerror(errno));
            return;
        }
        p->got += (size_t)n;
        if (p->got >= 4 && p->hello.magic != COLLI_HELLO_MAGIC) {
            drop_pending_s(s, p, "not a kcoll connection (bad magic); a stranger or a port scan");
            return;
        }
        if (p->got == PEND_HELLO)
            hello_arrived(comm, s, p);
        if (p->fd >= 0 && p->got == PEND_RESP && hello_only(p->hello.kind) &&
            !colli_response_ok(comm->secret, &p->hello, &p->chal, p->resp))
            drop_pending_s(s, p,
                           "wrong answer to the challenge: a replayed hello (recorded off the "
                           "network and sent again), not a peer");
        if (p->fd >= 0 && !hello_only(p->hello.kind) && p->got == PEND_LEN &&
            p->abort_len > sizeof(p->abort_msg))
            drop_pending_s(s, p, "abort notice too long");
    }
}

static bool pending_complete(const sock_pending_t *p)
{
    if (p->got < PEND_RESP)
        return false;
    if (hello_only(p->hello.kind))
        return true;
    return p->got >= PEND_LEN && p->got == PEND_LEN + p->abort_len;
}

coll_result_t sock_accept_progress(struct coll_comm *comm, sock_state_t *s, bool *progressed)
{
    for (int k = 0; k < 64 && s->npend < SOCK_MAX_PENDING; k++) {
        struct sockaddr_storage from;
        socklen_t len = sizeof(from);
        int fd =
            accept4(s->listen_fd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                /* strangers hold descriptors: the oldest one (from an address that is no
                 * member's) goes, and the communicator lives; with none, this rank itself is
                 * out of descriptors, which is named */
                const int e = errno;
                int victim = -1;
                for (int i = 0; i < s->npend && victim < 0; i++)
                    if (s->pend[i].fd >= 0 && !member_ip(comm, &s->pend[i].from))
                        victim = i;
                if (victim < 0)
                    return sock_fd_exhausted(comm, "accept a connection", e);
                drop_pending_s(s, &s->pend[victim],
                               "out of file descriptors while connections that are not peers "
                               "were pending: the oldest is dropped");
            }
            break;
        }
        if (s->npend >= SOCK_MAX_PENDING / 2 && pending_from(s, &from) >= SOCK_MAX_PER_SOURCE &&
            !member_ip(comm, &from)) {
            drop_fd(s, fd, &from, "too many connections from one address");
            continue;
        }
        colli_sock_tune(fd);
        if (s->npend == s->pend_cap) {
            int cap = s->pend_cap ? s->pend_cap * 2 : 16;
            sock_pending_t *n = realloc(s->pend, (size_t)cap * sizeof(*n));
            if (n == NULL) {
                close(fd);
                return COLLI_ERR(NET, COLL_ERR_SYSTEM, "out of memory accepting a connection");
            }
            s->pend = n;
            s->pend_cap = cap;
        }
        sock_pending_t *p = &s->pend[s->npend++];
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->from = from;
        p->since = colli_now();
        *progressed = true;
    }
    int k = 0;
    for (int i = 0; i < s->npend; i++) {
        sock_pending_t *p = &s->pend[i];
        read_pending(comm, s, p);
        if (p->fd >= 0 && pending_complete(p)) {
            coll_result_t st = admit(comm, s, p);
            if (st != COLL_SUCCESS)
                return st;
            *progressed = true;
        } else if (p->fd >= 0 && p->got == 0 && s->npend >= SOCK_MAX_PENDING / 2 &&
                   colli_now() - p->since > 1.0) {
            /* a peer sends its hello as soon as it is connected: under pressure, a silent
             * connection makes room after a second */
            drop_pending_s(s, p, "sent nothing within 1 s while the listener is crowded");
        } else if (p->fd >= 0 && colli_now() - p->since > 10.0) {
            drop_pending_s(s, p, "no complete hello within 10 s");
        }
        if (p->fd >= 0)
            s->pend[k++] = *p;
    }
    s->npend = k;
    if (s->aborted)
        return COLLI_ERR(NET, COLL_ERR_REMOTE, "%s", s->abort_msg);
    return COLL_SUCCESS;
}

/* A notice: hello, MAC over hello and text, length, text. One-way (no challenge): it must reach
 * a rank that is busy elsewhere at the time, a dying rank's last words above all. */
typedef struct {
    colli_hello_t h;
    uint8_t mac[16];
    uint32_t len;
    char text[1024];
} notice_t;

static void sock_notify_abort(struct coll_comm *comm, int tp, const char *reason)
{
    send_notices(comm, comm->tp[tp].state, COLLI_HELLO_ABORT, reason, -1);
}

static void sock_notify_stuck(struct coll_comm *comm, int tp, const char *waits)
{
    send_notices(comm, comm->tp[tp].state, COLLI_HELLO_STUCK, waits, -1);
}

/* Send a notice to every other rank, or only to `only`; bounded to about a second, best
 * effort. */
static void send_notices(struct coll_comm *comm, sock_state_t *s, uint8_t kind, const char *reason,
                         int only)
{
    if (s == NULL || comm->members == NULL)
        return;
    int n = comm->nranks;
    int *fds = malloc(sizeof(int) * (size_t)n);
    size_t *off = calloc((size_t)n, sizeof(size_t));
    notice_t *msg = malloc(sizeof(notice_t) * (size_t)n);
    if (fds == NULL || off == NULL || msg == NULL) {
        free(fds);
        free(off);
        free(msg);
        return;
    }
    size_t len = strnlen(reason, sizeof(msg->text));
    size_t total = offsetof(notice_t, text) + len;
    /* an abort names the rank it blames in `stream` (1 + rank; 0: the sender) */
    uint32_t blame =
        kind == COLLI_HELLO_ABORT && comm->blame_rank >= 0 && comm->blame_rank != comm->rank
            ? (uint32_t)comm->blame_rank + 1
            : 0;
    /* todo[p] 0: nothing to send, 1: waiting for a descriptor, 2: connecting or sending;
     * first[p]: p hears before the others */
    uint8_t *todo = calloc(2 * (size_t)n, 1);
    int *order = malloc(sizeof(int) * (size_t)n);
    if (todo == NULL || order == NULL) {
        free(todo);
        free(order);
        free(fds);
        free(off);
        free(msg);
        return;
    }
    /* who hears first: a peer whose half-done connection is closed below (its handshake breaks
     * now; it must read why, not "reset by peer"), then the peers of this host (they find this
     * rank's shared memory gone), then the rest */
    uint8_t *first = todo + n;
    if (kind == COLLI_HELLO_ABORT) {
        /* the communicator is over: connections not yet authenticated are of no use, and their
         * descriptors, and the one held back, may be what the notices need (a rank that failed
         * for want of them) */
        for (int i = 0; i < s->npend; i++) {
            const sock_pending_t *p = &s->pend[i];
            if (p->got >= PEND_HELLO && p->hello.from_rank >= 0 && p->hello.from_rank < n)
                first[p->hello.from_rank] = 1;
            close(p->fd);
        }
        s->npend = 0;
        if (s->spare_fd >= 0)
            close(s->spare_fd);
        s->spare_fd = -1;
    }
    const char *my_host = comm->members[comm->rank].host_id;
    int norder = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int p = 0; p < n; p++) {
            const bool local =
                strncmp(comm->members[p].host_id, my_host, sizeof(comm->members[p].host_id)) == 0;
            if ((pass == 0 && first[p]) || (pass == 1 && !first[p] && local) ||
                (pass == 2 && !first[p] && !local))
                order[norder++] = p;
        }
    int open_n = 0, waiting = 0;
    for (int p = 0; p < n; p++) {
        fds[p] = -1;
        if (p == comm->rank || (only >= 0 && p != only))
            continue;
        if (colli_hello_make(&msg[p].h, comm->secret, kind, comm->rank, p, blame, (uint32_t)n) !=
            COLL_SUCCESS)
            continue;
        msg[p].len = (uint32_t)len;
        memcpy(msg[p].text, reason, len);
        colli_notice_mac(comm->secret, &msg[p].h, reason, len, msg[p].mac);
        todo[p] = 1;
        waiting++;
    }
    double deadline = colli_now() + 1.0;
    while ((open_n > 0 || waiting > 0) && colli_now() < deadline) {
        /* start what descriptors allow: out of them, the rest wait for one to close */
        for (int k = 0; k < norder && waiting > 0; k++) {
            const int p = order[k];
            if (todo[p] != 1)
                continue;
            if (colli_sock_connect_start(&comm->members[p].addr, &s->bind_addr, &fds[p]) !=
                COLLI_IO_OK) {
                fds[p] = -1;
                if (errno == EMFILE || errno == ENFILE)
                    break;
                todo[p] = 0; /* unreachable: nothing to do */
                waiting--;
                continue;
            }
            todo[p] = 2;
            waiting--;
            open_n++;
        }
        if (open_n == 0 && waiting > 0) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        for (int p = 0; p < n; p++) {
            if (fds[p] < 0)
                continue;
            struct pollfd pf = {.fd = fds[p], .events = POLLOUT};
            if (poll(&pf, 1, 0) <= 0)
                continue;
            ssize_t w =
                send(fds[p], (char *)&msg[p] + off[p], total - off[p], MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                off[p] += (size_t)w;
            if (off[p] >= total || (w < 0 && errno != EAGAIN && errno != EINTR)) {
                close(fds[p]);
                fds[p] = -1;
                open_n--;
            }
        }
        if (open_n > 0) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    for (int p = 0; p < n; p++)
        if (fds[p] >= 0)
            close(fds[p]);
    free(todo);
    free(order);
    free(fds);
    free(off);
    free(msg);
}

static coll_result_t sock_poll_notices(struct coll_comm *comm, int tp)
{
    sock_state_t *s = comm->tp[tp].state;
    return s == NULL ? COLL_SUCCESS : sock_notice_first(comm, s);
}

static int sock_listener_fd(struct coll_comm *comm, int tp)
{
    const sock_state_t *s = comm->tp[tp].state;
    return s != NULL ? s->listen_fd : -1;
}

const colli_transport_t colli_socket_transport = {
    .struct_size = sizeof(colli_transport_t),
    .name = "socket",
    .via = "sockets",
    .flags = COLLI_TPF_LISTENER | COLLI_TPF_STREAMS,
    .comm_init = sock_comm_init,
    .can_connect = sock_can_connect,
    .comm_ready = sock_comm_ready,
    .progress = sock_progress,
    .wait_arm = sock_wait_arm,
    .wait_done = sock_wait_done,
    .poll_notices = sock_poll_notices,
    .notify_abort = sock_notify_abort,
    .notify_stuck = sock_notify_stuck,
    .comm_fini = sock_comm_fini,
    .listener_fd = sock_listener_fd,
};
