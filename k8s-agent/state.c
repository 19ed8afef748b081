/* The agent's state as the library sees it: READY with the facts, FAILED with a condition, and
 * warning conditions (each one logged and emitted as a pod Event). */
#include <pthread.h>
#include <stdio.h>

#include "agent.h"
#include "kube.h"

void agent_set_ready(agent_ctx_t *ctx, const agent_facts_t *facts)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->facts = *facts;
    ctx->state = AGENT_STATE_READY;
    pthread_cond_broadcast(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
    agent_info("AGENT-READY", "rank %d of %d job=%s interface=%s address=%s root=%s:%d in %lld ms",
               facts->rank, facts->nranks, facts->job, facts->ifname, facts->address,
               facts->root_host, facts->root_port, (long long)(agent_now_ms() - ctx->start_ms));
}

void agent_set_failed(agent_ctx_t *ctx, const agent_condition_t *cond)
{
    char reason[64];
    pthread_mutex_lock(&ctx->mu);
    ctx->failure = *cond;
    ctx->state = AGENT_STATE_FAILED;
    pthread_cond_broadcast(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
    agent_error("AGENT-CONDITION", "%s: %s", cond->type, cond->message);
    snprintf(reason, sizeof(reason), "Kcoll%s", cond->type);
    agent_health_event(ctx, "Warning", reason, cond->message);
}

void agent_add_warning(agent_ctx_t *ctx, const agent_condition_t *cond)
{
    char reason[64];
    pthread_mutex_lock(&ctx->mu);
    if (ctx->nwarnings < (int)(sizeof(ctx->warnings) / sizeof(ctx->warnings[0])))
        ctx->warnings[ctx->nwarnings++] = *cond;
    pthread_mutex_unlock(&ctx->mu);
    agent_warn("AGENT-CONDITION", "%s: %s", cond->type, cond->message);
    snprintf(reason, sizeof(reason), "Kcoll%s", cond->type);
    agent_health_event(ctx, "Warning", reason, cond->message);
}
