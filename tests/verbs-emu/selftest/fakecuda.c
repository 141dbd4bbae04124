/* A fake CUDA driver (libcuda.so.1) for testing the emulator's CUDA path on CPU.
 *
 * "Device memory" is a PROT_NONE address range with a hidden host shadow: any direct CPU access by the emulator
 * faults, so only the driver calls the emulator is supposed to make (cuMemcpy*Async on its own non-blocking
 * stream, with a context pushed) can move bytes. The checks it makes are counted in fakecu_stats().
 *
 * Pageable host memory: like the real driver, a copy between device memory and host memory that was not
 * allocated with cuMemHostAlloc goes through the driver's pageable staging path, one copy at a time per process
 * (pageable_mu). fakecu_hold_pageable(1) models an application thread inside a synchronous pageable copy that
 * waits for a kernel (PyTorch's .cpu() / .item() right after a collective): it holds that path until
 * fakecu_hold_pageable(0). A copy the emulator makes from pageable memory then blocks, as it does on the GPU. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define EXPORT __attribute__((visibility("default")))

struct fakecu_stats {
	int htod, dtoh, dtod, syncs, streams, pushes, pops, bad, pageable, pinned_allocs;
};

static struct fakecu_stats st;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char fake_ctx, fake_stream;
static int stream_flags = -1;
static int depth;
static pthread_mutex_t pageable_mu = PTHREAD_MUTEX_INITIALIZER;
#define MAXP 64
static struct {
	uintptr_t p;
	size_t len;
} pinned[MAXP];

static int is_pinned(const void *h, size_t n)
{
	uintptr_t p = (uintptr_t)h;
	for (int i = 0; i < MAXP; i++)
		if (pinned[i].p && p >= pinned[i].p && p + n <= pinned[i].p + pinned[i].len)
			return 1;
	return 0;
}

EXPORT void fakecu_hold_pageable(int on)
{
	if (on)
		pthread_mutex_lock(&pageable_mu);
	else
		pthread_mutex_unlock(&pageable_mu);
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags)
{
	(void)flags;
	void *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
	if (!p)
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	pthread_mutex_lock(&mu);
	if (depth <= 0)
		st.bad++; /* needs a current context */
	int i = 0;
	while (i < MAXP && pinned[i].p)
		i++;
	if (i < MAXP) {
		pinned[i].p = (uintptr_t)p;
		pinned[i].len = n;
	}
	st.pinned_allocs++;
	pthread_mutex_unlock(&mu);
	*pp = p;
	return 0;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXP; i++)
		if (pinned[i].p == (uintptr_t)p)
			pinned[i].p = 0;
	pthread_mutex_unlock(&mu);
	free(p);
	return 0;
}

#define MAXR 16
static struct {
	uintptr_t va;
	size_t len;
	char *shadow;
} regions[MAXR];

static char *shadow_of(CUdeviceptr p, size_t n)
{
	for (int i = 0; i < MAXR; i++)
		if (regions[i].va && p >= regions[i].va && p + n <= regions[i].va + regions[i].len)
			return regions[i].shadow + (p - regions[i].va);
	return NULL;
}

EXPORT void *fakecu_alloc(size_t len)
{
	void *va = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED)
		return NULL;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXR; i++)
		if (!regions[i].va) {
			regions[i].va = (uintptr_t)va;
			regions[i].len = len;
			regions[i].shadow = calloc(1, len);
			break;
		}
	pthread_mutex_unlock(&mu);
	return va;
}

EXPORT int fakecu_poke(void *va, const void *src, size_t n)
{
	char *s = shadow_of((uintptr_t)va, n);
	if (!s)
		return -1;
	memcpy(s, src, n);
	return 0;
}

EXPORT int fakecu_peek(void *dst, const void *va, size_t n)
{
	char *s = shadow_of((uintptr_t)va, n);
	if (!s)
		return -1;
	memcpy(dst, s, n);
	return 0;
}

