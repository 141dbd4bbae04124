/* Registration and the data path. isend/irecv/iflush/test run on NCCL's progress thread, one comm at a time per
 * thread: no lock here; the request pool belongs to the comm. */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "log.h"

static int is_data_comm(const struct gdr_comm *c) {
  return c != NULL && (c->magic == GDR_COMM_SEND || c->magic == GDR_COMM_RECV);
}

ncclResult_t gdr_core_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = comm;
  struct gdr_mr *mr = NULL;

  *mhandle = NULL;
  if (!is_data_comm(c)) {
    GDR_WARN("regMr: %p is not a send/recv comm of this plugin", comm);
    res = ncclInternalError;
    goto out;
  }
  mr = calloc(1, sizeof(*mr));
  if (mr == NULL) {
    GDR_WARN("regMr: out of memory");
    res = ncclSystemError;
    goto out;
  }
  GDR_CHECK(c->tp->reg_mr(c->tcomm, data, size, type, &mr->tmr));
  mr->magic = GDR_MR_MAGIC;
  mr->tp = c->tp;
  mr->data = data;
  mr->size = size;
  mr->type = type;
  *mhandle = mr;
  mr = NULL;
out:
  free(mr);
  return res;
}

ncclResult_t gdr_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                    void **mhandle) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = comm;
  struct gdr_mr *mr = NULL;

  *mhandle = NULL;
  if (!is_data_comm(c)) {
    GDR_WARN("regMrDmaBuf: %p is not a send/recv comm of this plugin", comm);
    res = ncclInternalError;
    goto out;
  }
  if (c->tp->reg_mr_dmabuf == NULL) {
    /* Only reached if NCCL calls it without NCCL_PTR_DMABUF in ptrSupport, or for host memory. */
    if (type == NCCL_PTR_HOST) return gdr_core_reg_mr(comm, data, size, type, mhandle);
    GDR_WARN("regMrDmaBuf: the %s transport does not take DMA-BUF registrations", c->tp->name);
    res = ncclInvalidUsage;
    goto out;
  }
  mr = calloc(1, sizeof(*mr));
  if (mr == NULL) {
    GDR_WARN("regMrDmaBuf: out of memory");
    res = ncclSystemError;
    goto out;
  }
  GDR_CHECK(c->tp->reg_mr_dmabuf(c->tcomm, data, size, type, offset, fd, &mr->tmr));
  mr->magic = GDR_MR_MAGIC;
  mr->tp = c->tp;
  mr->data = data;
  mr->size = size;
  mr->type = type;
  *mhandle = mr;
  mr = NULL;
out:
  free(mr);
  return res;
}

ncclResult_t gdr_core_dereg_mr(void *comm, void *mhandle) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = comm;
  struct gdr_mr *mr = mhandle;

  if (mr == NULL) return ncclSuccess;
  if (!is_data_comm(c) || mr->magic != GDR_MR_MAGIC) {
    GDR_WARN("deregMr: comm %p / mhandle %p are not this plugin's", comm, mhandle);
    res = ncclInternalError;
    goto out;
  }
  res = mr->tp->dereg_mr(c->tcomm, mr->tmr);
  mr->magic = 0;
  free(mr);
out:
  return res;
}

static void *tmr_of(void *mhandle) {
  struct gdr_mr *mr = mhandle;
  return mr != NULL ? mr->tmr : NULL;
}

ncclResult_t gdr_core_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = send_comm;
  struct gdr_request *r = NULL;
  void *treq = NULL;

  *request = NULL;
  if (c == NULL || c->magic != GDR_COMM_SEND) {
    GDR_WARN("isend: %p is not a send comm of this plugin", send_comm);
    return ncclInternalError;
  }
  r = gdr_pool_get(&c->reqs);
  if (r == NULL) return ncclSuccess; /* NCCL holds too many: try again later */
  GDR_CHECK(c->tp->isend(c->tcomm, data, size, tag, tmr_of(mhandle), &treq));
  if (treq == NULL) goto out;
  r->comm = c;
  r->treq = treq;
  r->magic = GDR_REQ_MAGIC;
  r->kind = GDR_REQ_SEND;
  r->n = 1;
  *request = r;
  r = NULL;
