/*
 * A rank's data listener (libcoll/src/transport/socket/socket.c: sock_accept_progress, which
 * runs read_pending, hello_arrived and admit on every pending connection), driven by a fake peer
 * over a Unix listener: up to four connections, each scripted by the input. A script's first
 * byte says how the peer behaves:
 *   bits 0-1  the kind of a made hello: data stream, abort, stuck or status notice
 *   bit  2    make the hello correctly (secret, MAC); else 64 bytes of the input
 *   bit  3    answer the challenge correctly; else 16 bytes of the input
 *   bit  4    MAC a notice's text correctly; else 16 bytes of the input
 *   bit  5    send the previous connection's hello again (a replay) instead of a new one
 *   bit  6    close right after the hello
 *   bit  7    keep the connection open (else closed at once after the script)
 * then from_rank, to_rank, stream, nranks as one byte each, and for notices a length byte and
 * the text. The listener belongs to rank 1 of 4 with two streams per peer. Invariants: a stream
 * is open only for a connection that answered the challenge with the secret; an abort is taken
 * only from a notice made with the secret.
 */
#include "base/comm.h"
#include "base/handshake.h"
#include "base/util.h"
#include "fuzz.h"
#include "transport/socket/socket.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define NRANKS   4
#define NSTREAMS 2
#define ME       1

static const uint8_t secret[16] = {0x6b, 0x63, 0x6f, 0x6c, 0x6c, 0x2d, 0x6c, 0x69,
                                   0x73, 0x74, 0x65, 0x6e, 0x65, 0x72, 0x21, 0x00};
static int lfd = -1;
static struct sockaddr_un laddr;
static socklen_t laddr_len;

static void listen_once(void)
{
    if (lfd < 0)
        lfd = fuzz_listen("listener", &laddr, &laddr_len);
}

typedef struct {
    const uint8_t *d;
    size_t n, at;
} input_t;

static uint8_t take(input_t *in)
{
    return in->at < in->n ? in->d[in->at++] : 0;
}

static void take_n(input_t *in, void *dst, size_t len)
{
    memset(dst, 0, len);
    size_t k = in->n - in->at < len ? in->n - in->at : len;
    memcpy(dst, in->d + in->at, k);
    in->at += k;
}

static void progress(struct coll_comm *comm, sock_state_t *s)
{
    bool progressed = false;
    (void)sock_accept_progress(comm, s, &progressed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t kinds[4] = {COLLI_HELLO_DATA, COLLI_HELLO_ABORT, COLLI_HELLO_STUCK,
                                     COLLI_HELLO_STATUS};
    listen_once();
    struct coll_comm *comm = calloc(1, sizeof(*comm));
    sock_state_t *s = calloc(1, sizeof(*s));
    if (comm == NULL || s == NULL)
        fuzz_fail("out of memory");
    comm->rank = ME;
    comm->nranks = NRANKS;
    memcpy(comm->secret, secret, 16);
    comm->tag = colli_comm_tag(secret);
    comm->members = calloc(NRANKS, sizeof(colli_member_t));
    comm->blame_rank = -1;
    s->listen_fd = lfd;
    s->nstreams = NSTREAMS;
    s->in = calloc(NRANKS * NSTREAMS, sizeof(sock_conn_t));
    for (int i = 0; i < NRANKS * NSTREAMS; i++)
        s->in[i].fd = -1;

    input_t in = {data, size, 0};
    int fds[4] = {-1, -1, -1, -1};
    bool authentic[NRANKS * NSTREAMS] = {false};
    bool abort_sent = false;
    colli_hello_t prev;
    memset(&prev, 0, sizeof(prev));
    bool prev_made = false;
    for (int c = 0; c < 4 && in.at < in.n; c++) {
        uint8_t mode = take(&in);
        uint8_t kind = kinds[mode & 3];
        int from = (int8_t)take(&in), to = (int8_t)take(&in);
        uint32_t stream = take(&in), nr = take(&in);
        colli_hello_t h;
        if (mode & 0x20) {
            h = prev;
        } else if (mode & 4) {
            if (colli_hello_make(&h, secret, kind, from, to, stream, nr) != COLL_SUCCESS)
                fuzz_fail("colli_hello_make");
        } else {
            take_n(&in, &h, sizeof(h));
        }
        /* made with the secret: now, or a replay of one that was */
        bool made = (mode & 0x20) ? prev_made : (mode & 4) != 0;
        prev = h;
        prev_made = made;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&laddr, laddr_len) != 0)
            fuzz_fail("the fake peer cannot connect");
        fds[c] = fd;
        if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h))
            continue;
        if (mode & 0x40) {
            close(fd);
            fds[c] = -1;
            progress(comm, s);
            continue;
        }
        progress(comm, s);
        if (h.kind == COLLI_HELLO_DATA) {
            colli_challenge_t ch;
            uint8_t resp[COLLI_RESPONSE_SIZE];
            ssize_t got = recv(fd, &ch, sizeof(ch), MSG_DONTWAIT);
            bool answered = false;
            if (got == (ssize_t)sizeof(ch) && (mode & 8))
                answered = colli_challenge_answer(secret, &h, &ch, resp);
            else
                take_n(&in, resp, sizeof(resp));
            send(fd, resp, sizeof(resp), MSG_NOSIGNAL);
            if (answered && h.from_rank >= 0 && h.from_rank < NRANKS && h.stream < NSTREAMS)
                authentic[h.from_rank * NSTREAMS + h.stream] = true;
        } else {
            uint8_t len = take(&in);
            char text[256];
            take_n(&in, text, len);
            uint8_t mac[16];
            if (mode & 0x10)
                colli_notice_mac(secret, &h, text, len, mac);
            else
                take_n(&in, mac, sizeof(mac));
            uint32_t l32 = len;
            send(fd, mac, sizeof(mac), MSG_NOSIGNAL);
            send(fd, &l32, sizeof(l32), MSG_NOSIGNAL);
            send(fd, text, len, MSG_NOSIGNAL);
            if (made && (mode & 0x10) && h.kind == COLLI_HELLO_ABORT)
                abort_sent = true;
        }
        progress(comm, s);
        if (!(mode & 0x80)) {
            close(fd);
            fds[c] = -1;
        }
        progress(comm, s);
    }
    progress(comm, s);
    for (int i = 0; i < NRANKS * NSTREAMS; i++)
        if (s->in[i].fd >= 0 && !authentic[i]) {
            fprintf(stderr, "stream %d of rank %d\n", i % NSTREAMS, i / NSTREAMS);
            fuzz_fail("a stream was opened without answering the challenge with the secret");
        }
    if (s->aborted && !abort_sent)
        fuzz_fail("an abort was taken from a notice not made with the secret");

    for (int c = 0; c < 4; c++)
        if (fds[c] >= 0)
            close(fds[c]);
    progress(comm, s); /* the listener sees the closes: nothing is left pending */
    for (int i = 0; i < NRANKS * NSTREAMS; i++)
        if (s->in[i].fd >= 0)
            close(s->in[i].fd);
    for (int i = 0; i < s->npend; i++)
        if (s->pend[i].fd >= 0)
            close(s->pend[i].fd);
    /* connections the listener never accepted (it holds at most SOCK_MAX_PENDING) */
    for (int fd; (fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
        close(fd);
    free(s->pend);
    free(s->in);
    free(s);
    free(comm->members);
    free(comm);
    return 0;
}
