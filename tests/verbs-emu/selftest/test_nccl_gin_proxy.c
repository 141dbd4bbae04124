/* Stock NCCL 2.28's own GIN proxy backend (ncclGinIbProxy, src/transport/net_ib.cc) on the emulator, with the real
 * libnccl.so.2, between NRANKS processes: what NCCL's gin_host_proxy.cc drives when a kernel calls put/signal
 * through the device API with NCCL_GIN_TYPE=2. On the GPU machine (2026-12-03) this backend failed at its first
 * putSignal with "ibv_post_send() failed with error Operation not supported": its signal is an
 * IBV_WR_ATOMIC_FETCH_AND_ADD, which the emulator did not have.
 *
 * Each rank: ncclNetIb.init (with a profiler callback, as NCCL gives it), ncclGinIbProxy.init/listen, the handles
 * all-gathered through the parent, connect (ring plus full mesh, self included), regMrSym of a host window and a
 * host signal array (NCCL_NET_MR_FLAG_FORCE_SO, as NCCL registers its signals), then rounds of sizes 0..1 MiB:
 * to every rank (itself too) an iputSignal ADD (rank+1) on the shared word 0, an iputSignal INC on word 1+rank,
 * and a plain iput; all requests tested to completion; a barrier; every rank checks every byte from every sender and
 * the signal words (word 0: the sum of all adds, atomic although NRANKS senders add to it at once).
 *
 * test_nccl_gin_proxy devsig: the signal array in (fake) CUDA device memory, as NCCL's gin_host_proxy.cc allocates
 * it (ncclCuMemAlloc), registered as NCCL_PTR_CUDA: the fake driver (fakecuda.c) is loaded first, its "device
 * memory" is PROT_NONE, so the emulator can only execute the atomics through the driver (vemu_cuda_atomic), and the
 * signals are checked through fakecu_peek.
 *
 * The table and ncclNetIb are local symbols: found in the library's .symtab (the nvidia-nccl-cu13 wheel and CUDA
 * 13.0's copy keep it). Skipped (77) where no such libnccl.so.2 2.28.x is found. VEMU_NCCL_LIB names the library. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "vt.h"

#define NRANKS 3
#define SLOT (1u << 20)
#define NSIGW 64

typedef int ncclResult_t;
typedef void (*logger_t)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);
typedef ncclResult_t (*prof_t)(void **eHandle, int type, void *pHandle, int64_t pluginId, void *extData);

/* ncclNet_v11_t: only the leading members this test calls */
struct net_v11 {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, void *config, logger_t log, prof_t prof);
	ncclResult_t (*devices)(int *ndev);
};

/* ncclGin_v11_t (src/include/plugin/net/net_v11.h at v2.28.9-1) */
struct gin_v11 {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, logger_t log);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, void *props);
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *ctx, void *handles[], int nranks, int rank, void *listenComm, void **collComm);
	ncclResult_t (*createContext)(void *collComm, int nSignals, int nCounters, void **ginCtx, void **devHandle);
	ncclResult_t (*regMrSym)(void *collComm, void *data, size_t size, int type, uint64_t mrFlags, void **mhandle,
				 void **ginHandle);
	ncclResult_t (*regMrSymDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
				       uint64_t mrFlags, void **mhandle, void **ginHandle);
	ncclResult_t (*deregMrSym)(void *collComm, void *mhandle);
	ncclResult_t (*destroyContext)(void *ginCtx);
	ncclResult_t (*closeColl)(void *collComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*iput)(void *collComm, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
			     void *dstMhandle, uint32_t rank, void **request);
	ncclResult_t (*iputSignal)(void *collComm, uint64_t srcOff, void *srcMhandle, size_t size, uint64_t dstOff,
				   void *dstMhandle, uint32_t rank, uint64_t signalOff, void *signalMhandle,
				   uint64_t signalValue, uint32_t signalOp, void **request);
	ncclResult_t (*test)(void *collComm, void *request, int *done);
	ncclResult_t (*ginProgress)(void *collComm);
	ncclResult_t (*queryLastError)(void *ginCtx, bool *hasError);
	ncclResult_t (*finalize)(void *ctx);
};

