/* Rendezvous through the job's Communicator object: rank 0 creates it (owned by the job) with the
 * root endpoint and the name of the job's Secret (job_secret.c, created first); every other
 * agent WATCHes that one object, then reads the Secret. A Communicator without ownerReferences
 * is never used: nothing would tell this job's from one anybody made. */
#define _GNU_SOURCE
#include "kube.h"

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define COMM_GROUP_PATH  "/apis/kcoll.io/v1alpha1/namespaces"
#define MAX_CREATE_TRIES 8

/* The kernel's ports for outgoing connections (net.ipv4.ip_local_port_range). */
static bool ephemeral_range(int *lo, int *hi)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f == NULL)
        return false;
    bool ok = fscanf(f, "%d %d", lo, hi) == 2 && *lo > 0 && *lo <= *hi && *hi <= 65535;
    fclose(f);
    return ok;
}

/* Can a TCP socket bind address:port now (0: any)? The port bound, or -1. */
static int try_bind(const struct sockaddr_storage *addr, socklen_t len, int port)
{
    struct sockaddr_storage ss = *addr;
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int got = -1;
    if (bind(fd, (struct sockaddr *)&ss, len) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        got = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                            : ((struct sockaddr_in6 *)&ss)->sin6_port);
    close(fd);
    return got;
}

/* A free TCP port on address for the bootstrap root, which rank 0 binds seconds later. Chosen at
 * random in [20000, 30000) below the kernel's ephemeral range: a port there is never handed to
 * an outgoing connection meanwhile (one from bind(0) is, by any connection of the pod, or of the
 * node with hostNetwork: "bind: Address already in use" on rank 0), and it stays clear of
 * Kubernetes' NodePorts (30000-32767). bind(0) when that range is not below the ephemeral one or
 * nothing in it is free. */
static int free_port(const char *address)
{
    enum { LOW = 20000, HIGH = 30000, TRIES = 64 };
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (strchr(address, ':') == NULL) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        if (inet_pton(AF_INET, address, &s4->sin_addr) != 1)
            return -1;
        len = sizeof(*s4);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, address, &s6->sin6_addr) != 1)
            return -1;
        len = sizeof(*s6);
    }
    int lo = 0, hi = 0;
    const int top = ephemeral_range(&lo, &hi) && lo < HIGH ? lo : HIGH;
    for (int i = 0; top - LOW >= TRIES && i < TRIES; i++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            break;
        int port = try_bind(&ss, len, LOW + (int)(r % (uint32_t)(top - LOW)));
        if (port > 0)
            return port;
    }
    return try_bind(&ss, len, 0);
}

static int parse_endpoint(const char *ep, char *host, size_t hlen, int *port)
{
    const char *colon = strrchr(ep, ':');
    const char *h = ep;
    size_t n;
    char *end;
    long p;
    if (!colon)
        return -1;
    n = (size_t)(colon - ep);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n == 0 || n >= hlen)
        return -1;
    p = strtol(colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)p;
    return 0;
}

