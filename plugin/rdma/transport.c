/* The RDMA transport's table for the core (plugin/transport.h). The entries that drive a connection take its lock
 * (service.c: a connection whose NCCL calls nothing still answers its peer from the service's thread); connect and
 * accept hand a new connection to the service, close takes it back first. */
#include "rdma.h"

static ncclResult_t connect_svc(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle,
                                void **send_comm) {
  ncclResult_t res = gdr_rdma_connect(dev, opts, handle, send_comm);
  if (res == ncclSuccess && *send_comm != NULL && gdr_rdma_svc_attach(*send_comm) != ncclSuccess)
    GDR_WARN("%s: the idle-peer service cannot watch it: its peer is answered on its own calls only",
             ((struct gdr_rdma_comm *)*send_comm)->desc);
  return res;
}

static ncclResult_t accept_svc(void *listen_comm, void **recv_comm) {
  ncclResult_t res = gdr_rdma_accept(listen_comm, recv_comm);
  if (res == ncclSuccess && *recv_comm != NULL && gdr_rdma_svc_attach(*recv_comm) != ncclSuccess)
    GDR_WARN("%s: the idle-peer service cannot watch it: its peer is answered on its own calls only",
             ((struct gdr_rdma_comm *)*recv_comm)->desc);
  return res;
}

static ncclResult_t isend_svc(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  struct gdr_rdma_comm *c = send_comm;
  gdr_rdma_svc_enter(c);
  ncclResult_t res = gdr_rdma_isend(c, data, size, tag, mhandle, request);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t irecv_svc(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                              void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  gdr_rdma_svc_enter(c);
  ncclResult_t res = gdr_rdma_irecv(c, n, data, sizes, tags, mhandles, request);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t iflush_svc(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) {
  struct gdr_rdma_comm *c = recv_comm;
  gdr_rdma_svc_enter(c);
  ncclResult_t res = gdr_rdma_iflush(c, n, data, sizes, mhandles, request);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t test_svc(void *request, int *done, size_t *sizes) {
  struct gdr_rdma_comm *c = ((struct gdr_rdma_req *)request)->comm; /* (the pool is the comm's: valid after) */
  gdr_rdma_svc_enter(c);
  ncclResult_t res = gdr_rdma_test(request, done, sizes);
  gdr_rdma_svc_leave(c);
  return res;
}

static ncclResult_t close_send_svc(void *send_comm) {
  gdr_rdma_svc_detach(send_comm);
  return gdr_rdma_close_send(send_comm);
}

static ncclResult_t close_recv_svc(void *recv_comm) {
  gdr_rdma_svc_detach(recv_comm);
  return gdr_rdma_close_recv(recv_comm);
}

const struct gdr_transport gdr_transport_rdma = {
    .name = "rdma",
    .id = GDR_TP_RDMA,
    .max_fused =
        GDR_RDMA_MAX_CONN_DEVS, /* a fused device's QPs spread over its devices (conn.c; the core caps v9..v11 at 4) */
    .init = gdr_rdma_init,
    .get_properties = gdr_rdma_get_properties,
    .listen = gdr_rdma_listen,
    .connect = connect_svc,
    .accept = accept_svc,
    .reg_mr = gdr_rdma_reg_mr,
    .reg_mr_dmabuf = gdr_rdma_reg_mr_dmabuf,
    .dereg_mr = gdr_rdma_dereg_mr,
    .isend = isend_svc,
    .irecv = irecv_svc,
    .iflush = iflush_svc,
    .test = test_svc,
    .close_send = close_send_svc,
    .close_recv = close_recv_svc,
    .close_listen = gdr_rdma_close_listen,
    .describe = gdr_rdma_describe,
    .quiesce = gdr_rdma_quiesce,
    .fini = gdr_rdma_fini,
};
