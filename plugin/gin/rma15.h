/* ncclRma v15's entry points (rma_v15.c) that the v16 table shares: v16 has the same signatures and only adds
 * getRmaProperties (rma_v16.c). Internal: hidden like every plugin symbol but the tables. */
#ifndef GDRNET_GIN_RMA15_H
#define GDRNET_GIN_RMA15_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gdrnet/rma.h"

ncclResult_t gdr_rma15_props(int dev, ncclNetProperties_v12_t *props);
ncclResult_t gdr_rma15_connect(void *ctx, void *handles[], int nranks, int rank, void *listen_comm, void **coll_comm);
ncclResult_t gdr_rma15_create_context(void *coll_comm, ncclRmaConfig_v15_t *config, void **rma_ctx);
ncclResult_t gdr_rma15_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags, void **mhandle);
ncclResult_t gdr_rma15_reg_dmabuf(void *coll_comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                  uint64_t flags, void **mhandle);
ncclResult_t gdr_rma15_iput(void *rma_ctx, int context, uint64_t src_off, void *src_mh, size_t size, uint64_t dst_off,
                            void *dst_mh, uint32_t rank, uint32_t opt_flags, void **request);
ncclResult_t gdr_rma15_iput_signal(void *rma_ctx, int context, uint64_t src_off, void *src_mh, size_t size,
                                   uint64_t dst_off, void *dst_mh, uint32_t rank, uint64_t sig_off, void *sig_mh,
                                   uint64_t sig_val, uint32_t sig_op, bool strong, uint32_t opt_flags, void **request);
ncclResult_t gdr_rma15_iget(void *rma_ctx, int context, uint64_t remote_off, void *remote_mh, size_t size,
                            uint64_t local_off, void *local_mh, uint32_t rank, uint32_t opt_flags, void **request);

#endif /* GDRNET_GIN_RMA15_H */
