/* What users of NCCL, Gloo and torchrun already set, read by kcoll (see envmap.h): the one mapping
 * of NCCL names to kcoll parameters, for kcoll's own API and for its libnccl.so.2 alike, and the
 * audit of the environment: a COLL_* name kcoll does not know (a typo: WARN with the closest
 * known name), an NCCL_* name that disagrees with its COLL_* twin (WARN), NCCL knobs and
 * GLOO_SOCKET_IFNAME that kcoll does not read (INFO naming the equivalent, or saying there is
 * none). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/config.h"
#include "base/envmap.h"
#include "base/log.h"

extern char **environ;

/* NCCL_NET=IB forces InfiniBand, NCCL_NET=Socket sockets: kcoll's RequireIB and Socket. */
static const char *net_policy(const char *v)
{
    if (strcasecmp(v, "IB") == 0)
        return "RequireIB";
    if (strcasecmp(v, "Socket") == 0)
        return "Socket";
    return NULL;
}

static const colli_env_alias_t aliases[] = {
    {"COLL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", NULL},
    {"COLL_SOCKET_FAMILY", "NCCL_SOCKET_FAMILY", NULL},
    {"COLL_TRANSPORT", "NCCL_NET", net_policy},
    {"COLL_IB_HCA", "NCCL_IB_HCA", NULL},
    {"COLL_IB_GID_INDEX", "NCCL_IB_GID_INDEX", NULL},
    {"COLL_IB_TIMEOUT", "NCCL_IB_TIMEOUT", NULL},
    {"COLL_SHM_DISABLE", "NCCL_SHM_DISABLE", NULL},
    {"COLL_DEBUG", "NCCL_DEBUG", NULL},
    {"COLL_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS", NULL},
    {"COLL_DEBUG_FILE", "NCCL_DEBUG_FILE", NULL},
};

const colli_env_alias_t *colli_env_alias(const char *coll_name)
{
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(aliases[i].coll, coll_name) == 0)
            return &aliases[i];
    return NULL;
}

const char *colli_env_nccl_value(const colli_env_alias_t *a, const char **raw)
{
    const char *v = secure_getenv(a->nccl);
    *raw = v;
    if (v == NULL || *v == '\0')
        return NULL;
    return a->translate != NULL ? a->translate(v) : v;
}

/* ---- the audit ---- */

/* NCCL settings kcoll does not read, with what to use instead ("" = nothing to use). */
static const struct {
    const char *name;
    const char *instead;
} nccl_knobs[] = {
    {"NCCL_IB_DISABLE", "COLL_TRANSPORT=Socket"},
    {"NCCL_NSOCKS_PERTHREAD", "COLL_SOCKET_NSTREAMS"},
    {"NCCL_SOCKET_NTHREADS", "COLL_SOCKET_NSTREAMS"},
    {"NCCL_IB_QPS_PER_CONNECTION", "COLL_IB_NQPS"},
    {"NCCL_BUFFSIZE", "COLL_CHUNK_SIZE"},
    {"NCCL_P2P_DISABLE", "COLL_SHM_DIRECT_MIN=0 (no single copy between the ranks of a host)"},
    {"NCCL_COMM_ID", "coll_unique_id_from_address (kcoll's libnccl.so.2 makes its ids from it "
                     "with COLL_JOB_SECRET or the kcoll agent's job secret, and refuses it "
                     "without either; kcoll's own coll_get_unique_id does not read it)"},
    {"NCCL_ALGO", ""},
    {"NCCL_PROTO", ""},
    {"NCCL_NTHREADS", ""},
    {"NCCL_MIN_NCHANNELS", ""},
    {"NCCL_MAX_NCHANNELS", ""},
};

