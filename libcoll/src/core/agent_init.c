/* coll_comm_init_agent: a communicator whose rank, world, root endpoint, network, transport
 * policy, timeouts and pinned version come from the pod's coll-agent (operator pin > COLL_*
 * environment > default). Rank 0 hosts the bootstrap root at the endpoint its agent published. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sockutil.h"
#include "bootstrap/agent_client.h"
#include "bootstrap/bootstrap.h"
#include "core/core.h"
#include "transport/transport.h"

#define AGENT_REPORT_MS 1000

/* The Communicator condition a failure sets False, with a machine-readable reason: what failed
 * (boot: during creation), from its code and, where one code covers several causes, its text. */
static void failure_condition(coll_result_t code, bool boot, const char *msg, const char **type,
                              const char **reason)
{
    *type = "Healthy";
    switch (code) {
    case COLL_ERR_VERSION:
        *type = "VersionsConsistent";
        *reason = strstr(msg, "CUDA driver too old") ? "CudaDriverTooOld" : "VersionMismatch";
        return;
    case COLL_ERR_NETWORK:
        if (strstr(msg, "failed authentication") != NULL) {
            *reason = "FrameAuthenticationFailed";
            return;
        }
        *type = "Reachable";
        *reason = strstr(msg, "bootstrap root") ? "RootUnreachable" : "PeerUnreachable";
        return;
    case COLL_ERR_TIMEOUT:
        if (boot)
            *type = "Reachable";
        *reason = boot ? "BootstrapTimeout" : "CollectiveTimeout";
        return;
    case COLL_ERR_MISMATCH:
        *reason = "CollectiveMismatch";
        return;
    case COLL_ERR_REMOTE:
        *reason = "PeerFailed";
        return;
    case COLL_ERR_INVALID_USAGE:
        if (boot && (strstr(msg, "COLL_SOCKET_IFNAME") || strstr(msg, "interface"))) {
            *type = "NetworkConsistent";
            *reason = "InterfaceNotFound";
            return;
        }
        *reason = "InvalidUsage";
        return;
    default:
        *reason = boot ? "CreationFailed" : "Failed";
        return;
    }
}

/* A failed phase with its condition; the error names err_rank (-1: this rank) and its pod and
 * node when known. Best effort. */
static void report_failed(const char *path, coll_result_t code, bool boot, const char *msg,
                          int err_rank, const char *pod, const char *node)
{
    const char *type, *reason;
    failure_condition(code, boot, msg, &type, &reason);
    if (colli_agent_report_ex(path, AGENT_REPORT_MS, COLLI_PROTO_PHASE_FAILED, -1, err_rank, pod,
                              node, msg, type, 0, reason, msg) != COLL_SUCCESS)
        coll_debug(AGENT, "could not report the failure to the agent: %s",
                   colli_agent_last_error());
}

void colli_agent_notify_failure(struct coll_comm *comm, const char *msg)
{
    if (comm->agent_socket[0] == '\0')
        return;
    /* The status names the rank the failure is blamed on (the dead or stopped peer), with its
     * pod and node from its member record; else this rank. */
    int blame = comm->blame_rank;
    const colli_member_t *m =
        blame >= 0 && blame < comm->nranks && comm->members ? &comm->members[blame] : NULL;
    report_failed(comm->agent_socket, __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE), false,
                  msg, m ? blame : -1, m ? m->pod : NULL, m ? m->node : NULL);
    if (comm->agent_job[0] == '\0')
        return;
    /* where the job's view of it is, and (the agent reads the blamed rank's pod) why it ended */
    if (m != NULL && blame != comm->rank)
        coll_warn(AGENT,
                  "kubectl describe communicator %s -n %s shows this failure for the whole job, "
                  "and why rank %d (pod %s) ended once its Pod or Node says (OOMKilled, evicted, "
                  "deleted, its node NotReady, ...)",
                  comm->agent_job, comm->agent_ns[0] ? comm->agent_ns : "default", blame,
                  m->pod[0] ? m->pod : "?");
    else
        coll_warn(AGENT,
                  "kubectl describe communicator %s -n %s shows this failure for the whole "
                  "job",
                  comm->agent_job, comm->agent_ns[0] ? comm->agent_ns : "default");
}

/* comm->on_idle under the agent: an op has waited idle seconds on ranks without progress. A
 * node that died (power, kernel) keeps its ranks' connections open, so nothing but COLL_TIMEOUT
 * would end the wait; the pod's agent knows when Kubernetes says their pod or node is gone. */
