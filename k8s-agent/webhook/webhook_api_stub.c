/* Webhook built without the agent's Kubernetes client (k8s-agent/ not configured): no API reads;
 * injected pods get *-error annotations. */
#include "webhook.h"

int agent_webhook_api_open(const char *kubeconfig, const char *sa_dir,
                           struct agent_webhook_config *cfg)
{
    (void)kubeconfig;
    (void)sa_dir;
    cfg->api_get = NULL;
    cfg->api_arg = NULL;
    agent_warn("AGENT-WEBHOOK-NO-API",
               "built without the Kubernetes API client: injected pods get *-error "
               "annotations instead of their Job's world size and Namespace's labels");
    return 1;
}

void agent_webhook_api_close(struct agent_webhook_config *cfg)
{
    (void)cfg;
}

int agent_webhook_topology_nccl(const struct agent_webhook_config *cfg, const char *ns,
                                const json_t *pod, const json_t *nslabels, json_t *warnings,
                                struct agent_webhook_nccl_pins *pins)
{
    (void)cfg, (void)ns, (void)pod, (void)nslabels, (void)warnings, (void)pins;
    return 0;
}