/* Apply the Communicator's spec to f; 0 when complete and consistent with this pod's pins. */
static int from_comm(const json_t *comm, agent_facts_t *f, int nranks_known,
                     agent_condition_t *cond)
{
    json_t *spec = json_object_get(comm, "spec");
    const char *ep = json_string_value(json_object_get(spec, "rootEndpoint"));
    const char *sname = json_string_value(json_object_get(spec, "secretName"));
    const char *topo = json_string_value(json_object_get(spec, "topology"));
    json_t *n = json_object_get(spec, "nranks"), *np = json_object_get(spec, "pods");
    json_t *nper = json_object_get(spec, "ranksPerPod");
    json_int_t nr, pp;
    int nranks, per;
    if (!ep || !sname || !json_is_integer(n))
        return 1; /* not published yet */
    /* f counts pods; spec.nranks counts ranks (pods x ranksPerPod); never wrapped into another
     * int (0 is refused below) */
    nr = json_is_integer(np) ? json_integer_value(np) : json_integer_value(n);
    nranks = nr > 0 && nr <= INT_MAX ? (int)nr : 0;
    pp = json_is_integer(nper) ? json_integer_value(nper) : 1;
    per = pp > 0 && pp <= INT_MAX ? (int)pp : 0;
    if (parse_endpoint(ep, f->root_host, sizeof(f->root_host), &f->root_port) != 0 || nranks <= 0) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "CommunicatorInvalid");
        snprintf(cond->message, sizeof(cond->message),
                 "Communicator %s/%s has a malformed spec (rootEndpoint \"%s\", nranks %lld); "
                 "delete it so that rank 0 recreates it",
                 f->ns, f->job, ep, (long long)nr);
        return -1;
    }
    if (per != (f->local_size > 0 ? f->local_size : 1)) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "RanksPerPodMismatch");
        snprintf(cond->message, sizeof(cond->message),
                 "rank 0's pod %s runs %d ranks per pod but this pod runs %d; every pod of job %s "
                 "must start the same number of processes (torchrun --nproc-per-node, or "
                 "ranksPerPod in the CollectiveTopology)",
                 json_string_value(json_object_get(spec, "rootPod"))
                     ? json_string_value(json_object_get(spec, "rootPod"))
                     : "?",
                 per, f->local_size, f->job);
        return -1;
    }
    if (nranks_known && nranks != f->nranks) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "WorldSizeMismatch");
        snprintf(cond->message, sizeof(cond->message),
                 "rank 0 published %d pods but this pod's labels say %d", nranks, f->nranks);
        return -1;
    }
    f->nranks = nranks;
    if (f->rank >= nranks) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "RankOutOfRange");
        snprintf(cond->message, sizeof(cond->message),
                 "this pod's rank %d is not below the job's %d ranks", f->rank, nranks);
        return -1;
    }
    if (topo && strcmp(topo, f->topology) != 0) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "TopologyMismatch");
        snprintf(cond->message, sizeof(cond->message),
                 "rank 0 of job %s uses CollectiveTopology %s but this pod is selected by %s; "
                 "every pod of a job must be selected by the same topology",
                 f->job, topo, f->topology);
        return -1;
    }
    return 0;
}

typedef struct {
    agent_facts_t *f;
    const char *job_uid;
    int nranks_known;
    agent_condition_t *cond;
    int result;  /* 0 ok, -1 fatal */
    int unowned; /* a Communicator without ownerReferences was seen and refused */
    char comm_uid[64];
    json_t *obj; /* the Communicator as watched (seeds the status writer) */
} watch_arg_t;

static int on_comm(void *arg, const char *type, json_t *obj)
{
    watch_arg_t *w = arg;
    json_t *owner = json_array_get(agent_json_path(obj, "metadata.ownerReferences"), 0);
    const char *ouid = json_string_value(json_object_get(owner, "uid"));
    int rc;
    if (strcmp(type, "DELETED") == 0)
        return 0;
    if (!ouid || !ouid[0]) {
        if (!w->unowned)
            agent_warn("AGENT-RDV-UNOWNED",
                       "Communicator %s/%s has no ownerReferences: refused (rank 0's agent always "
                       "sets this job as its owner; one without is an earlier version's or was "
                       "made by hand); waiting for rank 0 to take it over",
                       w->f->ns, w->f->job);
        w->unowned = 1;
        return 0;
    }
    if (strcmp(ouid, w->job_uid) != 0) {
        agent_info("AGENT-RDV-STALE",
                   "Communicator %s is owned by uid %s, not this job (%s); "
                   "waiting for rank 0 to replace it",
                   w->f->job, ouid, w->job_uid);
        return 0;
    }
    rc = from_comm(obj, w->f, w->nranks_known, w->cond);
    if (rc > 0)
        return 0;
    w->result = rc;
    agent_json_str(json_object_get(obj, "metadata"), "uid", w->comm_uid, sizeof(w->comm_uid));
    json_decref(w->obj);
    w->obj = json_incref(obj);
    return 1;
}

static json_t *comm_object(agent_pod_info_t *pi, const agent_facts_t *f, const char *endpoint,
                           const char *secret_name)
{
    json_t *o = json_pack(
        "{ss ss s{ss ss s{ss}} s{ss ss si si si ss ss ss ss ss ss ss si si}}", "apiVersion",
        "kcoll.io/v1alpha1", "kind", "Communicator", "metadata", "name", f->job, "namespace", f->ns,
        "labels", "kcoll.io/job", f->job, "spec", "jobName", f->job, "jobKind",
        pi->job_kind[0] ? pi->job_kind : "Pod", "nranks",
        f->nranks * (f->local_size > 0 ? f->local_size : 1), "pods", f->nranks, "ranksPerPod",
        f->local_size > 0 ? f->local_size : 1, "rootEndpoint", endpoint, "secretName", secret_name,
        "rootPod", f->pod, "rootNode", f->node, "topology", f->topology, "transport", f->transport,
        "libraryVersion", f->library_version, "bootstrapTimeoutSeconds", f->bootstrap_timeout_s,
        "timeoutSeconds", f->timeout_s);
    if (o) {
        json_t *ref =
            json_pack("[{ss ss ss ss sb}]", "apiVersion", pi->job_api_version, "kind", pi->job_kind,
                      "name", pi->owner_name, "uid", pi->job_uid, "controller", 0);
        json_object_set_new(json_object_get(o, "metadata"), "ownerReferences", ref);
    }
    return o;
}

