/* Lower-case hex of byte strings: the agent's secret on the socket and in the Communicator, and
 * the secret of a unique id's printable form. Needs nothing but libc. */
#ifndef COLLI_PROTO_HEX_H
#define COLLI_PROTO_HEX_H

#include <stddef.h>

/* Writes 2*len lower-case digits and a NUL to out (2*len+1 bytes). */
void colli_proto_hex_encode(const unsigned char *in, size_t len, char *out);

/* Reads exactly 2*len hex digits (either case) into out; -1 when hex is NULL, of another length
 * or not hex (out may then be partly written). */
int colli_proto_hex_decode(const char *hex, unsigned char *out, size_t len);

#endif /* COLLI_PROTO_HEX_H */
