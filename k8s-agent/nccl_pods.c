/*
 * spec.nccl: native, the Communicator's status.ncclPods as the agents read it (nccl_watch.c):
 * keyed by pod rank, each {job, pod, node, since}: the job's stamp, the pod, and when all of its
 * NCCL processes last passed their init. Pure functions of the object as the API server returned
 * it (fuzz_pod runs them on hostile shapes).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "health_state.h"
#include "pod_ranks.h" /* agent_name_ok */

/* Pod rank q's entry of this job (stamp), or NULL. */
static const json_t *entry(const json_t *comm, const char *stamp, int q)
{
    char key[16];
    snprintf(key, sizeof(key), "%d", q);
    const json_t *e = json_object_get(agent_json_path(comm, "status.ncclPods"), key);
    const char *job = json_string_value(json_object_get(e, "job"));
    return job && strcmp(job, stamp) == 0 ? e : NULL;
}

int agent_nccl_pods_entry(const json_t *comm, const char *stamp, int q, char *pod, size_t podlen,
                          char *node, size_t nodelen)
{
    const json_t *e = entry(comm, stamp, q);
    const char *p = json_string_value(json_object_get(e, "pod"));
    const char *n = json_string_value(json_object_get(e, "node"));
    if (!p || !agent_name_ok(p, 1))
        return 0;
    snprintf(pod, podlen, "%s", p);
    snprintf(node, nodelen, "%s", n && agent_name_ok(n, 1) ? n : "?");
    return 1;
}

int64_t agent_nccl_pods_since(const json_t *comm, const char *stamp, int q)
{
    return agent_rfc3339_s(json_string_value(json_object_get(entry(comm, stamp, q), "since")));
}

/* Is pod an unhealthy member (with that reason; NULL: any)? */
static int member(const json_t *members, const char *pod, const char *reason)
{
    size_t i;
    const json_t *m;
    json_array_foreach(members, i, m)
    {
        const char *mp = json_string_value(json_object_get(m, "pod"));
        const char *why = json_string_value(json_object_get(m, "reason"));
        if (pod && mp && strcmp(mp, pod) == 0 && (!reason || (why && strcmp(why, reason) == 0)))
            return 1;
    }
    return 0;
}

/* Was pod refused at its init (an unhealthy member of it with reason NcclVersionMismatch)? */
static int refused(const json_t *members, const char *pod)
{
    return member(members, pod, AGENT_NCCL_REFUSED);
}

int agent_nccl_pods_member(const json_t *comm, const char *pod)
{
    return member(agent_json_path(comm, "status.unhealthyMembers"), pod, NULL);
}

int agent_nccl_pods_refused_only(const json_t *comm)
{
    const json_t *members = agent_json_path(comm, "status.unhealthyMembers");
    size_t i;
    const json_t *m;
    json_array_foreach(members, i, m)
    {
        if (!refused(members, json_string_value(json_object_get(m, "pod"))))
            return 0;
    }
    return json_array_size(members) > 0;
}

int agent_nccl_pods_started(const json_t *comm, const char *stamp, int64_t t, int slack_s)
{
    const char *k;
    const json_t *v;
    int n = 0, only = t >= 0 && agent_nccl_pods_refused_only(comm);
    const json_t *members = agent_json_path(comm, "status.unhealthyMembers");
    json_object_foreach(agent_json_path(comm, "status.ncclPods"), k, v)
    {
        const char *job = json_string_value(json_object_get(v, "job"));
        const char *pod = json_string_value(json_object_get(v, "pod"));
        int64_t at = agent_rfc3339_s(json_string_value(json_object_get(v, "since")));
        n += job && strcmp(job, stamp) == 0 &&
             (t < 0 || (at >= 0 && at + slack_s >= t) || (only && !refused(members, pod)));
    }
    return n;
}
