/*
 * Pod annotations the admission webhook (`coll-agent webhook`) writes when it injects the agent,
 * and the sidecar reads from its own pod. They carry the facts the sidecar's least-privilege role
 * may not read itself (the owner Job, the JobSet, the Namespace). The webhook overwrites any value
 * the pod's creator set, so a pod cannot forge them; a read that failed leaves the fact out and
 * writes its *-error annotation instead ("Type: message", Type a condition of docs/agent.md).
 */
#ifndef AGENT_ANNOTATIONS_H
#define AGENT_ANNOTATIONS_H

/* World size: the Indexed Job's spec.completions, or the JobSet's replicas x completions. */
#define AGENT_ANN_WORLD_SIZE       "kcoll.io/world-size"
#define AGENT_ANN_WORLD_SIZE_ERROR "kcoll.io/world-size-error"
/* uid of the JobSet that owns the pod's Job (the Communicator's owner). */
#define AGENT_ANN_JOB_UID       "kcoll.io/job-uid"
#define AGENT_ANN_JOB_UID_ERROR "kcoll.io/job-uid-error"
/* Labels of the pod's Namespace as a JSON object, for a topology's namespaceSelector. */
#define AGENT_ANN_NAMESPACE_LABELS       "kcoll.io/namespace-labels"
#define AGENT_ANN_NAMESPACE_LABELS_ERROR "kcoll.io/namespace-labels-error"

/* Container env settings that contradict the topology's pins (spec.nccl: native), as text; the
 * sidecar turns it into an NcclEnvConflict Event. */
#define AGENT_ANN_NCCL_ENV_CONFLICT "kcoll.io/nccl-env-conflict"

#endif /* AGENT_ANNOTATIONS_H */
