/* the CUDA device-memory path, on CPU, against the fake driver (fakecuda.c, loaded as libcuda.so.1 before the
 * first verbs call, as a CUDA program would have it loaded). Device memory there is PROT_NONE: the emulator
 * can only reach it through cuMemcpy*Async on its own non-blocking stream with a context pushed.
 * FAKECU_VMM=1: every pointer is a cuMem* allocation (no owning context): the emulator copies it in a context of
 * its own with VEMU_CUDA_PRIVATE_CTX=1, else in the device's primary context.
 * VEMU_GDR_LAZY=1: device writes appear only after the flush READ. */
#include "vt.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include "fakecuda.h"
static void (*cu_hold_sync)(int);
static void *(*cu_alloc)(size_t);
static void *(*cu_alloc_vmm)(size_t);
static int (*cu_poke)(void *, const void *, size_t);
static int (*cu_peek)(void *, const void *, size_t);
static void (*cu_stats)(struct fakecu_stats *);

#define DLEN (8u << 20)
static struct vt_dev d;
static char *host;
static struct ibv_mr *hmr;
static int lazy;

static void load_fake(void)
{
	void *h = dlopen(FAKECUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
	CHECK(h);
	*(void **)&cu_alloc = dlsym(h, "fakecu_alloc");
	*(void **)&cu_poke = dlsym(h, "fakecu_poke");
	*(void **)&cu_peek = dlsym(h, "fakecu_peek");
	*(void **)&cu_stats = dlsym(h, "fakecu_get_stats");
	*(void **)&cu_alloc_vmm = dlsym(h, "fakecu_alloc_vmm");
	*(void **)&cu_hold_sync = dlsym(h, "fakecu_hold_sync");
	CHECK(cu_alloc && cu_alloc_vmm && cu_poke && cu_peek && cu_stats && cu_hold_sync);
}

static void fill(char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 7 + (size_t)seed);
}

static void check_dev(const char *dev, size_t n, int seed)
{
	char *tmp = malloc(n);
	CHECK_EQ(cu_peek(tmp, dev, n), 0);
	for (size_t i = 0; i < n; i++)
		if (tmp[i] != (char)(i * 7 + (size_t)seed)) {
			fprintf(stderr, "device byte %zu: %d != %d\n", i, tmp[i], (char)(i * 7 + (size_t)seed));
			CHECK(!"device memory content");
		}
	free(tmp);
}

