/* Shared-memory transport: segments (create, announce, map, unlink) and the links between local
 * ranks (set-up at communicator creation, wake-ups, end of a peer). See shm.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/sockutil.h"
#include "transport/shm/shm.h"

/* Segment names carry a value derived from the secret that never crosses the network (the
 * communicator tag does, in every hello): a process of another job or user cannot guess them
 * and create one first. */
static unsigned long long names_key(const struct coll_comm *comm)
{
    static const char label[] = "kcoll-shm-names";
    return (unsigned long long)colli_siphash64(comm->secret, label, sizeof(label) - 1);
}

void shm_seg_name(const struct coll_comm *comm, int from, int to, char *buf, size_t len)
{
    snprintf(buf, len, "/kcoll-%016llx-%d-%d", names_key(comm), from, to);
}

/* The advice every /dev/shm failure ends with. */
#define SHM_FIX                                                                                    \
    "make /dev/shm larger (in Kubernetes: an emptyDir with medium: Memory mounted at /dev/shm), "  \
    "lower COLL_SHM_NSLOTS or COLL_SHM_SLOT_SIZE, or set COLL_SHM_DISABLE=1 to use sockets"

/* Can this process create, size and map a POSIX shared-memory segment? */
static bool shm_works(const struct coll_comm *comm, char *why, size_t len)
{
    char name[96];
    /* by rank too: one process may create several ranks of a communicator at once (a group) */
    snprintf(name, sizeof(name), "/kcoll-%016llx-probe-%d-%d", names_key(comm), (int)getpid(),
             comm->rank);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, len, "shm_open(%s): %s", name, strerror(errno));
        return false;
    }
    shm_unlink(name);
    bool ok = false;
    if (ftruncate(fd, 4096) != 0) {
        snprintf(why, len, "ftruncate of a shared-memory segment: %s", strerror(errno));
    } else {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(why, len, "mmap of a shared-memory segment: %s", strerror(errno));
        } else {
            munmap(p, 4096);
            ok = true;
        }
    }
    close(fd);
    return ok;
}

/* An OFD lock on a whole segment (F_RDLCK: held by its creator; F_WRLCK: the sweep's test). */
static int seg_lock(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

#define SWEEP_GRACE_S 60 /* a name younger than this may not carry its creator's lock yet */

/* Remove names in /dev/shm that no live process will map: both ends of a pair died between the
 * creation of a segment and its mapping (say, the whole job was killed during its first
 * collective). Such a name is one of ours (kcoll-, this user, our segment version), older than
 * SWEEP_GRACE_S, and no process holds the read lock its creator takes for as long as it lives.
 * Anything else is left alone: other users' files, other versions, live segments. */
static void sweep_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return;
    const time_t now = time(NULL);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "kcoll-", 6) != 0 || strstr(e->d_name, "-probe-") != NULL)
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            continue;
        struct stat sb;
        bool leftover = false;
        if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
            (size_t)sb.st_size >= sizeof(shm_seg_t) && sb.st_mtime + SWEEP_GRACE_S < now) {
            shm_seg_t head;
            leftover = pread(fd, &head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
                       head.magic == SHM_SEG_MAGIC && head.version == SHM_SEG_VERSION &&
                       seg_lock(fd, F_WRLCK) == 0;
        }
        if (leftover && unlinkat(dirfd(d), e->d_name, 0) == 0) {
            removed++;
            coll_info(SHM,
                      "removed /dev/shm/%s: a segment whose creator and receiver are both "
                      "gone",
                      e->d_name);
        }
        close(fd);
    }
    closedir(d);
    if (removed > 0)
        coll_info(SHM, "removed %d leftover shared-memory segment%s", removed,
                  removed == 1 ? "" : "s");
}

/* COLL_SHM_DISABLE=1 turns it off; everything else is found out by comm_init. */
static coll_result_t shm_probe(struct coll_comm *comm, bool *use)
{
    *use = !comm->cfg.shm_disable;
    if (!*use)
        coll_info(SHM, "COLL_SHM_DISABLE=1: ranks on this host use sockets");
    return COLL_SUCCESS;
}

