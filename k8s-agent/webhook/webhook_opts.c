/* The command line of `coll-agent webhook`: options, their defaults and their checks. Messages
 * go to stderr (usage errors exit 2), --help to stdout (exit 0). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"
#include "pod_ranks.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define DEFAULT_LISTEN ":8443"

enum {
    OPT_LISTEN = 256,
    OPT_CERT,
    OPT_KEY,
    OPT_IMAGE,
    OPT_LIBV,
    OPT_PULL,
    OPT_CPU_REQ,
    OPT_MEM_REQ,
    OPT_CPU_LIM,
    OPT_MEM_LIM,
    OPT_MAX_BODY,
    OPT_THREADS,
    OPT_KUBECONFIG,
    OPT_SA_DIR,
    OPT_API_TIMEOUT,
    OPT_AGENT_SA,
};

static const struct option long_opts[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"cert", required_argument, NULL, OPT_CERT},
    {"key", required_argument, NULL, OPT_KEY},
    {"agent-image", required_argument, NULL, OPT_IMAGE},
    {"lib-version", required_argument, NULL, OPT_LIBV},
    {"image-pull-policy", required_argument, NULL, OPT_PULL},
    {"sidecar-cpu-request", required_argument, NULL, OPT_CPU_REQ},
    {"sidecar-memory-request", required_argument, NULL, OPT_MEM_REQ},
    {"sidecar-cpu-limit", required_argument, NULL, OPT_CPU_LIM},
    {"sidecar-memory-limit", required_argument, NULL, OPT_MEM_LIM},
    {"max-body", required_argument, NULL, OPT_MAX_BODY},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
    {"sa-dir", required_argument, NULL, OPT_SA_DIR},
    {"api-timeout-ms", required_argument, NULL, OPT_API_TIMEOUT},
    {"agent-service-account", required_argument, NULL, OPT_AGENT_SA},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: coll-agent webhook --cert FILE --key FILE --agent-image IMAGE --lib-version V\n"
        "                          [--listen ADDR:PORT] [options]\n"
        "Mutating admission webhook that injects the kcoll agent sidecar into pods that opt\n"
        "in with the label " AGENT_WEBHOOK_INJECT_LABEL "=true (on the pod or its namespace).\n"
        "\n"
        "  --listen ADDR:PORT            address to serve HTTPS on (default " DEFAULT_LISTEN
        "; ADDR may be\n"
        "                                empty, an IPv4 address or [IPv6]; port 0 picks one)\n"
        "  --cert FILE, --key FILE       PEM serving certificate (chain) and key; reloaded "
        "when they change\n"
        "  --agent-image IMAGE           sidecar image (its tag pins the library version)\n"
        "  --lib-version V               library version that image carries\n"
        "  --image-pull-policy P         Always, IfNotPresent (default) or Never\n"
        "  --sidecar-cpu-request Q       default 50m    (\"\" leaves it out)\n"
        "  --sidecar-memory-request Q    default 64Mi\n"
        "  --sidecar-cpu-limit Q         default none\n"
        "  --sidecar-memory-limit Q      default 256Mi\n"
        "  --max-body BYTES              largest AdmissionReview accepted (default %zu)\n"
        "  --agent-service-account NAME  ServiceAccount of the agent role: pods that name none\n"
        "                                (or default) run as it, its token in the sidecar only\n"
        "                                (default " AGENT_WEBHOOK_DEFAULT_AGENT_SA
        "; \"\" keeps every pod's own)\n"
        "  --threads N                   worker threads (default 2)\n"
        "  --kubeconfig FILE             API credentials when not in a cluster (in a cluster:\n"
        "                                the ServiceAccount token, see --sa-dir)\n"
        "  --sa-dir DIR                  in-cluster token and ca.crt (default\n"
        "                                /var/run/secrets/kubernetes.io/serviceaccount)\n"
        "  --api-timeout-ms N            budget of the owner Job/JobSet/Namespace reads of one\n"
        "                                review (default 3000; keep it under the webhook\n"
        "                                timeoutSeconds)\n",
        AGENT_WEBHOOK_DEFAULT_MAX_BODY);
}

/* "host:port", "[v6]:port" or ":port" into a socket address; host "" means every address. */
static int parse_listen(const char *spec, struct sockaddr_storage *ss, int *any_host,
                        unsigned int *port)
{
    char host[256];
    const char *colon, *p;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        snprintf(host, sizeof(host), "%.*s", (int)(close - spec - 1), spec + 1);
        colon = close + 1;
    } else {
        colon = strrchr(spec, ':');
        if (colon == NULL || (size_t)(colon - spec) >= sizeof(host))
            return -1;
        snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
        if (strchr(host, ':') != NULL)
            return -1; /* bare IPv6 needs brackets */
    }
    if (colon[1] == '\0')
        return -1;
    unsigned long v = 0;
    for (p = colon + 1; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535)
            return -1;
    }
    *port = (unsigned int)v;
    *any_host = host[0] == '\0';
    memset(ss, 0, sizeof(*ss));
    if (*any_host)
        return 0;
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", *port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || res == NULL)
        return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static int valid_token(const char *s, const char *extra)
{
    if (s == NULL || s[0] == '\0' || strlen(s) > 512)
        return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && strchr(extra, *p) == NULL)
            return 0;
    return 1;
}