/*
 * Take over the Communicator of an earlier job with the same name, in place: a merge PATCH
 * (precondition: the resourceVersion it was read at) that gives it this job's owner, labels and
 * spec (fields of the old spec that this agent does not set are removed), then a status PATCH
 * that clears the old status. Only create, patch and watch are needed (no get, no delete); the
 * watching ranks see the new owner in a MODIFIED event. Returns 0 when done (ctx->comm_uid set),
 * 1 when the object changed or vanished meanwhile (read it again), -1 with cond on failure.
 */
static int replace_stale(agent_ctx_t *ctx, int64_t deadline, const char *one, const json_t *cur,
                         const json_t *want, agent_condition_t *cond)
{
    const char *rv = json_string_value(agent_json_path(cur, "metadata.resourceVersion"));
    const char *cuid = json_string_value(agent_json_path(cur, "metadata.uid"));
    const json_t *old_spec = json_object_get(cur, "spec");
    json_t *spec = json_deep_copy(json_object_get(want, "spec"));
    json_t *refs = json_object_get(json_object_get(want, "metadata"), "ownerReferences");
    json_t *labels = json_object_get(json_object_get(want, "metadata"), "labels");
    json_t *patch = NULL, *reset = NULL;
    agent_kube_resp_t r;
    char spath[800];
    const char *key;
    json_t *val;
    int rc = -1;

    if (!spec || !rv)
        goto out;
    json_object_foreach((json_t *)old_spec, key, val)
    {
        if (!json_object_get(spec, key) && json_object_set_new(spec, key, json_null()) != 0)
            goto out;
    }
    patch = json_pack("{s{ss sO sO} sO}", "metadata", "resourceVersion", rv, "labels", labels,
                      "ownerReferences", refs ? refs : json_null(), "spec", spec);
    reset = json_pack("{sn}", "status");
    if (!patch || !reset)
        goto out;
    agent_info("AGENT-RDV-REPLACE",
               "Communicator %s (uid %s) belongs to an earlier job; taking it over for this one",
               one, cuid ? cuid : "?");
    if (agent_kube_request(ctx->kube, "PATCH", one, patch, "application/merge-patch+json", deadline,
                           &r) != 0) {
        agent_condition_from_resp(cond, "taking over the stale Communicator", &r);
        agent_kube_resp_free(&r);
        goto out;
    }
    if (r.code == 409 || r.code == 404) {
        agent_debug("AGENT-RDV-REPLACE", "stale Communicator changed meanwhile (HTTP %ld)", r.code);
        agent_kube_resp_free(&r);
        rc = 1;
        goto out;
    }
    if (r.code != 200) {
        agent_condition_from_resp(cond, "taking over the stale Communicator", &r);
        agent_kube_resp_free(&r);
        goto out;
    }
    agent_json_str(json_object_get(r.body, "metadata"), "uid", ctx->comm_uid,
                   sizeof(ctx->comm_uid));
    agent_health_set_object(ctx->health, r.body);
    agent_kube_resp_free(&r);
    /* the earlier job's phase, conditions and errors are not this job's */
    snprintf(spath, sizeof(spath), "%s/status", one);
    if (agent_kube_request(ctx->kube, "PATCH", spath, reset, "application/merge-patch+json",
                           deadline, &r) == 0 &&
        r.code == 200)
        agent_health_set_object(ctx->health, r.body);
    else
        agent_warn("AGENT-STATUS-FAIL",
                   "clearing the earlier job's status of Communicator %s: HTTP %ld %s", one, r.code,
                   r.message);
    agent_kube_resp_free(&r);
    rc = 0;
out:
    json_decref(spec);
    json_decref(patch);
    json_decref(reset);
    return rc;
}

