/* A stand-in for libibverbs.so.1 for test_ib, loaded by path with dlopen like the real one.
 * Built twice: complete (IB_STUB_FULL), with two fake devices, and partial (the symbols from
 * ibv_dereg_mr on are missing), so that the loader's missing-symbol error can be checked.
 *
 * Devices: mlx5_0 with port 1 ACTIVE (InfiniBand, LID 7) and port 2 DOWN; mlx5_1 with port 1
 * ACTIVE (Ethernet: RoCE) and a GID table of a zero entry, a RoCE v1 link-local entry, a RoCE v2
 * link-local entry and a RoCE v2 IPv4-mapped entry (index 3, the one to choose). */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static struct ibv_device devs[2];
static struct ibv_device *list[3] = {&devs[0], &devs[1], NULL};
static const char *names[2] = {"mlx5_0", "mlx5_1"};

EXPORT struct ibv_device **ibv_get_device_list(int *num);
EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
    *num = 2;
    return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **l);
EXPORT void ibv_free_device_list(struct ibv_device **l) {}

EXPORT const char *ibv_get_device_name(struct ibv_device *d);
EXPORT const char *ibv_get_device_name(struct ibv_device *d)
{
    return names[d == &devs[1]];
}

/* the context remembers its device in cmd_fd (0 or 1); abi_compat 0: not an extended context */
EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d);
EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d)
{
    struct ibv_context *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->device = d;
        c->cmd_fd = d == &devs[1];
    }
    return c;
}

EXPORT int ibv_close_device(struct ibv_context *c);
EXPORT int ibv_close_device(struct ibv_context *c)
{
    free(c);
    return 0;
}

EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a);
EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->phys_port_cnt = c->cmd_fd == 0 ? 2 : 1;
    a->max_qp_wr = 1024;
    a->max_cqe = 4096;
    return 0;
}

/* the exported compat entry point behind verbs.h's ibv_query_port macro */
#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *pa);
EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *pa)
{
    struct ibv_port_attr *a = (struct ibv_port_attr *)(void *)pa;
    a->state = port == 1 ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    a->active_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 4;
    a->lid = c->cmd_fd == 0 ? 7 : 0;
    a->link_layer = c->cmd_fd == 0 ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
    return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g);
EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
    memset(g, 0, sizeof(*g));
    if (index == 1 || index == 2) {
        g->raw[0] = 0xfe;
        g->raw[1] = 0x80;
        g->raw[15] = (uint8_t)index;
    } else if (index == 3) {
        g->raw[10] = g->raw[11] = 0xff;
        g->raw[12] = 10;
        g->raw[15] = 3;
    }
    return index < 4 ? 0 : -1;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
                             struct ibv_gid_entry *e, uint32_t flags, size_t size);
EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
                             struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
    memset(e, 0, sizeof(*e));
    e->gid_index = index;
    e->gid_type = index == 1 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
    return 0;
}

/* present, never called: defined under another C name (verbs.h declares the real prototypes) */
#define STUB(name)                                                                                 \
    EXPORT void stub_##name(void) __asm__(#name);                                                  \
    EXPORT void stub_##name(void) {}

STUB(ibv_alloc_pd)
STUB(ibv_dealloc_pd)
STUB(ibv_reg_mr)
#ifdef IB_STUB_FULL
STUB(ibv_dereg_mr)
STUB(ibv_create_comp_channel)
STUB(ibv_destroy_comp_channel)
STUB(ibv_create_cq)
STUB(ibv_destroy_cq)
STUB(ibv_get_cq_event)
STUB(ibv_ack_cq_events)
STUB(ibv_create_qp)
STUB(ibv_modify_qp)
STUB(ibv_destroy_qp)
STUB(ibv_get_async_event)
STUB(ibv_ack_async_event)
STUB(ibv_wc_status_str)
STUB(ibv_event_type_str)
#endif
