/* Rank side of the bootstrap: check in with the root, receive and check the member table. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/util.h"
#include "base/handshake.h"
#include "bootstrap/bootstrap.h"
#include "base/sockutil.h"

/* How long the root may refuse connections before a rank says so (and goes on trying). */
#define ROOT_QUIET_S 10.0
/* How long "no route" may last before the root is called unreachable: colli_sock_connect's. */
#define ROOT_NOROUTE_S 10.0

typedef struct {
    int rank;
    const char *root;
    double timeout;
} refused_note_t;

static void say_refused(void *arg)
{
    const refused_note_t *n = arg;
    coll_warn(BOOT,
              "rank %d: nothing has listened at the bootstrap root %s for %.0f s (connection "
              "refused); still trying, until COLL_BOOTSTRAP_TIMEOUT (%.0f s). The process that "
              "made the unique id may start late; if it ended, this waits in vain: a unique id "
              "serves one creation, so every communicator (a process group made again, too) needs "
              "a new one",
              n->rank, n->root, ROOT_QUIET_S, n->timeout);
}

coll_result_t colli_bootstrap_exchange(struct coll_comm *comm, const struct sockaddr_storage *root,
                                       const colli_member_t *self,
                                       const struct sockaddr_storage *bind_addr, bool shared_root)
{
    coll_result_t status = COLL_SUCCESS;
    char ra[80];
    colli_sockaddr_str(root, ra, sizeof(ra));
    /* The root answers at its own deadline; allow a margin for that answer to arrive. */
    double deadline = colli_now() + comm->cfg.bootstrap_timeout + 5.0;
    int fd = -1;
    struct {
        colli_wire_member_t rec;
        uint8_t mac[16]; /* SipHash-128 of the record, keyed with the connection's key */
    } out;
    colli_root_reply_t rep;
    /* Nothing listening at the root for a while is worth saying before the deadline: it may
     * start late (rank 0 of an NCCL_COMM_ID job, a pod still pulling its image), or it ended
     * (a unique id serves one creation: a second one with the same id waits in vain). */
    refused_note_t note = {comm->rank, ra, comm->cfg.bootstrap_timeout};
    /* a "no route" that came after connect() reported the connection open (below) is retried
     * within the connect's own budget for "no route", counted from the first attempt */
    const double first_try = colli_now();
    bool late_noroute = false;
again:;
    const double noroute_end = first_try + ROOT_NOROUTE_S;
    const double connect_end = late_noroute && noroute_end < deadline ? noroute_end : deadline;
    int io = colli_sock_connect_noted(root, bind_addr, connect_end, ROOT_QUIET_S, say_refused,
                                      &note, &fd);
    if (io == COLLI_IO_TIMEOUT && connect_end < deadline) {
        io = COLLI_IO_ERR; /* the budget for "no route" is spent */
        errno = ENETUNREACH;
    }
    if (io == COLLI_IO_ERR && (errno == ENETUNREACH || errno == EHOSTUNREACH)) {
        int e = errno;
        char me[INET6_ADDRSTRLEN] = "?";
        if (bind_addr != NULL && bind_addr->ss_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)bind_addr)->sin_addr, me, sizeof(me));
        else if (bind_addr != NULL && bind_addr->ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)bind_addr)->sin6_addr, me,
                      sizeof(me));
        return COLLI_ERR(BOOT, COLL_ERR_NETWORK,
                         "rank %d cannot reach the bootstrap root at %s from its address %s: %s "
                         "for 10 s. This host's interface is on another network than the root's: "
                         "pin the job's network on every rank with COLL_SOCKET_IFNAME=<a CIDR "
                         "that holds the root's address, such as its /24> (or the interface "
                         "name)",
                         comm->rank, ra, me, strerror(e));
    }
    if (io != COLLI_IO_OK) {
        int e = errno;
        return COLLI_ERR(BOOT, io == COLLI_IO_TIMEOUT ? COLL_ERR_TIMEOUT : COLL_ERR_NETWORK,
                         "rank %d cannot reach the bootstrap root at %s: %s%s%s. Is the process "
                         "that created the unique id still running, and is %s reachable from this "
                         "host (COLL_SOCKET_IFNAME)?",
                         comm->rank, ra, colli_io_str(io, e),
                         io == COLLI_IO_TIMEOUT && e != 0 ? ", last error: " : "",
                         io == COLLI_IO_TIMEOUT && e != 0 ? strerror(e) : "", ra);
    }
    colli_hs_t hs;
    /* A root on a listener it shares (coll_comm_shrink): the parent's transport may have
     * accepted this connection during its last operation and left it unread (it reads pending
     * connections only while an operation runs), so no challenge ever comes. A root challenges
     * at once and drops an exchange unfinished after 10 s: a handshake that takes longer is
     * tried again on a new connection. */
    const double hs_deadline =
        shared_root && deadline > colli_now() + 10.0 ? colli_now() + 10.0 : deadline;
    io = colli_hs_run(&hs, fd, comm->secret, COLLI_HELLO_BOOTSTRAP, comm->rank, -1, 0,
                      (uint32_t)comm->nranks, hs_deadline);
    if (io == COLLI_IO_OK) {
        colli_member_to_wire(self, &out.rec);
        colli_siphash128(hs.key, &out.rec, sizeof(out.rec), out.mac);
        io = colli_sock_write_all(fd, &out, sizeof(out), deadline);
    }
    if (io == COLLI_IO_OK)
        io = colli_sock_read_all(fd, &rep, sizeof(rep), deadline);
    /* Wire protocol 4: the root may first ask this rank to probe others' data addresses (its
     * network check, bootstrap/reach.c), once; then its answer follows. */
    if (io == COLLI_IO_OK && rep.magic == COLLI_FRAME_MAGIC && rep.status == COLLI_ROOT_PROBE) {
        io = colli_reach_answer(fd, &rep, hs.key, comm->secret, bind_addr, comm->rank, deadline);
        if (io == COLLI_IO_OK)
            io = colli_sock_read_all(fd, &rep, sizeof(rep), deadline);
    }
    /* A root on a listener it shares (coll_comm_shrink): the parent communicator's transport may
     * have taken this connection and dropped it as a stranger; connect again. */
    const bool dropped = io == COLLI_IO_EOF || io == COLLI_IO_TIMEOUT ||
                         (io == COLLI_IO_ERR && (errno == ECONNRESET || errno == EPIPE));
    if (dropped && shared_root && colli_now() + 0.1 < deadline) {
        close(fd);
        fd = -1;
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
        goto again;
    }
    /* "No route" on a connection connect() reported open (netns_diagnostics' a0 and e, rank 0,
     * twice in about 12 runs on a loaded host or under ASan: the ICMP error reached the socket
     * after the connect's check, or so it seems): the root is not reachable after all; go on as
     * the connect does, within its budget for "no route" (a restarted budget made e's rank 0
     * fail after 18 s instead of 10). */
    if (io == COLLI_IO_ERR && (errno == ENETUNREACH || errno == EHOSTUNREACH) &&
        colli_now() + 0.1 < deadline) {
        late_noroute = true;
        close(fd);
        fd = -1;
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
        goto again;
    }
    if (io == COLLI_HS_BADAUTH) {
        status = COLLI_ERR(BOOT, COLL_ERR_REMOTE,
                           "rank %d: the bootstrap root at %s does not hold this unique id's "
                           "secret; another program is listening there (the process that created "
                           "the unique id ended and its port was reused?)",
                           comm->rank, ra);
        goto err_close;
    }
    if (io != COLLI_IO_OK) {
        status = COLLI_ERR(BOOT, io == COLLI_IO_TIMEOUT ? COLL_ERR_TIMEOUT : COLL_ERR_REMOTE,
                           "rank %d: bootstrap with the root at %s failed: %s (the root answers "
                           "once all %d ranks checked in, or names the missing ones at "
                           "COLL_BOOTSTRAP_TIMEOUT; a root that closes the connection at once may "
                           "run a kcoll of another wire protocol, or hold another secret: a "
                           "COLL_JOB_SECRET that differs between the ranks)",
                           comm->rank, ra, colli_io_str(io, errno), comm->nranks);
        goto err_close;
    }
    if (rep.magic != COLLI_FRAME_MAGIC || rep.msg_len > 8192 || rep.status >= COLL_NUM_RESULTS ||
        (rep.status == COLL_SUCCESS && rep.nranks != (uint32_t)comm->nranks)) {
        status = COLLI_ERR(BOOT, COLL_ERR_REMOTE,
                           "rank %d: the bootstrap root at %s sent an invalid answer; is another "
                           "program listening there?",
                           comm->rank, ra);
        goto err_close;
    }
    char msg[8193] = "";
    if (rep.msg_len > 0) {
        io = colli_sock_read_all(fd, msg, rep.msg_len, deadline);
        if (io != COLLI_IO_OK) {
            status = COLLI_ERR(BOOT, COLL_ERR_REMOTE, "rank %d: bootstrap answer truncated: %s",
                               comm->rank, colli_io_str(io, errno));
            goto err_close;
        }
        msg[rep.msg_len] = '\0';
    }
    colli_wire_member_t *wire = NULL;
    uint8_t digest[16] = {0}, mac[16];
    if (rep.status == COLL_SUCCESS) {
        wire = malloc(sizeof(colli_wire_member_t) * (size_t)comm->nranks);
        if (wire == NULL) {
            status = COLLI_ERR(BOOT, COLL_ERR_SYSTEM, "out of memory for a %d-rank member table",
                               comm->nranks);
            goto err_close;
        }
        io = colli_sock_read_all(fd, wire, sizeof(colli_wire_member_t) * (size_t)comm->nranks,
                                 deadline);
        if (io != COLLI_IO_OK) {
            free(wire);
            status = COLLI_ERR(BOOT, COLL_ERR_REMOTE, "rank %d: member table truncated: %s",
                               comm->rank, colli_io_str(io, errno));
            goto err_close;
        }
        for (int i = 0; i < comm->nranks; i++)
            colli_digest_step(comm->secret, digest, &wire[i], sizeof(wire[i]));
    }
    colli_reply_mac(hs.key, &rep, msg, wire != NULL ? digest : NULL, mac);
    if (!colli_mem_equal(mac, rep.mac, sizeof(mac))) {
        free(wire);
        status = COLLI_ERR(BOOT, COLL_ERR_REMOTE,
                           "rank %d: the answer of the bootstrap root at %s failed authentication "
                           "(altered on the way, or not the root's); is another program listening "
                           "there?",
                           comm->rank, ra);
        goto err_close;
    }
    if (rep.status != COLL_SUCCESS) {
        status = COLLI_ERR(BOOT, (coll_result_t)rep.status, "rank %d: bootstrap failed: %s",
                           comm->rank, msg);
        goto err_close;
    }
    if (msg[0] != '\0') /* differences that do not stop the job: said once, by rank 0 */
        colli_log(comm->rank == 0 ? COLLI_LOG_WARN : COLLI_LOG_INFO, COLLI_SUB_BOOT, "%s", msg);
    comm->members = calloc((size_t)comm->nranks, sizeof(colli_member_t));
    if (comm->members == NULL) {
        free(wire);
        status = COLLI_ERR(BOOT, COLL_ERR_SYSTEM, "out of memory for a %d-rank member table",
                           comm->nranks);
        goto err_close;
    }
    for (int i = 0; i < comm->nranks && status == COLL_SUCCESS; i++) {
        status = colli_member_from_wire(&wire[i], &comm->members[i]);
        if (status == COLL_SUCCESS && comm->members[i].rank != i)
            status = COLLI_ERR(BOOT, COLL_ERR_INTERNAL, "member table entry %d claims rank %d", i,
                               comm->members[i].rank);
    }
    free(wire);
    if (status != COLL_SUCCESS)
        goto err_close;
    close(fd);
    return COLL_SUCCESS;
