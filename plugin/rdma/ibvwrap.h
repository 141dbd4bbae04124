/* libibverbs, loaded at run time.
 *
 * The plugin has no DT_NEEDED on libibverbs (docs/design.md section 1): the library is dlopened
 * (GDRNET_IBVERBS_LIB, else libibverbs.so.1) and every entry point is resolved with dlvsym at the
 * rdma-core version node that introduced it, so an old or partial library is detected instead of
 * binding to the wrong symbol version.  <infiniband/verbs.h> is used for its types and for the
 * verbs that are inline there (post_send, post_recv, poll_cq, req_notify_cq go through the
 * context's ops table and never reference a library symbol).
 *
 * Never call a verbs.h function or macro that is not one of those inline paths: ibv_query_port,
 * ibv_reg_mr, ... are macros in verbs.h that expand to references to library symbols, which
 * would become undefined symbols of the plugin.  Use the members of `gdr_ibv` below instead (they
 * are deliberately not called ibv_*, so verbs.h macros cannot rewrite them). */
#ifndef GDRNET_RDMA_IBVWRAP_H
#define GDRNET_RDMA_IBVWRAP_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gdr_ibv_api {
  /* IBVERBS_1.1 (required) */
  struct ibv_device **(*get_device_list)(int *num_devices);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *device);
  struct ibv_context *(*open_device)(struct ibv_device *device);
  int (*close_device)(struct ibv_context *context);
  int (*get_async_event)(struct ibv_context *context, struct ibv_async_event *event);
  void (*ack_async_event)(struct ibv_async_event *event);
  int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
  int (*query_port_compat)(struct ibv_context *context, uint8_t port, void *compat_attr);
  int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
  int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context, struct ibv_comp_channel *channel,
                              int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  const char *(*wc_status_str)(enum ibv_wc_status status);
  const char *(*event_type_str)(enum ibv_event_type type);
  /* IBVERBS_1.8 (optional) */
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access);
  /* IBVERBS_1.12 (optional) */
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
};

/* The resolved table; valid after gdr_ibv_load() returned 0. */
extern struct gdr_ibv_api gdr_ibv;

/* Loads the library once (thread-safe, idempotent).  Returns 0 on success; otherwise -1 and a
 * human-readable reason (which library, which symbol, dlerror) in `why`. The result of the first
 * call is remembered: later calls return it again with the same reason. */
int gdr_ibv_load(char *why, size_t whylen);

/* The path/name that was (or would be) dlopened. */
const char *gdr_ibv_lib_name(void);

/* ibv_query_port through the extended context op when the provider has it (fills every field of
 * struct ibv_port_attr), else through the IBVERBS_1.1 compat entry point. speed_ex (may be NULL): the
 * port's active_speed_ex where the library reports it (rdma-core >= 47; XDR does not fit active_speed's
 * 8 bits), else 0. */
int gdr_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, uint32_t *speed_ex);

/* Names for logs; never NULL. */
const char *gdr_ibv_wc_status_str(enum ibv_wc_status status);
const char *gdr_ibv_wc_opcode_str(enum ibv_wc_opcode op);
const char *gdr_ibv_event_str(enum ibv_event_type type);

/* Post helpers returning 0 or an errno (providers return either). */
static inline int gdr_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  return qp->context->ops.post_send(qp, wr, bad);
}
static inline int gdr_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  return qp->context->ops.post_recv(qp, wr, bad);
}
static inline int gdr_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  return cq->context->ops.poll_cq(cq, n, wc);
}

#ifdef __cplusplus
}
#endif

#endif /* GDRNET_RDMA_IBVWRAP_H */
