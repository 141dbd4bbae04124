/* verbs emulator: CUDA device memory through the driver API, dlopened (never linked).
 *
 * The driver is used only when libcuda.so.1 is already loaded in the process (a process cannot hold
 * device pointers otherwise), or when VEMU_CUDA=1 asks to load it. Copies run in the agent thread (a context pushed
 * for the copy and popped after) on the emulator's own CU_STREAM_NON_BLOCKING stream (one per context) followed by
 * a synchronize of that stream only: a synchronous or legacy-default-stream copy could wait behind the
 * application's kernels (NCCL's kernels wait for the network, which waits for the agent: a deadlock).
 *
 * Which context. Measured on the H200 machine (driver 580, selftest/cuda_lock_probe.c): while one thread of a
 * process is inside a *synchronous* copy (cuMemcpyDtoH/HtoD, pageable or pinned) that waits behind a running
 * kernel, every enqueue into that context from any other thread blocks in the driver -- cuMemcpy*Async on any
 * stream, cuLaunchKernel, cuMemHostRegister -- until the kernel ends; so does an enqueue from a second context
 * that touches memory owned by the first (cuMemAlloc memory). An enqueue from a second context onto memory it can
 * reach by itself does not block, and that includes cuMem* (VMM) allocations: they belong to no context, only to
 * the device. That is PyTorch's pattern (the main thread's .item()/.cpu() waits for an NCCL kernel, which waits for
 * data the agent must place) and was the "transport retry counter exceeded" of DDP's first broadcast. With
 * VEMU_CUDA_PRIVATE_CTX=1, device memory without an owning context (cuMem*, which is how NCCL allocates its
 * buffers by default) is copied in a context of the emulator's own, created per device at the first such
 * registration. It is not the default because it is slow: a copy in another context runs only when the GPU
 * time-slices to it, and NCCL's kernels keep the primary context busy -- each placement then waits a few
 * milliseconds (measured on the H200: every small all_reduce took 4.1 ms instead of 0.08 ms). cuMemAlloc memory
 * can only be copied in its owning context and remains exposed to the lock either way (README, "Limits").
 *
 * Host memory of these copies is always pinned (cuMemHostAlloc, portable): the agent copies through one pinned
 * bounce buffer (BOUNCE bytes per driver copy), allocated with the stream when the first device MR is registered
 * (on the application's thread, outside any collective), not in the agent's critical path. */
#include "vemu.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef int CUdevice;

#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2
#define CU_STREAM_NON_BLOCKING 1

static struct {
	int tried, ok;
	void *h;
	CUresult (*cuInit)(unsigned);
	CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
	CUresult (*cuCtxPushCurrent)(CUcontext);
	CUresult (*cuCtxPopCurrent)(CUcontext *);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice);
} cu;

#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define BOUNCE (4u << 20)
static char *bounce; /* pinned, BOUNCE bytes, never freed (the driver may be gone at exit) */
static int bounce_off; /* no bounce buffer: VEMU_CUDA_PAGEABLE=1, or cuMemHostAlloc failed */

static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;

#define MAX_CTX 64
static struct {
	CUcontext ctx;
	CUstream stream;
} streams[MAX_CTX];

static int load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	const char *force = getenv("VEMU_CUDA");
	if (!h && force && !strcmp(force, "1"))
		h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h)
		return 0;
#define SYM(field, name)                                                                                         \
	do {                                                                                                     \
		*(void **)&cu.field = dlsym(h, name);                                                            \
		if (!cu.field)                                                                                   \
			return 0;                                                                                \
	} while (0)
	SYM(cuInit, "cuInit");
	SYM(cuPointerGetAttribute, "cuPointerGetAttribute");
	SYM(cuCtxPushCurrent, "cuCtxPushCurrent_v2");
	SYM(cuCtxPopCurrent, "cuCtxPopCurrent_v2");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuStreamCreate, "cuStreamCreate");
	SYM(cuStreamSynchronize, "cuStreamSynchronize");
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
#undef SYM
	*(void **)&cu.cuMemHostAlloc = dlsym(h, "cuMemHostAlloc"); /* optional: without it, pageable copies */
	*(void **)&cu.cuDeviceGet = dlsym(h, "cuDeviceGet");        /* optional: without them, no private context */
	*(void **)&cu.cuCtxCreate = dlsym(h, "cuCtxCreate_v2");
	if (cu.cuInit(0))
		return 0;
	cu.h = h;
	return 1;
}