static coll_result_t ask_agent(struct coll_comm *comm, const int *ranks, int n, const char *what,
                               double idle, bool *soon)
{
    colli_proto_peer_msg_t q = {.pid = (int)getpid()};
    const char *own = comm->members[comm->rank].pod;
    for (int i = 0; i < n && q.npeers < COLLI_PROTO_MAX_PEERS; i++) {
        if (ranks[i] < 0 || ranks[i] >= comm->nranks)
            continue;
        const colli_member_t *m = &comm->members[ranks[i]];
        if (m->pod[0] == '\0' || strcmp(m->pod, own) == 0)
            continue; /* its own pod's ranks: the pod is alive */
        q.peers[q.npeers++] =
            (colli_proto_peer_t){.rank = ranks[i], .pod = m->pod, .node = m->node};
    }
    if (q.npeers == 0)
        return COLL_SUCCESS;
    int ended;
    char cause[1024];
    coll_result_t status = colli_agent_ask_peers(comm->agent_socket, AGENT_REPORT_MS, &q, &ended,
                                                 cause, sizeof(cause), soon);
    if (status != COLL_SUCCESS) {
        coll_info(AGENT,
                  "the kcoll agent does not answer whether the ranks this one waits on ended "
                  "(%s): the wait ends at COLL_TIMEOUT, as without it",
                  colli_agent_last_error());
        comm->idle_ask_off = true;
        return COLL_SUCCESS;
    }
    bool asked = false; /* an answer about a rank not asked about is not believed */
    for (int i = 0; i < q.npeers; i++)
        asked |= q.peers[i].rank == ended;
    if (!asked)
        return COLL_SUCCESS;
    char who[200];
    colli_member_desc(comm, ended, who, sizeof(who));
    colli_comm_blame(comm, ended);
    return COLLI_ERR(COLL, COLL_ERR_REMOTE,
                     "%s: %s is gone, as Kubernetes tells this pod's kcoll agent: %s. Rank %d "
                     "waited %.0f s for it: a rank whose node died sends nothing and closes "
                     "nothing, so only this (or COLL_TIMEOUT) ends the wait",
                     what, who, cause, comm->rank, idle);
}

void colli_agent_watch_peers(struct coll_comm *comm)
{
    if (comm->agent_socket[0] != '\0' && comm->agent_job[0] != '\0') /* a Kubernetes agent */
        comm->on_idle = ask_agent;
}

coll_result_t colli_agent_apply_pins(colli_config_t *cfg, const colli_proto_facts_t *f)
{
    char exact[sizeof(f->ifname) + 1];
    coll_result_t status = COLL_SUCCESS;
    if (f->ifname[0] != '\0') {
        snprintf(exact, sizeof(exact), "=%s", f->ifname);
        status = colli_config_pin(cfg, "COLL_SOCKET_IFNAME", exact, COLLI_SRC_AGENT);
    }
    if (status == COLL_SUCCESS && f->transport[0] != '\0')
        status = colli_config_pin(cfg, "COLL_TRANSPORT", f->transport, COLLI_SRC_AGENT);
    if (status == COLL_SUCCESS && f->ib_device[0] != '\0' &&
        strcmp(f->transport, COLLI_PROTO_TRANSPORT_SOCKET) != 0) {
        snprintf(exact, sizeof(exact), "=%s", f->ib_device);
        status = colli_config_pin(cfg, "COLL_IB_HCA", exact, COLLI_SRC_AGENT);
    }
    char secs[16];
    if (status == COLL_SUCCESS && f->bootstrap_timeout_s > 0) {
        snprintf(secs, sizeof(secs), "%d", f->bootstrap_timeout_s);
        status = colli_config_pin(cfg, "COLL_BOOTSTRAP_TIMEOUT", secs, COLLI_SRC_AGENT);
    }
    if (status == COLL_SUCCESS && f->timeout_s > 0) {
        snprintf(secs, sizeof(secs), "%d", f->timeout_s);
        status = colli_config_pin(cfg, "COLL_TIMEOUT", secs, COLLI_SRC_AGENT);
    }
    return status;
}

int colli_agent_gpu(const colli_proto_facts_t *f)
{
    if (f->gpu < 0)
        return -1;
    const char *cvd = secure_getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == NULL)
        return f->gpu;
    int n = 0;
    for (const char *p = cvd; *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (len == 0 || (len == 2 && strncmp(p, "-1", 2) == 0) ||
            (len == 10 && strncmp(p, "NoDevFiles", 10) == 0) ||
            (len == 4 && strncmp(p, "void", 4) == 0))
            break; /* CUDA stops at the first invalid entry */
        n++;
        p += len;
        if (*p == ',')
            p++;
    }
    if (n == 0)
        return -1;
    return n == 1 ? 0 : f->gpu % n;
}