/* COLL_* names kcoll reads besides the parameters (launchers, the agent, logging, test seams). */
static const char *const other_coll[] = {
    "COLL_DEBUG",         "COLL_DEBUG_SUBSYS",  "COLL_DEBUG_FILE",  "COLL_AGENT_SOCKET",
    "COLL_AGENT_LIB_DIR", "COLL_AGENT_LIB_SRC", "COLL_LIB_VERSION", "COLL_UNIQUE_ID",
    "COLL_RANK",          "COLL_NRANKS",        "COLL_LOCAL_RANK",  "COLL_MASTER_PORT",
    "COLL_JOB_SECRET",
};

/* Edit distance, for the closest known name of a typo (names are short). */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (lb >= sizeof(row) / sizeof(row[0]))
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* Is name a COLL_* name kcoll reads? Else *closest is the nearest one. */
static bool known_coll(const char *name, const char **closest)
{
    size_t best = (size_t)-1;
    *closest = NULL;
    if (strncmp(name, "COLL_TEST_", 10) == 0)
        return true; /* test seams (base/testhook.h) */
    const size_t nother = sizeof(other_coll) / sizeof(other_coll[0]);
    for (size_t i = 0;; i++) {
        const char *known = i < nother ? other_coll[i] : colli_config_param_name(i - nother);
        if (known == NULL)
            return false;
        if (strcmp(name, known) == 0)
            return true;
        size_t d = distance(name, known);
        if (d < best) {
            best = d;
            *closest = known;
        }
    }
}

static void audit_name(const char *name, const char *value)
{
    const char *closest;
    if (strncmp(name, "COLL_", 5) == 0) {
        if (!known_coll(name, &closest))
            coll_warn(CONFIG, "%s is not a kcoll setting and is ignored%s%s%s", name,
                      closest ? " (did you mean " : "", closest ? closest : "",
                      closest ? "?)" : "");
        return;
    }
    if (strcmp(name, "GLOO_SOCKET_IFNAME") == 0) {
        coll_info(CONFIG,
                  "GLOO_SOCKET_IFNAME=%s is Gloo's; kcoll reads COLL_SOCKET_IFNAME (or "
                  "NCCL_SOCKET_IFNAME)",
                  value);
        return;
    }
    if (strncmp(name, "NCCL_", 5) != 0)
        return;
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
        if (strcmp(name, aliases[i].nccl) != 0)
            continue;
        const char *coll = secure_getenv(aliases[i].coll), *raw = NULL;
        const char *mine = colli_env_nccl_value(&aliases[i], &raw);
        if (coll != NULL && mine != NULL && strcmp(coll, mine) != 0)
            coll_warn(CONFIG, "%s=%s and %s=%s disagree; kcoll uses %s=%s", aliases[i].coll, coll,
                      name, value, aliases[i].coll, coll);
        else if (coll == NULL && mine != NULL)
            coll_info(CONFIG, "%s=%s is honoured as %s=%s (COLL_* names win when set)", name, value,
                      aliases[i].coll, mine);
        else if (coll == NULL && mine == NULL && raw != NULL && *raw != '\0')
            coll_warn(CONFIG, "%s=%s has no kcoll meaning and is ignored", name, value);
        return;
    }
    for (size_t i = 0; i < sizeof(nccl_knobs) / sizeof(nccl_knobs[0]); i++)
        if (strcmp(name, nccl_knobs[i].name) == 0) {
            coll_info(CONFIG, "%s=%s is not read by kcoll%s%s", name, value,
                      nccl_knobs[i].instead[0] ? "; its equivalent: " : " (no equivalent)",
                      nccl_knobs[i].instead);
            return;
        }
    if (strcmp(name, "NCCL_COMM_BLOCKING") != 0) /* read by kcoll's libnccl.so.2 */
        coll_info(CONFIG, "%s=%s is not read by kcoll", name, value);
}

static void audit(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        char name[128];
        if (eq == NULL || (size_t)(eq - *e) >= sizeof(name))
            continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        audit_name(name, eq + 1);
    }
}

void colli_env_audit(void)
{
    /* process-wide, like the log it writes to: the environment is the process's */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, audit);
}
