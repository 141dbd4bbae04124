/* A fake CUDA driver (libcuda.so.1) for testing the emulator's CUDA path on CPU.
 *
 * "Device memory" is a PROT_NONE address range with a hidden host shadow: any direct CPU access by the emulator
 * faults, so only the driver calls the emulator is supposed to make (cuMemcpy*Async on its own non-blocking
 * stream, with a context pushed) can move bytes. The checks it makes are counted in fakecu_stats().
 *
 * Contexts: the device's primary context, plus contexts made by cuCtxCreate_v2 ("private"); each thread has its
 * own stack of current contexts, and each stream belongs to the context current when it was made. Memory from
 * fakecu_alloc() is owned by the primary context (cuMemAlloc); memory from fakecu_alloc_vmm() -- or any, with
 * FAKECU_VMM=1 -- belongs to no context (cuMem* / VMM), as the CONTEXT pointer attribute then reports.
 *
 * The context lock, as measured on the H200 machine (cuda_lock_probe.c): fakecu_hold_sync(1) models an
 * application thread inside a synchronous copy that waits behind a kernel (PyTorch's .cpu() / .item() right after
 * a collective). Until fakecu_hold_sync(0), every copy enqueued with the primary context current, or touching
 * memory the primary context owns, blocks; a copy in a private context on VMM memory does not.
 * Pageable host memory (not from cuMemHostAlloc) is counted in st.pageable: the emulator must not use it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define EXPORT __attribute__((visibility("default")))

#include "fakecuda.h"

static struct fakecu_stats st;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char fake_ctx;            /* the primary context */
#define MAXPRIV 4
static char fake_priv[MAXPRIV]; /* contexts from cuCtxCreate_v2 */
static int npriv;
#define MAXS 16
static struct {
	void *ctx;
	int flags;
} fst[MAXS]; /* streams: a CUstream is &fst[i] */
static int nstreams;
static __thread void *ctx_stack[8];
static __thread int depth; /* this thread's current-context stack */
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER; /* the primary context's lock (fakecu_hold_sync) */

static void *current(void)
{
	return depth > 0 ? ctx_stack[depth - 1] : NULL;
}

static int is_ctx(void *c)
{
	if (c == &fake_ctx)
		return 1;
	for (int i = 0; i < npriv; i++)
		if (c == &fake_priv[i])
			return 1;
	return 0;
}
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

EXPORT void fakecu_hold_sync(int on)
{
	if (on)
		pthread_mutex_lock(&sync_mu);
	else
		pthread_mutex_unlock(&sync_mu);
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
	int vmm; /* no owning context (cuMem*) */
} regions[MAXR];

static int region_of(CUdeviceptr p, size_t n)
{
	for (int i = 0; i < MAXR; i++)
		if (regions[i].va && p >= regions[i].va && p + n <= regions[i].va + regions[i].len)
			return i;
	return -1;
}

static char *shadow_of(CUdeviceptr p, size_t n)
{
	int i = region_of(p, n);
	return i < 0 ? NULL : regions[i].shadow + (p - regions[i].va);
}

static int is_vmm(CUdeviceptr p)
{
	const char *v = getenv("FAKECU_VMM");
	int i = region_of(p, 1);
	return i >= 0 && (regions[i].vmm || (v && *v == '1'));
}

static void *alloc_region(size_t len, int vmm)
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
			regions[i].vmm = vmm;
			break;
		}
	pthread_mutex_unlock(&mu);
	return va;
}

/* cuMemAlloc memory: owned by the primary context */
EXPORT void *fakecu_alloc(size_t len)
{
	return alloc_region(len, 0);
}