int vemu_cuda_available(void)
{
	pthread_mutex_lock(&cmu);
	if (!cu.ok) {
		/* retry until the application has loaded the driver */
		cu.ok = load();
		cu.tried = 1;
	}
	int ok = cu.ok;
	pthread_mutex_unlock(&cmu);
	return ok;
}

#define MAX_DEV 16
static CUcontext priv[MAX_DEV]; /* the emulator's own context per device ordinal (cmu), never destroyed */
static int priv_failed[MAX_DEV];

/* the emulator's own context on device ord, created on first use (application thread, at registration) */
static CUcontext private_ctx(int ord)
{
	const char *e = getenv("VEMU_CUDA_PRIVATE_CTX");
	if (!e || strcmp(e, "1") || ord < 0 || ord >= MAX_DEV || !cu.cuDeviceGet || !cu.cuCtxCreate)
		return NULL;
	pthread_mutex_lock(&cmu);
	CUcontext c = priv[ord];
	CUdevice dev;
	if (!c && !priv_failed[ord]) {
		CUcontext mine = NULL, old;
		if (!cu.cuDeviceGet(&dev, ord) && !cu.cuCtxCreate(&mine, 0, dev) && mine) {
			cu.cuCtxPopCurrent(&old); /* cuCtxCreate made it current on this thread: give the thread its own back */
			priv[ord] = c = mine;
		} else {
			priv_failed[ord] = 1;
			fprintf(stderr, "vemu: could not create a private CUDA context on device %d: cuMem* memory is copied "
					"in the primary context (can block behind the application's synchronous copies)\n",
				ord);
		}
	}
	pthread_mutex_unlock(&cmu);
	return c;
}

int vemu_cuda_is_dev_ptr(uint64_t ptr, void **ctx)
{
	if (!ptr)
		return 0;
	unsigned int type = 0;
	if (cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) || type != CU_MEMORYTYPE_DEVICE)
		return 0;
	CUcontext c = NULL;
	if (cu.cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, ptr) || !c) {
		/* cuMem* (VMM) allocations have no owning context: the emulator's own context on that device, else
		 * the device's primary context */
		int ord = -1;
		if (cu.cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) || ord < 0)
			return 0;
		c = private_ctx(ord);
		if (!c && cu.cuDevicePrimaryCtxRetain(&c, ord))
			return 0;
	}
	*ctx = c;
	return 1;
}

