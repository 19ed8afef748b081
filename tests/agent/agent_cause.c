/* What the agent says of why a blamed rank ended (k8s-agent/cause.c), from Pod and Node objects
 * as the API server returns them: each case checks the words a user acts on. */
#define _GNU_SOURCE
#include "expect.h"
#include "health_state.h"
#include "nccl_ipc.h"
#include "peer_ipc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2026-11-29T12:00:00Z: the communicator was Ready then */
#define SINCE 1795953600LL

static char out[MAX_CAUSE];
static int silent; /* agent_pod_cause's: a silent peer's question */

/* agent_pod_cause on a pod given as JSON (NULL: the pod does not exist) */
static int pod(const char *json)
{
    json_t *p = json ? json_loads(json, 0, NULL) : NULL;
    if (json && !p) {
        fprintf(stderr, "bad fixture: %s\n", json);
        failures++;
        return -1;
    }
    int r = agent_pod_cause("train-2-abcde", p, SINCE, silent, out, sizeof(out));
    printf("  %d: %s\n", r, out);
    json_decref(p);
    return r;
}

static int has(const char *what)
{
    if (strstr(out, what))
        return 1;
    fprintf(stderr, "  missing \"%s\" in: %s\n", what, out);
    return 0;
}

#define SPEC_LIMIT                                                                                 \
    "\"spec\":{\"nodeName\":\"node-2\",\"containers\":[{\"name\":\"trainer\",\"resources\":"       \
    "{\"limits\":{\"memory\":\"8Gi\"}}}]}"
#define SPEC_NOLIMIT "\"spec\":{\"nodeName\":\"node-2\",\"containers\":[{\"name\":\"trainer\"}]}"

