/* libibverbs reached only through dlopen("libibverbs.so.1") and a table of function pointers
 * filled by dlsym (NCCL's ibvsymbols idea): the library never links libibverbs, so it loads and
 * runs where rdma-core is absent. The table belongs to its caller (the policy probe, or one
 * communicator's InfiniBand transport): there is no process-wide verbs state.
 *
 * Entry points that verbs.h defines as static inline calls through the context's ops
 * (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) need no symbol. Two that are
 * macros around versioned exports are loaded by their exported name: ibv_query_port (the
 * IBVERBS_1.1 compat export; colli_ib_query_port applies the header's logic) and ibv_reg_mr
 * (the plain export, not the ibv_reg_mr_iova2 path the header takes for optional access
 * flags, which this transport does not use). */
#ifndef COLLI_IB_VERBS_H
#define COLLI_IB_VERBS_H

#include <stdbool.h>
#include <stddef.h>

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define COLLI_HAVE_VERBS 1
#endif

/* The library every caller loads unless a test names another (COLL_TEST_IB_VERBS_LIB). */
#define COLLI_IB_VERBS_LIB "libibverbs.so.1"

#ifdef COLLI_HAVE_VERBS
typedef struct colli_ib_verbs {
    void *handle;
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    int (*query_port_compat)(struct ibv_context *ctx, uint8_t port,
                             struct _compat_ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                                struct ibv_comp_channel *ch, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *event);
    void (*ack_async_event)(struct ibv_async_event *event);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    const char *(*event_type_str)(enum ibv_event_type event);
    /* optional: fork safety (ib.c's fork_protect); ibv_is_fork_initialized is rdma-core >= 35 */
    int (*fork_init)(void);
    int (*is_fork_initialized)(void);
    /* optional (rdma-core >= 32): the GID type; NULL -> sysfs gid_attrs/types */
    int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
} colli_ib_verbs_t;

/* ibv_query_port as verbs.h defines it (the provider's extended op where there is one, else the
 * compat export), without a link-time reference to libibverbs. */
int colli_ib_query_port(const colli_ib_verbs_t *v, struct ibv_context *ctx, uint8_t port,
                        struct ibv_port_attr *attr);
#else
typedef struct colli_ib_verbs {
    void *handle;
} colli_ib_verbs_t;
#endif

/* Load path (NULL: libibverbs.so.1) and every required symbol into *v. Returns false with a
 * message in why naming the library and what failed: it cannot be loaded (dlerror's text), or
 * the first symbol it lacks. Nothing is left open on failure. */
bool colli_ib_verbs_open(const char *path, colli_ib_verbs_t *v, char *why, size_t whylen);
void colli_ib_verbs_close(colli_ib_verbs_t *v);

/* Number of required symbols and the name of symbol i (tests list them). */
int colli_ib_verbs_nsyms(void);
const char *colli_ib_verbs_sym(int i);

#endif