/* cuMemCreate + cuMemMap memory: owned by no context */
EXPORT void *fakecu_alloc_vmm(size_t len)
{
	return alloc_region(len, 1);
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
	switch (attr) {
	case 1: /* CONTEXT: cuMem*-mapped memory has none */
		*(void **)data = is_vmm(ptr) ? NULL : &fake_ctx;
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

EXPORT CUresult cuDeviceGet(int *dev, int ord)
{
	if (ord != 0)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*dev = 0;
	return 0;
}

/* every attribute 0 (e.g. no DMA-BUF): the plugin's CUDA loader needs the entry point */
EXPORT CUresult cuDeviceGetAttribute(int *value, int attr, int dev)
{
	(void)attr;
	if (dev != 0)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*value = 0;
	return 0;
}

static CUresult push(void *ctx)
{
	if (depth >= 8)
		return 1;
	ctx_stack[depth++] = ctx;
	return 0;
}

/* a new context, made current on this thread (as the real one does) */
EXPORT CUresult cuCtxCreate_v2(void **ctx, unsigned flags, int dev)
{
	(void)flags;
	pthread_mutex_lock(&mu);
	CUresult r = dev != 0 ? 101 : npriv >= MAXPRIV ? 2 : 0;
	if (!r) {
		*ctx = &fake_priv[npriv++];
		st.private_ctxs++;
		st.pushes++; /* balanced by the caller's pop */
		r = push(*ctx);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

EXPORT CUresult cuCtxPushCurrent_v2(void *ctx)
{
	pthread_mutex_lock(&mu);
	if (!is_ctx(ctx))
		st.bad++;
	st.pushes++;
	CUresult r = push(ctx);
	pthread_mutex_unlock(&mu);
	return r;
}

EXPORT CUresult cuCtxPopCurrent_v2(void **ctx)
{
	pthread_mutex_lock(&mu);
	if (depth <= 0)
		st.bad++;
	else
		depth--;
	st.pops++;
	if (ctx)
		*ctx = ctx_stack[depth];
	pthread_mutex_unlock(&mu);
	return 0;
}

EXPORT CUresult cuStreamCreate(void **s, unsigned flags)
{
	pthread_mutex_lock(&mu);
	CUresult r = 0;
	if (depth <= 0 || nstreams >= MAXS) {
		st.bad++; /* a stream belongs to the current context */
		r = 1;
	} else {
		fst[nstreams].ctx = current();
		fst[nstreams].flags = (int)flags;
		*s = &fst[nstreams++];
		st.streams++;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

EXPORT CUresult cuStreamSynchronize(void *s)
{
	pthread_mutex_lock(&mu);
	int ok = 0;
	for (int i = 0; i < nstreams; i++)
		ok |= s == &fst[i];
	if (!ok)
		st.bad++;
	st.syncs++;
	pthread_mutex_unlock(&mu);
	return 0;
}

/* mu held: our own non-blocking stream of the current context */
static int check_copy(void *s)
{
	for (int i = 0; i < nstreams; i++)
		if (s == &fst[i])
			return fst[i].flags == 1 && depth > 0 && fst[i].ctx == current();
	return 0;
}

/* would this enqueue wait for the primary context's lock (see the top of the file)? */
static int needs_primary(CUdeviceptr a, CUdeviceptr b)
{
	pthread_mutex_lock(&mu);
	int r = current() == &fake_ctx || (a && !is_vmm(a)) || (b && !is_vmm(b));
	if (!r)
		st.private_copies++;
	pthread_mutex_unlock(&mu);
	return r;
}

/* one host <-> device copy: counted, checked, blocked by the primary context's lock where the real driver blocks */
static CUresult copy_hd(CUdeviceptr dev, char *host, size_t n, void *s, int to_dev)
{
	pthread_mutex_lock(&mu);
	st.pageable += !is_pinned(host, n);
	pthread_mutex_unlock(&mu);
	int lock = needs_primary(dev, 0);
	if (lock)
		pthread_mutex_lock(&sync_mu);
	pthread_mutex_lock(&mu);
	char *d = shadow_of(dev, n);
	int ok = d && check_copy(s);
	if (ok)
		memcpy(to_dev ? d : host, to_dev ? host : d, n);
	else
		st.bad++;
	if (to_dev)
		st.htod++;
	else
		st.dtoh++;
	pthread_mutex_unlock(&mu);
	if (lock)
		pthread_mutex_unlock(&sync_mu);
	return ok ? 0 : 1;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s)
{
	return copy_hd(dst, (char *)(uintptr_t)src, n, s, 1); /* src is only read */
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s)
{
	return copy_hd(src, dst, n, s, 0);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s)
{
	int lock = needs_primary(dst, src);
	if (lock)
		pthread_mutex_lock(&sync_mu);
	pthread_mutex_lock(&mu);
	char *d = shadow_of(dst, n), *p = shadow_of(src, n);
	int ok = d && p && check_copy(s);
	if (ok)
		memmove(d, p, n);
	else
		st.bad++;
	st.dtod++;
	pthread_mutex_unlock(&mu);
	if (lock)
		pthread_mutex_unlock(&sync_mu);
	return ok ? 0 : 1;
}