static CUstream stream_for(CUcontext ctx)
{
	for (int i = 0; i < MAX_CTX; i++)
		if (streams[i].ctx == ctx)
			return streams[i].stream;
	for (int i = 0; i < MAX_CTX; i++)
		if (!streams[i].ctx) {
			CUstream s = NULL;
			if (cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
				return NULL;
			streams[i].ctx = ctx;
			streams[i].stream = s;
			return s;
		}
	return NULL;
}

/* make ctx current for this copy and restore the thread's own context afterwards (push/pop) */
static CUstream enter(void *ctx)
{
	if (cu.cuCtxPushCurrent(ctx))
		return NULL;
	CUstream s = stream_for(ctx);
	if (!s) {
		CUcontext old;
		cu.cuCtxPopCurrent(&old);
	}
	return s;
}

static void leave(void)
{
	CUcontext old;
	cu.cuCtxPopCurrent(&old);
}

/* cmu held, ctx current: the pinned bounce buffer (portable: usable from every context) */
static void bounce_alloc(void)
{
	if (bounce || bounce_off)
		return;
	const char *pg = getenv("VEMU_CUDA_PAGEABLE"); /* the old behaviour, as a control on the GPU machine */
	if (pg && !strcmp(pg, "1")) {
		bounce_off = 1;
		return;
	}
	void *p = NULL;
	if (cu.cuMemHostAlloc && !cu.cuMemHostAlloc(&p, BOUNCE, CU_MEMHOSTALLOC_PORTABLE) && p) {
		bounce = p;
		return;
	}
	bounce_off = 1;
	fprintf(stderr, "vemu: cuMemHostAlloc failed or missing: device copies use pageable memory (they can "
				"block behind the application's own pageable copies)\n");
}

/* a device MR was registered (application thread): create the context's stream and the bounce buffer now */
void vemu_cuda_prepare(void *ctx)
{
	pthread_mutex_lock(&cmu);
	CUstream s = enter(ctx);
	if (s) {
		bounce_alloc();
		leave();
	}
	pthread_mutex_unlock(&cmu);
}

/* host <-> device through the pinned bounce buffer, BOUNCE bytes per driver copy (straight from/to host memory when
 * there is none); to_dev: host -> device */
static int copy_hd(void *ctx, uint64_t dev, char *host, size_t n, int to_dev)
{
	pthread_mutex_lock(&cmu);
	CUstream s = enter(ctx);
	int rc = !s;
	if (s) {
		bounce_alloc();
		if (!bounce)
			rc = (to_dev ? cu.cuMemcpyHtoDAsync(dev, host, n, s) : cu.cuMemcpyDtoHAsync(host, dev, n, s)) ||
			     cu.cuStreamSynchronize(s);
		for (size_t o = 0; bounce && !rc && o < n; o += BOUNCE) {
			size_t k = n - o < BOUNCE ? n - o : BOUNCE;
			if (to_dev)
				memcpy(bounce, host + o, k);
			rc = (to_dev ? cu.cuMemcpyHtoDAsync(dev + o, bounce, k, s) :
				       cu.cuMemcpyDtoHAsync(bounce, dev + o, k, s)) ||
			     cu.cuStreamSynchronize(s);
			if (!rc && !to_dev)
				memcpy(host + o, bounce, k);
		}
		leave();
	}
	pthread_mutex_unlock(&cmu);
	if (rc)
		fprintf(stderr, "vemu: CUDA %s copy of %zu bytes failed\n", to_dev ? "host-to-device" : "device-to-host",
			n);
	return rc ? -1 : 0;
}

int vemu_cuda_htod(void *ctx, uint64_t dst, const void *src, size_t n)
{
	return copy_hd(ctx, dst, (char *)(uintptr_t)src, n, 1); /* src is only read */
}

int vemu_cuda_dtoh(void *ctx, void *dst, uint64_t src, size_t n)
{
	return copy_hd(ctx, src, dst, n, 0);
}

int vemu_cuda_dtod(void *ctx, uint64_t dst, uint64_t src, size_t n)
{
	pthread_mutex_lock(&cmu);
	CUstream s = enter(ctx);
	int rc = !s || cu.cuMemcpyDtoDAsync(dst, src, n, s) || cu.cuStreamSynchronize(s);
	if (s)
		leave();
	pthread_mutex_unlock(&cmu);
	return rc ? -1 : 0;
}

/* An RDMA atomic on device memory: the 8-byte word read, changed and written back with two synchronous copies on the
 * emulator's stream, both under cmu, the lock every device copy of this process takes. So it is atomic against every
 * other placement and atomic this process's emulator makes (all of them: the target's agent places them), but not
 * against a kernel's own atomics on that word, nor another process mapping the same memory (what PCIe atomics on a
 * real HCA are). *old gets the value before; cas: compare-and-swap, else fetch-and-add. */
int vemu_cuda_atomic(void *ctx, uint64_t addr, int cas, uint64_t cmp_add, uint64_t swap, uint64_t *old)
{
	pthread_mutex_lock(&cmu);
	CUstream s = enter(ctx);
	int rc = !s;
	if (s) {
		bounce_alloc();
		uint64_t local = 0, *w = bounce ? (uint64_t *)bounce : &local;
		rc = cu.cuMemcpyDtoHAsync(w, addr, 8, s) || cu.cuStreamSynchronize(s);
		if (!rc) {
			*old = *w;
			uint64_t nv = cas ? (*w == cmp_add ? swap : *w) : *w + cmp_add;
			if (nv != *old) {
				*w = nv;
				rc = cu.cuMemcpyHtoDAsync(addr, w, 8, s) || cu.cuStreamSynchronize(s);
			}
		}
		leave();
	}
	pthread_mutex_unlock(&cmu);
	if (rc)
		fprintf(stderr, "vemu: CUDA atomic on 0x%llx failed\n", (unsigned long long)addr);
	return rc ? -1 : 0;
}