static void test_containers(void)
{
    /* OOMKilled with a limit: names the container, the code, the time, the limit, the fix */
    EXPECT(pod("{" SPEC_LIMIT ",\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{\"name\":"
               "\"trainer\",\"restartCount\":0,\"state\":{\"terminated\":{\"exitCode\":137,"
               "\"reason\":\"OOMKilled\",\"finishedAt\":\"2026-11-29T12:03:11Z\"}}}]}}") == 1);
    EXPECT(has("container trainer was OOMKilled (exit code 137) at 2026-11-29T12:03:11Z") &&
           has("memory limit of 8Gi") && has("raise resources.limits.memory"));
    /* ... without one: the node ran out */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"terminated\":{\"exitCode\":137,\"reason\":\"OOMKilled\"}}}]}}") == 1);
    EXPECT(has("OOMKilled") && has("node ran out of memory"));
    /* a Python exception: the code, the reason, the tail of the termination message on one line */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"terminated\":{\"exitCode\":1,\"reason\":\"Error\",\"finishedAt\":"
               "\"2026-11-29T12:04:00Z\",\"message\":\"Traceback (most recent call last):\\n  "
               "File \\\"train.py\\\", line 9\\nKeyError: 'lr'\\n\"}}}]}}") == 1);
    EXPECT(
        has("container trainer exited with code 1 (Error) at 2026-11-29T12:04:00Z") &&
        has("its last words: \"Traceback (most recent call last): |   File \"train.py\", line 9") &&
        has("KeyError: 'lr'\""));
    /* a long message keeps its tail */
    char big[3000] = "{" SPEC_NOLIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
                     "\"state\":{\"terminated\":{\"exitCode\":2,\"message\":\"";
    for (int i = 0; i < 100; i++)
        strcat(big, "0123456789");
    strcat(big, "THE END\"}}}]}}");
    EXPECT(pod(big) == 1 && has("...") && has("THE END\"") && strlen(out) < 400);
    /* signals: SIGSEGV is a crash, SIGKILL without OOMKilled is not the OOM killer */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"terminated\":{\"exitCode\":139,\"reason\":\"Error\"}}}]}}") == 1);
    EXPECT(has("killed by signal 11 (SIGSEGV, exit code 139)") && has("a crash"));
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"terminated\":{\"exitCode\":137,\"reason\":\"Error\"}}}]}}") == 1);
    EXPECT(has("signal 9 (SIGKILL") && has("not the kernel's OOM killer"));
    /* exit 0 while the others still called collectives */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"terminated\":{\"exitCode\":0,\"reason\":\"Completed\"}}}]}}") == 1);
    EXPECT(has("exited with code 0") && has("do all ranks make the same calls?"));
    /* restarted after this failure: its last end, and how often */
    EXPECT(pod("{" SPEC_LIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"restartCount\":2,\"state\":{\"running\":{}},\"lastState\":{\"terminated\":{"
               "\"exitCode\":137,\"reason\":\"OOMKilled\",\"finishedAt\":"
               "\"2026-11-29T12:05:00Z\"}}}]}}") == 1);
    EXPECT(has("OOMKilled") && has("2 restarts so far"));
    /* ... but an end from before the communicator was Ready is an earlier failure's */
    EXPECT(pod("{" SPEC_LIMIT ",\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{"
               "\"name\":\"trainer\",\"restartCount\":1,\"state\":{\"running\":{}},\"lastState\":"
               "{\"terminated\":{\"exitCode\":137,\"reason\":\"OOMKilled\",\"finishedAt\":"
               "\"2026-11-29T11:50:00Z\"}}}]}}") == 0);
    EXPECT(out[0] == '\0');
    /* a silent peer (a process that exits closes its connections): a container's end is no
     * proof that its rank ended, the pod's own end is */
    silent = 1;
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":"
               "\"Ready\",\"status\":\"True\"}],\"containerStatuses\":[{\"name\":\"logger\","
               "\"state\":{\"terminated\":{\"exitCode\":0}}},{\"name\":\"trainer\",\"state\":"
               "{\"running\":{}}}]}}") == 0);
    EXPECT(pod(NULL) == 1 && has("no longer exists"));
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\","
               "\"containerStatuses\":[{\"name\":\"trainer\",\"state\":{\"terminated\":{"
               "\"exitCode\":137}}}]}}") == 1);
    EXPECT(has("failed: Evicted"));
    silent = 0;
    /* a helper container that completed before the communicator was Ready is not the rank */
    EXPECT(
        pod("{" SPEC_NOLIMIT ",\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{"
            "\"name\":\"fetch\",\"state\":{\"terminated\":{\"exitCode\":0,\"finishedAt\":"
            "\"2026-11-29T11:59:00Z\"}}},{\"name\":\"trainer\",\"state\":{\"running\":{}}}]}}") ==
        0);
    /* two containers: the one that failed, not the one that completed */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"logger\","
               "\"state\":{\"terminated\":{\"exitCode\":0}}},{\"name\":\"trainer\",\"state\":"
               "{\"terminated\":{\"exitCode\":3}}}]}}") == 1);
    EXPECT(has("container trainer exited with code 3"));
}

static void test_pod_level(void)
{
    /* deleted */
    EXPECT(pod(NULL) == 1);
    EXPECT(has("pod train-2-abcde no longer exists") &&
           has("--field-selector involvedObject.name=train-2-abcde"));
    /* preempted: the disruption's reason and message, then the container's end */
    EXPECT(pod("{\"metadata\":{\"deletionTimestamp\":\"2026-11-29T12:06:30Z\"}," SPEC_NOLIMIT
               ",\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"DisruptionTarget\","
               "\"status\":\"True\",\"reason\":\"PreemptionByScheduler\",\"message\":\"default-"
               "scheduler: preempting to accommodate a higher priority pod\"}],"
               "\"containerStatuses\":[{\"name\":\"trainer\",\"state\":{\"terminated\":{"
               "\"exitCode\":143}}}]}}") == 1);
    EXPECT(has("is being deleted (due by 2026-11-29T12:06:30Z): PreemptionByScheduler: "
               "default-scheduler: preempting") &&
           has("; container trainer was killed by signal 15 (SIGTERM, exit code 143)"));
    /* evicted by the kubelet */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\","
               "\"message\":\"The node was low on resource: memory.\"}}") == 1);
    EXPECT(has("pod train-2-abcde failed: Evicted: The node was low on resource: memory."));
    /* running, not Ready, nothing ended: look at the node */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":"
               "\"Ready\",\"status\":\"False\",\"lastTransitionTime\":\"2026-11-29T12:07:00Z\"}],"
               "\"containerStatuses\":[{\"name\":\"trainer\",\"state\":{\"running\":{}}}]}}") == 2);
    EXPECT(has("is not Ready since 2026-11-29T12:07:00Z"));
    /* the node controller's mark (Ready False, ContainersReady still True): its node is lost,
     * without reading the Node; for a silent peer too */
