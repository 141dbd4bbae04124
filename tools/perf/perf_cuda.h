/* CUDA buffers for gdrnet-perf, through libcuda.so.1 opened with dlopen only: this file compiles
 * and the tool runs on machines without CUDA (--cuda then fails with a clear message). */
#ifndef GDRNET_PERF_CUDA_H
#define GDRNET_PERF_CUDA_H

#include <stddef.h>
#include <stdint.h>

/* Loads libcuda.so.1, initialises the driver, retains device dev's primary context and makes it
 * current on this thread. Returns 0 or -1 with a reason. */
int pc_open(int dev, char *err, size_t errlen);
int pc_dmabuf_supported(void); /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of the device (0 if unknown) */
void *pc_alloc(size_t size, char *err, size_t errlen); /* device memory, NULL on error */
void pc_free(void *dptr);
int pc_htod(void *dst, const void *src, size_t len);
int pc_dtoh(void *dst, const void *src, size_t len);
/* cuMemGetHandleForAddressRange(&fd, ptr, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), as NCCL. */
int pc_dmabuf_fd(void *dptr, size_t size, int *fd, char *err, size_t errlen);
void pc_close(void);

#endif
