/* The CUDA driver, dlopened lazily (libcuda.so.1; never linked). Only what the plugin needs: tell host from device
 * pointers, and ask a GPU about DMA-BUF and GPUDirect RDMA support.
 *
 * gdr_cuda_load() is cheap after the first call and thread-safe. Without a driver (CPU hosts) it fails with a
 * reason and every query says "host"/"unsupported". */
#ifndef GDRNET_CUDA_H
#define GDRNET_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gdrnet/net_v8.h"

/* ncclSuccess if libcuda.so.1 is loaded and cuInit(0) succeeded; else ncclSystemError and why (if non-NULL). */
ncclResult_t gdr_cuda_load(char *why, size_t whylen);

enum gdr_mem_kind { GDR_MEM_HOST = 0, GDR_MEM_CUDA = 1 };
/* Where ptr lives, per CU_POINTER_ATTRIBUTE_MEMORY_TYPE. Without a driver, or for memory CUDA does not know
 * (malloc), GDR_MEM_HOST. Pinned host memory (cudaHostAlloc) is GDR_MEM_HOST. *cuda_dev (may be NULL) gets the
 * device ordinal for device memory, else -1. Prefer NCCL's own type argument where it has one: NCCL's cuMem host
 * allocations (NCCL_CUMEM_HOST_ENABLE) are not guaranteed to answer "host" here. */
ncclResult_t gdr_cuda_ptr_kind(const void *ptr, enum gdr_mem_kind *kind, int *cuda_dev);

/* Device attributes of CUDA device ordinal dev: 1/0. Errors when there is no driver or no such device. */
ncclResult_t gdr_cuda_dmabuf_supported(int dev, int *supported);
ncclResult_t gdr_cuda_gdr_supported(int dev, int *supported);

/* DMA-BUF fd for [ptr, ptr + size) of device memory (cuMemGetHandleForAddressRange). The caller closes fd. */
ncclResult_t gdr_cuda_dmabuf_fd(void *ptr, size_t size, int *fd);

#endif /* GDRNET_CUDA_H */
