/* The emulator's CUDA path against the real driver (GPU machine; exits 77 = skipped where libcuda.so.1 cannot
 * be loaded). Device memory from cuMemAlloc: WRITE host->device, device->host, READ, 64 MiB device->device with
 * WRITE_WITH_IMM (GB/s printed), a DMA-BUF registration from cuMemGetHandleForAddressRange, and the deadlock
 * case: an RDMA write into device memory completes while a kernel spins on the legacy default stream waiting
 * for the host (as NCCL's kernels wait for the network), and the same into cuMem* (VMM) memory -- how NCCL
 * allocates its buffers -- while another thread is inside a synchronous device-to-host copy that waits behind
 * that kernel (PyTorch's .cpu()/.item() after a collective: it holds the context's lock, which blocks every
 * enqueue into that context; the emulator copies VMM memory in a context of its own). cuMemAlloc memory in that
 * situation is a known limit (README). With VEMU_GDR_LAZY=1 device writes must stay invisible until the flush. */
#include "vt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;

static struct {
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDeviceGet)(int *, int);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
	CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				   CUstream, void **, void **);
	CUresult (*cuMemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);
	CUresult (*cuMemCreate)(unsigned long long *, size_t, const void *, unsigned long long);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const void *, size_t);
} cu;

#define CU(x)                                                                                                    \
	do {                                                                                                     \
		CUresult _r = (x);                                                                               \
		if (_r) {                                                                                        \
			fprintf(stderr, "FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #x, _r);                    \
			exit(1);                                                                                 \
		}                                                                                                \
	} while (0)

static const char spin_ptx[] = ".version 7.0\n"
			       ".target sm_70\n"
			       ".address_size 64\n"
			       ".visible .entry spin(.param .u64 flag)\n"
			       "{\n"
			       "  .reg .u64 %rd<3>;\n"
			       "  .reg .u32 %r<2>;\n"
			       "  .reg .pred %p<2>;\n"
			       "  ld.param.u64 %rd1, [flag];\n"
			       "  cvta.to.global.u64 %rd2, %rd1;\n"
			       "LOOP:\n"
			       "  ld.volatile.global.u32 %r1, [%rd2];\n"
			       "  setp.eq.u32 %p1, %r1, 0;\n"
			       "  @%p1 bra LOOP;\n"
			       "  ret;\n"
			       "}\n";

#define SZ (64u << 20)
static struct vt_dev d;

static void one(struct ibv_qp *qp, int op, void *buf, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;
	CHECK_EQ(vt_post_write(qp, op, buf, len, lkey, raddr, rkey, 1, IBV_SEND_SIGNALED, 0), 0);
	vt_wait(&d, d.cq, &wc, 1, 30000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static CUcontext copier_ctx;
static CUdeviceptr copier_src;
static char *copier_dst; /* pageable (malloc) */
static volatile int copier_done;
static void *copier(void *arg)
{
	(void)arg;
	CU(cu.cuCtxSetCurrent(copier_ctx));
	CU(cu.cuMemcpyDtoH(copier_dst, copier_src, 1 << 20)); /* waits for the spinning kernel (legacy stream) */
	copier_done = 1;
	return NULL;
}

/* 4 MiB of cuMemCreate + cuMemMap memory on device 0, as NCCL allocates its buffers (no owning context) */
static CUdeviceptr vmm_alloc(size_t len)
{
	struct {
		int type, handle_types;
		struct {
			int type, id;
		} loc;
		void *win32;
		unsigned char flags[8];
	} prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = 1;     /* CU_MEM_ALLOCATION_TYPE_PINNED */
	prop.loc.type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
	struct {
		struct {
			int type, id;
		} loc;
		int flags;
	} acc = { { 1, 0 }, 3 /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */ };
	unsigned long long hnd;
	CUdeviceptr p;
	CU(cu.cuMemCreate(&hnd, len, &prop, 0));
	CU(cu.cuMemAddressReserve(&p, len, 0, 0, 0));
	CU(cu.cuMemMap(p, len, 0, hnd, 0));
	CU(cu.cuMemSetAccess(p, len, &acc, 1));
	return p;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "FAIL: watchdog: the emulator's copy waited behind the spinning kernel or behind "
				 "another thread's synchronous copy (deadlock)\n";
	ssize_t r = write(2, m, sizeof(m) - 1);
	(void)r;
	_exit(1);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	vt_name = "gpu_check";
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		printf("gpu_check: no libcuda.so.1: skipped\n");
		return 77;
	}
#define SYM(f, n) CHECK((*(void **)&cu.f = dlsym(h, n)) != NULL)
	SYM(cuInit, "cuInit");
	SYM(cuDeviceGet, "cuDeviceGet");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuCtxSynchronize, "cuCtxSynchronize");
	SYM(cuMemAlloc, "cuMemAlloc_v2");
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(cuMemsetD8, "cuMemsetD8_v2");
	SYM(cuMemHostAlloc, "cuMemHostAlloc");
	SYM(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
	SYM(cuModuleLoadData, "cuModuleLoadData");
	SYM(cuModuleGetFunction, "cuModuleGetFunction");
	SYM(cuLaunchKernel, "cuLaunchKernel");
	SYM(cuMemCreate, "cuMemCreate");
	SYM(cuMemAddressReserve, "cuMemAddressReserve");
	SYM(cuMemMap, "cuMemMap");
	SYM(cuMemSetAccess, "cuMemSetAccess");
	*(void **)&cu.cuMemGetHandleForAddressRange = dlsym(h, "cuMemGetHandleForAddressRange");
	if (cu.cuInit(0)) {
		printf("gpu_check: cuInit failed (no GPU): skipped\n");
		return 77;
	}
	int dev;
	CUcontext ctx;
	CU(cu.cuDeviceGet(&dev, 0));
	CU(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cu.cuCtxSetCurrent(ctx));
	CUdeviceptr d1, d2;
	CU(cu.cuMemAlloc(&d1, SZ));
	CU(cu.cuMemAlloc(&d2, SZ));
	CU(cu.cuMemsetD8(d1, 0, SZ));
	CU(cu.cuMemsetD8(d2, 0, SZ));
	const char *l = getenv("VEMU_GDR_LAZY");
	int lazy = l && !strcmp(l, "1");

	vt_open(&d, 0, 256);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	char *host = aligned_alloc(4096, SZ), *chk = aligned_alloc(4096, SZ);
	struct ibv_mr *hmr = vt_mr(&d, host, SZ, acc);
	struct ibv_mr *m1 = ibv_reg_mr(d.pd, (void *)(uintptr_t)d1, SZ, acc);
	CHECK(m1);
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 20;
	struct ibv_qp *a = vt_qp(&d, 64, 0, NULL), *b = vt_qp(&d, 64, 0, NULL), *self = vt_qp(&d, 64, 0, NULL);
	vt_connect(&d, a, b->qp_num, rc);
	vt_connect(&d, b, a->qp_num, rc);
	vt_connect(&d, self, self->qp_num, rc);

	/* host -> device */
	for (size_t i = 0; i < SZ; i++)
		host[i] = (char)(i * 7 + 1);
	one(a, IBV_WR_RDMA_WRITE, host, 1 << 20, hmr->lkey, d1 + 4096, m1->rkey);
	if (lazy) {
		CU(cu.cuMemcpyDtoH(chk, d1 + 4096, 1 << 20));
		CHECK(chk[0] == 0 && chk[(1 << 20) - 1] == 0);
		one(self, IBV_WR_RDMA_READ, host + SZ - 1, 1, hmr->lkey, d1, m1->rkey); /* the flush */
	}
	CU(cu.cuMemcpyDtoH(chk, d1 + 4096, 1 << 20));
	CHECK(!memcmp(chk, host, 1 << 20));
	printf("gpu_check: host -> device WRITE ok\n");
	/* device -> host (WRITE from device memory) and READ of device memory */
	CU(cu.cuMemcpyHtoD(d1, host, SZ));
	memset(chk, 0, SZ);
	struct ibv_mr *cmr = vt_mr(&d, chk, SZ, acc);
	one(a, IBV_WR_RDMA_WRITE, (void *)(uintptr_t)(d1 + 100), 3000000, m1->lkey, (uintptr_t)chk + 7, cmr->rkey);
	CHECK(!memcmp(chk + 7, host + 100, 3000000));
	memset(chk, 0, SZ);
	one(self, IBV_WR_RDMA_READ, chk, SZ, cmr->lkey, d1, m1->rkey);
	CHECK(!memcmp(chk, host, SZ));
	printf("gpu_check: device -> host WRITE and READ ok\n");
	/* device -> device, 64 MiB, WRITE_WITH_IMM; through DMA-BUF when the driver exports one */
	struct ibv_mr *m2 = NULL;
	int fd = -1;
	if (cu.cuMemGetHandleForAddressRange &&
	    !cu.cuMemGetHandleForAddressRange(&fd, d2, SZ, 1 /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */, 0)) {
		m2 = ibv_reg_dmabuf_mr(d.pd, 0, SZ, d2, fd, acc);
		CHECK(m2);
		close(fd);
		printf("gpu_check: DMA-BUF registration of device memory ok\n");
	} else {
		printf("gpu_check: no DMA-BUF export from this driver: plain registration\n");
		m2 = ibv_reg_mr(d.pd, (void *)(uintptr_t)d2, SZ, acc);
		CHECK(m2);
	}
	for (int it = 0; it < 3; it++) {
		CHECK_EQ(vt_post_recv(b, NULL, 0, 0, 5), 0);
		double t0 = now_s();
		CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE_WITH_IMM, (void *)(uintptr_t)d1, SZ, m1->lkey, d2, m2->rkey, 6,
				       IBV_SEND_SIGNALED, htonl(9)),
			 0);
		struct ibv_wc wc[2];
		vt_wait(&d, d.cq, wc, 2, 30000);
		double t1 = now_s();
		CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[1].status, IBV_WC_SUCCESS);
		printf("gpu_check: 64 MiB device -> device WRITE_WITH_IMM: %.2f GB/s\n", SZ / (t1 - t0) / 1e9);
	}
	if (lazy)
		one(self, IBV_WR_RDMA_READ, chk, 1, cmr->lkey, d2, m2->rkey);
	memset(chk, 0, SZ);
	CU(cu.cuMemcpyDtoH(chk, d2, SZ));
	CHECK(!memcmp(chk, host, SZ));
	printf("gpu_check: device -> device ok\n");

	/* a kernel spins on the legacy default stream until the host sets a flag; meanwhile an RDMA write into
	 * device memory must complete (the emulator copies on its own non-blocking stream) */
	CUmodule mod;
	CUfunction spin;
	CU(cu.cuModuleLoadData(&mod, spin_ptx));
	CU(cu.cuModuleGetFunction(&spin, mod, "spin"));
	volatile unsigned *flag;
	CU(cu.cuMemHostAlloc((void **)&flag, 64, 2 /* CU_MEMHOSTALLOC_DEVICEMAP */));
	*flag = 0;
	CUdeviceptr dflag;
	CU(cu.cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));
	void *args[] = { &dflag };
	CU(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
	signal(SIGALRM, on_alarm);
	alarm(20);
	for (size_t i = 0; i < (1 << 20); i++)
		host[i] = (char)(i * 3 + 5);
	one(a, IBV_WR_RDMA_WRITE, host, 1 << 20, hmr->lkey, d1, m1->rkey);
	one(self, IBV_WR_RDMA_READ, chk, 4096, cmr->lkey, d1, m1->rkey);
	alarm(0);
	*flag = 1;
	CU(cu.cuCtxSynchronize());
	CU(cu.cuMemcpyDtoH(chk, d1, 1 << 20));
	CHECK(!memcmp(chk, host, 1 << 20));
	printf("gpu_check: RDMA into device memory completed while a kernel spun on the default stream: ok\n");

	/* into and out of cuMem* memory with a second thread inside a synchronous cuMemcpyDtoH waiting behind the kernel;
	 * registered first (the emulator makes its own context then, on this thread, outside the lock) */
	const size_t VSZ = 4u << 20;
	CUdeviceptr dv = vmm_alloc(VSZ);
	struct ibv_mr *mv = ibv_reg_mr(d.pd, (void *)(uintptr_t)dv, VSZ, acc);
	CHECK(mv);
	*flag = 0;
	CU(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
	copier_ctx = ctx;
	copier_src = d2;
	copier_dst = malloc(1 << 20);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, copier, NULL), 0);
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	nanosleep(&ts, NULL); /* time to enter the driver; CHECK(!copier_done) below proves the overlap */
	alarm(20);
	for (size_t i = 0; i < (1 << 20); i++)
		host[i] = (char)(i * 5 + 3);
	one(a, IBV_WR_RDMA_WRITE, host, 1 << 20, hmr->lkey, dv + (2 << 20), mv->rkey);
	one(self, IBV_WR_RDMA_READ, chk + 8192, 4096, cmr->lkey, dv + (2 << 20), mv->rkey); /* (the lazy flush) */
	one(a, IBV_WR_RDMA_WRITE, (void *)(uintptr_t)(dv + (2 << 20)), 4096, mv->lkey, (uintptr_t)chk, cmr->rkey);
	alarm(0);
	CHECK(!copier_done); /* all of it happened while the other thread was still inside its copy */
	*flag = 1;
	CHECK_EQ(pthread_join(th, NULL), 0);
	CU(cu.cuCtxSynchronize());
	CHECK(!memcmp(chk, host, 4096) && !memcmp(chk + 8192, host, 4096));
	CHECK(copier_done);
	CU(cu.cuMemcpyDtoH(chk, dv + (2 << 20), 1 << 20));
	CHECK(!memcmp(chk, host, 1 << 20));
	free(copier_dst);
	printf("gpu_check: RDMA into and out of cuMem* device memory completed while another thread's synchronous "
	       "cuMemcpyDtoH waited behind a spinning kernel: ok\n");
	printf("gpu_check: OK%s\n", lazy ? " (GDR_LAZY)" : "");
	return 0;
}
