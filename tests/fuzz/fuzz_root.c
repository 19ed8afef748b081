/*
 * The bootstrap root (libcoll/src/bootstrap/root.c: serve, pending_check, hello_arrived, admit,
 * check_versions, its answers), driven by a fake peer thread over a Unix listener while serve()
 * runs in the calling thread. The file is included so that serve() can run on a listener made
 * here and be stopped when the peer is done (its deadline is moved; a last connection wakes it).
 * Up to four connections, each scripted by the input; a script's first byte:
 *   bits 0-1  the hello's kind: bootstrap, boot error, data (wrong for a root), kind from input
 *   bit  2    make the hello correctly (secret, MAC); else 64 bytes of the input
 *   bit  3    answer the challenge correctly; else 16 bytes of the input
 *   bit  4    MAC the record with the connection key; else 16 bytes of the input
 *   bit  5    wire protocol 2 (no challenge: the record follows the hello at once)
 *   bit  6    close right after the hello
 *   bit  7    make the record's rank and world size agree with the hello
 * then from_rank and nranks (a byte each; nranks 0 means 1) and the record's 640 bytes.
 * Invariants: serve() returns; no rank is admitted without answering the challenge (the
 * authenticated ranks must cover every slot the root filled).
 */
#include "bootstrap/root.c"

#include <sys/un.h>

#include "fuzz.h"

static const uint8_t secret[16] = {0x6b, 0x63, 0x6f, 0x6c, 0x6c, 0x2d, 0x72, 0x6f,
                                   0x6f, 0x74, 0x2d, 0x66, 0x75, 0x7a, 0x7a, 0x21};
static int lfd = -1;
static struct sockaddr_un laddr;
static socklen_t laddr_len;

typedef struct {
    const uint8_t *d;
    size_t n;
    root_t *r;
    bool authentic[8]; /* ranks whose record the peer sent with the secret */
    int serve_done;    /* serve() has returned: no answer will come */
} script_t;

static uint8_t take(script_t *in, size_t *at)
{
    return *at < in->n ? in->d[(*at)++] : 0;
}

static void take_n(script_t *in, size_t *at, void *dst, size_t len)
{
    memset(dst, 0, len);
    size_t k = in->n - *at < len ? in->n - *at : len;
    memcpy(dst, in->d + *at, k);
    *at += k;
}

static int peer_connect(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&laddr, laddr_len) != 0)
        fuzz_fail("the fake peer cannot connect");
    return fd;
}

/* Wait up to a second for n bytes (the root answers at once or drops the connection), less once
 * serve() has returned. */
static bool recv_within(script_t *sc, int fd, void *buf, size_t n)
{
    size_t got = 0;
    for (int tries = 0; got < n; tries++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = fuzz_poll(&p, 1, 10);
        if (rc < 0 || tries >= 100)
            return false;
        if (rc == 0) {
            if (__atomic_load_n(&sc->serve_done, __ATOMIC_ACQUIRE))
                return false;
            continue;
        }
        ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    return true;
}

static void *peer(void *arg)
{
    script_t *sc = arg;
    static const uint8_t kinds[3] = {COLLI_HELLO_BOOTSTRAP, COLLI_HELLO_BOOT_ERROR,
                                     COLLI_HELLO_DATA};
    int fds[4] = {-1, -1, -1, -1};
    size_t at = 0;
    for (int c = 0; c < 4 && at < sc->n; c++) {
        uint8_t mode = take(sc, &at);
        int from = take(sc, &at) % 8;
        uint32_t nr = take(sc, &at);
        uint8_t kind = (mode & 3) < 3 ? kinds[mode & 3] : take(sc, &at);
        colli_hello_t h;
        if (mode & 4) {
            colli_hello_make(&h, secret, kind, from, -1, 0, nr ? nr : 1);
            if (mode & 0x20) {
                h.proto = 2;
                colli_siphash128(secret, &h, offsetof(colli_hello_t, mac), h.mac);
            }
        } else {
            take_n(sc, &at, &h, sizeof(h));
        }
        colli_wire_member_t rec;
        take_n(sc, &at, &rec, sizeof(rec));
        if (mode & 0x80) {
            rec.rank = h.from_rank;
            rec.nranks = (int32_t)h.nranks;
        }
        int fd = fds[c] = peer_connect();
        if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) || (mode & 0x40))
            continue;
        if (h.proto < 3 && (mode & 4)) {
            send(fd, &rec, sizeof(rec), MSG_NOSIGNAL); /* protocol 2: no handshake */
            continue;
        }
        colli_challenge_t ch;
        uint8_t resp[COLLI_RESPONSE_SIZE], key[16], mac[16];
        bool answered = false;
        if (recv_within(sc, fd, &ch, sizeof(ch)) && (mode & 8))
            answered = colli_challenge_answer(secret, &h, &ch, resp);
        if (!answered)
            take_n(sc, &at, resp, sizeof(resp));
        if (answered && (mode & 0x10)) {
            colli_conn_key(secret, &h, &ch, key);
            colli_siphash128(key, &rec, sizeof(rec), mac);
        } else {
            take_n(sc, &at, mac, sizeof(mac));
        }
        if (answered && h.from_rank >= 0 && h.from_rank < 8)
            sc->authentic[h.from_rank] = true;
        send(fd, resp, sizeof(resp), MSG_NOSIGNAL);
        send(fd, &rec, sizeof(rec), MSG_NOSIGNAL);
        send(fd, mac, sizeof(mac), MSG_NOSIGNAL);
    }
    /* done: let serve() see its deadline now (a last connection wakes its poll) */
    double past = 0;
    __atomic_store(&sc->r->deadline, &past, __ATOMIC_SEQ_CST);
    close(peer_connect());
    for (int c = 0; c < 4; c++)
        if (fds[c] >= 0)
            close(fds[c]);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (lfd < 0)
        lfd = fuzz_listen("root", &laddr, &laddr_len);
    root_t *r = root_new(secret, 10.0);
    if (r == NULL)
        fuzz_fail("out of memory");
    r->listen_fd = lfd;
    script_t sc = {.d = data, .n = size, .r = r};
    pthread_t t;
    if (pthread_create(&t, NULL, peer, &sc) != 0)
        fuzz_fail("cannot start the fake peer");
    serve(r);
    __atomic_store_n(&sc.serve_done, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    /* every slot filled over protocol 3 (a record or an error report) answered the challenge */
    for (int i = 0; r->slots && i < r->nranks && i < 8; i++)
        if (r->slots[i].present && !r->slots[i].ak.legacy && !sc.authentic[i]) {
            fprintf(stderr, "rank %d\n", i);
            fuzz_fail("the root admitted a rank that did not answer the challenge");
        }
    for (int i = 0; i < r->npend; i++)
        if (r->pend[i].fd >= 0)
            close(r->pend[i].fd);
    for (int i = 0; r->slots && i < r->nranks; i++)
        if (r->slots[i].fd >= 0)
            close(r->slots[i].fd);
    for (int fd; (fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
        close(fd);
    free(r->pend);
    free(r->pfd);
    free(r->slots);
    free(r);
    return 0;
}