static coll_result_t shm_comm_init(struct coll_comm *comm, int tp, const colli_netif_t *nif,
                                   colli_member_t *self)
{
    char why[256];
    if (!shm_works(comm, why, sizeof(why))) {
        coll_warn(SHM,
                  "shared memory does not work in this process (%s): ranks on this host use "
                  "loopback sockets, which is slower; mount a writable tmpfs at /dev/shm, or set "
                  "COLL_SHM_DISABLE=1 to silence this",
                  why);
        return COLL_SUCCESS;
    }
    sweep_leftovers();
    shm_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM, "out of memory for the shared-memory transport");
    st->bind_addr = nif->addr;
    st->nslots = (uint32_t)comm->cfg.shm_nslots;
    st->cap = (uint32_t)comm->cfg.shm_slot_size;
    st->tp = tp;
    comm->tp[tp].state = st;
    self->caps |= COLLI_CAP_SHM;
    return COLL_SUCCESS;
}

/* A peer with this rank's host identity, when both offer shared memory. */
static coll_result_t shm_can_connect(struct coll_comm *comm, int tp, const colli_member_t *peer,
                                     bool *yes)
{
    const colli_member_t *me = &comm->members[comm->rank];
    *yes = (me->caps & peer->caps & COLLI_CAP_SHM) && strcmp(me->host_id, peer->host_id) == 0;
    return COLL_SUCCESS;
}

static bool is_local(const struct coll_comm *comm, const shm_state_t *st, int p)
{
    return p != comm->rank && comm->peer_tp[p] == st->tp;
}

static void link_close(shm_peer_t *pp)
{
    if (pp->fd >= 0)
        close(pp->fd);
    pp->fd = -1;
    pp->link = LINK_CLOSED;
}

/* Start (or restart after a refusal) the link to a higher local rank. */
static coll_result_t link_connect(struct coll_comm *comm, shm_state_t *st, int p)
{
    shm_peer_t *pp = &st->peers[p];
    if (pp->since == 0)
        pp->since = colli_now();
    if (colli_sock_connect_start(&comm->members[p].addr, &st->bind_addr, &pp->fd) != COLLI_IO_OK) {
        int e = errno;
        pp->fd = -1;
        char who[200], advice[512] = "";
        colli_member_desc(comm, p, who, sizeof(who));
        if (e == EMFILE || e == ENFILE) {
            colli_fd_advice(comm, e, advice, sizeof(advice));
            return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                             "rank %d cannot open its shared-memory link to %s: %s; %s", comm->rank,
                             who, strerror(e), advice);
        }
        colli_comm_blame(comm, p);
        return COLLI_ERR(SHM, COLL_ERR_NETWORK,
                         "rank %d cannot open its shared-memory link to %s: %s (the link is a "
                         "loopback-speed TCP connection that tells when a local peer dies)",
                         comm->rank, who, strerror(e));
    }
    colli_sock_tune(pp->fd);
    pp->link = LINK_CONNECTING;
    return COLL_SUCCESS;
}

/* A connecting link became writable (finish the connect, send the hello) or its challenge
 * arrived (answer it: the link is ready). */