static int root_create(agent_ctx_t *ctx, int64_t deadline, agent_pod_info_t *pi, agent_facts_t *f,
                       agent_condition_t *cond)
{
    char path[700], one[1000], endpoint[128], secret_name[254];
    int port = ctx->opt.root_port > 0 ? ctx->opt.root_port : free_port(f->address);
    json_t *obj;

    if (port <= 0) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "RootPortUnavailable");
        snprintf(cond->message, sizeof(cond->message),
                 "cannot find a free TCP port on %s for the bootstrap root; set --root-port",
                 f->address);
        return -1;
    }
    if (agent_random_bytes(f->secret, sizeof(f->secret)) != 0) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "RandomUnavailable");
        snprintf(cond->message, sizeof(cond->message), "getrandom failed: no secret");
        return -1;
    }
    if (agent_secret_create(ctx, deadline, pi, f, cond) != 0 ||
        agent_secret_name(f->job, secret_name, sizeof(secret_name)) != 0)
        return -1;
    snprintf(f->root_host, sizeof(f->root_host), "%s", f->address);
    f->root_port = port;
    if (strchr(f->address, ':'))
        snprintf(endpoint, sizeof(endpoint), "[%s]:%d", f->address, port);
    else
        snprintf(endpoint, sizeof(endpoint), "%s:%d", f->address, port);
    snprintf(path, sizeof(path), "%s/%s/communicators", COMM_GROUP_PATH, f->ns);
    snprintf(one, sizeof(one), "%s/%s", path, f->job);
    obj = comm_object(pi, f, endpoint, secret_name);
    if (!obj)
        return -1;
    for (int tries = 0; tries < MAX_CREATE_TRIES && agent_remaining_ms(deadline) > 0; tries++) {
        agent_kube_resp_t r;
        json_t *owner;
        const char *ouid;
        int rc;
        if (agent_kube_request(ctx->kube, "POST", path, obj, NULL, deadline, &r) != 0) {
            agent_condition_from_resp(cond, "creating the Communicator", &r);
            break;
        }
        if (r.code == 201 || r.code == 200) {
            agent_json_str(json_object_get(r.body, "metadata"), "uid", ctx->comm_uid,
                           sizeof(ctx->comm_uid));
            agent_health_set_object(ctx->health, r.body);
            agent_info("AGENT-RDV-CREATED", "created Communicator %s/%s root=%s nranks=%d", f->ns,
                       f->job, endpoint, f->nranks);
            agent_kube_resp_free(&r);
            json_decref(obj);
            return 0;
        }
        if (r.code != 409) {
            agent_condition_from_resp(cond, "creating the Communicator", &r);
            agent_kube_resp_free(&r);
            break;
        }
        agent_kube_resp_free(&r);
        /* AlreadyExists carries no object: ours (this agent restarted) or a stale one of an
         * earlier job. An empty merge patch answers with it (the role has no get). */
        if (agent_kube_read_by_patch(ctx->kube, one, deadline, &r) != 0 ||
            (r.code != 200 && r.code != 404)) {
            agent_condition_from_resp(cond, "reading the existing Communicator", &r);
            agent_kube_resp_free(&r);
            break;
        }
        if (r.code == 404) { /* gone meanwhile: create again */
            agent_kube_resp_free(&r);
            continue;
        }
        owner = json_array_get(agent_json_path(r.body, "metadata.ownerReferences"), 0);
        ouid = json_string_value(json_object_get(owner, "uid"));
        if (ouid && strcmp(ouid, pi->job_uid) == 0) {
            rc = from_comm(r.body, f, 1, cond);
            if (rc == 0) {
                agent_json_str(json_object_get(r.body, "metadata"), "uid", ctx->comm_uid,
                               sizeof(ctx->comm_uid));
                agent_health_set_object(ctx->health, r.body);
                agent_info("AGENT-RDV-ADOPTED",
                           "Communicator %s/%s exists for this job; reusing its root "
                           "endpoint %s:%d",
                           f->ns, f->job, f->root_host, f->root_port);
                agent_kube_resp_free(&r);
                json_decref(obj);
                return 0;
            }
            if (rc < 0) {
                agent_kube_resp_free(&r);
                break;
            }
            /* ours but never completed: overwrite it like a stale one */
        }
        rc = replace_stale(ctx, deadline, one, r.body, obj, cond);
        agent_kube_resp_free(&r);
        if (rc == 0) {
            json_decref(obj);
            return 0;
        }
        if (rc < 0)
            break;
        /* rc > 0: it changed or went away meanwhile; look again */
        agent_kube_backoff(ctx->kube, tries < 3 ? tries : 3, deadline);
    }
    json_decref(obj);
    if (!cond->type[0]) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "CommunicatorConflict");
        snprintf(cond->message, sizeof(cond->message),
                 "could not create or take over Communicator %s/%s after %d attempts (it kept "
                 "changing); is another agent of this job running as rank 0?",
                 f->ns, f->job, MAX_CREATE_TRIES);
    }
    return -1;
}