#define MARKED(ready_extra, cr)                                                                    \
    "{\"spec\":{\"nodeName\":\"node-7\"},\"status\":{\"phase\":\"Running\",\"conditions\":[{"      \
    "\"type\":\"Ready\",\"status\":\"False\"" ready_extra ",\"lastTransitionTime\":"               \
    "\"2026-11-29T12:07:00Z\"},{\"type\":\"ContainersReady\",\"status\":\"" cr "\"}],"             \
    "\"containerStatuses\":[{\"name\":\"trainer\",\"ready\":true,\"state\":{\"running\":{}}}]}}"
    for (silent = 0; silent < 2; silent++) {
        EXPECT(pod(MARKED("", "True")) == 1);
        EXPECT(has("node node-7 stopped reporting: the node controller marked pod train-2-abcde "
                   "not Ready at 2026-11-29T12:07:00Z while its containers ran") &&
               has("down or cut off"));
    }
    silent = 0;
    /* the kubelet's not Ready: a readiness probe (ContainersReady False), a readiness gate */
    EXPECT(pod(MARKED("", "False")) == 2 && !strstr(out, "stopped reporting"));
    EXPECT(pod(MARKED(",\"reason\":\"ReadinessGatesNotReady\"", "True")) == 2);
    {
        char unknown[] = MARKED("", "True"); /* phase Unknown (older clusters' NodeLost) */
        memcpy(strstr(unknown, "Running"), "Unknown", 7);
        EXPECT(pod(unknown) == 1 && has("stopped reporting"));
    }
    {
        json_t *p = json_loads(MARKED("", "True"), 0, NULL);
        EXPECT(agent_node_lost("train-2-abcde", p, out, sizeof(out)) == 1 && has("node-7"));
        json_object_set_new(agent_json_path(p, "spec"), "nodeName", json_string("../x"));
        EXPECT(agent_node_lost("train-2-abcde", p, out, sizeof(out)) == 1 &&
               has("node ? stopped") && !strstr(out, "../x"));
        json_decref(p);
        p = json_loads(MARKED("", "False"), 0, NULL);
        EXPECT(agent_node_lost("train-2-abcde", p, out, sizeof(out)) == 0 && out[0] == '\0');
        json_decref(p);
        EXPECT(agent_node_lost("train-2-abcde", NULL, out, sizeof(out)) == 0);
    }
#undef MARKED
    /* running and Ready, nothing ended: nothing to say (yet) */
    EXPECT(pod("{" SPEC_NOLIMIT ",\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":"
               "\"Ready\",\"status\":\"True\"}],\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"running\":{}}}]}}") == 0);
    /* hostile shapes: wrong types everywhere, no crash, nothing claimed */
    EXPECT(pod("{\"metadata\":7,\"spec\":[],\"status\":{\"conditions\":{},\"containerStatuses\":"
               "[1,\"x\",{\"state\":{\"terminated\":\"yes\"},\"lastState\":{\"terminated\":{"
               "\"finishedAt\":17}}}]}}") == 0);
    EXPECT(pod("[]") == 0 && pod("{\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":"
                                 "{\"exitCode\":\"1\",\"finishedAt\":\"junk\"}}}]}}") == 0);
    /* no name, a time that is none: neither is repeated as if it were */
    EXPECT(pod("{\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":{"
               "\"exitCode\":5,\"finishedAt\":\"junk\"}}}]}}") == 1);
    EXPECT(has("container ? exited with code 5") && !strstr(out, "junk"));
}