out:
  if (r != NULL) gdr_pool_put(&c->reqs, r);
  return res;
}

ncclResult_t gdr_core_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **request) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = recv_comm;
  struct gdr_request *r = NULL;
  void *tmrs[GDR_MAX_RECVS];
  void *treq = NULL;

  *request = NULL;
  if (c == NULL || c->magic != GDR_COMM_RECV) {
    GDR_WARN("irecv: %p is not a recv comm of this plugin", recv_comm);
    return ncclInternalError;
  }
  if (n < 1 || n > c->max_recvs) {
    GDR_WARN("irecv: %d receives in one group, this device takes 1..%d", n, c->max_recvs);
    return ncclInternalError;
  }
  r = gdr_pool_get(&c->reqs);
  if (r == NULL) return ncclSuccess;
  for (int i = 0; i < n; i++) tmrs[i] = mhandles ? tmr_of(mhandles[i]) : NULL;
  GDR_CHECK(c->tp->irecv(c->tcomm, n, data, sizes, tags, tmrs, &treq));
  if (treq == NULL) goto out;
  r->comm = c;
  r->treq = treq;
  r->magic = GDR_REQ_MAGIC;
  r->kind = GDR_REQ_RECV;
  r->n = n;
  *request = r;
  r = NULL;
out:
  if (r != NULL) gdr_pool_put(&c->reqs, r);
  return res;
}

ncclResult_t gdr_core_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) {
  ncclResult_t res = ncclSuccess;
  struct gdr_comm *c = recv_comm;
  struct gdr_request *r = NULL;
  void *tmrs[GDR_MAX_RECVS];
  void *treq = NULL;

  *request = NULL;
  if (c == NULL || c->magic != GDR_COMM_RECV) {
    GDR_WARN("iflush: %p is not a recv comm of this plugin", recv_comm);
    return ncclInternalError;
  }
  if (n < 1 || n > c->max_recvs) {
    GDR_WARN("iflush: %d buffers in one group, this device takes 1..%d", n, c->max_recvs);
    return ncclInternalError;
  }
  if (c->tp->iflush == NULL) return ncclSuccess; /* nothing to wait for */
  r = gdr_pool_get(&c->reqs);
  if (r == NULL) {
    GDR_WARN("iflush: more than %d requests outstanding on one comm", c->reqs.cap);
    return ncclInternalError;
  }
  for (int i = 0; i < n; i++) tmrs[i] = mhandles ? tmr_of(mhandles[i]) : NULL;
  GDR_CHECK(c->tp->iflush(c->tcomm, n, data, sizes, tmrs, &treq));
  if (treq == NULL) goto out; /* nothing to wait for */
  r->comm = c;
  r->treq = treq;
  r->magic = GDR_REQ_MAGIC;
  r->kind = GDR_REQ_FLUSH;
  r->n = 0;
  *request = r;
  r = NULL;
out:
  if (r != NULL) gdr_pool_put(&c->reqs, r);
  return res;
}

ncclResult_t gdr_core_test(void *request, int *done, size_t *sizes, int *n) {
  ncclResult_t res = ncclSuccess;
  struct gdr_request *r = request;
  struct gdr_comm *c;
  size_t tsizes[GDR_MAX_RECVS];

  *done = 0;
  if (n) *n = 0;
  if (r == NULL || r->magic != GDR_REQ_MAGIC || r->comm == NULL || gdr_pool_index(&r->comm->reqs, r) < 0) {
    GDR_WARN("test: %p is not an outstanding request of this plugin", request);
    return ncclInternalError;
  }
  c = r->comm;
  GDR_CHECK(c->tp->test(r->treq, done, sizes ? tsizes : NULL));
  if (*done) {
    int k = r->kind == GDR_REQ_FLUSH ? 0 : r->n;
    if (sizes) memcpy(sizes, tsizes, (size_t)k * sizeof(size_t));
    if (n) *n = k;
    r->magic = 0;
    gdr_pool_put(&c->reqs, r);
  }
out:
  return res;
}