coll_result_t shm_link_connected(struct coll_comm *comm, shm_state_t *st, int p)
{
    shm_peer_t *pp = &st->peers[p];
    int err = 0, rc = COLLI_IO_ERR;
    const bool handshake = pp->link == LINK_HANDSHAKE;
    if (handshake) {
        rc = colli_hs_step(&pp->hs, pp->fd, comm->secret);
        if (rc == COLLI_HS_AGAIN)
            return COLL_SUCCESS;
        if (rc == COLLI_IO_OK) {
            pp->link = LINK_READY;
            return COLL_SUCCESS;
        }
        err = errno;
    } else {
        socklen_t len = sizeof(err);
        if (getsockopt(pp->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err == 0) {
            if (colli_hs_begin(&pp->hs, pp->fd, comm->secret, COLLI_HELLO_LINK, comm->rank, p, 0,
                               (uint32_t)comm->nranks) == COLLI_IO_OK) {
                pp->link = LINK_HANDSHAKE;
                return COLL_SUCCESS;
            }
            err = errno;
        }
    }
    close(pp->fd);
    pp->fd = -1;
    pp->link = LINK_NONE;
    if (!handshake && (err == ECONNREFUSED || err == EAGAIN || err == EINTR) &&
        colli_now() - pp->since < 2.0) {
        pp->retry_at = colli_now() + 0.02;
        return COLL_SUCCESS;
    }
    /* a peer whose creation failed sends its reason before it closes: that, when it comes */
    coll_result_t why = colli_tp_await_notice(comm, 0.5);
    if (why != COLL_SUCCESS)
        return why;
    char who[200];
    colli_member_desc(comm, p, who, sizeof(who));
    colli_comm_blame(comm, p);
    return COLLI_ERR(SHM, COLL_ERR_NETWORK,
                     "rank %d cannot open its shared-memory link to %s: %s%s. The process died, "
                     "or its listener is unreachable from this one.",
                     comm->rank, who, handshake ? "the handshake failed: " : "",
                     handshake ? colli_hs_str(rc, err) : strerror(err));
}

static coll_result_t shm_adopt(struct coll_comm *comm, int tp, const colli_hello_t *h, int fd)
{
    shm_state_t *st = comm->tp[tp].state;
    int p = h->from_rank;
    if (st == NULL || st->peers == NULL || p >= comm->rank || !is_local(comm, st, p) ||
        st->peers[p].link != LINK_NONE) {
        coll_warn(SHM, "rank %d opened a shared-memory link that rank %d does not expect; closed",
                  p, comm->rank);
        close(fd);
        return COLL_SUCCESS;
    }
    st->peers[p].fd = fd;
    st->peers[p].link = LINK_READY;
    return COLL_SUCCESS;
}

/* Every pair of local ranks opens its link now (the lower rank connects), so that wake-ups and
 * the death of a peer work from the first operation on. Bounded by COLL_BOOTSTRAP_TIMEOUT. */
static coll_result_t shm_comm_ready(struct coll_comm *comm, int tp)
{
    shm_state_t *st = comm->tp[tp].state;
    st->peers = calloc((size_t)comm->nranks, sizeof(shm_peer_t));
    if (st->peers == NULL)
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM, "out of memory for %d peers", comm->nranks);
    for (int p = 0; p < comm->nranks; p++) {
        st->peers[p].fd = -1;
        st->peers[p].pfd = -1;
        st->peers[p].out.lock_fd = -1;
        st->peers[p].in.lock_fd = -1;
    }
    for (int p = comm->rank + 1; p < comm->nranks; p++) {
        if (!is_local(comm, st, p))
            continue;
        coll_result_t status = link_connect(comm, st, p);
        if (status != COLL_SUCCESS)
            return status;
    }
    double deadline = colli_now() + comm->cfg.bootstrap_timeout;
    for (;;) {
        char missing[256] = "";
        size_t used = 0;
        int nmissing = 0;
        for (int p = 0; p < comm->nranks; p++) {
            if (!is_local(comm, st, p) || st->peers[p].link == LINK_READY)
                continue;
            if (st->peers[p].link == LINK_NONE && p > comm->rank &&
                colli_now() >= st->peers[p].retry_at) {
                coll_result_t status = link_connect(comm, st, p);
                if (status != COLL_SUCCESS)
                    return status;
            }
            if (nmissing++ < 8 && used < sizeof(missing) - 16) {
                int n =
                    snprintf(missing + used, sizeof(missing) - used, "%s%d", used ? ", " : "", p);
                used += n > 0 ? (size_t)n : 0;
            }
        }
        if (nmissing == 0)
            return COLL_SUCCESS;
        if (colli_now() > deadline)
            return COLLI_ERR(SHM, COLL_ERR_TIMEOUT,
                             "rank %d: no shared-memory link with local rank%s %s%s within %.0f s "
                             "(COLL_BOOTSTRAP_TIMEOUT) after the bootstrap; %s stopped or died "
                             "while the communicator was being created",
                             comm->rank, nmissing > 1 ? "s" : "", missing,
                             nmissing > 8 ? " and more" : "", comm->cfg.bootstrap_timeout,
                             nmissing > 1 ? "they" : "it");
        coll_result_t status = colli_tp_wait(comm, NULL, 20, -1, NULL);
        if (status != COLL_SUCCESS)
            return status;
    }
}

