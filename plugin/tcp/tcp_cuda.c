/* TCP transport: device memory, staged through pinned host buffers (tcp.h, "tcp_cuda.c").
 *
 * A TCP comm carries CUDA memory only for the RDMA transport's fallback: NCCL registered its GPU buffers with a
 * device that said CUDA/DMA-BUF, and keeps posting them after the connection moved to TCP. A send copies the
 * message to the slot's pinned buffer first (when it is about to go out, not on every "try again"); a receive
 * lands in the slot's pinned buffer and is copied to the GPU before test() reports it done, so NCCL never reads a
 * buffer the copy has not reached (iflush has nothing left to wait for). */
#include <string.h>

#include "cuda.h"
#include "log.h"
#include "tcp.h"

ncclResult_t gdr_tcp_mr_make(void *data, size_t size, int type, struct tcp_mr *mr) {
  memset(mr, 0, sizeof(*mr));
  mr->data = data;
  mr->size = size;
  mr->type = type;
  if (type != NCCL_PTR_CUDA) return ncclSuccess;
  return gdr_cuda_mem_ctx(data, &mr->cuda_ctx);
}

static ncclResult_t stage_fit(struct tcp_req *r, void *ctx, size_t size) {
  void *p = NULL;
  if (r->stage_cap >= size && r->stage != NULL) return ncclSuccess;
  size_t cap = r->stage_cap ? r->stage_cap : 65536;
  while (cap < size) cap *= 2;
  if (gdr_cuda_host_alloc(ctx, cap, &p) != ncclSuccess) return ncclSystemError;
  gdr_cuda_host_free(r->stage);
  r->stage = p;
  r->stage_cap = cap;
  return ncclSuccess;
}

ncclResult_t gdr_tcp_stage_out(struct tcp_req *r, const struct tcp_mr *mr, const void *data, size_t size, char **host) {
  ncclResult_t res = ncclSuccess;
  GDR_CHECK(stage_fit(r, mr->cuda_ctx, size));
  GDR_CHECK(gdr_cuda_copy(mr->cuda_ctx, r->stage, data, size, 0));
  *host = r->stage;
out:
  return res;
}

ncclResult_t gdr_tcp_stage_in(struct tcp_req *r, const struct tcp_mr *mr, void *data, size_t size, char **host) {
  ncclResult_t res = ncclSuccess;
  GDR_CHECK(stage_fit(r, mr->cuda_ctx, size));
  r->dev = data;
  r->cuda_ctx = mr->cuda_ctx;
  *host = r->stage;
out:
  return res;
}

ncclResult_t gdr_tcp_stage_done(struct tcp_req *r, size_t bytes) {
  void *dev = r->dev;
  if (dev == NULL) return ncclSuccess;
  r->dev = NULL;
  return gdr_cuda_copy(r->cuda_ctx, dev, r->stage, bytes, 1);
}

void gdr_tcp_stage_free(struct tcp_comm *c) {
  for (int i = 0; i < TCP_NREQ; i++) {
    gdr_cuda_host_free(c->req[i].stage);
    c->req[i].stage = NULL;
    c->req[i].stage_cap = 0;
  }
}
