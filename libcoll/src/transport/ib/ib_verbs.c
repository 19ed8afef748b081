/* Loading libibverbs with dlopen and filling the verbs table with dlsym (see ib_verbs.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "transport/ib/ib_verbs.h"

#ifdef COLLI_HAVE_VERBS
#define SYM(name, field)                                                                           \
    {                                                                                              \
        name, offsetof(colli_ib_verbs_t, field)                                                    \
    }
static const struct {
    const char *name;
    size_t off;
} syms[] = {
    SYM("ibv_get_device_list", get_device_list),
    SYM("ibv_free_device_list", free_device_list),
    SYM("ibv_get_device_name", get_device_name),
    SYM("ibv_open_device", open_device),
    SYM("ibv_close_device", close_device),
    SYM("ibv_query_device", query_device),
    SYM("ibv_query_port", query_port_compat),
    SYM("ibv_query_gid", query_gid),
    SYM("ibv_alloc_pd", alloc_pd),
    SYM("ibv_dealloc_pd", dealloc_pd),
    SYM("ibv_reg_mr", reg_mr),
    SYM("ibv_dereg_mr", dereg_mr),
    SYM("ibv_create_comp_channel", create_comp_channel),
    SYM("ibv_destroy_comp_channel", destroy_comp_channel),
    SYM("ibv_create_cq", create_cq),
    SYM("ibv_destroy_cq", destroy_cq),
    SYM("ibv_get_cq_event", get_cq_event),
    SYM("ibv_ack_cq_events", ack_cq_events),
    SYM("ibv_create_qp", create_qp),
    SYM("ibv_modify_qp", modify_qp),
    SYM("ibv_destroy_qp", destroy_qp),
    SYM("ibv_get_async_event", get_async_event),
    SYM("ibv_ack_async_event", ack_async_event),
    SYM("ibv_wc_status_str", wc_status_str),
    SYM("ibv_event_type_str", event_type_str),
};
#define NSYMS ((int)(sizeof(syms) / sizeof(syms[0])))

int colli_ib_verbs_nsyms(void)
{
    return NSYMS;
}

const char *colli_ib_verbs_sym(int i)
{
    return i >= 0 && i < NSYMS ? syms[i].name : NULL;
}

bool colli_ib_verbs_open(const char *path, colli_ib_verbs_t *v, char *why, size_t whylen)
{
    if (path == NULL || *path == '\0')
        path = COLLI_IB_VERBS_LIB;
    memset(v, 0, sizeof(*v));
    /* NODELETE: libibverbs and its providers stay mapped after the last close, as rdma-core
     * expects of a process that once used them */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, whylen,
                 "%s cannot be loaded (%s); install rdma-core/libibverbs1 in the image, or use "
                 "COLL_TRANSPORT=Socket",
                 path, e ? e : "unknown error");
        return false;
    }
    for (int i = 0; i < NSYMS; i++) {
        (void)dlerror();
        void *s = dlsym(h, syms[i].name);
        if (s == NULL) {
            snprintf(why, whylen,
                     "%s lacks the symbol %s (rdma-core too old or not libibverbs?); install "
                     "rdma-core >= 17, or use COLL_TRANSPORT=Socket",
                     path, syms[i].name);
            dlclose(h);
            memset(v, 0, sizeof(*v));
            return false;
        }
        memcpy((char *)v + syms[i].off, &s, sizeof(s));
    }
    void *gx = dlsym(h, "_ibv_query_gid_ex");
    memcpy(&v->query_gid_ex, &gx, sizeof(gx));
    void *fi = dlsym(h, "ibv_fork_init"), *fs = dlsym(h, "ibv_is_fork_initialized");
    memcpy(&v->fork_init, &fi, sizeof(fi));
    memcpy(&v->is_fork_initialized, &fs, sizeof(fs));
    v->handle = h;
    return true;
}

int colli_ib_query_port(const colli_ib_verbs_t *v, struct ibv_context *ctx, uint8_t port,
                        struct ibv_port_attr *attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    if (vctx != NULL)
        return vctx->query_port(ctx, port, attr, sizeof(*attr));
    memset(attr, 0, sizeof(*attr));
    return v->query_port_compat(ctx, port, (struct _compat_ibv_port_attr *)attr);
}
#else
int colli_ib_verbs_nsyms(void)
{
    return 0;
}

const char *colli_ib_verbs_sym(int i)
{
    return NULL;
}

bool colli_ib_verbs_open(const char *path, colli_ib_verbs_t *v, char *why, size_t whylen)
{
    memset(v, 0, sizeof(*v));
    snprintf(why, whylen,
             "this kcoll build has no InfiniBand support (built without the libibverbs-dev "
             "headers); rebuild with them, or use COLL_TRANSPORT=Socket");
    return false;
}
#endif

void colli_ib_verbs_close(colli_ib_verbs_t *v)
{
    if (v->handle != NULL)
        dlclose(v->handle);
    memset(v, 0, sizeof(*v));
}