static coll_result_t resolve(const char *host, int port, struct sockaddr_storage *out)
{
    return colli_sock_resolve(host, port, out, "the agent's root endpoint", "");
}

/* This process told the root that it cannot start (msg): its own error is what every other rank
 * reads, "rank R (pid P on HOST) cannot start: msg". */
static void set_told_error(int rank, const char *msg)
{
    char text[1900];
    colli_bootstrap_error_text(rank, msg, text, sizeof(text));
    colli_set_last_error(text);
}

/* The library version the agent pins, against this build's: COLL_ERR_VERSION (reported to the
 * agent) naming rank, pod and node on a mismatch. */
static coll_result_t check_version(const char *path, const colli_proto_facts_t *f)
{
    if (f->library_version[0] == '\0' || strcmp(f->library_version, COLL_VERSION_STRING_BUILD) == 0)
        return COLL_SUCCESS;
    char msg[1600];
    if (f->topology[0] != '\0') /* Kubernetes: the sidecar delivers the pinned build */
        snprintf(msg, sizeof(msg),
                 "version mismatch: rank %d (pod %s on node %s) runs kcoll %s, but the job pins "
                 "%s (CollectiveTopology %s). Load the library the kcoll sidecar delivers "
                 "(LD_LIBRARY_PATH=/var/run/kcoll/lib) or change the pin.",
                 f->rank, f->pod, f->node, COLL_VERSION_STRING_BUILD, f->library_version,
                 f->topology);
    else /* a standalone agent (coll-run --agent, coll-agent --topology FILE) */
        snprintf(msg, sizeof(msg),
                 "version mismatch: rank %d (%s on %s) runs kcoll %s, but its agent's standalone "
                 "topology pins %s. Run the build it pins, or change the pin (coll-run "
                 "--pin-version, or libraryVersion in the topology file).",
                 f->rank, f->pod, f->node, COLL_VERSION_STRING_BUILD, f->library_version);
    report_failed(path, COLL_ERR_VERSION, true, msg, -1, NULL, NULL);
    return COLLI_ERR(AGENT, COLL_ERR_VERSION, "%s", msg);
}

coll_result_t colli_agent_attach(colli_create_t *c, colli_proto_facts_t *f)
{
    const char *path = secure_getenv(COLL_ENV_AGENT_SOCKET);
    if (path == NULL || *path == '\0')
        return COLL_SUCCESS;
    colli_config_t env;
    coll_result_t status = colli_config_load(&env);
    if (status != COLL_SUCCESS)
        return status;
    status = colli_agent_hello(path, (int)(env.bootstrap_timeout * 1000.0), f);
    if (status != COLL_SUCCESS) {
        colli_proto_failure_t how;
        bool tell = colli_agent_failed_facts(f, &how) == 0;
        status = COLLI_ERR(AGENT, status,
                           "%s (%s is set, so this communicator takes the pod's pins from its "
                           "kcoll agent; unset it to run without the agent)",
                           colli_agent_last_error(), COLL_ENV_AGENT_SOCKET);
        if (tell) { /* the agent refused this process of its pod: fail the others now */
            char msg[1600];
            snprintf(msg, sizeof(msg), "%s", colli_last_error());
            colli_bootstrap_report_error(&c->root, c->secret, how.own_rank ? c->rank : -1,
                                         c->nranks, msg);
            set_told_error(how.own_rank ? c->rank : -1, msg);
        }
        return status;
    }
    if ((status = check_version(path, f)) != COLL_SUCCESS) {
        /* the caller's id names the root: every rank fails now, not at the bootstrap timeout */
        char msg[1600];
        snprintf(msg, sizeof(msg), "%s", colli_last_error());
        colli_bootstrap_report_error(&c->root, c->secret, c->rank, c->nranks, msg);
        set_told_error(c->rank, msg);
        return status;
    }
    coll_info(INIT,
              "rank %d of %d from the caller's unique id; network, transport and timeouts pinned "
              "by the kcoll agent of pod %s (rank %d of %d in %s%s)",
              c->rank, c->nranks, f->pod[0] ? f->pod : "(unnamed)", f->rank, f->nranks,
              f->topology[0] ? "CollectiveTopology " : "its standalone topology", f->topology);
    c->agent = f;
    c->agent_socket = path;
    (void)colli_agent_report(path, AGENT_REPORT_MS, COLLI_PROTO_PHASE_BOOTSTRAPPING, NULL);
    return COLL_SUCCESS;
}

/* The GPU ordinals of ranks first .. first + count - 1, as ranges ("0-3,6"); "" for none, or
 * when they do not fit. */