int agent_rendezvous(agent_ctx_t *ctx, int64_t deadline, agent_pod_info_t *pi, agent_facts_t *f,
                     agent_condition_t *cond)
{
    char path[700], fsel[400];
    agent_kube_resp_t r;
    watch_arg_t w;
    int64_t rdv_deadline;

    snprintf(ctx->comm_name, sizeof(ctx->comm_name), "%s", f->job);
    /* JobSet members of later Jobs learn their rank from their Job's completions */
    if (!pi->rank_known && agent_pod_world_size(pi, f, cond) != 0)
        return -1;
    f->is_root = f->rank == 0;
    if (!pi->job_uid[0] || !pi->job_api_version[0] || !pi->job_kind[0] || !pi->owner_name[0])
        return agent_fatal(
            cond, "JobOwnerUnknown",
            "pod %s names job %s but no owner uid (%s): the job's Communicator and Secret must be "
            "owned by the job, so that they are garbage-collected with it and no other object "
            "can pass for them; run the pods under a Job, JobSet or PyTorchJob created through "
            "the kcoll webhook (it writes a JobSet's uid as kcoll.io/job-uid)",
            f->pod, f->job,
            pi->job_kind[0] ? pi->job_kind : "no controlling Job, JobSet or PyTorchJob");
    if (f->is_root) {
        if (agent_pod_world_size(pi, f, cond) != 0)
            return -1;
        f->nranks = pi->nranks;
        return root_create(ctx, deadline, pi, f, cond);
    }
    if (pi->nranks > 0)
        f->nranks = pi->nranks;
    snprintf(path, sizeof(path), "%s/%s/communicators", COMM_GROUP_PATH, f->ns);
    snprintf(fsel, sizeof(fsel), "metadata.name=%s", f->job);
    memset(&w, 0, sizeof(w));
    w.f = f;
    w.job_uid = pi->job_uid;
    w.nranks_known = pi->nranks > 0;
    w.cond = cond;
    rdv_deadline = agent_now_ms() + (int64_t)f->bootstrap_timeout_s * 1000;
    if (ctx->opt.rendezvous_timeout_s > 0)
        rdv_deadline = agent_now_ms() + (int64_t)ctx->opt.rendezvous_timeout_s * 1000;
    agent_info("AGENT-RDV-WAIT", "rank %d waiting for Communicator %s/%s (watch)", f->rank, f->ns,
               f->job);
    if (agent_kube_watch(ctx->kube, path, fsel, rdv_deadline, on_comm, &w, &r) != 0) {
        json_decref(w.obj);
        if (r.code == 401 || r.code == 403 || r.code == 404) {
            agent_condition_from_resp(cond, "watching the Communicator", &r);
        } else if (w.unowned) {
            agent_fatal(cond, "CommunicatorUnowned",
                        "Communicator %s/%s has no ownerReferences, so it was refused, and rank 0 "
                        "did not replace it within the bootstrap timeout: delete it (kubectl "
                        "delete communicator -n %s %s) and restart the job",
                        f->ns, f->job, f->ns, f->job);
        } else {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "%s", COLLI_PROTO_CODE_RENDEZVOUS_TIMEOUT);
            snprintf(cond->message, sizeof(cond->message),
                     "rank 0 of job %s did not publish Communicator %s/%s within the bootstrap "
                     "timeout: is rank 0's pod running and its agent healthy? (%s)",
                     f->job, f->ns, f->job, r.message);
        }
        return -1;
    }
    if (w.result != 0 ||
        agent_secret_read(ctx, rdv_deadline,
                          json_string_value(agent_json_path(w.obj, "spec.secretName")), pi->job_uid,
                          f, cond) != 0) {
        json_decref(w.obj);
        return -1;
    }
    snprintf(ctx->comm_uid, sizeof(ctx->comm_uid), "%s", w.comm_uid);
    agent_health_set_object(ctx->health, w.obj);
    json_decref(w.obj);
    agent_info("AGENT-RDV-FOUND", "rank %d of %d: root %s:%d", f->rank, f->nranks, f->root_host,
               f->root_port);
    return 0;
}

/* The pinned network is not usable in this pod: still learn the job's root endpoint and secret
 * (rank 0 publishes them on its pod IP when its pinned address is not here), so that this pod's
 * processes fail the job's other ranks through the bootstrap root within seconds instead of
 * leaving them to the bootstrap timeout (issue 19). 0 when known. */