static void test_node(void)
{
    json_t *n = json_loads("{\"status\":{\"conditions\":[{\"type\":\"MemoryPressure\",\"status\":"
                           "\"False\"},{\"type\":\"Ready\",\"status\":\"Unknown\",\"reason\":"
                           "\"NodeStatusUnknown\",\"message\":\"Kubelet stopped posting node "
                           "status.\",\"lastTransitionTime\":\"2026-11-29T12:07:40Z\"}]}}",
                           0, NULL);
    EXPECT(agent_node_cause("node-2", n, out, sizeof(out)) == 1);
    printf("  node: %s\n", out);
    EXPECT(has("node node-2 is NotReady (Ready=Unknown, NodeStatusUnknown: Kubelet stopped "
               "posting node status.) since 2026-11-29T12:07:40Z") &&
           has("down or cut off"));
    json_decref(n);
    n = json_loads("{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}", 0,
                   NULL);
    EXPECT(agent_node_cause("node-2", n, out, sizeof(out)) == 0 && out[0] == '\0');
    json_decref(n);
    EXPECT(agent_node_cause("node-2", NULL, out, sizeof(out)) == 0);
}

/* The peer question's messages (proto/peer_ipc.c) as both sides read them. */
static void test_peer_proto(void)
{
    colli_proto_peer_msg_t q = {.pid = 41, .npeers = 3}, r;
    q.peers[0] = (colli_proto_peer_t){.rank = 2, .pod = "train-2-x", .node = "n-7"};
    q.peers[1] = (colli_proto_peer_t){.rank = 3, .pod = "train-3-y"};
    q.peers[2] = (colli_proto_peer_t){.rank = 4, .pod = ""}; /* no pod: dropped */
    char err[128];
    json_t *m = colli_proto_peer_request(&q);
    EXPECT(m && colli_proto_peer_request_parse(m, &r, err, sizeof(err)) == 0);
    EXPECT(r.pid == 41 && r.npeers == 2 && r.peers[0].rank == 2 &&
           strcmp(r.peers[0].pod, "train-2-x") == 0 && strcmp(r.peers[0].node, "n-7") == 0 &&
           r.peers[1].rank == 3 && r.peers[1].node == NULL);
    json_decref(m);
    /* hostile: ranks out of range, names too long, more than 8, no array */
    m = json_loads(
        "{\"v\":1,\"type\":\"peer\",\"peers\":[{\"rank\":-1,\"pod\":\"a\"},{\"rank\":"
        "4294967296,\"pod\":\"a\"},{\"rank\":1},{\"rank\":1,\"pod\":7},{\"rank\":1,"
        "\"pod\":\"a\"},{\"rank\":2,\"pod\":\"b\"},{\"rank\":3,\"pod\":\"c\"},{\"rank\":4,"
        "\"pod\":\"d\"},{\"rank\":5,\"pod\":\"e\"},{\"rank\":6,\"pod\":\"f\"},{\"rank\":7,"
        "\"pod\":\"g\"},{\"rank\":8,\"pod\":\"h\"},{\"rank\":9,\"pod\":\"i\"}]}",
        0, NULL);
    EXPECT(m && colli_proto_peer_request_parse(m, &r, err, sizeof(err)) == 0 && r.npeers == 8 &&
           r.peers[0].rank == 1 && r.peers[7].rank == 8);
    json_decref(m);
    m = json_loads("{\"v\":1,\"type\":\"peer\",\"peers\":{}}", 0, NULL);
    EXPECT(m && colli_proto_peer_request_parse(m, &r, err, sizeof(err)) == -1 && err[0]);
    EXPECT(m && colli_proto_peer_reply_parse(m, &r, err, sizeof(err)) == -1 && err[0]);
    json_decref(m);
    /* the answer: a cause each; one without a cause is not an answer */
    q = (colli_proto_peer_msg_t){.npeers = 2, .pending = 1};
    q.peers[0] = (colli_proto_peer_t){.rank = 2, .cause = "node n-7 is NotReady"};
    q.peers[1] = (colli_proto_peer_t){.rank = 5, .cause = ""};
    m = colli_proto_peer_reply(&q);
    EXPECT(m && json_is_true(json_object_get(m, "ok")) &&
           colli_proto_peer_reply_parse(m, &r, err, sizeof(err)) == 0 && r.pending &&
           r.npeers == 1 && r.peers[0].rank == 2 &&
           strcmp(r.peers[0].cause, "node n-7 is NotReady") == 0);
    json_decref(m);
}