static void unlink_name(const struct coll_comm *comm, int from, int to)
{
    char name[96];
    shm_seg_name(comm, from, to, name, sizeof(name));
    shm_unlink(name);
}

/* A peer ended without saying goodbye (it died or aborted): no one will map what it announced
 * or what was announced to it, so remove every name of a pair with it, also those of other
 * local ranks, which may have left already. */
static void unlink_dead(struct coll_comm *comm, shm_state_t *st, int dead)
{
    for (int q = 0; q < comm->nranks; q++) {
        if (q == dead || (q != comm->rank && !is_local(comm, st, q)))
            continue;
        if (q != comm->rank || st->peers[dead].in.seg == NULL)
            unlink_name(comm, dead, q);
        unlink_name(comm, q, dead);
    }
    st->peers[dead].out.named = false;
}
coll_result_t shm_ring_create(struct coll_comm *comm, shm_state_t *st, int peer)
{
    shm_peer_t *pp = &st->peers[peer];
    shm_ring_t *r = &pp->out;
    char name[96], who[200];
    shm_seg_name(comm, comm->rank, peer, name, sizeof(name));
    const uint32_t stride = st->cap + SHM_SLOT_HDR;
    const size_t bytes = SHM_SLOTS_OFF + (size_t)st->nslots * stride;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        const int e = errno;
        char advice[520] = "";
        colli_member_desc(comm, peer, who, sizeof(who));
        if (e == EEXIST)
            snprintf(advice, sizeof(advice), " (another process uses this name)");
        else if (e == EMFILE || e == ENFILE) {
            memcpy(advice, "; ", 3);
            colli_fd_advice(comm, e, advice + 2, sizeof(advice) - 2);
        }
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                         "rank %d cannot create the shared-memory segment %s for %s: %s%s",
                         comm->rank, name, who, strerror(e), advice);
    }
    r->named = true;
    /* the sign that we live, for the sweep of other processes (a failure only costs that) */
    if (seg_lock(fd, F_RDLCK) != 0)
        coll_debug(SHM, "no OFD lock on %s: %s", name, strerror(errno));
    /* allocate every page now: a full /dev/shm is an error here, not a SIGBUS later */
    int err = ftruncate(fd, (off_t)bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
    void *p = MAP_FAILED;
    if (err == 0) {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            err = errno;
    }
    if (err != 0) {
        close(fd);
        shm_unlink(name);
        r->named = false;
        colli_member_desc(comm, peer, who, sizeof(who));
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                         "rank %d cannot allocate %zu bytes of shared memory (%s) for its ring to "
                         "%s: %s; " SHM_FIX,
                         comm->rank, bytes, name, who, strerror(err));
    }
    r->lock_fd = fd;
    shm_seg_t *seg = p;
    seg->magic = SHM_SEG_MAGIC;
    seg->version = SHM_SEG_VERSION;
    seg->tag = comm->tag;
    seg->from = comm->rank;
    seg->to = peer;
    seg->nslots = st->nslots;
    seg->slot_bytes = stride;
    seg->seg_bytes = bytes;
    colli_siphash128(comm->secret, seg, offsetof(shm_seg_t, mac), seg->mac);
    r->seg = seg;
    r->slots = (char *)p + SHM_SLOTS_OFF;
    r->map_bytes = bytes;
    r->nslots = st->nslots;
    r->slot_bytes = stride;
    r->cap = st->cap;
    r->pos = 0;
    r->tail_seen = 0;
    /* the header is complete before the peer can learn of the segment (the send orders it) */
    char c = 'N';
    if (send(pp->fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1 && errno != EAGAIN)
        return shm_gone_error(comm, st, NULL, peer, "announcing a shared-memory segment to");
    return COLL_SUCCESS;
}

