/* Checks inside the pod before the library starts: /dev/shm size, RLIMIT_MEMLOCK and
 * /dev/infiniband for an InfiniBand pin, and once the root is known whether the pinned address
 * is on its network. Each problem is a named condition with the fix. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#define MEMLOCK_MIN_BYTES (64LL << 20)

static void cond_set(agent_condition_t *c, const char *type, int fatal, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void cond_set(agent_condition_t *c, const char *type, int fatal, const char *fmt, ...)
{
    va_list ap;
    memset(c, 0, sizeof(*c));
    snprintf(c->type, sizeof(c->type), "%s", type);
    c->fatal = fatal;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof(c->message), fmt, ap);
    va_end(ap);
}

static int dir_has_entries(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

int agent_preflight(agent_ctx_t *ctx, const agent_facts_t *f, agent_condition_t *fatal)
{
    const char *shm = ctx->opt.shm_path ? ctx->opt.shm_path : "/dev/shm";
    const char *ibdir = ctx->opt.ib_dev_dir ? ctx->opt.ib_dev_dir : "/dev/infiniband";
    int require_ib = strcmp(f->transport, "RequireIB") == 0;
    int want_ib = require_ib || strcmp(f->transport, "PreferIB") == 0;
    struct statvfs sv;
    struct rlimit rl;
    agent_condition_t c;
    int rc = 0;

    if (statvfs(shm, &sv) != 0) {
        cond_set(&c, "ShmMissing", 0,
                 "%s is not available (%s): shared-memory transport between ranks of one node is "
                 "off; mount an emptyDir with medium: Memory at /dev/shm",
                 shm, strerror(errno));
        agent_add_warning(ctx, &c);
    } else {
        long long size = (long long)sv.f_blocks * (long long)sv.f_frsize;
        if (ctx->opt.min_shm_bytes > 0 && size < ctx->opt.min_shm_bytes) {
            cond_set(&c, "ShmTooSmall", 0,
                     "%s is %lld MiB, below the %lld MiB the shared-memory transport needs (the "
                     "container runtime default is 64 MiB); mount an emptyDir with medium: "
                     "Memory and sizeLimit >= %lld Mi at /dev/shm",
                     shm, size >> 20, (long long)ctx->opt.min_shm_bytes >> 20,
                     (long long)ctx->opt.min_shm_bytes >> 20);
            agent_add_warning(ctx, &c);
        }
    }
    if (!want_ib)
        return 0;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long long)rl.rlim_cur < MEMLOCK_MIN_BYTES) {
        cond_set(&c, "MemlockTooLow", require_ib,
                 "RLIMIT_MEMLOCK is %llu KiB: InfiniBand memory registration needs it unlimited; "
                 "raise the container runtime's memlock ulimit (e.g. containerd "
                 "LimitMEMLOCK=infinity) or grant IPC_LOCK%s",
                 (unsigned long long)rl.rlim_cur >> 10,
                 require_ib ? "" : " (PreferIB: falling back to sockets)");
        if (require_ib) {
            *fatal = c;
            rc = -1;
        } else {
            agent_add_warning(ctx, &c);
        }
    }
    if (!dir_has_entries(ibdir)) {
        cond_set(&c, "IBDeviceMissing", require_ib,
                 "transport %s but %s has no devices in this pod%s%s: request the RDMA device "
                 "from the device plugin (resources.limits, e.g. rdma/hca) or pin "
                 "transport: Socket%s",
                 f->transport, ibdir, f->ib_device[0] ? "; expected HCA " : "", f->ib_device,
                 require_ib ? "" : " (PreferIB: falling back to sockets)");
        if (require_ib && rc == 0) {
            *fatal = c;
            rc = -1;
        } else {
            agent_add_warning(ctx, &c); /* a second fatal problem: still reported */
        }
    }
    return rc;
}

void agent_check_root_network(agent_ctx_t *ctx, const agent_facts_t *f)
{
    struct ifaddrs *ifa;
    char msg[700];
    agent_condition_t c;
    if (getifaddrs(&ifa) != 0) {
        agent_warn("AGENT-ROOT-NETWORK",
                   "cannot list this host's interfaces (%s): whether %s is on the bootstrap root's "
                   "network is not checked",
                   strerror(errno), f->address);
        return;
    }
    int rc = agent_root_network(ifa, f->address, f->root_host, msg, sizeof(msg));
    freeifaddrs(ifa);
    if (rc == 1) {
        cond_set(&c, "RootOnOtherNetwork", 0, "rank %d (%s on %s): %s", f->rank, f->pod, f->node,
                 msg);
        agent_add_warning(ctx, &c); /* logged and emitted as a pod Event */
    } else if (rc == 2) {
        agent_info("AGENT-ROOT-ROUTED", "rank %d (%s on %s): %s", f->rank, f->pod, f->node, msg);
    }
}