#define PTR_HOST 0x1
#define PTR_CUDA 0x2
#define MR_FLAG_FORCE_SO 0x1
#define SIGNAL_OP_INC 0x1
#define SIGNAL_OP_ADD 0x2

/* the value of a symbol in the file's .symtab; 0 when absent */
static uint64_t symtab_value(const char *path, const char *name)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	uint64_t v = 0;
	if (fstat(fd, &st) || (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
		close(fd);
		return 0;
	}
	const unsigned char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return 0;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > (uint64_t)st.st_size)
		goto out;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
	for (int i = 0; i < eh->e_shnum && !v; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
			continue;
		const Elf64_Sym *sy = (const Elf64_Sym *)(m + sh[i].sh_offset);
		const char *str = (const char *)(m + sh[sh[i].sh_link].sh_offset);
		size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
		for (size_t k = 0; k < n; k++)
			if (sy[k].st_name < sh[sh[i].sh_link].sh_size && !strcmp(str + sy[k].st_name, name) &&
			    sy[k].st_value) {
				v = sy[k].st_value;
				break;
			}
	}
out:
	munmap((void *)m, (size_t)st.st_size);
	return v;
}

static void nccl_log(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
	(void)level;
	(void)flags;
	(void)file;
	(void)line;
	(void)fmt;
}

static ncclResult_t prof_cb(void **eHandle, int type, void *pHandle, int64_t pluginId, void *extData)
{
	(void)type;
	(void)pHandle;
	(void)pluginId;
	(void)extData;
	if (eHandle)
		*eHandle = NULL;
	return 0;
}

static const char *lib;
static int devsig;
static void *(*cu_alloc)(size_t);
static int (*cu_peek)(void *, const void *, size_t);
static struct gin_v11 *gin;
static struct net_v11 *net;

static char pattern(int from, int to, int round, size_t i)
{
	return (char)(i * 131 + (size_t)from * 17 + (size_t)to * 5 + (size_t)round * 29 + 1);
}

