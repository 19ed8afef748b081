/* coll_comm_init_agent: a communicator whose rank, world, root endpoint, network, transport
 * policy, timeouts and pinned version come from the pod's coll-agent (operator pin > COLL_*
 * environment > default). Rank 0 hosts the bootstrap root at the endpoint its agent published. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sockutil.h"
#include "bootstrap/agent_client.h"
#include "bootstrap/bootstrap.h"
#include "core/core.h"
#include "transport/transport.h"

#define AGENT_REPORT_MS 1000

void colli_agent_notify_failure(struct coll_comm *comm, const char *msg)
{
    if (comm->agent_socket[0] == '\0')
        return;
    /* The status names the rank the failure is blamed on (the dead or stopped peer), with its
     * pod and node from its member record; else this rank. */
    int blame = comm->blame_rank;
    const colli_member_t *m =
        blame >= 0 && blame < comm->nranks && comm->members ? &comm->members[blame] : NULL;
    if (colli_agent_report_ex(comm->agent_socket, AGENT_REPORT_MS, COLLI_PROTO_PHASE_FAILED, -1,
                              m ? blame : -1, m ? m->pod : NULL, m ? m->node : NULL, msg, NULL, 0,
                              NULL, NULL) != COLL_SUCCESS)
        coll_debug(AGENT, "could not report the failure to the agent: %s",
                   colli_agent_last_error());
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

static coll_result_t resolve(const char *host, int port, struct sockaddr_storage *out)
{
    return colli_sock_resolve(host, port, out, "the agent's root endpoint", "");
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
    (void)colli_agent_report(path, AGENT_REPORT_MS, COLLI_PROTO_PHASE_FAILED, msg);
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
    if (status != COLL_SUCCESS)
        return COLLI_ERR(AGENT, status,
                         "%s (%s is set, so this communicator takes the pod's pins from its "
                         "kcoll agent; unset it to run without the agent)",
                         colli_agent_last_error(), COLL_ENV_AGENT_SOCKET);
    if ((status = check_version(path, f)) != COLL_SUCCESS) {
        /* the caller's id names the root: every rank fails now, not at the bootstrap timeout */
        char msg[1600];
        snprintf(msg, sizeof(msg), "%s", colli_last_error());
        colli_bootstrap_report_error(&c->root, c->secret, c->rank, c->nranks, msg);
        colli_set_last_error(msg);
        return status;
    }
    coll_info(INIT,
              "rank %d of %d from the caller's unique id; network, transport and timeouts pinned "
              "by the kcoll agent of pod %s (rank %d of %d in topology %s)",
              c->rank, c->nranks, f->pod[0] ? f->pod : "?", f->rank, f->nranks,
              f->topology[0] ? f->topology : "?");
    c->agent = f;
    c->agent_socket = path;
    (void)colli_agent_report(path, AGENT_REPORT_MS, COLLI_PROTO_PHASE_BOOTSTRAPPING, NULL);
    return COLL_SUCCESS;
}

/* Ready, with the transports the new communicator uses (the Communicator shows rank 0's). */
static void report_ready(const char *path, coll_comm_t handle)
{
    char tp[256] = "";
    struct coll_comm *comm = NULL;
    if (handle != NULL && colli_comm_lookup(handle, &comm) == COLL_SUCCESS)
        colli_tp_summary(comm, tp, sizeof(tp));
    (void)colli_agent_report_ready(path, AGENT_REPORT_MS, tp[0] ? tp : NULL);
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
    (void)colli_agent_report(c->agent_socket, AGENT_REPORT_MS, COLLI_PROTO_PHASE_FAILED, msg);
    colli_set_last_error(msg);
}

/* This rank cannot start (its last error says why): the root, at the endpoint the agent serves,
 * fails every rank with that message within seconds instead of letting them wait for the
 * bootstrap timeout; the rank that hosts the root starts it for that and stays until the others
 * were told. Best effort, bounded by the bootstrap timeout. */
static void tell_root(const colli_proto_facts_t *f, double env_timeout)
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
    if (f->is_root) {
        struct sockaddr_storage bound;
        double bt = f->bootstrap_timeout_s > 0 ? f->bootstrap_timeout_s : env_timeout;
        hosts = colli_root_start(&root, f->secret, bt, &bound, &thread) == COLL_SUCCESS;
    }
    colli_bootstrap_report_error(&root, f->secret, f->rank, f->nranks, msg);
    if (hosts)
        colli_root_finish(thread, COLL_SUCCESS); /* until every rank got the message */
    colli_set_last_error(msg);
}

coll_result_t coll_comm_init_agent(coll_comm_t *out)
{
    coll_result_t status;
    if (out == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_agent: comm is NULL (pass a coll_comm_t to fill)");
    const char *path = secure_getenv(COLL_ENV_AGENT_SOCKET);
    if (path == NULL || *path == '\0')
        return COLLI_ERR(AGENT, COLL_ERR_INVALID_USAGE,
                         "coll_comm_init_agent: %s is not set. Inside Kubernetes the kcoll "
                         "webhook sets it when the pod opts in (label kcoll.io/inject=true); "
                         "outside, start `coll-agent --topology FILE` and point %s at its socket",
                         COLL_ENV_AGENT_SOCKET, COLL_ENV_AGENT_SOCKET);
    colli_config_t env;
    COLL_CHECK_GOTO(colli_config_load(&env), out);
    colli_proto_facts_t f;
    status = colli_agent_hello(path, (int)(env.bootstrap_timeout * 1000.0), &f);
    if (status != COLL_SUCCESS)
        return COLLI_ERR(AGENT, status, "%s", colli_agent_last_error());
    colli_log_set_rank(f.rank);
    if ((status = check_version(path, &f)) != COLL_SUCCESS) {
        tell_root(&f, env.bootstrap_timeout);
        goto out;
    }
    colli_create_t c = {.nranks = f.nranks, .rank = f.rank, .agent = &f, .agent_socket = path};
    memcpy(c.secret, f.secret, sizeof(c.secret));
    COLL_CHECK_GOTO(resolve(f.root_host, f.root_port, &c.root), report);
    pthread_t root;
    if (f.is_root) {
        struct sockaddr_storage bound;
        double bt = f.bootstrap_timeout_s > 0 ? f.bootstrap_timeout_s : env.bootstrap_timeout;
        COLL_CHECK_GOTO(colli_root_start(&c.root, f.secret, bt, &bound, &root), report);
    }
    (void)colli_agent_report(path, AGENT_REPORT_MS, COLLI_PROTO_PHASE_BOOTSTRAPPING, NULL);
    status = colli_comm_create(&c, out);
    if (f.is_root)
        colli_root_finish(root, status);
    if (status != COLL_SUCCESS)
        goto report;
    report_ready(path, *out);
    goto out;
report : {
    char msg[2048];
    snprintf(msg, sizeof(msg), "%s", colli_last_error());
    (void)colli_agent_report(path, AGENT_REPORT_MS, COLLI_PROTO_PHASE_FAILED, msg);
    colli_set_last_error(msg);
}
out:
    colli_log_set_rank(-1);
    return status;
}