static void gpu_ranges(const struct coll_comm *comm, int first, int count, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int r = first; r < first + count;) {
        const int g = comm->members[r].gpu;
        int e = r;
        while (g >= 0 && e + 1 < first + count &&
               comm->members[e + 1].gpu == comm->members[e].gpu + 1)
            e++;
        if (g >= 0) {
            int n = e > r ? snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", g,
                                     comm->members[e].gpu)
                          : snprintf(buf + off, len - off, "%s%d", off ? "," : "", g);
            if (n < 0 || (size_t)n >= len - off) {
                buf[0] = '\0';
                return;
            }
            off += (size_t)n;
        }
        r = e + 1;
    }
}

/* Where rank 0's communicator runs, one entry per pod (consecutive ranks of one pod). */
typedef struct {
    colli_proto_place_t places[COLLI_PROTO_MAX_PLACES];
    char gpus[COLLI_PROTO_MAX_PLACES][96];
    int n, more;
} placement_t;

static void placement(const struct coll_comm *comm, placement_t *pl)
{
    pl->n = pl->more = 0;
    for (int r = 0; r < comm->nranks;) {
        int end = r + 1;
        while (end < comm->nranks && strcmp(comm->members[end].pod, comm->members[r].pod) == 0)
            end++;
        if (!comm->members[r].pod[0]) {
            r = end; /* no agent named it */
            continue;
        }
        if (pl->n == COLLI_PROTO_MAX_PLACES) {
            pl->more++;
        } else {
            gpu_ranges(comm, r, end - r, pl->gpus[pl->n], sizeof(pl->gpus[pl->n]));
            pl->places[pl->n] = (colli_proto_place_t){.pod = comm->members[r].pod,
                                                      .node = comm->members[r].node,
                                                      .gpus = pl->gpus[pl->n],
                                                      .first = r,
                                                      .count = end - r};
            pl->n++;
        }
        r = end;
    }
}

/* Ready, with the transports the new communicator uses (the Communicator shows rank 0's) and,
 * from rank 0, where every rank runs. */
static void report_ready(const char *path, coll_comm_t handle)
{
    char tp[256] = "";
    struct coll_comm *comm = NULL;
    placement_t *pl = NULL;
    if (handle != NULL && colli_comm_lookup(handle, &comm) == COLL_SUCCESS) {
        colli_tp_summary(comm, tp, sizeof(tp));
        if (comm->rank == 0 && comm->members != NULL && (pl = calloc(1, sizeof(*pl))) != NULL)
            placement(comm, pl);
    }
    (void)colli_agent_report_ready(path, AGENT_REPORT_MS, tp[0] ? tp : NULL, pl ? pl->places : NULL,
                                   pl ? pl->n : 0, pl ? pl->more : 0);
    free(pl);
}

void colli_agent_created(const colli_create_t *c, coll_comm_t comm, coll_result_t status)
{
    if (c->agent_socket == NULL || c->parent != NULL)
        return;
    if (status == COLL_SUCCESS) {
        report_ready(c->agent_socket, comm);
        return;
    }
    char msg[2048];
    snprintf(msg, sizeof(msg), "%s", colli_last_error());
    report_failed(c->agent_socket, status, true, msg, -1, NULL, NULL);
    colli_set_last_error(msg);
}

/* How long the root that rank 0 hosts waits for the ranks: the agent's pin, else the
 * environment's, shortened to the caller's bound (> 0). */
static double root_wait(const colli_proto_facts_t *f, double env_timeout, double bound)
{
    return colli_config_bounded(f->bootstrap_timeout_s > 0 ? f->bootstrap_timeout_s : env_timeout,
                                bound);
}

/* This rank cannot start (its last error says why): the root, at the endpoint the agent serves,
 * fails every rank with that message within seconds instead of letting them wait for the
 * bootstrap timeout; the process that hosts the root (rank 0, or the lowest local rank of pod 0
 * its agent named) starts it for that and stays until the others were told. A process the agent
 * refused as no rank reports as none; the one the agent asks to also reports the pod's ranks that
 * never started, so that the root does not wait for them. Best effort, bounded by the bootstrap
 * timeout. */