/* The agent's own pod under NVIDIA NCCL (agent_own_end): which ends are its ranks' end. */
static int own(const char *json, char *key)
{
    json_t *p = json_loads(json, 0, NULL);
    char k[160];
    if (!p) {
        fprintf(stderr, "bad fixture: %s\n", json);
        failures++;
        return -1;
    }
    int r = agent_own_end("train-2-abcde", p, SINCE, out, sizeof(out), key ? key : k, 160);
    printf("  own %d: %s\n", r, out);
    json_decref(p);
    return r;
}

static void test_own_end(void)
{
    char k1[160], k2[160];
    /* the job's normal end: every container exited 0 */
    EXPECT(own("{" SPEC_LIMIT ",\"status\":{\"phase\":\"Succeeded\",\"containerStatuses\":[{"
               "\"name\":\"trainer\",\"state\":{\"terminated\":{\"exitCode\":0,\"reason\":"
               "\"Completed\",\"finishedAt\":\"2026-11-29T13:00:00Z\"}}}]}}",
               NULL) == 0 &&
           out[0] == '\0');
    /* running, and an end before the pod's NCCL started (an earlier generation) */
    EXPECT(own("{" SPEC_LIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"running\":{}},\"lastState\":{\"terminated\":{\"exitCode\":1,"
               "\"finishedAt\":\"2026-11-29T11:00:00Z\"}}}]}}",
               NULL) == 0);
    /* OOMKilled */
    EXPECT(own("{" SPEC_LIMIT ",\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{"
               "\"name\":\"trainer\",\"state\":{\"terminated\":{\"exitCode\":137,\"reason\":"
               "\"OOMKilled\",\"finishedAt\":\"2026-11-29T12:03:11Z\"}}}]}}",
               k1) == 1 &&
           has("OOMKilled") && has("8Gi"));
    /* restarted in place (restartPolicy OnFailure): the last end counts, and is another end */
    EXPECT(own("{" SPEC_LIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"restartCount\":1,\"state\":{\"running\":{}},\"lastState\":{\"terminated\":{"
               "\"exitCode\":1,\"reason\":\"Error\",\"finishedAt\":\"2026-11-29T12:09:00Z\"}}}]}}",
               k2) == 1 &&
           has("exited with code 1") && strcmp(k1, k2) != 0);
    /* a helper container that completed and the trainer still running: nothing */
    EXPECT(own("{" SPEC_LIMIT ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\","
               "\"state\":{\"running\":{}}},{\"name\":\"logger\",\"state\":{\"terminated\":"
               "{\"exitCode\":0,\"finishedAt\":\"2026-11-29T12:30:00Z\"}}}]}}",
               NULL) == 0);
    /* deleted (a drain, kubectl delete) or evicted, containers not yet ended */
    EXPECT(own("{\"metadata\":{\"deletionTimestamp\":\"2026-11-29T12:06:30Z\"}," SPEC_LIMIT
               ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\",\"state\":{"
               "\"running\":{}}}]}}",
               NULL) == 1 &&
           has("is being deleted"));
    EXPECT(own("{" SPEC_LIMIT ",\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\","
               "\"message\":\"The node was low on resource: memory.\"}}",
               NULL) == 1 &&
           has("Evicted"));
    /* a helper without GPUs failed while the GPU container trains: not the training's end; the
     * GPU container's end is, named as itself */
#define SPEC_GPU                                                                                   \
    "\"spec\":{\"containers\":[{\"name\":\"trainer\",\"resources\":{\"limits\":{"                  \
    "\"nvidia.com/gpu\":\"8\"}}},{\"name\":\"logger\"}]}"
    EXPECT(own("{" SPEC_GPU ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\",\"state\":"
               "{\"running\":{}}},{\"name\":\"logger\",\"state\":{\"terminated\":{\"exitCode\":1,"
               "\"finishedAt\":\"2026-11-29T12:30:00Z\"}}}]}}",
               NULL) == 0);
    EXPECT(own("{" SPEC_GPU ",\"status\":{\"containerStatuses\":[{\"name\":\"trainer\",\"state\":"
               "{\"terminated\":{\"exitCode\":134,\"finishedAt\":\"2026-11-29T12:31:00Z\"}}},{"
               "\"name\":\"logger\",\"state\":{\"terminated\":{\"exitCode\":1,\"finishedAt\":"
               "\"2026-11-29T12:30:00Z\"}}}]}}",
               NULL) == 1 &&
           has("container trainer") && has("SIGABRT") && !strstr(out, "logger"));
    /* hostile shapes */
    EXPECT(own("{\"metadata\":[],\"status\":{\"containerStatuses\":[7,{\"state\":{"
               "\"terminated\":{\"exitCode\":\"1\",\"finishedAt\":\"2026-11-29T12:09:00Z\"}}},"
               "{\"name\":\"t\",\"state\":{\"terminated\":{\"exitCode\":2}}}]}}",
               NULL) == 0);
}