/* Where a string option is stored; NULL for the others. */
static const char **string_opt(struct agent_webhook_opts *o, int c)
{
    switch (c) {
    case OPT_LISTEN:
        return &o->listen_spec;
    case OPT_CERT:
        return &o->cert;
    case OPT_KEY:
        return &o->key;
    case OPT_IMAGE:
        return &o->cfg.agent_image;
    case OPT_LIBV:
        return &o->cfg.lib_version;
    case OPT_PULL:
        return &o->cfg.image_pull_policy;
    case OPT_CPU_REQ:
        return &o->cfg.cpu_request;
    case OPT_MEM_REQ:
        return &o->cfg.memory_request;
    case OPT_CPU_LIM:
        return &o->cfg.cpu_limit;
    case OPT_MEM_LIM:
        return &o->cfg.memory_limit;
    case OPT_KUBECONFIG:
        return &o->kubeconfig;
    case OPT_SA_DIR:
        return &o->sa_dir;
    case OPT_AGENT_SA:
        return &o->cfg.agent_service_account;
    }
    return NULL;
}

/* A numeric option within its range: 0, else -1 after saying what it needs. */
static int number_opt(struct agent_webhook_opts *o, int c, const char *arg)
{
    static const struct {
        int opt;
        unsigned long min, max;
        const char *needs;
    } ranges[] = {
        {OPT_MAX_BODY, 1024, ULONG_MAX, "--max-body needs a byte count >= 1024"},
        {OPT_THREADS, 1, 64, "--threads needs 1..64"},
        {OPT_API_TIMEOUT, 100, 30000, "--api-timeout-ms needs 100..30000"},
    };
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        char *end;
        unsigned long v;
        if (ranges[i].opt != c)
            continue;
        errno = 0;
        v = strtoul(arg, &end, 10);
        if (errno != 0 || *end != '\0' || v < ranges[i].min || v > ranges[i].max) {
            fprintf(stderr, "coll-agent webhook: %s\n", ranges[i].needs);
            return -1;
        }
        if (c == OPT_MAX_BODY)
            o->cfg.max_body = v;
        else if (c == OPT_THREADS)
            o->threads = (unsigned int)v;
        else
            o->cfg.api_timeout_ms = (int)v;
        return 0;
    }
    return -1;
}

