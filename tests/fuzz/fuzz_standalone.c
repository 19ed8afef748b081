/*
 * The standalone topology file (k8s-agent/standalone.c, `coll-agent --topology FILE`): JSON or
 * YAML naming every rank's address and interface, the root endpoint and the pins. The input is
 * the file; the agent runs as rank 1 (or as the rank the first line's digit names, "# rank 3").
 * Whatever the agent accepts it serves to the library in its hello reply: the facts must encode
 * and decode there unchanged (the library must never be handed facts it then rejects), and the
 * numbers must be the file's (never wrapped to another int).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "fuzz.h"

static void check_number(const json_t *o, const char *key, int served)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v) && json_integer_value(v) != served) {
        fprintf(stderr, "%s: file %lld, served %d\n", key, (long long)json_integer_value(v),
                served);
        fuzz_fail("the agent serves a number the file does not say");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    agent_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    pthread_mutex_init(&ctx.mu, NULL);
    pthread_cond_init(&ctx.cv, NULL);
    ctx.opt.topology_file = fuzz_as_file(data, size);
    ctx.opt.standalone_rank =
        size > 8 && data[0] == '#' && data[7] >= '0' && data[7] <= '9' ? data[7] - '0' : 1;
    ctx.opt.shm_path = "/dev/shm";
    ctx.opt.ib_dev_dir = "/nonexistent";
    int rc = agent_standalone_run(&ctx);
    if (rc == 0) {
        if (ctx.state != AGENT_STATE_READY)
            fuzz_fail("standalone returned 0 without serving facts");
        char err[256] = "";
        /* what the agent answers a one-rank pod's hello (agent_local_hello) */
        json_t *req = colli_proto_hello_request(1000, "0.1.0", 4242);
        json_t *reply = agent_local_hello(&ctx, req, agent_now_ms() + 1000);
        json_decref(req);
        colli_proto_facts_t back;
        if (reply == NULL)
            fuzz_fail("the facts of an accepted file cannot be encoded");
        if (colli_proto_hello_decode(reply, &back, err, sizeof(err)) != 0) {
            fprintf(stderr, "library: %s\n", err);
            fuzz_fail("the library rejects the facts of an accepted file");
        }
        json_decref(reply);
        char jerr[256];
        json_t *file = agent_yaml_load((const char *)data, size, jerr, sizeof(jerr));
        check_number(file, "nranks", ctx.facts.nranks);
        check_number(file, "bootstrapTimeoutSeconds", ctx.facts.bootstrap_timeout_s);
        check_number(file, "timeoutSeconds", ctx.facts.timeout_s);
        if (json_object_get(json_object_get(file, "root"), "port") == NULL)
            check_number(file, "port", ctx.facts.root_port);
        else
            check_number(json_object_get(file, "root"), "port", ctx.facts.root_port);
        json_decref(file);
    } else if (ctx.state != AGENT_STATE_FAILED || ctx.failure.type[0] == '\0' ||
               ctx.failure.message[0] == '\0') {
        fuzz_fail("standalone failed without a named condition");
    }
    pthread_mutex_destroy(&ctx.mu);
    pthread_cond_destroy(&ctx.cv);
    return 0;
}
