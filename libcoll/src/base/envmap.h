/* NCCL's names for kcoll's settings, and the audit of the environment (envmap.c). A COLL_* name
 * wins; its NCCL twin is read when it is unset (a user's NCCL habit is honoured, and said so);
 * both kcoll's API and its libnccl.so.2 read settings through this one mapping. */
#ifndef COLLI_ENVMAP_H
#define COLLI_ENVMAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct colli_env_alias {
    const char *coll; /* "COLL_SOCKET_IFNAME" */
    const char *nccl; /* "NCCL_SOCKET_IFNAME" */
    /* NCCL's value as kcoll's (NULL: the same syntax); NULL when it has no kcoll meaning */
    const char *(*translate)(const char *nccl_value);
} colli_env_alias_t;

/* The NCCL twin of a COLL_* name, or NULL. */
const colli_env_alias_t *colli_env_alias(const char *coll_name);
/* The twin's value in kcoll's syntax, NULL when unset, empty or untranslatable (*raw: as set). */
const char *colli_env_nccl_value(const colli_env_alias_t *a, const char **raw);

/* Once per process, at the first communicator: WARN for an unknown COLL_* name (with the closest
 * known one) and for an NCCL twin that disagrees with its COLL_* name; INFO for an NCCL twin
 * honoured, for NCCL knobs kcoll does not read (with the equivalent) and GLOO_SOCKET_IFNAME. */
void colli_env_audit(void);

#endif
