/*
 * NVIDIA NCCL's environment-plugin ABI, version 1 (NCCL >= 2.28.7; NCCL's plugins/env docs):
 * the layout of the exported ncclEnvPlugin_v1 struct and the result codes its functions return.
 * Written from the documented interface so that the plugin builds without nccl.h;
 * tests/ncclenv/ncclenv_check.c asserts the codes against the real nccl.h where it exists.
 */
#ifndef KCOLL_NCCL_ENV_ABI_H
#define KCOLL_NCCL_ENV_ABI_H

#include <stdint.h>

/* NCCL's ncclResult_t values the plugin returns (an int-sized enum in nccl.h; named apart so
 * that a file may include nccl.h too). */
typedef int kcoll_nccl_result_t;
enum {
    KCOLL_NCCL_SUCCESS = 0,
    KCOLL_NCCL_SYSTEM_ERROR = 2,
    KCOLL_NCCL_INTERNAL_ERROR = 3,
    KCOLL_NCCL_INVALID_ARGUMENT = 4,
    KCOLL_NCCL_INVALID_USAGE = 5,
};

typedef struct {
    const char *name; /* shown in NCCL's INFO lines */
    /* Called once at NCCL's first init with NCCL's version; a result other than success
     * fails that init (NCCL 2.28.9 returns it from ncclGetUniqueId / ncclCommInitRank). */
    kcoll_nccl_result_t (*init)(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix);
    kcoll_nccl_result_t (*finalize)(void);
    /* The value of variable name, or NULL when unset; the string must stay valid until
     * finalize or the next getEnv of the same name. */
    const char *(*getEnv)(const char *name);
} kcoll_nccl_env_v1_t;

#define NCCL_ENV_EXPORT __attribute__((visibility("default")))

#endif /* KCOLL_NCCL_ENV_ABI_H */
