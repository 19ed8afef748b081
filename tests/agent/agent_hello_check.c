/*
 * agent_hello_check: the library's side of the agent protocol, driven from tests.
 *
 *   agent_hello_check [--timeout-ms N] [--check N] SOCKET...
 *       colli_agent_hello on every socket; one line per socket ("OK rank=..." or
 *       "ERR result=... message=..."). --check N: exit 0 only if every hello succeeded, the ranks
 *       are exactly 0..N-1, exactly rank 0 is root, and all agree on root endpoint and secret.
 *   agent_hello_check --report PHASE [--error MSG] [--error-rank R [--error-pod POD
 *                     --error-node NODE]] [--ready-ranks N]
 *                     [--condition TYPE=True|False[/REASON]] SOCKET
 *       colli_agent_report_ex on one socket.
 */
#include "agent_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The test links agent_client.c alone, not the whole library. */
const char *coll_get_version_string(void);
const char *coll_get_version_string(void)
{
    return "0.1.0";
}

static const char *result_name(coll_result_t r)
{
    switch (r) {
    case COLL_SUCCESS:
        return "SUCCESS";
    case COLL_ERR_INVALID_ARGUMENT:
        return "ERR_INVALID_ARGUMENT";
    case COLL_ERR_INVALID_USAGE:
        return "ERR_INVALID_USAGE";
    case COLL_ERR_SYSTEM:
        return "ERR_SYSTEM";
    case COLL_ERR_TIMEOUT:
        return "ERR_TIMEOUT";
    case COLL_ERR_NETWORK:
        return "ERR_NETWORK";
    case COLL_ERR_UNSUPPORTED:
        return "ERR_UNSUPPORTED";
    default:
        return "ERR_OTHER";
    }
}

int main(int argc, char **argv)
{
    int timeout_ms = 60000, check = -1, i, failures = 0, ready_ranks = -1, err_rank = -1;
    const char *report = NULL, *error = NULL, *cond = NULL, *transport = NULL;
    const char *err_pod = NULL, *err_node = NULL;
    colli_proto_facts_t *facts;
    int nsock, first = -1;

    for (i = 1; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc)
            timeout_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--check") == 0 && i + 1 < argc)
            check = atoi(argv[++i]);
        else if (strcmp(argv[i], "--report") == 0 && i + 1 < argc)
            report = argv[++i];
        else if (strcmp(argv[i], "--error") == 0 && i + 1 < argc)
            error = argv[++i];
        else if (strcmp(argv[i], "--error-rank") == 0 && i + 1 < argc)
            err_rank = atoi(argv[++i]);
        else if (strcmp(argv[i], "--error-pod") == 0 && i + 1 < argc)
            err_pod = argv[++i];
        else if (strcmp(argv[i], "--error-node") == 0 && i + 1 < argc)
            err_node = argv[++i];
        else if (strcmp(argv[i], "--ready-ranks") == 0 && i + 1 < argc)
            ready_ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--condition") == 0 && i + 1 < argc)
            cond = argv[++i];
        else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            transport = argv[++i];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    nsock = argc - i;
    if (nsock <= 0) {
        fprintf(stderr, "usage: agent_hello_check [options] SOCKET...\n");
        return 2;
    }
    if (report) {
        colli_proto_phase_t p = colli_proto_phase_parse(report);
        char type[64] = "", reason[64] = "";
        int ok = 1;
        coll_result_t r;
        if (p == COLLI_PROTO_PHASE_NONE) {
            fprintf(stderr, "unknown phase %s\n", report);
            return 2;
        }
        if (cond) {
            const char *eq = strchr(cond, '=');
            snprintf(type, sizeof(type), "%.*s", eq ? (int)(eq - cond) : (int)strlen(cond), cond);
            ok = !eq || strncmp(eq + 1, "False", 5) != 0;
            const char *slash = eq ? strchr(eq, '/') : NULL; /* TYPE=False/Reason */
            if (slash)
                snprintf(reason, sizeof(reason), "%s", slash + 1);
        }
        if (transport != NULL && p == COLLI_PROTO_PHASE_READY)
            r = colli_agent_report_ready(argv[i], timeout_ms, transport, NULL, 0, 0);
        else
            r = colli_agent_report_ex(argv[i], timeout_ms, p, ready_ranks, err_rank, err_pod,
                                      err_node, error, cond ? type : NULL, ok,
                                      reason[0] ? reason : NULL,
                                      cond ? "from agent_hello_check" : NULL);
        if (r != COLL_SUCCESS) {
            printf("ERR result=%s message=%s\n", result_name(r), colli_agent_last_error());
            return 1;
        }
        printf("OK report %s\n", report);
        return 0;
    }
    facts = calloc((size_t)nsock, sizeof(*facts));
    if (!facts)
        return 2;
    for (int s = 0; s < nsock; s++) {
        coll_result_t r = colli_agent_hello(argv[i + s], timeout_ms, &facts[s]);
        colli_proto_facts_t *f = &facts[s];
        if (r != COLL_SUCCESS) {
            printf("ERR socket=%s result=%s message=%s\n", argv[i + s], result_name(r),
                   colli_agent_last_error());
            facts[s].rank = -1;
            failures++;
            continue;
        }
        {
            char hex[33];
            colli_proto_hex_encode(f->secret, sizeof(f->secret), hex);
            printf("OK rank=%d nranks=%d root=%s:%d secret=%s is_root=%d if=%s addr=%s ib=%s "
                   "transport=%s version=%s boot_timeout=%d timeout=%d pod=%s node=%s ns=%s "
                   "job=%s topology=%s\n",
                   f->rank, f->nranks, f->root_host, f->root_port, hex, f->is_root, f->ifname,
                   f->address, f->ib_device[0] ? f->ib_device : "-", f->transport,
                   f->library_version[0] ? f->library_version : "-", f->bootstrap_timeout_s,
                   f->timeout_s, f->pod, f->node, f->ns, f->job, f->topology);
        }
        if (first < 0)
            first = s;
    }
    if (check < 0 || failures) {
        free(facts);
        if (check >= 0)
            printf("CHECK FAIL: %d hello(s) failed\n", failures);
        return failures ? 1 : 0;
    }
    {
        char *seen = calloc((size_t)check, 1);
        int roots = 0;
        if (!seen)
            return 2;
        for (int s = 0; s < nsock; s++) {
            colli_proto_facts_t *f = &facts[s], *f0 = &facts[first];
            if (f->nranks != check || f->rank < 0 || f->rank >= check || seen[f->rank]) {
                printf("CHECK FAIL: socket %s rank %d nranks %d (duplicate or out of range)\n",
                       argv[i + s], f->rank, f->nranks);
                free(seen);
                free(facts);
                return 1;
            }
            seen[f->rank] = 1;
            roots += f->is_root;
            if (strcmp(f->root_host, f0->root_host) || f->root_port != f0->root_port ||
                memcmp(f->secret, f0->secret, 16)) {
                printf("CHECK FAIL: socket %s disagrees on root endpoint or secret\n", argv[i + s]);
                free(seen);
                free(facts);
                return 1;
            }
        }
        free(seen);
        if (nsock != check || roots != 1) {
            printf("CHECK FAIL: %d sockets for %d ranks, %d roots\n", nsock, check, roots);
            free(facts);
            return 1;
        }
    }
    printf("CHECK OK: %d ranks, one root %s:%d, one secret\n", check, facts[first].root_host,
           facts[first].root_port);
    free(facts);
    return 0;
}
