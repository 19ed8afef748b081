/* coll_comm_init_env: a communicator from the environment, whichever launcher set it. The kcoll
 * agent (COLL_AGENT_SOCKET) first, then coll-run's COLL_UNIQUE_ID/COLL_RANK/COLL_NRANKS, then
 * torchrun's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE: rank 0 hosts the bootstrap root on
 * MASTER_ADDR:MASTER_PORT (COLL_MASTER_PORT overrides the port: under torchrun its TCPStore holds
 * MASTER_PORT), and the job's secret comes from COLL_JOB_SECRET. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/agent_client.h"
#include "bootstrap/bootstrap.h"
#include "base/sockutil.h"
#include "base/util.h"
#include "core/core.h"
#include "hex.h" /* proto/ */

static const char *env(const char *name)
{
    const char *v = secure_getenv(name);
    return v != NULL && *v != '\0' ? v : NULL;
}

/* A required integer variable in [min, max]. */
static coll_result_t env_long(const char *name, long min, long max, const char *why, long *out)
{
    const char *v = env(name);
    if (v == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE, "coll_comm_init_env: %s is not set (%s)",
                         name, why);
    if (!colli_parse_long(v, min, max, out))
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "coll_comm_init_env: %s=\"%s\" is not a number from %ld to %ld (%s)", name,
                         v, min, max, why);
    return COLL_SUCCESS;
}

/* coll-run's variables: the id string, the rank and the world size. */
static coll_result_t from_unique_id(coll_comm_t *out, const char *id_str)
{
    coll_unique_id_t id;
    long rank, nranks;
    coll_result_t status = coll_unique_id_from_string(&id, id_str);
    if (status == COLL_SUCCESS)
        status =
            env_long(COLL_ENV_NRANKS, 1, 1 << 24, "the world size, with COLL_UNIQUE_ID", &nranks);
    if (status == COLL_SUCCESS)
        status = env_long(COLL_ENV_RANK, 0, nranks - 1, "this process's rank, with COLL_UNIQUE_ID",
                          &rank);
    if (status != COLL_SUCCESS)
        return status;
    return coll_comm_init_rank(out, (int)nranks, id, (int)rank);
}

/* The secret every rank must share: COLL_JOB_SECRET, or (with a WARN: nothing is authenticated
 * then) one derived from what every rank of the job sees alike. */
static coll_result_t job_secret(const char *addr, long port, long world, long rank,
                                uint8_t secret[16])
{
    const char *hex = env("COLL_JOB_SECRET");
    if (hex != NULL) {
        if (strlen(hex) != 32 || colli_proto_hex_decode(hex, secret, 16) != 0)
            return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                             "coll_comm_init_env: COLL_JOB_SECRET must be 32 hex digits, the same "
                             "on every rank (e.g. from `openssl rand -hex 16`); it is %zu "
                             "characters long",
                             strlen(hex));
        return COLL_SUCCESS;
    }
    const char *run = env("TORCHELASTIC_RUN_ID");
    char text[512];
    snprintf(text, sizeof(text), "kcoll-master|%s|%ld|%ld|%s", addr, port, world, run ? run : "");
    static const uint8_t zero_key[16];
    colli_siphash128(zero_key, text, strlen(text), secret);
    if (rank == 0)
        coll_warn(INIT,
                  "coll_comm_init_env: COLL_JOB_SECRET is not set, so this job's connections are "
                  "not authenticated (anyone who can reach %s:%ld could join or disturb it, as "
                  "with torchrun's store); set COLL_JOB_SECRET=$(openssl rand -hex 16) to the "
                  "same value on every rank",
                  addr, port);
    return COLL_SUCCESS;
}

/* What binding addr would fail with (0: it would work), as the root's listener binds. */
static int bind_errno(const struct sockaddr_storage *addr)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int one = 1, e = 0;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)addr, colli_sockaddr_len(addr)) != 0)
        e = errno;
    close(fd);
    return e;
}

coll_result_t colli_host_root(const struct sockaddr_storage *root, const uint8_t secret[16],
                              double timeout, const char *root_busy, pthread_t *thread)
{
    struct sockaddr_storage at = *root, bound;
    int e = bind_errno(&at);
    if (e == EADDRNOTAVAIL) { /* MASTER_ADDR names a service, a NAT, another name */
        if (at.ss_family == AF_INET)
            memset(&((struct sockaddr_in *)&at)->sin_addr, 0, sizeof(struct in_addr));
        else
            memset(&((struct sockaddr_in6 *)&at)->sin6_addr, 0, sizeof(struct in6_addr));
        coll_info(INIT, "the root's address is not one of this host's (a service, a NAT, "
                        "another name): the bootstrap root listens on every address");
        e = bind_errno(&at);
    }
    if (e == EADDRINUSE)
        return COLLI_ERR(INIT, COLL_ERR_NETWORK, "rank 0 cannot host the bootstrap root: %s. %s",
                         strerror(e), root_busy);
    return colli_root_start(&at, secret, timeout, &bound, thread);
}

static coll_result_t from_master(coll_comm_t *out, const char *addr)
{
    long port, world, rank;
    const char *port_var = env("COLL_MASTER_PORT") != NULL ? "COLL_MASTER_PORT" : "MASTER_PORT";
    coll_result_t status =
        env_long(port_var, 1, 65535, "the bootstrap port, with MASTER_ADDR", &port);
    if (status == COLL_SUCCESS)
        status = env_long("WORLD_SIZE", 1, 1 << 24, "the world size, with MASTER_ADDR", &world);
    if (status == COLL_SUCCESS)
        status = env_long("RANK", 0, world - 1, "this process's rank, with MASTER_ADDR", &rank);
    if (status != COLL_SUCCESS)
        return status;
    char busy[200];
    snprintf(busy, sizeof(busy),
             "The port of %s is taken on this host (under torchrun, its store holds "
             "MASTER_PORT): set COLL_MASTER_PORT to a free port, the same on every rank",
             port_var);
    colli_create_t c = {
        .nranks = (int)world, .rank = (int)rank, .host_root = rank == 0, .root_busy = busy};
    if ((status = job_secret(addr, port, world, rank, c.secret)) != COLL_SUCCESS ||
        (status = colli_sock_resolve(addr, (int)port, &c.root, "MASTER_ADDR:port",
                                     " (MASTER_ADDR must name rank 0's host, as for "
                                     "torchrun)")) != COLL_SUCCESS)
        return status;
    coll_info(INIT, "coll_comm_init_env: rank %ld of %ld from MASTER_ADDR=%s %s=%ld%s", rank, world,
              addr, port_var, port, rank == 0 ? " (this rank hosts the bootstrap root)" : "");
    return colli_comm_create(&c, out);
}

coll_result_t coll_comm_init_env(coll_comm_t *out)
{
    if (out == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_env: comm is NULL (pass a coll_comm_t to fill)");
    *out = NULL;
    if (env(COLL_ENV_AGENT_SOCKET) != NULL)
        return coll_comm_init_agent(out);
    const char *v = env(COLL_ENV_UNIQUE_ID);
    if (v != NULL)
        return from_unique_id(out, v);
    if ((v = env("MASTER_ADDR")) != NULL)
        return from_master(out, v);
    return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                     "coll_comm_init_env: nothing to start from: set COLL_AGENT_SOCKET (the kcoll "
                     "agent), COLL_UNIQUE_ID with COLL_RANK and COLL_NRANKS (coll-run), or "
                     "MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (torchrun)");
}