static void one(struct ibv_qp *qp, int op, void *buf, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;
	CHECK_EQ(vt_post_write(qp, op, buf, len, lkey, raddr, rkey, 1, IBV_SEND_SIGNALED, 0), 0);
	vt_wait(&d, d.cq, &wc, 1, 20000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
}

static int post_cas(struct ibv_qp *qp, void *res, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t cmp,
		    uint64_t swap)
{
	struct ibv_sge sge = { (uintptr_t)res, 8, lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 14;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = cmp;
	wr.wr.atomic.swap = swap;
	return ibv_post_send(qp, &wr, &bad);
}

static void flush(struct ibv_qp *self, char *dev, struct ibv_mr *dmr)
{
	/* the GPUDirect flush: a loopback RDMA READ of one byte of device memory */
	one(self, IBV_WR_RDMA_READ, host + DLEN - 1, 1, hmr->lkey, (uintptr_t)dev, dmr->rkey);
}

static void single(void)
{
	vt_name = "cuda/single";
	vt_open(&d, 0, 256);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	host = aligned_alloc(4096, DLEN);
	hmr = vt_mr(&d, host, DLEN, acc);
	char *dev = cu_alloc(DLEN), *dev2 = cu_alloc(DLEN);
	CHECK(dev && dev2);
	struct ibv_mr *dmr = ibv_reg_mr(d.pd, dev, DLEN, acc);
	CHECK(dmr);
	int fd = memfd_create("dmabuf", 0);
	struct ibv_mr *dmr2 = ibv_reg_dmabuf_mr(d.pd, 0, DLEN, (uintptr_t)dev2, fd, acc);
	CHECK(dmr2);
	close(fd);
	CHECK(dmr2->addr == dev2);
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.access |= IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_qp *a = vt_qp(&d, 64, 0, NULL), *b = vt_qp(&d, 64, 0, NULL), *self = vt_qp(&d, 64, 0, NULL);
	vt_connect(&d, a, b->qp_num, rc);
	vt_connect(&d, b, a->qp_num, rc);
	vt_connect(&d, self, self->qp_num, rc);

	/* host -> device (WRITE) */
	fill(host, 1 << 20, 1);
	one(a, IBV_WR_RDMA_WRITE, host, 1 << 20, hmr->lkey, (uintptr_t)dev + 4096, dmr->rkey);
	if (lazy) {
		char z[16], zero[16] = { 0 };
		CHECK_EQ(cu_peek(z, dev + 4096, 16), 0);
		CHECK(!memcmp(z, zero, 16)); /* not visible before the flush */
		flush(self, dev, dmr);
	}
	check_dev(dev + 4096, 1 << 20, 1);
	/* device -> host (WRITE from device memory) */
	char *pat = malloc(DLEN);
	fill(pat, DLEN, 2);
	CHECK_EQ(cu_poke(dev, pat, DLEN), 0);
	memset(host, 0, DLEN);
	one(a, IBV_WR_RDMA_WRITE, dev + 100, 300000, dmr->lkey, (uintptr_t)host + 7, hmr->rkey);
	CHECK(!memcmp(host + 7, pat + 100, 300000));
	/* READ of device memory into host, on a QP connected to itself */
	memset(host, 0, DLEN);
	one(self, IBV_WR_RDMA_READ, host, 1 << 20, hmr->lkey, (uintptr_t)dev, dmr->rkey);
	CHECK(!memcmp(host, pat, 1 << 20));
	/* READ into device memory (DMA-BUF MR) */
	fill(host, 1 << 20, 3);
	one(self, IBV_WR_RDMA_READ, dev2, 1 << 20, dmr2->lkey, (uintptr_t)host, hmr->rkey);
	check_dev(dev2, 1 << 20, 3);
	/* SEND into a device receive buffer, with immediate */
	fill(host, 65536, 4);
	CHECK_EQ(vt_post_recv(b, dev2 + 65536, 65536, dmr2->lkey, 9), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_SEND, host, 65536, hmr->lkey, 0, 0, 10, IBV_SEND_SIGNALED, 0), 0);
	struct ibv_wc wc[2];
	vt_wait(&d, d.cq, wc, 2, 20000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(wc[1].status, IBV_WC_SUCCESS);
	if (lazy)
		flush(self, dev2, dmr2);
	check_dev(dev2 + 65536, 65536, 4);
	/* device -> device, larger than one staging buffer, through WRITE_WITH_IMM */
	CHECK_EQ(cu_poke(dev, pat, DLEN), 0);
	CHECK_EQ(vt_post_recv(b, NULL, 0, 0, 11), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE_WITH_IMM, dev, DLEN, dmr->lkey, (uintptr_t)dev2, dmr2->rkey, 12,
			       IBV_SEND_SIGNALED, htonl(5)),
		 0);
	vt_wait(&d, d.cq, wc, 2, 20000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(wc[1].status, IBV_WC_SUCCESS);
	if (lazy)
		flush(self, dev2, dmr2);
	check_dev(dev2, DLEN, 2);
	/* atomics on device memory (NCCL's GIN proxy keeps its signals there): put + signal, the signal a FETCH_AND_ADD
	 * on a device word whose result goes to host memory; with GDR_LAZY the data is visible once the atomic has
	 * completed, without a flush (the atomic reads device memory: what was written before it lands first) */
	{
		vt_name = "cuda/single/atomic";
		uint64_t sig = 1000, got;
		char *sigp = dev2 + DLEN - 64;
		CHECK_EQ(cu_poke(sigp, &sig, 8), 0);
		fill(host, 1 << 20, 8);
		struct ibv_sge s0 = { (uintptr_t)host, 1 << 20, hmr->lkey }, s1 = { (uintptr_t)host + DLEN - 64, 8, hmr->lkey };
		struct ibv_send_wr w[2], *bad;
		memset(w, 0, sizeof(w));
		w[0].opcode = IBV_WR_RDMA_WRITE;
		w[0].sg_list = &s0;
		w[0].num_sge = 1;
		w[0].wr.rdma.remote_addr = (uintptr_t)dev2 + 8192;
		w[0].wr.rdma.rkey = dmr2->rkey;
		w[0].next = &w[1];
		w[1].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		w[1].wr_id = 13;
		w[1].send_flags = IBV_SEND_SIGNALED;
		w[1].sg_list = &s1;
		w[1].num_sge = 1;
		w[1].wr.atomic.remote_addr = (uintptr_t)sigp;
		w[1].wr.atomic.rkey = dmr2->rkey;
		w[1].wr.atomic.compare_add = 5;
		CHECK_EQ(ibv_post_send(a, w, &bad), 0);
		vt_wait(&d, d.cq, wc, 1, 20000);
		CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].opcode, IBV_WC_FETCH_ADD);
		memcpy(&got, host + DLEN - 64, 8);
		CHECK_EQ(got, 1000);
		CHECK_EQ(cu_peek(&got, sigp, 8), 0);
		CHECK_EQ(got, 1005);
		check_dev(dev2 + 8192, 1 << 20, 8);
		/* compare-and-swap on the device word, the result into device memory */
		CHECK_EQ(post_cas(a, dev + 64, dmr->lkey, (uintptr_t)sigp, dmr2->rkey, 1005, 7), 0);
		vt_wait(&d, d.cq, wc, 1, 20000);
		CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].opcode, IBV_WC_COMP_SWAP);
		CHECK_EQ(cu_peek(&got, sigp, 8), 0);
		CHECK_EQ(got, 7);
		if (lazy)
			flush(self, dev, dmr);
		CHECK_EQ(cu_peek(&got, dev + 64, 8), 0);
		CHECK_EQ(got, 1005);
		vt_name = "cuda/single";
	}
	/* the driver saw only correct calls */
	struct fakecu_stats s;
	cu_stats(&s);
	printf("cuda: htod=%d dtoh=%d syncs=%d streams=%d pushes=%d pops=%d bad=%d\n", s.htod, s.dtoh, s.syncs,
	       s.streams, s.pushes, s.pops, s.bad);
	CHECK_EQ(s.bad, 0);
	CHECK(s.htod > 0 && s.dtoh > 0);
	CHECK_EQ(s.pushes, s.pops);
	CHECK(s.syncs >= s.htod + s.dtoh);
	CHECK_EQ(s.streams, 1);
	CHECK_EQ(s.pageable, 0);      /* every driver copy through the pinned bounce buffer */
	CHECK_EQ(s.pinned_allocs, 1); /* allocated once, at the first device registration */
	const char *vmm = getenv("FAKECU_VMM"), *pc = getenv("VEMU_CUDA_PRIVATE_CTX");
	if (vmm && !strcmp(vmm, "1") && pc && !strcmp(pc, "1")) {
		CHECK_EQ(s.private_ctxs, 1); /* one per device, made at the first registration */
		CHECK_EQ(s.private_copies, s.htod + s.dtoh + s.dtod);
	} else {
		CHECK_EQ(s.private_ctxs, 0);
		CHECK_EQ(s.private_copies, 0);
	}
	free(pat);
}

