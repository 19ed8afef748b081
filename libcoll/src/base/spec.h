/* NCCL's list syntax, shared by COLL_SOCKET_IFNAME and COLL_IB_HCA: an optional '^' (exclude
 * the matches), an optional '=' (exact names, else prefixes), then comma-separated entries. The
 * syntax is checked when the configuration is read, so it lives here, below every user. */
#ifndef COLLI_SPEC_H
#define COLLI_SPEC_H

#include <stdbool.h>
#include <stddef.h>

/* entry() decides one entry (a writable copy; exact tells '='); the result has the exclusion
 * applied. An empty spec matches everything. */
bool colli_spec_match(const char *spec, bool (*entry)(char *tok, bool exact, void *arg), void *arg);

/* Does device:port match an HCA list ("mlx5_0:1,mlx5_1", "^mlx5_2", "=mlx5_0")? Without '=' a
 * name is a prefix (mlx5 matches mlx5_0 and mlx5_1); a port limits the entry to that port; '^'
 * inverts the whole list. */
bool colli_ib_hca_match(const char *spec, const char *dev, int port);

/* Is spec a well-formed HCA list? false with the reason (empty entry, empty name, port not an
 * integer from 1 to 255, several ':' in one entry, a list that is only "^" or "="). */
bool colli_ib_hca_check(const char *spec, char *why, size_t whylen);

#endif
