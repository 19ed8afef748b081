/* spec.nccl: native (docs/nccl-env.md): what the webhook checks in a pod spec against the pins of
 * its CollectiveTopology. NVIDIA NCCL's environment plugin overrides NCCL_* at run time, but
 * NCCL without the plugin (the conf file path) and PyTorch's Gloo take a variable set in the
 * pod's env over anything kcoll writes, so a contradiction is named at admission (a warning)
 * and by the agent (an Event, from the kcoll.io/nccl-env-conflict annotation). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

void agent_webhook_nccl_pins_read(const json_t *spec, struct agent_webhook_nccl_pins *pins)
{
    const char *ifname =
        json_string_value(json_object_get(json_object_get(spec, "network"), "interface"));
    const char *t = json_string_value(json_object_get(spec, "transport"));
    memset(pins, 0, sizeof(*pins));
    if (ifname != NULL && strlen(ifname) < sizeof(pins->ifname))
        snprintf(pins->ifname, sizeof(pins->ifname), "%s", ifname);
    snprintf(pins->transport, sizeof(pins->transport), "%s",
             t != NULL && strlen(t) < sizeof(pins->transport) ? t : "PreferIB");
    const char *u = json_string_value(json_object_get(spec, "ncclAgentUnreachable"));
    pins->pass_through = u != NULL && strcmp(u, "PassThrough") == 0;
    const char *e = json_string_value(json_object_get(spec, "ncclOnRankEnd"));
    pins->exit_on_end = e != NULL && strcmp(e, "Exit") == 0;
}

/* Does an interface setting (NCCL's syntax: "=eth1", "eth1", a list, "^" exclusions) say
 * exactly ifname? */
static int names_interface(const char *v, const char *ifname)
{
    if (v[0] == '=')
        v++;
    return strcmp(v, ifname) == 0;
}

static int net_contradicts(const char *v, const char *transport)
{
    if (strcmp(transport, "Socket") == 0)
        return strcasecmp(v, "Socket") != 0;
    if (strcmp(transport, "RequireIB") == 0)
        return strcasecmp(v, "IB") != 0;
    return 0; /* PreferIB: IB or sockets are both what the pin allows */
}

int agent_webhook_nccl_conflicts(const json_t *containers,
                                 const struct agent_webhook_nccl_pins *pins, char *out,
                                 size_t outlen)
{
    size_t i, j, off = 0;
    const json_t *c, *e;
    int n = 0;
    if (outlen > 0)
        out[0] = '\0';
    json_array_foreach(containers, i, c)
    {
        const char *cname = json_string_value(json_object_get(c, "name"));
        json_array_foreach(json_object_get(c, "env"), j, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *v = json_string_value(json_object_get(e, "value"));
            const char *why = NULL;
            if (name == NULL || v == NULL || v[0] == '\0')
                continue;
            if ((strcmp(name, "NCCL_SOCKET_IFNAME") == 0 ||
                 strcmp(name, "GLOO_SOCKET_IFNAME") == 0) &&
                pins->ifname[0] && !names_interface(v, pins->ifname))
                why = "the topology pins interface";
            else if (strcmp(name, "NCCL_NET") == 0 && net_contradicts(v, pins->transport))
                why = "the topology pins transport";
            if (why == NULL)
                continue;
            int w = snprintf(out + off, off < outlen ? outlen - off : 0,
                             "%scontainer %s sets %s=%.64s, but %s %s", n ? "; " : "",
                             cname ? cname : "?", name, v, why,
                             strcmp(name, "NCCL_NET") == 0 ? pins->transport : pins->ifname);
            if (w > 0)
                off += (size_t)w;
            n++;
        }
    }
    if (off >= outlen && outlen > 4)
        memcpy(out + outlen - 4, "...", 4);
    return n;
}