static int rendezvous_to_fail(agent_ctx_t *ctx, agent_pod_info_t *pi, agent_facts_t *f,
                              const char *type)
{
    agent_condition_t c;
    char ifn[64];
    int64_t deadline;
    if (f->rank == 0 &&
        (!f->address[0] || agent_interface_for_address(f->address, ifn, sizeof(ifn)) != 0)) {
        f->address[0] = '\0';
        agent_json_str(agent_json_path(pi->pod, "status"), "podIP", f->address, sizeof(f->address));
        if (!f->address[0])
            return -1;
    }
    agent_warn("AGENT-RDV-TO-FAIL",
               "this pod cannot start (%s); joining the rendezvous first, so that its processes "
               "can tell the job's other ranks through the bootstrap root",
               type);
    memset(&c, 0, sizeof(c));
    deadline = agent_now_ms() +
               (int64_t)(f->bootstrap_timeout_s > 0 ? f->bootstrap_timeout_s : 300) * 1000;
    if (agent_rendezvous(ctx, deadline, pi, f, &c) != 0) {
        agent_warn("AGENT-RDV-FAILED",
                   "cannot learn the job's bootstrap root to tell the other ranks that this pod "
                   "cannot start: %s",
                   c.message);
        return -1;
    }
    return 0;
}

int agent_kube_run(agent_ctx_t *ctx)
{
    int known = 0;
    agent_facts_t f;
    agent_condition_t cond;
    agent_pod_info_t pi;
    int64_t deadline;
    int rc = -1;

    memset(&f, 0, sizeof(f));
    memset(&cond, 0, sizeof(cond));
    memset(&pi, 0, sizeof(pi));
    /* reading the pod and topology: bounded by the rendezvous timeout too */
    deadline =
        agent_now_ms() +
        (int64_t)(ctx->opt.rendezvous_timeout_s > 0 ? ctx->opt.rendezvous_timeout_s : 300) * 1000;
    if (agent_pod_read(ctx, deadline, &pi, &f, &cond) != 0)
        goto out;
    /* the pod's identity addresses Events from here on (warnings come before READY) */
    pthread_mutex_lock(&ctx->mu);
    snprintf(ctx->facts.pod, sizeof(ctx->facts.pod), "%s", f.pod);
    snprintf(ctx->pod_uid, sizeof(ctx->pod_uid), "%s", pi.pod_uid);
    snprintf(ctx->facts.node, sizeof(ctx->facts.node), "%s", f.node);
    snprintf(ctx->facts.ns, sizeof(ctx->facts.ns), "%s", f.ns);
    pthread_mutex_unlock(&ctx->mu);
    agent_log_init(NULL, f.pod);
    if (agent_topology_resolve(ctx, deadline, &pi, &f, &cond) != 0) {
        known = colli_proto_code_class(cond.type) == COLLI_PROTO_CLASS_NETWORK &&
                rendezvous_to_fail(ctx, &pi, &f, cond.type) == 0;
        goto out;
    }
    if (agent_preflight(ctx, &f, &cond) != 0)
        goto out;
    if (ctx->opt.rendezvous_timeout_s <= 0)
        deadline = agent_now_ms() + (int64_t)f.bootstrap_timeout_s * 1000;
    if (agent_rendezvous(ctx, deadline, &pi, &f, &cond) != 0)
        goto out;
    agent_check_root_network(ctx, &f);
    rc = 0;
out:
    if (rc == 0) {
        agent_set_ready(ctx, &f);
        if (f.is_root)
            agent_health_set_phase(ctx->health, "Bootstrapping");
    } else {
        /* the facts known so far (pod, node, uid) address the Event */
        pthread_mutex_lock(&ctx->mu);
        ctx->facts = f;
        snprintf(ctx->pod_uid, sizeof(ctx->pod_uid), "%s", pi.pod_uid);
        pthread_mutex_unlock(&ctx->mu);
        if (known)
            agent_set_failed_known(ctx, &cond, &f);
        else
            agent_set_failed(ctx, &cond);
        /* the Communicator names this pod and the cause, not the ranks that wait for it */
        if (pi.rank_known)
            agent_health_member_failed(
                ctx, &f, pi.job_uid, &cond,
                agent_now_ms() +
                    (int64_t)(f.bootstrap_timeout_s > 0 ? f.bootstrap_timeout_s : 300) * 1000);
    }
    agent_pod_info_free(&pi);
    return rc;
}
