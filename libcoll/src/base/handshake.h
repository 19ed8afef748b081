/* The connection handshake (wire protocol 3). Every kcoll connection, to a rank's listener or to
 * the bootstrap root, opens with it:
 *
 *   connector -> acceptor  hello (64 bytes: kind, ranks, stream, a fresh nonce, MAC by the secret)
 *   acceptor  -> connector challenge (32 bytes: a fresh nonce of its own, and a MAC binding it to
 *                          the hello: the acceptor proves it holds the secret)
 *   connector -> acceptor  response (16 bytes: a MAC binding the hello and the challenge)
 *
 * A hello recorded off the network and sent again is worthless: the acceptor's nonce is new for
 * each connection, and the response to it needs the secret. Both sides then derive a key that
 * belongs to this connection alone (it authenticates what follows: frame headers, the member
 * record, the root's answer). */
#ifndef COLLI_HANDSHAKE_H
#define COLLI_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/wire.h"

typedef struct colli_challenge {
    uint8_t nonce[16];
    uint8_t mac[16];
} colli_challenge_t;
_Static_assert(sizeof(colli_challenge_t) == 32, "challenge is 32 bytes");

#define COLLI_RESPONSE_SIZE 16u

/* Acceptor: a fresh challenge for the verified hello h. */
coll_result_t colli_challenge_make(const uint8_t secret[16], const colli_hello_t *h,
                                   colli_challenge_t *c);
/* Acceptor: make a fresh challenge for hello h and send it on the accepted socket fd (32 bytes
 * into the empty buffer of a fresh socket: sent whole or failed). False with *why on failure. */
bool colli_challenge_send(int fd, const uint8_t secret[16], const colli_hello_t *h,
                          colli_challenge_t *c, const char **why);
/* Acceptor: is resp the answer to challenge c for hello h? */
bool colli_response_ok(const uint8_t secret[16], const colli_hello_t *h, const colli_challenge_t *c,
                       const uint8_t resp[COLLI_RESPONSE_SIZE]);
/* Connector: check that challenge c comes from a holder of the secret, and answer it. */
bool colli_challenge_answer(const uint8_t secret[16], const colli_hello_t *h,
                            const colli_challenge_t *c, uint8_t resp[COLLI_RESPONSE_SIZE]);
/* Both: the key of this connection. */
void colli_conn_key(const uint8_t secret[16], const colli_hello_t *h, const colli_challenge_t *c,
                    uint8_t key[16]);

/* The connector's side, for non-blocking sockets. */
typedef struct colli_hs {
    colli_hello_t hello;
    colli_challenge_t chal;
    size_t got;      /* bytes of the challenge read */
    uint8_t key[16]; /* once done */
} colli_hs_t;

enum { COLLI_HS_AGAIN = 1, COLLI_HS_BADAUTH = -10 };

/* Make the hello and send it on a freshly connected socket (64 bytes into an empty socket
 * buffer: sent whole or failed). Returns COLLI_IO_OK or COLLI_IO_ERR (errno). */
int colli_hs_begin(colli_hs_t *hs, int fd, const uint8_t secret[16], uint8_t kind, int from, int to,
                   uint32_t stream, uint32_t nranks);
/* Read the challenge without blocking; once whole, check it and send the response. Returns
 * COLLI_IO_OK (done: hs->key is set), COLLI_HS_AGAIN (wait for POLLIN), COLLI_IO_EOF, COLLI_IO_ERR
 * (errno), or COLLI_HS_BADAUTH (the acceptor does not hold the secret). */
int colli_hs_step(colli_hs_t *hs, int fd, const uint8_t secret[16]);
/* Both steps with a deadline, on a connected socket (blocking use: bootstrap). Returns
 * COLLI_IO_* or COLLI_HS_BADAUTH. */
int colli_hs_run(colli_hs_t *hs, int fd, const uint8_t secret[16], uint8_t kind, int from, int to,
                 uint32_t stream, uint32_t nranks, double deadline);
/* Text for a colli_hs_* / COLLI_IO_* result. */
const char *colli_hs_str(int rc, int err);

/* Notices (abort, stuck, status) are one-way: hello, then this MAC over the hello and the text,
 * then the text. The receiver accepts each hello's nonce once. */
void colli_notice_mac(const uint8_t secret[16], const colli_hello_t *h, const char *text,
                      size_t len, uint8_t mac[16]);

/* The bootstrap root's answer: the rank's record and the answer are authenticated with the
 * connection's key. The table is covered by a digest (chained SipHash keyed with the secret, one
 * step per record: computed once, whatever the number of ranks); the answer's MAC covers its
 * header, its message and that digest (all zeros when no table follows). */
void colli_digest_step(const uint8_t secret[16], uint8_t digest[16], const void *rec, size_t len);
void colli_reply_mac(const uint8_t key[16], const colli_root_reply_t *h, const char *msg,
                     const uint8_t digest[16], uint8_t mac[16]);

/* The MAC a frame header carries in its tag field on an authenticated connection: keyed with the
 * connection's key, over the header (tag zeroed) and the frame's number on the connection, so
 * that an injected, replayed or reordered frame does not verify. */
uint64_t colli_frame_mac(const uint8_t key[16], const colli_frame_t *f, uint64_t counter);

#endif