/* Map the segment peer announced, check it, and unlink its name: both sides have it now. */
static coll_result_t ring_map(struct coll_comm *comm, shm_state_t *st, int peer)
{
    shm_ring_t *r = &st->peers[peer].in;
    if (r->seg != NULL)
        return COLL_SUCCESS;
    char name[96], who[200];
    shm_seg_name(comm, peer, comm->rank, name, sizeof(name));
    colli_member_desc(comm, peer, who, sizeof(who));
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT && st->peers[peer].gone && !st->peers[peer].bye)
        return shm_gone_error(comm, st, NULL, peer, "receiving from");
    /* A peer that fails removes what it announced: its abort notice says why. It may come a
     * moment later (a rank out of descriptors sends its notices a few at a time): wait for it,
     * briefly, rather than fail with this rank's view of the effect. */
    if (fd < 0 && errno == ENOENT) {
        coll_result_t status = colli_tp_await_notice(comm, 2.0);
        if (status != COLL_SUCCESS)
            return status;
        errno = ENOENT;
    }
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        const int e = errno;
        char advice[512];
        colli_fd_advice(comm, e, advice, sizeof(advice));
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                         "rank %d cannot open the shared-memory segment %s that %s announced: "
                         "%s; %s",
                         comm->rank, name, who, strerror(e), advice);
    }
    if (fd < 0 && errno == ENOENT) /* announced, then gone, and no notice within 2 s */
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                         "rank %d cannot open the shared-memory segment %s that %s announced: "
                         "it is gone, so that rank most likely failed and removed it (its log "
                         "or another rank's error says why); else /dev/shm is not one directory "
                         "for every rank of this host",
                         comm->rank, name, who);
    if (fd < 0)
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                         "rank %d cannot open the shared-memory segment %s that %s announced: %s "
                         "(/dev/shm must be the same directory for every rank of one host)",
                         comm->rank, name, who, strerror(errno));
    struct stat sb;
    void *p = MAP_FAILED;
    const char *bad = NULL;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < SHM_SLOTS_OFF)
        bad = "it is too small";
    else if (sb.st_uid != geteuid())
        bad = "another user owns it (ranks of one host must run as one user)";
    else if ((p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
             MAP_FAILED)
        bad = strerror(errno);
    close(fd);
    shm_unlink(name);
    shm_seg_t *seg = p;
    uint8_t mac[16];
    if (bad == NULL) {
        colli_siphash128(comm->secret, seg, offsetof(shm_seg_t, mac), mac);
        if (seg->magic != SHM_SEG_MAGIC || seg->version != SHM_SEG_VERSION ||
            seg->tag != comm->tag || seg->from != peer || seg->to != comm->rank ||
            !colli_mem_equal(mac, seg->mac, sizeof(mac)))
            bad = "its header does not belong to this communicator and pair";
        else if (seg->nslots < 2 || seg->slot_bytes <= SHM_SLOT_HDR ||
                 seg->slot_bytes % SHM_SLOT_HDR != 0 || seg->seg_bytes != (size_t)sb.st_size ||
                 SHM_SLOTS_OFF + (uint64_t)seg->nslots * seg->slot_bytes > seg->seg_bytes)
            bad = "its ring geometry is invalid";
    }
    if (bad != NULL) {
        if (p != MAP_FAILED)
            munmap(p, (size_t)sb.st_size);
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                         "rank %d cannot use the shared-memory segment %s from %s: %s", comm->rank,
                         name, who, bad);
    }
    r->seg = seg;
    r->slots = (char *)p + SHM_SLOTS_OFF;
    r->map_bytes = (size_t)sb.st_size;
    r->nslots = seg->nslots;
    r->slot_bytes = seg->slot_bytes;
    r->cap = seg->slot_bytes - SHM_SLOT_HDR;
    r->pos = 0;
    return COLL_SUCCESS;
}

