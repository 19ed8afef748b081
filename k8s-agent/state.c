/* The agent's state as the library sees it: READY with the facts, FAILED with a condition, and
 * warning conditions (each one logged and emitted as a pod Event). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>

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

void agent_set_failed_known(agent_ctx_t *ctx, const agent_condition_t *cond,
                            const agent_facts_t *facts)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->facts = *facts;
    ctx->failed_known = 1;
    pthread_mutex_unlock(&ctx->mu);
    agent_set_failed(ctx, cond);
}

void agent_wait_step(agent_ctx_t *ctx, int64_t deadline_ms)
{
    struct timespec ts;
    int64_t step = agent_remaining_ms(deadline_ms);
    if (step > 200)
        step = 200;
    if (step < 1)
        step = 1;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(step * 1000000);
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&ctx->cv, &ctx->mu, &ts);
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
