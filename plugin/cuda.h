/* The CUDA driver, dlopened lazily (libcuda.so.1; never linked). Only what the plugin needs: tell host from device
 * pointers, ask a GPU about DMA-BUF support, and copy device memory through pinned host buffers
 * for a connection that carries it over TCP (the RDMA->TCP fallback).
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

/* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of CUDA device ordinal dev: 1/0. Errors when there is no driver or no such
 * device. */
ncclResult_t gdr_cuda_dmabuf_supported(int dev, int *supported);

/* Staging (device memory carried by the TCP transport): the context to copy ptr's memory in, a copy between host and
 * device memory (an async copy on the plugin's own non-blocking stream of that context, then a sync of that stream
 * only: never behind the application's kernels), and pinned host buffers (allocated with that context current).
 * The context: cudaMalloc memory's own; for cuMem* (VMM) memory, which belongs to no context (NCCL's default
 * buffers), a context of the plugin's own on its device, made once: a copy enqueued with the primary context current
 * waits while any application thread sits in a synchronous copy behind a kernel (PyTorch's .item() after a
 * collective; measured on the H200, tests/verbs-emu's cuda_lock_probe), and that kernel may wait for this very
 * copy: a deadlock. Without cuCtxCreate_v2 (or when it fails) the primary context, said once. Errors are WARNed. */
ncclResult_t gdr_cuda_mem_ctx(const void *dptr, void **ctx);
ncclResult_t gdr_cuda_copy(void *ctx, void *dst, const void *src, size_t len, int to_device);
ncclResult_t gdr_cuda_host_alloc(void *ctx, size_t len, void **p);
void gdr_cuda_host_free(void *p);

#endif /* GDRNET_CUDA_H */
