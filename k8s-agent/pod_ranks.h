/*
 * Several ranks per pod: what a pod's spec says about the processes it starts (torchrun's
 * --nproc-per-node in a container's command or args, PET_NPROC_PER_NODE of a PyTorchJob, the
 * kcoll.io/ranks-per-pod annotation, nvidia.com/gpu limits), and the ranksPerPod chosen from
 * them and the CollectiveTopology. Shared by the sidecar and the admission webhook (jansson only).
 */
#ifndef AGENT_POD_RANKS_H
#define AGENT_POD_RANKS_H

#include <stddef.h>

#include <jansson.h>

/* Annotation (or label) a pod may set: the number of ranks (processes) it runs. */
#define AGENT_ANN_RANKS_PER_POD "kcoll.io/ranks-per-pod"
#define AGENT_GPU_RESOURCE      "nvidia.com/gpu"
#define AGENT_MAX_PER_POD       256

typedef struct {
    int gpus;              /* sum of nvidia.com/gpu limits of the pod's containers (0 = none) */
    int nproc;             /* torchrun's --nproc-per-node / PET_NPROC_PER_NODE; 0 = not said */
    char nproc_where[200]; /* where it was said, for messages */
    int annotation;        /* kcoll.io/ranks-per-pod; 0 = absent */
    int nnodes;            /* torchrun's --nnodes N (a fixed count); 0 = not said or elastic */
    char error[300];       /* a malformed value ("" = none): the first one met */
} agent_pod_ranks_t;

/* Read pod (a Pod object: metadata, spec) into out; returns -1 when out->error says what is
 * malformed, else 0. "gpu" and "auto" as --nproc-per-node mean the pod's GPU count. */
int agent_pod_ranks_read(const json_t *pod, agent_pod_ranks_t *out);

/* The admission webhook's check of a pod it injects (pod_ranks.c): -1 with why when the pod's
 * ranks cannot work: more ranks than the pod's GPUs, or torchrun's --nnodes unlike the job's
 * pods (world_size: the Job's completions, 0 = unknown), or a malformed value; else 0. */
int agent_pod_ranks_admit(const json_t *pod, int world_size, char *why, size_t len);

/* ranksPerPod: the topology's (topo > 0) wins, then the annotation, then torchrun's, then the
 * GPU count, else 1; source gets where it came from ("CollectiveTopology spec.ranksPerPod", ...).
 */
int agent_pod_ranks_choose(int topo, const char *topo_name, const agent_pod_ranks_t *pr,
                           char *source, size_t len);

/* May s enter an API path as an object name? DNS-1123: a subdomain (253 characters, '.'
 * allowed) when subdomain is set, else a label (63). 1 yes, 0 no. Every name read from a pod or
 * an object (namespace, owner, job) is checked with it before it is put into a URL. */
int agent_name_ok(const char *s, int subdomain);

#endif /* AGENT_POD_RANKS_H */
