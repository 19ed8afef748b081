/* Communicator state every layer shares: the handle registry, member descriptions, blame,
 * failure (with the creator's hook), scratch. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/comm.h"
#include "base/error.h"
#include "base/util.h"

/* Handles are (generation << 32 | slot + 1): a destroyed handle is detected, never followed.
 * This table is the only process-wide state besides logging, the transport registry and what a
 * fork needs for its child (below). */
static struct {
    pthread_mutex_t lock;
    struct coll_comm **comms;
    uint32_t *gens;
    uint32_t cap;
    uint32_t forks; /* forks between the first process with kcoll loaded and this one */
    /* the listeners of the bootstrap roots this process serves (colli_fork_watch) */
    struct sockaddr_storage *roots;
    uint32_t nroots, roots_cap;
} registry = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, NULL, 0, 0};

/* ---- fork: a child lets go of the communicators' descriptors ----
 * A process forked from a rank (PyTorch's DataLoader workers and multiprocessing with the fork
 * start method, a helper that forks without exec) inherits every socket of its communicators.
 * A peer learns that a rank died when the rank's connections and links close, which no longer
 * happens while a child holds copies: the peers waited for as long as the child lived (20 s in
 * nccl_forkdeath_3, for ever under NCCL's defaults, which give operations no deadline). The child
 * cannot use the communicators, so it closes what is theirs: sockets whose local or remote address
 * is a member's listener (connections, links, listeners, notices) and the shared-memory segments
 * kcoll named, and the sockets of the bootstrap roots this process serves (a root whose listener
 * a child kept open accepted the ranks' connections after its process died, and they waited for
 * an answer that never came instead of being refused). The parent's descriptors are untouched: a
 * socket or an OFD lock ends only when its last descriptor closes. The child's handles of them are
 * refused from then on (other threads, transports and locks of theirs stayed in the parent); its
 * destroy or abort lets go of the handle and touches nothing else: telling the peers or closing
 * descriptors again would end the parent's communicator or close the child's own files, which reuse
 * the numbers. The registry's lock is held across the fork, so the child's is free. */

/* A listener address as a sortable key (family, port, address; zero-padded). */
typedef struct {
    uint16_t family, port;
    uint8_t addr[16];
} addr_key_t;

static bool addr_key(const struct sockaddr_storage *sa, addr_key_t *k)
{
    memset(k, 0, sizeof(*k));
    k->family = sa->ss_family;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const void *)sa;
        k->port = v4->sin_port;
        memcpy(k->addr, &v4->sin_addr, sizeof(v4->sin_addr));
        return true;
    }
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const void *)sa;
        k->port = v6->sin6_port;
        memcpy(k->addr, &v6->sin6_addr, sizeof(v6->sin6_addr));
        return true;
    }
    return false;
}

static int key_cmp(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(addr_key_t));
}

/* The members' listener addresses, sorted by fork_prepare (in the parent, where allocating is
 * safe) for the child's lookups; a fork in another thread waits on the lock meanwhile. */
static struct {
    pthread_mutex_t lock;
    addr_key_t *keys;
    size_t n;
} forking = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};

static bool is_member_addr(const struct sockaddr_storage *sa)
{
    addr_key_t k;
    return forking.n > 0 && addr_key(sa, &k) &&
           bsearch(&k, forking.keys, forking.n, sizeof(k), key_cmp) != NULL;
}

static bool is_ours(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    memset(&a, 0, sizeof(a));
    if (getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        if (is_member_addr(&a))
            return true;
        len = sizeof(a);
        memset(&a, 0, sizeof(a));
        return getpeername(fd, (struct sockaddr *)&a, &len) == 0 && is_member_addr(&a);
    }
    char path[40], target[64]; /* not a socket: a segment of kcoll's? */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    return n > 15 && strncmp(target, "/dev/shm/kcoll-", 15) == 0;
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&forking.lock);
    pthread_mutex_lock(&registry.lock);
    size_t n = registry.nroots;
    for (uint32_t i = 0; i < registry.cap; i++)
        if (registry.comms[i] != NULL && registry.comms[i]->members != NULL)
            n += (size_t)registry.comms[i]->nranks;
    forking.keys = n > 0 ? malloc(n * sizeof(addr_key_t)) : NULL;
    forking.n = 0;
    for (uint32_t i = 0; forking.keys != NULL && i < registry.cap; i++) {
        const struct coll_comm *c = registry.comms[i];
        for (int r = 0; c != NULL && c->members != NULL && r < c->nranks; r++)
            if (addr_key(&c->members[r].addr, &forking.keys[forking.n]))
                forking.n++;
    }
    for (uint32_t i = 0; forking.keys != NULL && i < registry.nroots; i++)
        if (addr_key(&registry.roots[i], &forking.keys[forking.n]))
            forking.n++;
    if (forking.n > 1)
        qsort(forking.keys, forking.n, sizeof(addr_key_t), key_cmp);
}

