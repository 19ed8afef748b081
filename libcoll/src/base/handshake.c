/* The connection handshake and the keys it derives (see handshake.h). */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "base/handshake.h"
#include "base/sockutil.h"
#include "base/util.h"

/* SipHash-128(secret, label || hello's MAC || challenge nonce): the hello's MAC stands for the
 * whole hello (it covers every field and the connector's nonce). */
static void bind3(const uint8_t secret[16], const char label[8], const colli_hello_t *h,
                  const uint8_t nonce[16], uint8_t out[16])
{
    uint8_t buf[8 + 16 + 16];
    memcpy(buf, label, 8);
    memcpy(buf + 8, h->mac, 16);
    memcpy(buf + 24, nonce, 16);
    colli_siphash128(secret, buf, sizeof(buf), out);
}

coll_result_t colli_challenge_make(const uint8_t secret[16], const colli_hello_t *h,
                                   colli_challenge_t *c)
{
    coll_result_t status = colli_random_bytes(c->nonce, sizeof(c->nonce));
    if (status != COLL_SUCCESS)
        return status;
    bind3(secret, "kc-chal", h, c->nonce, c->mac);
    return COLL_SUCCESS;
}

bool colli_challenge_send(int fd, const uint8_t secret[16], const colli_hello_t *h,
                          colli_challenge_t *c, const char **why)
{
    if (colli_challenge_make(secret, h, c) != COLL_SUCCESS) {
        *why = "no random bytes for the challenge";
        return false;
    }
    ssize_t w = send(fd, c, sizeof(*c), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == (ssize_t)sizeof(*c))
        return true;
    *why = w < 0 ? strerror(errno) : "could not send the challenge";
    return false;
}

bool colli_response_ok(const uint8_t secret[16], const colli_hello_t *h, const colli_challenge_t *c,
                       const uint8_t resp[COLLI_RESPONSE_SIZE])
{
    uint8_t want[16];
    bind3(secret, "kc-resp", h, c->nonce, want);
    return colli_mem_equal(want, resp, sizeof(want));
}

bool colli_challenge_answer(const uint8_t secret[16], const colli_hello_t *h,
                            const colli_challenge_t *c, uint8_t resp[COLLI_RESPONSE_SIZE])
{
    uint8_t want[16];
    bind3(secret, "kc-chal", h, c->nonce, want);
    if (!colli_mem_equal(want, c->mac, sizeof(want)))
        return false;
    bind3(secret, "kc-resp", h, c->nonce, resp);
    return true;
}

void colli_conn_key(const uint8_t secret[16], const colli_hello_t *h, const colli_challenge_t *c,
                    uint8_t key[16])
{
    bind3(secret, "kc-key\0", h, c->nonce, key);
}

int colli_hs_begin(colli_hs_t *hs, int fd, const uint8_t secret[16], uint8_t kind, int from, int to,
                   uint32_t stream, uint32_t nranks)
{
    memset(hs, 0, sizeof(*hs));
    if (colli_hello_make(&hs->hello, secret, kind, from, to, stream, nranks) != COLL_SUCCESS) {
        errno = EIO;
        return COLLI_IO_ERR;
    }
    ssize_t w = send(fd, &hs->hello, sizeof(hs->hello), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == (ssize_t)sizeof(hs->hello))
        return COLLI_IO_OK;
    if (w >= 0)
        errno = EIO; /* a short write into an empty buffer: the socket is broken */
    return COLLI_IO_ERR;
}