static void tell_root(const colli_proto_facts_t *f, const colli_proto_failure_t *how,
                      double env_timeout, double bound)
{
    char msg[1600];
    snprintf(msg, sizeof(msg), "%s", colli_last_error());
    struct sockaddr_storage root;
    if (resolve(f->root_host, f->root_port, &root) != COLL_SUCCESS) {
        colli_set_last_error(msg);
        return;
    }
    pthread_t thread;
    bool hosts = false;
    if (how->host_root) {
        struct sockaddr_storage bound_at;
        hosts = colli_root_start(&root, f->secret, root_wait(f, env_timeout, bound), &bound_at,
                                 &thread) == COLL_SUCCESS;
    }
    colli_bootstrap_report_error(&root, f->secret, how->own_rank ? f->rank : -1, f->nranks, msg);
    for (int i = 0; i < how->nmissing; i++) {
        char why[1800];
        snprintf(why, sizeof(why), "rank %d never started (reported by its pod's agent): %s",
                 how->missing[i], msg);
        colli_bootstrap_report_error(&root, f->secret, how->missing[i], f->nranks, why);
    }
    if (hosts)
        colli_root_finish(thread, COLL_SUCCESS); /* until every rank got the message */
    set_told_error(how->own_rank ? f->rank : -1, msg);
}

coll_result_t coll_comm_init_agent(coll_comm_t *out)
{
    return coll_comm_init_agent_timeout(out, 0);
}

coll_result_t coll_comm_init_agent_timeout(coll_comm_t *out, double bound)
{
    coll_result_t status;
    if (out == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_agent: comm is NULL (pass a coll_comm_t to fill)");
    if ((status = colli_config_check_bound("coll_comm_init_agent_timeout", bound)) != COLL_SUCCESS)
        return status;
    const char *path = secure_getenv(COLL_ENV_AGENT_SOCKET);
    if (path == NULL || *path == '\0')
        return COLLI_ERR(AGENT, COLL_ERR_INVALID_USAGE,
                         "coll_comm_init_agent: %s is not set. Inside Kubernetes the kcoll "
                         "webhook sets it when the pod opts in (label kcoll.io/inject=true); "
                         "outside, start `coll-agent --topology FILE` and point %s at its socket",
                         COLL_ENV_AGENT_SOCKET, COLL_ENV_AGENT_SOCKET);
    colli_config_t env;
    COLL_CHECK_GOTO(colli_config_load(&env), out);
    colli_config_bound_bootstrap(&env, bound);
    colli_proto_facts_t f;
    status = colli_agent_hello(path, (int)(env.bootstrap_timeout * 1000.0), &f);
    if (status != COLL_SUCCESS) {
        colli_proto_failure_t how;
        status = COLLI_ERR(AGENT, status, "%s", colli_agent_last_error());
        /* the agent refused this process but named the job (a pod whose local ranks did not
         * all start, a local rank claimed twice): fail the job's other ranks now */
        if (colli_agent_failed_facts(&f, &how) == 0) {
            how.host_root = how.host_root || (f.is_root && how.own_rank);
            tell_root(&f, &how, env.bootstrap_timeout, bound);
        }
        return status;
    }
    colli_log_set_rank(f.rank);
    if ((status = check_version(path, &f)) != COLL_SUCCESS) {
        colli_proto_failure_t how = {.host_root = f.is_root, .own_rank = 1};
        tell_root(&f, &how, env.bootstrap_timeout, bound);
        goto out;
    }
    colli_create_t c = {
        .nranks = f.nranks, .rank = f.rank, .agent = &f, .agent_socket = path, .bound = bound};
    memcpy(c.secret, f.secret, sizeof(c.secret));
    COLL_CHECK_GOTO(resolve(f.root_host, f.root_port, &c.root), report);
    pthread_t root;
    if (f.is_root) {
        struct sockaddr_storage bound_at;
        COLL_CHECK_GOTO(colli_root_start(&c.root, f.secret,
                                         root_wait(&f, env.bootstrap_timeout, bound), &bound_at,
                                         &root),
                        report);
    }
    (void)colli_agent_report(path, AGENT_REPORT_MS, COLLI_PROTO_PHASE_BOOTSTRAPPING, NULL);
    status = colli_comm_create(&c, out);
    if (f.is_root && status == COLL_SUCCESS) {
        colli_root_finish(root, status);
    } else if (f.is_root) { /* tell the ranks still to come before the root goes */
        char msg[1600];
        snprintf(msg, sizeof(msg), "%s", colli_last_error());
        colli_root_finish_failed(root, &c.root, f.secret, f.rank, f.nranks, msg);
        colli_set_last_error(msg);
    }
    if (status != COLL_SUCCESS)
        goto report;
    report_ready(path, *out);
    goto out;
report : {
    char msg[2048];
    snprintf(msg, sizeof(msg), "%s", colli_last_error());
    report_failed(path, status, true, msg, -1, NULL, NULL);
    colli_set_last_error(msg);
}
out:
    colli_log_set_rank(-1);
    return status;
}