/* "nccl_ended" (proto/nccl_ipc.c) as the agent writes it and the plugin reads it. */
static void test_ended_proto(void)
{
    colli_proto_nccl_ended_t e[2], r[COLLI_PROTO_NCCL_MAX_ENDED];
    char err[200];
    int n = -1;
    memset(e, 0, sizeof(e));
    e[0].rank = 2;
    snprintf(e[0].pod, sizeof(e[0].pod), "train-2-abcde");
    snprintf(e[0].node, sizeof(e[0].node), "gpu-7");
    snprintf(e[0].what, sizeof(e[0].what), "rank 2 (pod train-2-abcde) ended: OOMKilled");
    e[1] = e[0];
    e[1].rank = 8;
    json_t *m = colli_proto_nccl_ended_reply(e, 2);
    EXPECT(m && colli_proto_nccl_ended_decode(m, r, 1, &n, err, sizeof(err)) == 0 && n == 1 &&
           r[0].rank == 2 && strcmp(r[0].node, "gpu-7") == 0);
    json_decref(m);
    m = colli_proto_nccl_ended_request(1795953600LL);
    EXPECT(m && colli_proto_nccl_ended_since(m) == 1795953600LL);
    json_decref(m);
    /* hostile: a pod name with a separator, a line break in the text, a negative rank */
    const char *bad[] = {
        "{\"ended\":[{\"rank\":1,\"pod\":\"a b\",\"what\":\"x\"}]}",
        "{\"ended\":[{\"rank\":1,\"pod\":\"a\",\"what\":\"x\\ny\"}]}",
        "{\"ended\":[{\"rank\":-1,\"pod\":\"a\",\"what\":\"x\"}]}",
        "{\"ended\":{}}",
        "{\"ended\":[{\"rank\":1,\"pod\":\"a\",\"what\":\"\"}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m = json_loads(bad[i], 0, NULL);
        EXPECT(m && colli_proto_nccl_ended_decode(m, r, 4, &n, err, sizeof(err)) == -1 && n == 0 &&
               err[0]);
        json_decref(m);
    }
    m = json_loads("{\"since\":-5}", 0, NULL);
    EXPECT(colli_proto_nccl_ended_since(m) == 0);
    json_decref(m);
}