/* two processes: device memory to device memory */
static void procs(void)
{
	int sp[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	vt_open(&d, 0, 64);
	char *dev = cu_alloc(1 << 20);
	struct ibv_mr *dmr = ibv_reg_mr(d.pd, dev, 1 << 20, acc);
	CHECK(dmr);
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *qp = vt_qp(&d, 16, 0, NULL);
	uint64_t me[3] = { qp->qp_num, dmr->rkey, (uintptr_t)dev }, peer[3];
	int fd = pid == 0 ? sp[1] : sp[0];
	vt_send(fd, me, sizeof(me));
	vt_recv(fd, peer, sizeof(peer));
	vt_connect(&d, qp, (uint32_t)peer[0], rc);
	struct ibv_wc wc;
	if (pid == 0) {
		vt_name = "cuda/procs/child";
		char *pat = malloc(1 << 20);
		fill(pat, 1 << 20, 6);
		CHECK_EQ(cu_poke(dev, pat, 1 << 20), 0);
		char c;
		vt_recv(fd, &c, 1);
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, dev, 1 << 20, dmr->lkey, peer[2], (uint32_t)peer[1],
				       1, IBV_SEND_SIGNALED, 0),
			 0);
		vt_wait(&d, d.cq, &wc, 1, 20000);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		vt_recv(fd, &c, 1);
		free(pat);
		exit(0);
	}
	vt_name = "cuda/procs/parent";
	CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, 2), 0);
	vt_send(fd, "r", 1);
	vt_wait(&d, d.cq, &wc, 1, 20000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	if (lazy) {
		struct ibv_qp *self = vt_qp(&d, 4, 0, NULL);
		vt_connect(&d, self, self->qp_num, rc);
		char *h = aligned_alloc(4096, 4096);
		struct ibv_mr *m = vt_mr(&d, h, 4096, IBV_ACCESS_LOCAL_WRITE);
		one(self, IBV_WR_RDMA_READ, h, 1, m->lkey, (uintptr_t)dev, dmr->rkey);
		CHECK_EQ(ibv_destroy_qp(self), 0);
		CHECK_EQ(ibv_dereg_mr(m), 0);
		free(h);
	}
	check_dev(dev, 1 << 20, 6);
	vt_send(fd, "d", 1);
	CHECK_EQ(vt_wait_child(pid), 0);
}

