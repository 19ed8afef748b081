/* Several ranks per pod: reading a pod's spec for the number of processes it starts (see
 * pod_ranks.h), and the one check of names that enter API paths. */
#define _GNU_SOURCE
#include "pod_ranks.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A count 1..AGENT_MAX_PER_POD from a decimal string (n chars, or to its end when n is 0); 0 when
 * it is none. */
static int count_value(const char *s, size_t n)
{
    char buf[16], *end;
    long v;
    if (n == 0)
        n = strlen(s);
    if (n == 0 || n >= sizeof(buf))
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!isdigit((unsigned char)buf[0]))
        return 0;
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno || *end || v < 1 || v > AGENT_MAX_PER_POD)
        return 0;
    return (int)v;
}

static void set_error(agent_pod_ranks_t *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_error(agent_pod_ranks_t *out, const char *fmt, ...)
{
    va_list ap;
    if (out->error[0])
        return;
    va_start(ap, fmt);
    vsnprintf(out->error, sizeof(out->error), fmt, ap);
    va_end(ap);
}

/* --nproc-per-node (or --nproc_per_node) V in one string, or V in the next token when the string
 * ends with the option. Returns 1 when found (*v: count, -1 for "gpu"/"auto", 0 malformed), 2
 * when the value is in the next token, 0 when not found. */
static int nproc_in(const char *s, int *v, const char **raw, size_t *rawlen)
{
    static const char *const opts[] = {"--nproc-per-node", "--nproc_per_node"};
    for (size_t k = 0; k < 2; k++) {
        const char *p = strstr(s, opts[k]);
        size_t n;
        if (!p)
            continue;
        p += strlen(opts[k]);
        if (*p == '=')
            p++;
        else if (*p == ' ' || *p == '\t')
            while (*p == ' ' || *p == '\t')
                p++;
        else if (*p == '\0')
            return 2;
        else
            continue; /* --nproc-per-nodeX: another word */
        n = strcspn(p, " \t\n;&|\"'");
        *raw = p;
        *rawlen = n;
        if ((n == 3 && strncmp(p, "gpu", 3) == 0) || (n == 4 && strncmp(p, "auto", 4) == 0))
            *v = -1;
        else
            *v = count_value(p, n);
        return 1;
    }
    return 0;
}

/* The strings of one container's command and args, in order. */
static void scan_container(const json_t *c, agent_pod_ranks_t *out)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    const char *lists[] = {"command", "args"};
    int want_next = 0;
    size_t i;
    json_t *it;
    for (size_t l = 0; l < 2 && !out->nproc; l++) {
        json_array_foreach(json_object_get(c, lists[l]), i, it)
        {
            const char *s = json_string_value(it), *raw = "";
            size_t rawlen = 0;
            int v = 0, found;
            if (!s)
                continue;
            if (want_next) {
                want_next = 0;
                raw = s;
                rawlen = strlen(s);
                v = strcmp(s, "gpu") == 0 || strcmp(s, "auto") == 0 ? -1 : count_value(s, 0);
                found = 1;
            } else {
                found = nproc_in(s, &v, &raw, &rawlen);
                if (found == 2) {
                    want_next = 1;
                    continue;
                }
            }
            if (!found)
                continue;
            if (v == 0) {
                char val[40];
                snprintf(val, sizeof(val), "%.*s", (int)(rawlen < 32 ? rawlen : 32), raw);
                set_error(out,
                          "container %s: --nproc-per-node \"%s\" is not a count 1..256, gpu or "
                          "auto",
                          name ? name : "?", val);
                return;
            }
            out->nproc = v;
            snprintf(out->nproc_where, sizeof(out->nproc_where),
                     "torchrun --nproc-per-node %.*s in container %s",
                     (int)(rawlen < 32 ? rawlen : 32), raw, name ? name : "?");
            break;
        }
    }
    json_array_foreach(json_object_get(c, "env"), i, it)
    {
        const char *k = json_string_value(json_object_get(it, "name"));
        const char *v = json_string_value(json_object_get(it, "value"));
        int n;
        if (out->nproc || !k || !v || strcmp(k, "PET_NPROC_PER_NODE") != 0)
            continue;
        n = strcmp(v, "gpu") == 0 || strcmp(v, "auto") == 0 ? -1 : count_value(v, 0);
        if (n == 0) {
            set_error(out, "container %s: PET_NPROC_PER_NODE \"%.32s\" is not a count 1..256",
                      name ? name : "?", v);
            return;
        }
        out->nproc = n;
        snprintf(out->nproc_where, sizeof(out->nproc_where),
                 "PET_NPROC_PER_NODE=%.32s in container %s", v, name ? name : "?");
    }
}

/* torchrun's --nnodes N in one container's command and args (joined): N, or 0. */
static int nnodes_of(const json_t *c)
{
    char all[4096];
    size_t used = 0, i;
    json_t *it;
    const char *lists[] = {"command", "args"}, *p;
    all[0] = '\0';
    for (size_t l = 0; l < 2; l++)
        json_array_foreach(json_object_get(c, lists[l]), i, it)
        {
            const char *s = json_string_value(it);
            int w = s ? snprintf(all + used, sizeof(all) - used, " %s", s) : 0;
            if (w < 0 || (size_t)w >= sizeof(all) - used)
                break;
            used += (size_t)w;
        }
    p = strstr(all, "--nnodes");
    if (!p)
        return 0;
    p += strlen("--nnodes");
    if (*p != '=' && *p != ' ')
        return 0;
    while (*p == '=' || *p == ' ')
        p++;
    return count_value(p, strcspn(p, " \t\n;&|\"'")) > 0 ? atoi(p) : 0; /* MIN:MAX: elastic */
}