/* status.ncclPods as the agents read it (nccl_pods.c): the next pod, a start's time, and when a
 * failed job runs again. */
static void test_nccl_pods(void)
{
    const char *stamp = "0123456789abcdef";
    json_t *c = json_loads(
        "{\"status\":{\"ncclPods\":{"
        "\"0\":{\"job\":\"0123456789abcdef\",\"pod\":\"t-0\",\"node\":\"n0\","
        "\"since\":\"2026-11-29T12:00:00Z\"},"
        "\"1\":{\"job\":\"0123456789abcdef\",\"pod\":\"t-1\",\"node\":\"../n\","
        "\"since\":\"2026-11-29T12:10:00Z\"},"
        "\"2\":{\"job\":\"another-job-stmp\",\"pod\":\"t-2\"},"
        "\"3\":{\"job\":\"0123456789abcdef\",\"pod\":\"T/3\"}},"
        "\"unhealthyMembers\":[{\"rank\":1,\"pod\":\"t-1\",\"reason\":"
        "\"NcclVersionMismatch\"},{\"rank\":1,\"pod\":\"t-1\",\"reason\":\"RankEnded\"}]}}",
        0, NULL);
    char pod[254], node[254];
    EXPECT(c != NULL);
    EXPECT(agent_nccl_pods_entry(c, stamp, 0, pod, sizeof(pod), node, sizeof(node)) == 1 &&
           strcmp(pod, "t-0") == 0 && strcmp(node, "n0") == 0);
    /* a node that is no name is not repeated; another job's record, a pod that is no name: none */
    EXPECT(agent_nccl_pods_entry(c, stamp, 1, pod, sizeof(pod), node, sizeof(node)) == 1 &&
           strcmp(node, "?") == 0);
    EXPECT(agent_nccl_pods_entry(c, stamp, 2, pod, sizeof(pod), node, sizeof(node)) == 0);
    EXPECT(agent_nccl_pods_entry(c, stamp, 3, pod, sizeof(pod), node, sizeof(node)) == 0);
    EXPECT(agent_nccl_pods_since(c, stamp, 0) == SINCE); /* 12:00:00Z */
    EXPECT(agent_nccl_pods_since(c, stamp, 1) - agent_nccl_pods_since(c, stamp, 0) == 600);
    EXPECT(agent_nccl_pods_since(c, stamp, 2) == -1 && agent_nccl_pods_since(c, stamp, 9) == -1);
    /* a refused pod only (its own end beside it): only it must start again */
    int64_t fail = agent_nccl_pods_since(c, stamp, 0) + 300; /* 12:05 */
    EXPECT(agent_nccl_pods_refused_only(c) == 1);
    EXPECT(agent_nccl_pods_started(c, stamp, -1, 2) == 3); /* 0, 1, 3: this job's */
    EXPECT(agent_nccl_pods_started(c, stamp, fail, 2) == 3);
    /* another pod's end as well: every pod must start again after it (pod 1 did, 0 did not) */
    json_array_append_new(agent_json_path(c, "status.unhealthyMembers"),
                          json_pack("{si ss ss}", "rank", 0, "pod", "t-0", "reason", "RankEnded"));
    EXPECT(agent_nccl_pods_refused_only(c) == 0);
    EXPECT(agent_nccl_pods_started(c, stamp, fail, 2) == 1);
    EXPECT(agent_nccl_pods_started(c, stamp, fail - 600, 2) == 2);
    /* a pod named by any member (written ended, refused, failed), not by the ncclPods record */
    EXPECT(agent_nccl_pods_member(c, "t-0") == 1 && agent_nccl_pods_member(c, "t-1") == 1);
    EXPECT(agent_nccl_pods_member(c, "t-3") == 0 && agent_nccl_pods_member(c, NULL) == 0);
    json_decref(c);
    /* nothing unhealthy is no refusal */
    c = json_loads("{\"status\":{\"unhealthyMembers\":[]}}", 0, NULL);
    EXPECT(agent_nccl_pods_refused_only(c) == 0 && agent_nccl_pods_started(c, stamp, 0, 2) == 0);
    json_decref(c);
    EXPECT(agent_nccl_pods_refused_only(NULL) == 0 &&
           agent_nccl_pods_started(NULL, stamp, 0, 2) == 0 &&
           agent_nccl_pods_member(NULL, "t-0") == 0);
}