#define NCHECK(call)                                                                                               \
	do {                                                                                                       \
		int _r = (call);                                                                                   \
		if (_r) {                                                                                          \
			fprintf(stderr, "FAIL %s:%d [%s] pid %d: %s returned ncclResult %d\n", __FILE__, __LINE__, \
				vt_name, (int)getpid(), #call, _r);                                                \
			exit(1);                                                                                   \
		}                                                                                                  \
	} while (0)

static uint64_t sigword(uint64_t *sig, int i)
{
	uint64_t v = 0;
	if (devsig)
		CHECK_EQ(cu_peek(&v, sig + i, 8), 0);
	else
		v = __atomic_load_n(&sig[i], __ATOMIC_ACQUIRE);
	return v;
}

static const size_t sizes[] = { 0, 1, 8, 100, 4096, 65536 + 3, SLOT };
#define NROUNDS (sizeof(sizes) / sizeof(sizes[0]))

static void rank_main(int rank, int fd)
{
	char nm[32];
	snprintf(nm, sizeof(nm), "gin_proxy/rank%d", rank);
	vt_name = nm;
	if (devsig) {
		/* the driver first, as in a CUDA program: the emulator uses the one already loaded */
		void *fh = dlopen(FAKECUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
		CHECK(fh);
		*(void **)&cu_alloc = dlsym(fh, "fakecu_alloc");
		*(void **)&cu_peek = dlsym(fh, "fakecu_peek");
		CHECK(cu_alloc && cu_peek);
	}
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	CHECK(h);
	void *gv = dlsym(h, "ncclGetVersion");
	CHECK(gv);
	uintptr_t base = (uintptr_t)gv - symtab_value(lib, "ncclGetVersion");
	gin = (struct gin_v11 *)(base + symtab_value(lib, "ncclGinIbProxy"));
	net = (struct net_v11 *)(base + symtab_value(lib, "ncclNetIb"));
	CHECK(!strcmp(gin->name, "GIN_IB_PROXY") && !strcmp(net->name, "IB"));
	/* as NCCL: ncclNetIb first (it keeps the profiler callback), then the GIN */
	void *netctx = NULL, *ctx = NULL;
	int config[4] = { 0 };
	NCHECK(net->init(&netctx, 0x5eed, config, nccl_log, prof_cb));
	NCHECK(gin->init(&ctx, 0x5eed, nccl_log));
	int ndev = 0;
	NCHECK(gin->devices(&ndev));
	CHECK(ndev >= 1);
	char handles[NRANKS][128];
	void *lcomm = NULL, *coll = NULL;
	memset(handles, 0, sizeof(handles));
	NCHECK(gin->listen(ctx, 0, handles[rank], &lcomm));
	vt_send(fd, handles[rank], 128);
	vt_recv(fd, handles, sizeof(handles));
	void *hp[NRANKS];
	for (int i = 0; i < NRANKS; i++)
		hp[i] = handles[i];
	NCHECK(gin->connect(ctx, hp, NRANKS, rank, lcomm, &coll));
	NCHECK(gin->closeListen(lcomm));

	size_t wlen = 2 * NRANKS * (size_t)SLOT; /* [receive slots of every sender][send slots for every receiver] */
	char *win = aligned_alloc(4096, wlen);
	/* NSIGW words (aligned_alloc wants a multiple of 4096); device memory (zeroed by the fake) with devsig */
	uint64_t *sig = devsig ? cu_alloc(4096) : aligned_alloc(4096, 4096);
	CHECK(win && sig);
	memset(win, 0, wlen);
	if (!devsig)
		memset(sig, 0, NSIGW * sizeof(uint64_t));
	void *wmh = NULL, *wgh = NULL, *smh = NULL, *sgh = NULL;
	NCHECK(gin->regMrSym(coll, win, wlen, PTR_HOST, 0, &wmh, &wgh));
	NCHECK(gin->regMrSym(coll, sig, NSIGW * sizeof(uint64_t), devsig ? PTR_CUDA : PTR_HOST, MR_FLAG_FORCE_SO, &smh,
			     &sgh));

	uint64_t want0 = 0;
	for (unsigned r = 0; r < NROUNDS; r++) {
		size_t n = sizes[r];
		for (int to = 0; to < NRANKS; to++)
			for (size_t i = 0; i < n; i++)
				win[(size_t)(NRANKS + to) * SLOT + i] = pattern(rank, to, (int)r, i);
		void *req[3 * NRANKS];
		int nreq = 0;
		for (int to = 0; to < NRANKS; to++) {
			uint64_t src = (uint64_t)(NRANKS + to) * SLOT, dst = (uint64_t)rank * SLOT;
			/* data + ADD on the word every rank adds to; then a signal alone (size 0) INC on this sender's
			 * word; and a plain put of the last byte again (idempotent) */
			NCHECK(gin->iputSignal(coll, src, wgh, n, dst, wgh, (uint32_t)to, 0, sgh, (uint64_t)rank + 1,
					       SIGNAL_OP_ADD, &req[nreq++]));
			NCHECK(gin->iputSignal(coll, 0, wgh, 0, 0, NULL, (uint32_t)to, (uint64_t)(1 + rank) * 8, sgh, 0,
					       SIGNAL_OP_INC, &req[nreq++]));
			if (n)
				NCHECK(gin->iput(coll, src + n - 1, wgh, 1, dst + n - 1, wgh, (uint32_t)to,
						 &req[nreq++]));
		}
		uint64_t t0 = vt_now_ms();
		for (int left = nreq; left;) {
			for (int i = 0; i < nreq; i++) {
				if (!req[i])
					continue;
				int done = 0;
				NCHECK(gin->test(coll, req[i], &done));
				if (done) {
					req[i] = NULL;
					left--;
				}
			}
			if (left) {
				CHECK(vt_now_ms() - t0 < 30000);
				sched_yield(); /* NCCL's proxy thread polls the same way */
			}
		}
		/* every rank's puts and signals are complete (an RC completion: placed at the target) */
		vt_send(fd, "d", 1);
		char go;
		vt_recv(fd, &go, 1);
		for (int from = 0; from < NRANKS; from++) {
			want0 += (uint64_t)from + 1;
			const char *p = win + (size_t)from * SLOT;
			for (size_t i = 0; i < n; i++)
				if (p[i] != pattern(from, rank, (int)r, i)) {
					fprintf(stderr,
						"FAIL [%s] round %u size %zu: byte %zu from rank %d is %d, want %d\n",
						vt_name, r, n, i, from, p[i], pattern(from, rank, (int)r, i));
					exit(1);
				}
			CHECK_EQ(sigword(sig, 1 + from), r + 1);
		}
		CHECK_EQ(sigword(sig, 0), want0);
		vt_send(fd, "c", 1);
		vt_recv(fd, &go, 1);
	}
	printf("%s: %zu rounds to %d ranks, every byte and signal checked (word 0 = %llu, signals in %s memory)\n",
	       vt_name, NROUNDS, NRANKS, (unsigned long long)want0, devsig ? "device" : "host");
	NCHECK(gin->deregMrSym(coll, smh));
	NCHECK(gin->deregMrSym(coll, wmh));
	NCHECK(gin->closeColl(coll));
	exit(0);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	vt_name = "gin_proxy";
	devsig = argc > 1 && !strcmp(argv[1], "devsig");
	const char *env = getenv("VEMU_NCCL_LIB");
	const char *cand[] = { env, "/usr/local/cuda-13.0/lib/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2",
			       "/usr/local/cuda/lib64/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2" };
	for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]) && !lib; i++)
		if (cand[i] && !access(cand[i], R_OK) && symtab_value(cand[i], "ncclGinIbProxy") &&
		    symtab_value(cand[i], "ncclNetIb") && symtab_value(cand[i], "ncclGetVersion"))
			lib = cand[i];
	if (!lib) {
		printf("test_nccl_gin_proxy: no libnccl.so.2 with ncclGinIbProxy in its symbol table: skipped\n");
		return 77;
	}
	/* its version, in a child (loading NCCL is its business) */
	int vp[2];
	CHECK_EQ(pipe(vp), 0);
	pid_t vpid = fork();
	CHECK(vpid >= 0);
	if (vpid == 0) {
		int v = 0;
		void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		int (*getv)(int *) = h ? (int (*)(int *))dlsym(h, "ncclGetVersion") : NULL;
		if (getv)
			getv(&v);
		vt_send(vp[1], &v, sizeof(v));
		_exit(0);
	}
	close(vp[1]);
	int version = 0;
	vt_recv(vp[0], &version, sizeof(version));
	close(vp[0]);
	CHECK_EQ(vt_wait_child(vpid), 0);
	if (version < 22807 || version >= 22900) {
		printf("test_nccl_gin_proxy: %s is NCCL %d, not 2.28.7..2.28.x (ncclGin_v11): skipped\n", lib, version);
		return 77;
	}
	printf("test_nccl_gin_proxy: %s, NCCL %d, %d ranks\n", lib, version, NRANKS);
	int fds[NRANKS];
	pid_t pids[NRANKS];
	for (int r = 0; r < NRANKS; r++) {
		int sv[2];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		pids[r] = fork();
		CHECK(pids[r] >= 0);
		if (pids[r] == 0) {
			close(sv[0]);
			for (int k = 0; k < r; k++)
				close(fds[k]);
			rank_main(r, sv[1]);
		}
		close(sv[1]);
		fds[r] = sv[0];
	}
	char handles[NRANKS][128];
	for (int r = 0; r < NRANKS; r++)
		vt_recv(fds[r], handles[r], 128);
	for (int r = 0; r < NRANKS; r++)
		vt_send(fds[r], handles, sizeof(handles));
	for (unsigned round = 0; round < 2 * NROUNDS; round++) { /* two barriers a round */
		char c;
		for (int r = 0; r < NRANKS; r++)
			vt_recv(fds[r], &c, 1);
		for (int r = 0; r < NRANKS; r++)
			vt_send(fds[r], "g", 1);
	}
	int bad = 0;
	for (int r = 0; r < NRANKS; r++)
		bad |= vt_wait_child(pids[r]) != 0;
	if (bad) {
		printf("test_nccl_gin_proxy: FAIL\n");
		return 1;
	}
	printf("test_nccl_gin_proxy: OK (NCCL's own GIN proxy: putSignal = WRITE + FETCH_AND_ADD, on the emulator)\n");
	return 0;
}
