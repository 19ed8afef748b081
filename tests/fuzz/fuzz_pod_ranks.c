/*
 * A pod's spec as the agent reads it from the API server and the webhook from an admission
 * review (k8s-agent/pod_ranks.c): ranksPerPod from torchrun's --nproc-per-node, PET_NPROC_PER_NODE,
 * the kcoll.io/ranks-per-pod annotation and nvidia.com/gpu limits, and the webhook's check. Any
 * JSON: no crash, a refusal says why, and an accepted pod's ranksPerPod is 1..256 (the agent's
 * local-rank table has 256 slots).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "pod_ranks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *pod = json_loadb((const char *)data, size, 0, NULL);
    if (pod == NULL)
        return 0;
    agent_pod_ranks_t pr;
    char source[240], why[700] = "";
    if (agent_pod_ranks_read(pod, &pr) != 0) {
        if (pr.error[0] == '\0')
            fuzz_fail("a pod refused without saying why");
    } else {
        int per = agent_pod_ranks_choose(0, NULL, &pr, source, sizeof(source));
        if (per < 1 || per > AGENT_MAX_PER_POD || source[0] == '\0')
            fuzz_fail("ranksPerPod outside 1..256, or without its source");
        if (pr.gpus < 0 || pr.nproc < 0 || pr.nproc > AGENT_MAX_PER_POD || pr.nnodes < 0)
            fuzz_fail("a count out of range");
    }
    if (agent_pod_ranks_admit(pod, (int)(size % 7), why, sizeof(why)) != 0 && why[0] == '\0')
        fuzz_fail("the webhook refused a pod without saying why");
    json_decref(pod);
    return 0;
}