/* two processes, the DDP broadcast case seen on the H200 machine: 64 MiB then 256 MiB WRITE_WITH_IMM into device
 * memory (cuMem*, as NCCL allocates its buffers) registered through ibv_reg_dmabuf_mr with a non-zero offset inside
 * a larger allocation, while the receiving application is itself inside a synchronous copy waiting for a kernel
 * (PyTorch's main thread after a collective), which holds the primary context's lock. The receiver's agent must
 * place the data and acknowledge anyway: it copies in a context of its own. Before that fix the agent blocked in
 * its first cuMemcpyHtoDAsync, acknowledged nothing, and the sender's QP ran out of retries ("transport retry
 * counter exceeded", 34 s with NCCL's timeout 20). Run with VEMU_CUDA_PRIVATE_CTX=1; expect_block (the default primary context, the control):
 * the same in the primary context must block, and the sender must see exactly that RETRY_EXC_ERR. */
static void procs_big(int expect_block)
{
	const size_t big = 256u << 20, off = 3u << 20, alloc = big + off + (1u << 20);
	const uint32_t sizes[2] = { 64u << 20, (uint32_t)big };
	int sp[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_RELAXED_ORDERING;
	vt_open(&d, 0, 64);
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 18; /* 1.07 s x 8: a silent receiver fails the sender in ~9 s, a loaded machine's stalls do not */
	struct ibv_qp *qp = vt_qp(&d, 16, 0, NULL);
	int fd = pid == 0 ? sp[1] : sp[0];
	struct ibv_wc wc;
	if (pid == 0) {
		vt_name = "cuda/procs_big/sender";
		char *src = aligned_alloc(4096, big);
		CHECK(src);
		fill(src, big, 8);
		struct ibv_mr *m = vt_mr(&d, src, big, IBV_ACCESS_LOCAL_WRITE);
		uint64_t me = qp->qp_num, peer[3];
		vt_send(fd, &me, sizeof(me));
		vt_recv(fd, peer, sizeof(peer));
		vt_connect(&d, qp, (uint32_t)peer[0], rc);
		char c;
		vt_recv(fd, &c, 1);
		for (int i = 0; i < 2; i++) {
			CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, src, sizes[i], m->lkey, peer[2], (uint32_t)peer[1],
					       (uint64_t)i, IBV_SEND_SIGNALED, htonl((uint32_t)i)),
				 0);
			vt_wait(&d, d.cq, &wc, 1, 60000);
			if (expect_block) {
				CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR); /* the receiver's agent could not place it */
				vt_send(fd, "x", 1);
				break;
			}
			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		}
		vt_recv(fd, &c, 1);
		/* after RETRY_EXC_ERR the agent may still be streaming the rest of the failed write out of src once the
		 * receiver drains its socket: ibv_dereg_mr waits for such accesses (as an HCA stops DMA), free after */
		CHECK_EQ(ibv_destroy_qp(qp), 0);
		CHECK_EQ(ibv_dereg_mr(m), 0);
		free(src);
		exit(0);
	}
	vt_name = "cuda/procs_big/receiver";
	char *dev = cu_alloc_vmm(alloc);
	CHECK(dev);
	int dfd = memfd_create("dmabuf", 0);
	/* NCCL/the plugin: offset of the buffer inside the exported range, iova = the buffer's VA */
	struct ibv_mr *dmr = ibv_reg_dmabuf_mr(d.pd, off, big, (uintptr_t)(dev + off), dfd, acc);
	CHECK(dmr);
	close(dfd);
	uint64_t peer, me[3] = { qp->qp_num, dmr->rkey, (uintptr_t)(dev + off) };
	vt_recv(fd, &peer, sizeof(peer));
	vt_send(fd, me, sizeof(me));
	vt_connect(&d, qp, (uint32_t)peer, rc);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, (uint64_t)(10 + i)), 0);
	cu_hold_sync(1); /* the application is in a synchronous copy behind a kernel from here on */
	vt_send(fd, "g", 1);
	if (expect_block) {
		char c;
		vt_recv(fd, &c, 1); /* the sender saw RETRY_EXC_ERR */
		cu_hold_sync(0);
		vt_send(fd, "d", 1);
		CHECK_EQ(vt_wait_child(pid), 0);
		return;
	}
	for (int i = 0; i < 2; i++) {
		vt_wait(&d, d.cq, &wc, 1, 30000);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
		CHECK_EQ(wc.byte_len, sizes[i]);
		CHECK_EQ(ntohl(wc.imm_data), (uint32_t)i);
	}
	cu_hold_sync(0);
	check_dev(dev + off, big, 8);
	char edge[2] = { 1, 1 };
	CHECK_EQ(cu_peek(edge, dev + off - 1, 1), 0);
	CHECK_EQ(cu_peek(edge + 1, dev + off + big, 1), 0);
	CHECK(!edge[0] && !edge[1]); /* nothing outside the registered sub-range */
	struct fakecu_stats s;
	cu_stats(&s);
	printf("cuda: htod=%d syncs=%d pageable=%d pinned_allocs=%d private_copies=%d bad=%d\n", s.htod, s.syncs,
	       s.pageable, s.pinned_allocs, s.private_copies, s.bad);
	CHECK_EQ(s.bad, 0);
	CHECK_EQ(s.pageable, 0);
	CHECK(s.private_copies >= s.htod && s.htod > 0); /* every placement in the emulator's own context */
	CHECK_EQ(s.pushes, s.pops);
	vt_send(fd, "d", 1);
	CHECK_EQ(vt_wait_child(pid), 0);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *l = getenv("VEMU_GDR_LAZY");
	lazy = l && !strcmp(l, "1");
	load_fake();
	if (argc > 1 && !strcmp(argv[1], "procs"))
		procs();
	else if (argc > 1 && !strcmp(argv[1], "procs_big"))
		procs_big(0);
	else if (argc > 1 && !strcmp(argv[1], "procs_big_control"))
		procs_big(1);
	else
		single();
	printf("test_cuda %s: OK\n", argc > 1 ? argv[1] : "single");
	return 0;
}