/* agent_pod_leaving on a pod given as JSON, as the ring's watch gets it (deleted: its DELETED) */
static int leaving(const char *json, int deleted)
{
    json_t *p = json_loads(json, 0, NULL);
    memset(out, 'x', sizeof(out));
    int r = agent_pod_leaving("train-2-abcde", p, deleted, out, sizeof(out));
    printf("  leaving %d: %s\n", r, out);
    json_decref(p);
    return r;
}

/* Another pod of the job that leaves while it runs (spec.nccl: native, the ring): its deletion
 * by the pod garbage collector, a force deletion, one in progress; not its end, nor a pod that
 * runs. */
static void test_leaving(void)
{
#define RUNNING                                                                                    \
    "\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"trainer\","              \
    "\"state\":{\"running\":{}}}]"
    EXPECT(
        leaving("{" SPEC_NOLIMIT
                ",\"metadata\":{\"deletionTimestamp\":\"2026-11-29T12:01:00Z\"}," RUNNING
                ",\"conditions\":[{\"type\":\"DisruptionTarget\",\"status\":\"True\","
                "\"reason\":\"DeletionByPodGC\",\"message\":\"PodGC: node no longer exists\"}]}}",
                1) == 1);
    EXPECT(has("pod train-2-abcde is being deleted (due by 2026-11-29T12:01:00Z)") &&
           has("DeletionByPodGC: PodGC: node no longer exists"));
    /* a deletion in progress (stuck on a dead node), before its DELETED */
    EXPECT(leaving("{\"metadata\":{\"deletionTimestamp\":\"2026-11-29T12:01:00Z\"}," RUNNING "}}",
                   0) == 1 &&
           has("is being deleted"));
    /* a DELETED whose last state says nothing of it (a force deletion) */
    EXPECT(leaving("{" RUNNING "}}", 1) == 1 && has("no longer exists: it was deleted"));
    /* it ended first (the kubelet, alive, said so; its agent too): not this; nor a running pod */
    EXPECT(leaving("{\"metadata\":{\"deletionTimestamp\":\"2026-11-29T12:01:00Z\"},\"status\":{"
                   "\"phase\":\"Failed\"}}",
                   1) == 0 &&
           out[0] == '\0');
    EXPECT(leaving("{\"status\":{\"phase\":\"Succeeded\"}}", 1) == 0);
    EXPECT(leaving("{" RUNNING "}}", 0) == 0 && out[0] == '\0');
    /* hostile shapes */
    EXPECT(leaving("{\"metadata\":{\"deletionTimestamp\":7},\"status\":{\"phase\":[],"
                   "\"conditions\":[{\"type\":\"DisruptionTarget\",\"status\":true}]}}",
                   0) == 0);
    EXPECT(leaving("[]", 1) == 1 && has("no longer exists"));
#undef RUNNING
}

int main(void)
{
    agent_log_init("error", NULL);
    test_containers();
    test_pod_level();
    test_node();
    test_peer_proto();
    test_own_end();
    test_ended_proto();
    test_nccl_pods();
    test_leaving();
    if (failures) {
        fprintf(stderr, "%d expectation(s) failed\n", failures);
        return 1;
    }
    printf("agent_cause: all passed\n");
    return 0;
}