err_close:
    close(fd);
    return status;
}

void colli_bootstrap_error_text(int rank, const char *msg, char *buf, size_t len)
{
    char host[64] = "?";
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "?");
    if (rank >= 0)
        snprintf(buf, len, "rank %d (pid %d on %s) cannot start: %s", rank, (int)getpid(), host,
                 msg);
    else /* a process that is no rank (its agent refused it) */
        snprintf(buf, len, "a process of this job (pid %d on %s) was refused: %s", (int)getpid(),
                 host, msg);
}

void colli_bootstrap_report_error(const struct sockaddr_storage *root, const uint8_t secret[16],
                                  int rank, int nranks, const char *msg)
{
    struct {
        char text[sizeof(colli_wire_member_t)];
        uint8_t mac[16];
    } out;
    memset(&out, 0, sizeof(out));
    colli_bootstrap_error_text(rank, msg, out.text, sizeof(out.text));
    int fd = -1;
    double deadline = colli_now() + 2.0;
    if (colli_sock_connect(root, NULL, deadline, true, &fd) != COLLI_IO_OK)
        return;
    colli_hs_t hs;
    if (colli_hs_run(&hs, fd, secret, COLLI_HELLO_BOOT_ERROR, rank, -1, 0, (uint32_t)nranks,
                     deadline) == COLLI_IO_OK) {
        colli_siphash128(hs.key, out.text, sizeof(out.text), out.mac);
        (void)colli_sock_write_all(fd, &out, sizeof(out), deadline);
    }
    close(fd);
}