coll_result_t shm_link_read(struct coll_comm *comm, shm_state_t *st, int peer)
{
    shm_peer_t *pp = &st->peers[peer];
    while (pp->fd >= 0 && !pp->gone) {
        char buf[64];
        ssize_t n = recv(pp->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return COLL_SUCCESS;
        if (n <= 0) {
            pp->gone = true;
            pp->gone_err = n < 0 ? errno : 0;
            if (!pp->bye)
                unlink_dead(comm, st, peer);
            coll_debug(SHM, "rank %d: the shared-memory link to rank %d ended (%s%s)", comm->rank,
                       peer, n < 0 ? strerror(errno) : "end of stream",
                       pp->bye ? ", after goodbye" : "");
            return COLL_SUCCESS;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == 'B') {
                pp->bye = true;
            } else if (buf[i] == 'N' && !st->leaving) {
                coll_result_t status = ring_map(comm, st, peer);
                if (status != COLL_SUCCESS)
                    return status;
            }
        }
    }
    return COLL_SUCCESS;
}

void shm_link_wake(shm_peer_t *pp)
{
    char c = 'W';
    if (pp->fd >= 0)
        (void)send(pp->fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

coll_result_t shm_gone_error(struct coll_comm *comm, const shm_state_t *st, colli_op_t *op,
                             int peer, const char *what)
{
    return colli_tp_peer_left(comm, COLLI_SUB_SHM, op, peer, what, "shared memory",
                              st->peers[peer].gone_err);
}

static void ring_unmap(shm_ring_t *r)
{
    if (r->seg != NULL)
        munmap(r->seg, r->map_bytes);
    r->seg = NULL;
    if (r->lock_fd >= 0)
        close(r->lock_fd);
    r->lock_fd = -1;
}

/* Leaving. After a clean destroy a segment we announced stays named until its receiver, which
 * may still need the data, maps it (it unlinks it then, or at its own destroy); everything else
 * goes now. Peers learn of a clean destroy from a goodbye byte, of anything else from the end of
 * the link alone. */
static void shm_comm_fini(struct coll_comm *comm, int tp)
{
    shm_state_t *st = comm->tp[tp].state;
    if (st == NULL)
        return;
    const bool clean = comm->async_error == COLL_SUCCESS;
    /* what a peer announced now is never read: its name is removed below, not mapped (mapping
     * it could wait for a notice on a communicator that is over, and overwrite its error) */
    st->leaving = true;
    for (int p = 0; st->peers != NULL && p < comm->nranks; p++) {
        if (!is_local(comm, st, p))
            continue;
        shm_peer_t *pp = &st->peers[p];
        if (pp->fd >= 0 && !pp->gone)
            (void)shm_link_read(comm, st, p); /* has it left? */
        if (pp->in.seg == NULL)
            unlink_name(comm, p, comm->rank);
        if (pp->out.named && (!clean || pp->gone))
            unlink_name(comm, comm->rank, p);
        if (clean && pp->fd >= 0 && !pp->gone) {
            char c = 'B';
            (void)send(pp->fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        link_close(pp);
        ring_unmap(&pp->out);
        ring_unmap(&pp->in);
    }
    free(st->peers);
    free(st);
    comm->tp[tp].state = NULL;
}

const colli_transport_t colli_shm_transport = {
    .struct_size = sizeof(colli_transport_t),
    .name = "shm",
    .via = "shared memory",
    .cap = COLLI_CAP_SHM,
    .flags = COLLI_TPF_LOCAL,
    .hello_kind = COLLI_HELLO_LINK,
    .probe = shm_probe,
    .comm_init = shm_comm_init,
    .can_connect = shm_can_connect,
    .comm_ready = shm_comm_ready,
    .progress = shm_progress,
    .wait_arm = shm_wait_arm,
    .wait_done = shm_wait_done,
    .adopt = shm_adopt,
    .comm_fini = shm_comm_fini,
};