int agent_pod_ranks_read(const json_t *pod, agent_pod_ranks_t *out)
{
    const json_t *md = json_object_get(pod, "metadata");
    const json_t *spec = json_object_get(pod, "spec");
    const char *ann = json_string_value(
        json_object_get(json_object_get(md, "annotations"), AGENT_ANN_RANKS_PER_POD));
    size_t i;
    json_t *c;
    memset(out, 0, sizeof(*out));
    if (!ann)
        ann = json_string_value(
            json_object_get(json_object_get(md, "labels"), AGENT_ANN_RANKS_PER_POD));
    if (ann) {
        out->annotation = count_value(ann, 0);
        if (!out->annotation)
            set_error(out,
                      "annotation " AGENT_ANN_RANKS_PER_POD " is \"%.32s\": it must be a count "
                      "1..256",
                      ann);
    }
    json_array_foreach(json_object_get(spec, "containers"), i, c)
    {
        json_t *g = json_object_get(json_object_get(json_object_get(c, "resources"), "limits"),
                                    AGENT_GPU_RESOURCE);
        const char *gs = json_string_value(g);
        int n = json_is_integer(g) ? (int)json_integer_value(g) : gs ? atoi(gs) : 0;
        if (n > 0 && n <= 4096)
            out->gpus += n;
        if (!out->nproc)
            scan_container(c, out);
        if (!out->nnodes)
            out->nnodes = nnodes_of(c);
    }
    if (out->gpus > AGENT_MAX_PER_POD)
        set_error(out,
                  "the pod's containers ask for %d nvidia.com/gpu, more than the %d ranks a pod "
                  "may run",
                  out->gpus, AGENT_MAX_PER_POD);
    if (out->nproc == -1) { /* "gpu" / "auto": one process per GPU */
        if (out->gpus > 0) {
            out->nproc = out->gpus;
        } else {
            set_error(out,
                      "%s asks for one process per GPU, but the pod's containers have no "
                      "nvidia.com/gpu limit",
                      out->nproc_where);
            out->nproc = 0;
        }
    }
    return out->error[0] ? -1 : 0;
}

int agent_pod_ranks_choose(int topo, const char *topo_name, const agent_pod_ranks_t *pr,
                           char *source, size_t len)
{
    if (topo > 0) {
        snprintf(source, len, "CollectiveTopology %s spec.ranksPerPod", topo_name ? topo_name : "");
        return topo;
    }
    if (pr->annotation > 0) {
        snprintf(source, len, "the pod's " AGENT_ANN_RANKS_PER_POD " annotation");
        return pr->annotation;
    }
    if (pr->nproc > 0) {
        snprintf(source, len, "%s", pr->nproc_where);
        return pr->nproc;
    }
    if (pr->gpus > 0) {
        snprintf(source, len, "the pod's " AGENT_GPU_RESOURCE " limit (one rank per GPU)");
        return pr->gpus;
    }
    snprintf(source, len, "the default (one rank per pod)");
    return 1;
}

int agent_pod_ranks_admit(const json_t *pod, int world_size, char *why, size_t len)
{
    agent_pod_ranks_t pr;
    char source[240];
    int per;
    if (agent_pod_ranks_read(pod, &pr) != 0) {
        snprintf(why, len, "%s", pr.error);
        return -1;
    }
    per = agent_pod_ranks_choose(0, NULL, &pr, source, sizeof(source));
    if (pr.gpus > 0 && per > pr.gpus) {
        snprintf(why, len,
                 "the pod runs %d ranks (%s) but has %d GPU%s (nvidia.com/gpu limits): give it "
                 "%d GPUs or start %d processes",
                 per, source, pr.gpus, pr.gpus == 1 ? "" : "s", per, pr.gpus);
        return -1;
    }
    if (pr.annotation > 0 && pr.nproc > 0 && pr.annotation != pr.nproc) {
        snprintf(why, len,
                 "annotation " AGENT_ANN_RANKS_PER_POD " says %d ranks but %s starts %d; make "
                 "them agree",
                 pr.annotation, pr.nproc_where, pr.nproc);
        return -1;
    }
    if (world_size > 0 && pr.nnodes > 0 && pr.nnodes != world_size) {
        snprintf(why, len,
                 "torchrun --nnodes %d in the pod, but its Job runs %d pods (completions and "
                 "parallelism %d): each pod is one torchrun node, so make --nnodes %d",
                 pr.nnodes, world_size, world_size, world_size);
        return -1;
    }
    return 0;
}

int agent_name_ok(const char *s, int subdomain)
{
    const size_t max = subdomain ? 253 : 63;
    size_t n = s != NULL ? strnlen(s, max + 1) : 0;
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        const int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-' && !(subdomain && c == '.'))
            return 0;
        if ((i == 0 || i == n - 1) && !alnum)
            return 0;
        if (c == '.' && (s[i + 1] == '.' || s[i + 1] == '-' || (i > 0 && s[i - 1] == '-')))
            return 0;
    }
    return 1;
}
