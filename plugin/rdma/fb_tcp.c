/* The RDMA transport's one seam to the TCP transport (fb_tcp.h). */
#include "fb_tcp.h"

#include <string.h>

#include "../cuda.h"
#include "../tcp/tcp.h"
#include "rdma.h"

static int same_addr(const union gdr_sockaddr *a, const union gdr_sockaddr *b) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET) return a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
  if (a->sa.sa_family == AF_INET6) return memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, 16) == 0;
  return 0;
}

int gdr_fb_tcp_dev_at(int dev, const union gdr_sockaddr *addr) {
  union gdr_sockaddr a;
  return gdr_tcp_dev_addr(dev, &a) == ncclSuccess && same_addr(&a, addr);
}

int gdr_fb_tcp_init(const union gdr_sockaddr *if_addr, int *dev, char *why, size_t whylen) {
  int n = 0;
  *dev = 0;
  if (gdr_transport_tcp.init(&n, why, whylen) != ncclSuccess || n <= 0) return -1;
  for (int d = 0; d < n; d++)
    if (gdr_fb_tcp_dev_at(d, if_addr)) {
      *dev = d;
      break;
    }
  return 0;
}

void gdr_fb_tcp_fini(void) {
  if (gdr_transport_tcp.fini) gdr_transport_tcp.fini();
}

ncclResult_t gdr_fb_tcp_listen(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **listen) {
  return gdr_transport_tcp.listen(dev, opts, handle, listen);
}

ncclResult_t gdr_fb_tcp_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **comm) {
  return gdr_transport_tcp.connect(dev, opts, handle, comm);
}

ncclResult_t gdr_fb_tcp_accept(void *listen, void **comm) { return gdr_transport_tcp.accept(listen, comm); }

void gdr_fb_tcp_close_listen(void *listen) { (void)gdr_transport_tcp.close_listen(listen); }

void gdr_fb_tcp_close(void *comm, int sender) {
  if (sender)
    (void)gdr_transport_tcp.close_send(comm);
  else
    (void)gdr_transport_tcp.close_recv(comm);
}

void gdr_fb_tcp_connect_abort(struct gdr_handle *handle) { gdr_tcp_connect_abort(handle); }

const char *gdr_fb_tcp_peer(const void *comm, uint32_t *caps) {
  const struct tcp_comm *tc = comm;
  *caps = tc->peer_caps;
  return tc->peer_str;
}

/* The TCP mhandle for a buffer of this registration: the driver says whether it is GPU memory (DMA-BUF and
 * nvidia-peermem registrations normally are; the emulator registers host memory that way on CPU hosts). */
static ncclResult_t tcp_mr_of(const struct gdr_rdma_mh *mh, void *data, size_t size, struct tcp_mr *out) {
  enum gdr_mem_kind kind = GDR_MEM_HOST;
  if (mh != NULL && mh->kind != GDR_REG_HOST) (void)gdr_cuda_ptr_kind(data, &kind, NULL);
  return gdr_tcp_mr_make(data, size, kind == GDR_MEM_CUDA ? NCCL_PTR_CUDA : NCCL_PTR_HOST, out);
}

ncclResult_t gdr_fb_tcp_isend(void *comm, void *data, size_t size, int tag, const struct gdr_rdma_mh *mh,
                              void **request) {
  struct tcp_mr mr;
  ncclResult_t res = tcp_mr_of(mh, data, size, &mr);
  if (res == ncclSuccess) res = gdr_transport_tcp.isend(comm, data, size, tag, &mr, request);
  return res;
}

ncclResult_t gdr_fb_tcp_irecv(void *comm, int n, void **data, size_t *sizes, int *tags, struct gdr_rdma_mh *const *mhs,
                              void **request) {
  struct tcp_mr mrs[GDR_RDMA_MAX_RECVS];
  void *tmhs[GDR_RDMA_MAX_RECVS];
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < n && res == ncclSuccess; i++) {
    res = tcp_mr_of(mhs ? mhs[i] : NULL, data[i], sizes[i], &mrs[i]);
    tmhs[i] = &mrs[i];
  }
  if (res == ncclSuccess) res = gdr_transport_tcp.irecv(comm, n, data, sizes, tags, tmhs, request);
  return res;
}

ncclResult_t gdr_fb_tcp_test(void *request, int *done, size_t *sizes) {
  return gdr_transport_tcp.test(request, done, sizes);
}

int gdr_fb_tcp_tag_counts(const void *comm, int *tags, uint64_t *counts, int max) {
  return gdr_tcp_tag_counts(comm, tags, counts, max);
}

uint64_t gdr_fb_tcp_tag_count(const void *comm, int tag) { return gdr_tcp_tag_count(comm, tag); }

int gdr_fb_tcp_describe(void *comm, struct gdr_conn_desc *out) { return gdr_tcp_describe(comm, out); }

uint64_t gdr_fb_tcp_next_seq(const void *comm) { return ((const struct tcp_comm *)comm)->next_seq; }