/* The getopt loop: AGENT_WEBHOOK_SERVE, or the exit status. */
static int parse_args(int argc, char **argv, struct agent_webhook_opts *o)
{
    int c;
    optind = 0; /* may run after the caller's own getopt */
    while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        const char **s = string_opt(o, c);
        if (s) {
            *s = optarg;
        } else if (c == OPT_MAX_BODY || c == OPT_THREADS || c == OPT_API_TIMEOUT) {
            if (number_opt(o, c, optarg) != 0)
                return 2;
        } else if (c == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "coll-agent webhook: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    return AGENT_WEBHOOK_SERVE;
}

/* The values together: AGENT_WEBHOOK_SERVE, or 2 after saying what is wrong. */
static int check_opts(struct agent_webhook_opts *o)
{
    const struct agent_webhook_config *cfg = &o->cfg;
    if (o->cert == NULL || o->key == NULL || cfg->agent_image == NULL || cfg->lib_version == NULL) {
        fprintf(stderr, "coll-agent webhook: --cert, --key, --agent-image and --lib-version are "
                        "required\n");
        usage(stderr);
        return 2;
    }
    if (!valid_token(cfg->agent_image, "./:@_-")) {
        fprintf(stderr, "coll-agent webhook: --agent-image '%s' is not an image reference\n",
                cfg->agent_image);
        return 2;
    }
    if (!valid_token(cfg->lib_version, ".+-_")) {
        fprintf(stderr, "coll-agent webhook: --lib-version '%s' is not a version\n",
                cfg->lib_version);
        return 2;
    }
    if (strcmp(cfg->image_pull_policy, "Always") != 0 &&
        strcmp(cfg->image_pull_policy, "IfNotPresent") != 0 &&
        strcmp(cfg->image_pull_policy, "Never") != 0) {
        fprintf(stderr, "coll-agent webhook: --image-pull-policy must be Always, IfNotPresent "
                        "or Never\n");
        return 2;
    }
    const char *quantities[] = {cfg->cpu_request, cfg->memory_request, cfg->cpu_limit,
                                cfg->memory_limit};
    for (size_t i = 0; i < sizeof(quantities) / sizeof(quantities[0]); i++) {
        if (quantities[i][0] != '\0' && !agent_webhook_quantity_valid(quantities[i])) {
            fprintf(stderr,
                    "coll-agent webhook: '%s' is not a resource quantity (e.g. 50m, "
                    "64Mi)\n",
                    quantities[i]);
            return 2;
        }
    }
    if (cfg->agent_service_account[0] != '\0' && !agent_name_ok(cfg->agent_service_account, 1)) {
        fprintf(stderr,
                "coll-agent webhook: --agent-service-account '%s' is not a ServiceAccount name "
                "(a DNS-1123 subdomain)\n",
                cfg->agent_service_account);
        return 2;
    }
    if (parse_listen(o->listen_spec, &o->listen_addr, &o->listen_any, &o->port) != 0) {
        fprintf(stderr,
                "coll-agent webhook: --listen '%s' is not ADDR:PORT (e.g. :8443, "
                "127.0.0.1:8443, [::1]:8443)\n",
                o->listen_spec);
        return 2;
    }
    return AGENT_WEBHOOK_SERVE;
}

int agent_webhook_opts_parse(int argc, char **argv, struct agent_webhook_opts *o)
{
    int rc;
    *o = (struct agent_webhook_opts){
        .cfg =
            {
                .image_pull_policy = "IfNotPresent",
                .cpu_request = "50m",
                .memory_request = "64Mi",
                .cpu_limit = "",
                .memory_limit = "256Mi",
                .max_body = AGENT_WEBHOOK_DEFAULT_MAX_BODY,
                .api_timeout_ms = 3000,
                .agent_service_account = AGENT_WEBHOOK_DEFAULT_AGENT_SA,
            },
        .listen_spec = DEFAULT_LISTEN,
        .threads = 2,
    };
    rc = parse_args(argc, argv, o);
    return rc != AGENT_WEBHOOK_SERVE ? rc : check_opts(o);
}
