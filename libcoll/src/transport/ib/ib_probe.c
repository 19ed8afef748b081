#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "transport/ib/ib_probe.h"

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define HAVE_VERBS_H 1
#endif

bool colli_ib_hca_match(const char *spec, const char *dev, int port)
{
    if (spec == NULL || *spec == '\0')
        return true;
    bool exclude = false, exact = false;
    if (*spec == '^')
        exclude = true, spec++;
    if (*spec == '=')
        exact = true, spec++;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec);
    bool hit = false;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        long want_port = -1;
        if (colon) {
            *colon = '\0';
            if (!colli_parse_long(colon + 1, 1, 255, &want_port))
                continue;
        }
        bool name_ok = exact ? strcmp(dev, tok) == 0 : strncmp(dev, tok, strlen(tok)) == 0;
        if (name_ok && (want_port < 0 || want_port == port))
            hit = true;
    }
    return exclude ? !hit : hit;
}

void colli_ib_probe(const char *hca_spec, colli_ib_probe_t *out)
{
    memset(out, 0, sizeof(*out));
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(out->reason, sizeof(out->reason),
                 "libibverbs.so.1 cannot be loaded (%s); install rdma-core/libibverbs1 in the "
                 "image, or use COLL_TRANSPORT=Socket",
                 dlerror());
        return;
    }
#ifdef HAVE_VERBS_H
    typedef struct ibv_device **(*get_list_fn)(int *);
    typedef void (*free_list_fn)(struct ibv_device **);
    typedef const char *(*get_name_fn)(struct ibv_device *);
    typedef struct ibv_context *(*open_fn)(struct ibv_device *);
    typedef int (*close_fn)(struct ibv_context *);
    typedef int (*query_dev_fn)(struct ibv_context *, struct ibv_device_attr *);
    typedef int (*query_port_fn)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
    get_list_fn get_list = (get_list_fn)dlsym(h, "ibv_get_device_list");
    free_list_fn free_list = (free_list_fn)dlsym(h, "ibv_free_device_list");
    get_name_fn get_name = (get_name_fn)dlsym(h, "ibv_get_device_name");
    open_fn open_dev = (open_fn)dlsym(h, "ibv_open_device");
    close_fn close_dev = (close_fn)dlsym(h, "ibv_close_device");
    query_dev_fn query_dev = (query_dev_fn)dlsym(h, "ibv_query_device");
    /* ibv_query_port is an inline wrapper in new headers; the exported symbol is versioned. */
    query_port_fn query_port = (query_port_fn)dlvsym(h, "ibv_query_port", "IBVERBS_1.1");
    if (query_port == NULL)
        query_port = (query_port_fn)dlsym(h, "ibv_query_port");
    if (!get_list || !free_list || !get_name || !open_dev || !close_dev || !query_dev ||
        !query_port) {
        snprintf(out->reason, sizeof(out->reason),
                 "libibverbs.so.1 lacks required symbols (too old?); use COLL_TRANSPORT=Socket");
        dlclose(h);
        return;
    }
    int n = 0;
    struct ibv_device **list = get_list(&n);
    if (list == NULL || n == 0) {
        snprintf(out->reason, sizeof(out->reason),
                 "libibverbs found no RDMA devices (no HCA, or /dev/infiniband not mounted in "
                 "the container)");
        if (list)
            free_list(list);
        dlclose(h);
        return;
    }
    size_t used = 0;
    int seen = 0;
    for (int i = 0; i < n; i++) {
        const char *name = get_name(list[i]);
        struct ibv_context *ctx = open_dev(list[i]);
        if (ctx == NULL)
            continue;
        struct ibv_device_attr da;
        if (query_dev(ctx, &da) == 0) {
            for (int p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                memset(&pa, 0, sizeof(pa));
                if (query_port(ctx, (uint8_t)p, &pa) != 0 || !colli_ib_hca_match(hca_spec, name, p))
                    continue;
                seen++;
                if (pa.state != IBV_PORT_ACTIVE)
                    continue;
                int w = snprintf(out->devices + used, sizeof(out->devices) - used, "%s%s:%d",
                                 used ? ", " : "", name, p);
                if (w > 0 && (size_t)w < sizeof(out->devices) - used)
                    used += (size_t)w;
                out->usable = true;
            }
        }
        close_dev(ctx);
    }
    free_list(list);
    if (!out->usable)
        snprintf(out->reason, sizeof(out->reason),
                 "%d RDMA device(s) found but %s (COLL_IB_HCA=\"%s\")", n,
                 seen ? "no matching port is ACTIVE" : "no port matches the HCA list",
                 hca_spec ? hca_spec : "");
#else
    snprintf(out->reason, sizeof(out->reason),
             "this build has no InfiniBand support (built without libibverbs headers)");
#endif
    dlclose(h);
}
