/* The RDMA transport's table for the core (plugin/transport.h). */
#include "rdma.h"

const struct gdr_transport gdr_transport_rdma = {
  .name = "rdma",
  .id = GDR_TP_RDMA,
  .max_fused = GDR_RDMA_MAX_CONN_DEVS, /* a fused device's QPs spread over its devices (conn.c; the core caps v9..v11 at 4) */
  .init = gdr_rdma_init,
  .get_properties = gdr_rdma_get_properties,
  .listen = gdr_rdma_listen,
  .connect = gdr_rdma_connect,
  .accept = gdr_rdma_accept,
  .reg_mr = gdr_rdma_reg_mr,
  .reg_mr_dmabuf = gdr_rdma_reg_mr_dmabuf,
  .dereg_mr = gdr_rdma_dereg_mr,
  .isend = gdr_rdma_isend,
  .irecv = gdr_rdma_irecv,
  .iflush = gdr_rdma_iflush,
  .test = gdr_rdma_test,
  .close_send = gdr_rdma_close_send,
  .close_recv = gdr_rdma_close_recv,
  .close_listen = gdr_rdma_close_listen,
  .quiesce = gdr_rdma_quiesce,
  .fini = gdr_rdma_fini,
};