int colli_hs_step(colli_hs_t *hs, int fd, const uint8_t secret[16])
{
    while (hs->got < sizeof(hs->chal)) {
        ssize_t n = recv(fd, (char *)&hs->chal + hs->got, sizeof(hs->chal) - hs->got, MSG_DONTWAIT);
        if (n == 0)
            return COLLI_IO_EOF;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? COLLI_HS_AGAIN
                                                                             : COLLI_IO_ERR;
        hs->got += (size_t)n;
        if (hs->got < sizeof(hs->chal))
            continue;
        uint8_t resp[COLLI_RESPONSE_SIZE];
        if (!colli_challenge_answer(secret, &hs->hello, &hs->chal, resp))
            return COLLI_HS_BADAUTH;
        /* 16 bytes after the 64 of the hello, long read by now: sent whole or failed */
        ssize_t w = send(fd, resp, sizeof(resp), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w != (ssize_t)sizeof(resp)) {
            if (w >= 0)
                errno = EIO;
            return COLLI_IO_ERR;
        }
        colli_conn_key(secret, &hs->hello, &hs->chal, hs->key);
    }
    return COLLI_IO_OK;
}

int colli_hs_run(colli_hs_t *hs, int fd, const uint8_t secret[16], uint8_t kind, int from, int to,
                 uint32_t stream, uint32_t nranks, double deadline)
{
    int rc = colli_hs_begin(hs, fd, secret, kind, from, to, stream, nranks);
    while (rc == COLLI_IO_OK || rc == COLLI_HS_AGAIN) {
        rc = colli_hs_step(hs, fd, secret);
        if (rc != COLLI_HS_AGAIN)
            return rc;
        double left = deadline - colli_now();
        if (left <= 0)
            return COLLI_IO_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left > 1.0 ? 1000 : (int)(left * 1000) + 1) < 0 && errno != EINTR)
            return COLLI_IO_ERR;
    }
    return rc;
}

const char *colli_hs_str(int rc, int err)
{
    if (rc == COLLI_HS_BADAUTH)
        return "the peer's challenge failed authentication (it does not hold this "
               "communicator's secret)";
    return colli_io_str(rc, err);
}

void colli_notice_mac(const uint8_t secret[16], const colli_hello_t *h, const char *text,
                      size_t len, uint8_t mac[16])
{
    uint8_t buf[8 + 16 + 4 + 1024];
    if (len > 1024)
        len = 1024;
    memcpy(buf, "kc-note", 8);
    memcpy(buf + 8, h->mac, 16);
    uint32_t l = (uint32_t)len;
    memcpy(buf + 24, &l, 4);
    memcpy(buf + 28, text, len);
    colli_siphash128(secret, buf, 28 + len, mac);
}

void colli_digest_step(const uint8_t secret[16], uint8_t digest[16], const void *rec, size_t len)
{
    uint8_t buf[16 + sizeof(colli_wire_member_t) + 16];
    if (len > sizeof(buf) - 16)
        len = sizeof(buf) - 16;
    memcpy(buf, digest, 16);
    memcpy(buf + 16, rec, len);
    colli_siphash128(secret, buf, 16 + len, digest);
}

void colli_reply_mac(const uint8_t key[16], const colli_root_reply_t *h, const char *msg,
                     const uint8_t digest[16], uint8_t mac[16])
{
    enum { MSG_MAX = 8192 };
    static const uint8_t zero[16];
    uint8_t buf[8 + offsetof(colli_root_reply_t, mac) + 16 + MSG_MAX];
    size_t n = 0, len = h->msg_len > MSG_MAX ? MSG_MAX : h->msg_len;
    memcpy(buf, "kc-repl", 8);
    n += 8;
    memcpy(buf + n, h, offsetof(colli_root_reply_t, mac));
    n += offsetof(colli_root_reply_t, mac);
    memcpy(buf + n, digest != NULL ? digest : zero, 16);
    n += 16;
    memcpy(buf + n, msg, len);
    n += len;
    colli_siphash128(key, buf, n, mac);
}

uint64_t colli_frame_mac(const uint8_t key[16], const colli_frame_t *f, uint64_t counter)
{
    struct {
        colli_frame_t f;
        uint64_t counter;
    } m;
    memcpy(&m.f, f, sizeof(m.f));
    m.f.tag = 0;
    m.counter = counter;
    return colli_siphash64(key, &m, sizeof(m));
}
