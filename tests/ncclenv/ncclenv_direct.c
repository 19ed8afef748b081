/* Drives libnccl-env.so as NCCL would, without NCCL: dlopen, ncclEnvPlugin_v1, init with a
 * given version, getEnv of the names given, finalize. Prints one line per step:
 *   init=RESULT ms=ELAPSED
 *   NAME=VALUE (or NAME=(null))
 * Usage: ncclenv_direct PLUGIN.so MAJOR.MINOR.PATCH [NAME...]  (exit 0 when it ran, 2 on usage)
 *
 * NCCLENV_DIRECT_REINIT=N: then N more inits (two NCCL copies in one process share the plugin)
 * while a thread reads the first NAME in a loop, and one line
 *   reinit=N failed=F reads=R changed=C
 * where C counts the reads that differed from the value before the re-inits.
 *
 * NCCLENV_DIRECT_HOLD_MS=N: after the getEnv lines, "held" and N ms of waiting (a process blocked
 * in a collective) before finalize: the plugin's thread that asks whether a rank ended runs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_env_abi.h"

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
    const kcoll_nccl_env_v1_t *p;
    const char *name;
    char first[256];
    atomic_int stop;
    long reads, changed;
} watch_t;

static void *reader(void *arg)
{
    watch_t *w = arg;
    while (!atomic_load(&w->stop)) {
        const char *v = w->p->getEnv(w->name);
        w->reads++;
        if (strcmp(v ? v : "(null)", w->first) != 0)
            w->changed++;
    }
    return NULL;
}

/* N more inits while a thread reads name; one summary line. */
static int reinit(const kcoll_nccl_env_v1_t *p, const char *name, int n, unsigned maj, unsigned min,
                  unsigned pat)
{
    static watch_t w;
    pthread_t t;
    int failed = 0;
    const char *v = p->getEnv(name);
    w.p = p;
    w.name = name;
    snprintf(w.first, sizeof(w.first), "%s", v ? v : "(null)");
    if (pthread_create(&t, NULL, reader, &w) != 0)
        return 2;
    for (int i = 0; i < n; i++)
        failed += p->init((uint8_t)maj, (uint8_t)min, (uint8_t)pat, "") != 0;
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    printf("reinit=%d failed=%d reads=%ld changed=%ld\n", n, failed, w.reads, w.changed);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned maj, min, pat;
    void *lib;
    const kcoll_nccl_env_v1_t *p;
    long long t0;
    kcoll_nccl_result_t r;
    if (argc < 3 || sscanf(argv[2], "%u.%u.%u", &maj, &min, &pat) != 3 || maj > 255 || min > 255 ||
        pat > 255) {
        fprintf(stderr, "usage: %s PLUGIN.so MAJOR.MINOR.PATCH [NAME...]\n", argv[0]);
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    p = (const kcoll_nccl_env_v1_t *)dlsym(lib, "ncclEnvPlugin_v1");
    if (!p || !p->name || !p->init || !p->finalize || !p->getEnv) {
        fprintf(stderr, "ncclEnvPlugin_v1 missing or incomplete\n");
        return 2;
    }
    t0 = now_ms();
    r = p->init((uint8_t)maj, (uint8_t)min, (uint8_t)pat, "");
    printf("init=%d ms=%lld name=%s\n", r, now_ms() - t0, p->name);
    for (int i = 3; i < argc; i++) {
        const char *v = p->getEnv(argv[i]);
        printf("%.64s=%s\n", argv[i], v ? v : "(null)");
    }
    const char *hold = getenv("NCCLENV_DIRECT_HOLD_MS");
    if (hold != NULL) {
        struct timespec ts = {atoi(hold) / 1000, (long)(atoi(hold) % 1000) * 1000000L};
        printf("held\n");
        fflush(stdout);
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    const char *again = getenv("NCCLENV_DIRECT_REINIT");
    if (again != NULL && argc > 3 && reinit(p, argv[3], atoi(again), maj, min, pat) != 0)
        return 2;
    printf("getenv(NULL)=%s\n", p->getEnv(NULL) ? "value" : "(null)");
    printf("finalize=%d\n", p->finalize());
    fflush(stdout);
    dlclose(lib);
    return 0;
}