EXPORT void fakecu_get_stats(struct fakecu_stats *out)
{
	pthread_mutex_lock(&mu);
	*out = st;
	pthread_mutex_unlock(&mu);
}

EXPORT CUresult cuInit(unsigned flags)
{
	(void)flags;
	return 0;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr)
{
	if (!shadow_of(ptr, 1))
		return 1; /* CUDA_ERROR_INVALID_VALUE: not ours (host memory) */
	const char *vmm = getenv("FAKECU_VMM");
	switch (attr) {
	case 1: /* CONTEXT: cuMem*-mapped memory has none */
		*(void **)data = vmm && *vmm == '1' ? NULL : &fake_ctx;
		return 0;
	case 2: /* MEMORY_TYPE */
		*(unsigned *)data = 2;
		return 0;
	case 9: /* DEVICE_ORDINAL */
		*(int *)data = 0;
		return 0;
	default:
		return 1;
	}
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	if (dev != 0)
		return 101;
	*ctx = &fake_ctx;
	return 0;
}

EXPORT CUresult cuCtxPushCurrent_v2(void *ctx)
{
	pthread_mutex_lock(&mu);
	if (ctx != &fake_ctx)
		st.bad++;
	depth++;
	st.pushes++;
	pthread_mutex_unlock(&mu);
	return 0;
}

EXPORT CUresult cuCtxPopCurrent_v2(void **ctx)
{
	pthread_mutex_lock(&mu);
	if (depth <= 0)
		st.bad++;
	depth--;
	st.pops++;
	if (ctx)
		*ctx = &fake_ctx;
	pthread_mutex_unlock(&mu);
	return 0;
}

EXPORT CUresult cuStreamCreate(void **s, unsigned flags)
{
	pthread_mutex_lock(&mu);
	if (depth <= 0)
		st.bad++; /* a stream belongs to the current context */
	stream_flags = (int)flags;
	st.streams++;
	pthread_mutex_unlock(&mu);
	*s = &fake_stream;
	return 0;
}

EXPORT CUresult cuStreamSynchronize(void *s)
{
	pthread_mutex_lock(&mu);
	if (s != &fake_stream)
		st.bad++;
	st.syncs++;
	pthread_mutex_unlock(&mu);
	return 0;
}

static int check_copy(void *s)
{
	/* our own non-blocking stream, with a context current */
	return s == &fake_stream && stream_flags == 1 && depth > 0;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s)
{
	pthread_mutex_lock(&mu);
	int pageable = !is_pinned(src, n);
	st.pageable += pageable;
	pthread_mutex_unlock(&mu);
	if (pageable)
		pthread_mutex_lock(&pageable_mu);
	pthread_mutex_lock(&mu);
	char *d = shadow_of(dst, n);
	int ok = d && check_copy(s);
	if (ok)
		memcpy(d, src, n);
	else
		st.bad++;
	st.htod++;
	pthread_mutex_unlock(&mu);
	if (pageable)
		pthread_mutex_unlock(&pageable_mu);
	return ok ? 0 : 1;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s)
{
	pthread_mutex_lock(&mu);
	int pageable = !is_pinned(dst, n);
	st.pageable += pageable;
	pthread_mutex_unlock(&mu);
	if (pageable)
		pthread_mutex_lock(&pageable_mu);
	pthread_mutex_lock(&mu);
	char *p = shadow_of(src, n);
	int ok = p && check_copy(s);
	if (ok)
		memcpy(dst, p, n);
	else
		st.bad++;
	st.dtoh++;
	pthread_mutex_unlock(&mu);
	if (pageable)
		pthread_mutex_unlock(&pageable_mu);
	return ok ? 0 : 1;
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s)
{
	pthread_mutex_lock(&mu);
	char *d = shadow_of(dst, n), *p = shadow_of(src, n);
	int ok = d && p && check_copy(s);
	if (ok)
		memmove(d, p, n);
	else
		st.bad++;
	st.dtod++;
	pthread_mutex_unlock(&mu);
	return ok ? 0 : 1;
}