static void fork_done(void)
{
    free(forking.keys);
    forking.keys = NULL;
    forking.n = 0;
    pthread_mutex_unlock(&registry.lock);
    pthread_mutex_unlock(&forking.lock);
}

static void fork_child(void)
{
    /* getdents64 on /proc/self/fd, not opendir: the scan allocates nothing (fork_done's free
     * is glibc's, whose allocator fork leaves usable in the child) */
    int dir = forking.n > 0 ? open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    char buf[4096];
    for (long n; dir >= 0 && (n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0;) {
        for (long off = 0; off < n;) {
            const struct {
                uint64_t ino;
                int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *e = (const void *)(buf + off);
            off += e->reclen;
            long fd;
            if (e->name[0] != '.' && colli_parse_long(e->name, 0, 1 << 30, &fd) && fd != dir &&
                is_ours((int)fd))
                close((int)fd);
        }
    }
    if (dir >= 0)
        close(dir);
    registry.forks++; /* the lock is held: fork_prepare took it */
    fork_done();
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_install(void)
{
    if (pthread_atfork(fork_prepare, fork_done, fork_child) != 0)
        coll_warn(INIT, "pthread_atfork failed: a process forked from this one keeps the "
                        "communicators' sockets, and peers learn late that this rank died");
}

void colli_fork_watch(const struct sockaddr_storage *listener)
{
    pthread_once(&fork_once, fork_install);
    pthread_mutex_lock(&registry.lock);
    if (registry.nroots == registry.roots_cap) {
        uint32_t cap = registry.roots_cap ? registry.roots_cap * 2 : 4;
        struct sockaddr_storage *r = realloc(registry.roots, cap * sizeof(*r));
        if (r != NULL) {
            registry.roots = r;
            registry.roots_cap = cap;
        }
    }
    if (registry.nroots < registry.roots_cap)
        registry.roots[registry.nroots++] = *listener;
    else /* out of memory: a child forked meanwhile keeps this root's port open */
        coll_debug(INIT, "no memory to note a bootstrap root for the fork handler");
    pthread_mutex_unlock(&registry.lock);
}

void colli_fork_unwatch(const struct sockaddr_storage *listener)
{
    pthread_mutex_lock(&registry.lock);
    for (uint32_t i = 0; i < registry.nroots; i++)
        if (memcmp(&registry.roots[i], listener, sizeof(*listener)) == 0) {
            registry.roots[i] = registry.roots[--registry.nroots];
            break;
        }
    pthread_mutex_unlock(&registry.lock);
}

coll_result_t colli_comm_register(struct coll_comm *comm, coll_comm_t *handle)
{
    pthread_once(&fork_once, fork_install);
    pthread_mutex_lock(&registry.lock);
    uint32_t slot = 0;
    while (slot < registry.cap && registry.comms[slot] != NULL)
        slot++;
    if (slot == registry.cap) {
        uint32_t cap = registry.cap ? registry.cap * 2 : 16;
        struct coll_comm **c = realloc(registry.comms, cap * sizeof(*c));
        if (c)
            registry.comms = c;
        uint32_t *g = c ? realloc(registry.gens, cap * sizeof(*g)) : NULL;
        if (c == NULL || g == NULL) {
            pthread_mutex_unlock(&registry.lock);
            return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory registering a communicator");
        }
        registry.gens = g;
        for (uint32_t i = registry.cap; i < cap; i++) {
            registry.comms[i] = NULL;
            registry.gens[i] = 1;
        }
        registry.cap = cap;
    }
    registry.comms[slot] = comm;
    comm->forks = registry.forks;
    comm->pid = (int)getpid();
    uint64_t h = ((uint64_t)registry.gens[slot] << 32) | (uint64_t)(slot + 1);
    pthread_mutex_unlock(&registry.lock);
    *handle = (coll_comm_t)(uintptr_t)h;
    return COLL_SUCCESS;
}

/* The communicator handle names (NULL: none), and whether it was made before a fork that led
 * to this process. */
static struct coll_comm *registry_find(coll_comm_t handle, bool *inherited)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;
    uint32_t slot = (uint32_t)(h & 0xffffffffu), gen = (uint32_t)(h >> 32);
    pthread_mutex_lock(&registry.lock);
    struct coll_comm *c = NULL;
    if (slot >= 1 && slot <= registry.cap && registry.gens[slot - 1] == gen)
        c = registry.comms[slot - 1];
    *inherited = c != NULL && c->forks != registry.forks;
    pthread_mutex_unlock(&registry.lock);
    return c;
}

struct coll_comm *colli_comm_find(coll_comm_t handle)
{
    bool inherited = false;
    struct coll_comm *c = handle != NULL ? registry_find(handle, &inherited) : NULL;
    return inherited ? NULL : c;
}

coll_result_t colli_comm_lookup(coll_comm_t handle, struct coll_comm **comm)
{
    if (handle == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "comm is NULL: pass a communicator from coll_comm_init_rank");
    bool inherited;
    struct coll_comm *c = registry_find(handle, &inherited);
    if (c == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "comm %p is not a live communicator: it was destroyed or aborted, or "
                         "never created; create a new one with coll_comm_init_rank",
                         (void *)handle);
    if (inherited)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "the communicator of rank %d of %d was created by process %d, and this "
                         "process (%d) was forked from it: its connections stayed in the parent "
                         "(the fork closed them here). Create a communicator in this process "
                         "(start workers with exec or multiprocessing's 'spawn'); destroy or "
                         "abort here only lets go of the handle",
                         c->rank, c->nranks, c->pid, (int)getpid());
    *comm = c;
    return COLL_SUCCESS;
}

bool colli_comm_let_go_inherited(coll_comm_t handle, const char *fn)
{
    bool inherited;
    struct coll_comm *c = registry_find(handle, &inherited);
    if (c == NULL || !inherited)
        return false;
    colli_comm_unregister(handle); /* its memory stays: its locks may be held in the parent */
    coll_info(INIT,
              "%s: the communicator of rank %d of %d belongs to process %d, from which this one "
              "(%d) was forked: the handle is let go here, the parent's communicator and its "
              "peers are untouched",
              fn, c->rank, c->nranks, c->pid, (int)getpid());
    return true;
}

void colli_comm_unregister(coll_comm_t handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;
    uint32_t slot = (uint32_t)(h & 0xffffffffu);
    pthread_mutex_lock(&registry.lock);
    if (slot >= 1 && slot <= registry.cap) {
        registry.comms[slot - 1] = NULL;
        registry.gens[slot - 1]++;
        if (registry.gens[slot - 1] == 0)
            registry.gens[slot - 1] = 1;
    }
    pthread_mutex_unlock(&registry.lock);
}

void colli_member_desc(const struct coll_comm *comm, int rank, char *buf, size_t len)
{
    if (comm->members == NULL || rank < 0 || rank >= comm->nranks) {
        snprintf(buf, len, "rank %d", rank);
        return;
    }
    const colli_member_t *m = &comm->members[rank];
    char a[80];
    colli_sockaddr_str(&m->addr, a, sizeof(a));
    if (m->pod[0] && m->local_size > 1)
        snprintf(buf, len, "rank %d (local rank %d of %d in pod %s on node %s, pid %d, %s)", rank,
                 m->local_rank, m->local_size, m->pod, m->node[0] ? m->node : "?", m->pid, a);
    else if (m->pod[0])
        snprintf(buf, len, "rank %d (pod %s on node %s, pid %d, %s)", rank, m->pod,
                 m->node[0] ? m->node : "?", m->pid, a);
    else
        snprintf(buf, len, "rank %d (pid %d on %s, %s)", rank, m->pid, m->hostname, a);
}

coll_result_t colli_comm_scratch(struct coll_comm *comm, size_t bytes, void **out)
{
    if (bytes > comm->scratch_size) {
        void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (p == NULL)
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory for %zu bytes of scratch",
                             bytes);
        free(comm->scratch);
        comm->scratch = p;
        comm->scratch_size = bytes;
    }
    *out = comm->scratch;
    return COLL_SUCCESS;
}

void colli_comm_blame(struct coll_comm *comm, int rank)
{
    if (comm->blame_rank < 0 && rank >= 0 && rank < comm->nranks)
        comm->blame_rank = rank;
}

void colli_comm_fail(struct coll_comm *comm, coll_result_t code, const char *msg)
{
    if (comm->async_error != COLL_SUCCESS)
        return;
    snprintf(comm->async_msg, sizeof(comm->async_msg), "%s", msg);
    /* read by the caller's thread while the device progress thread fails the communicator */
    __atomic_store_n(&comm->async_error, code, __ATOMIC_RELEASE);
    /* One summary line a user can paste into an issue. */
    coll_warn(COLL, "communicator failed on rank %d of %d: %s", comm->rank, comm->nranks, msg);
    if (comm->on_fail != NULL)
        comm->on_fail(comm, msg);
}
