/* NCCL's IB transport pattern between two processes (what stock NCCL and our plugin do on the emulator):
 * the receiver RDMA-writes inline CTS entries into the sender's FIFO (sender QP has REMOTE_WRITE), the sender
 * polls that host memory, writes the data split over 2 QPs (128-byte aligned) with RELAXED_ORDERING MRs and ends
 * each QP's part with WRITE_WITH_IMM; the receiver waits for both immediates, then flushes with a 1-byte RDMA
 * READ on a QP connected to itself (LOCAL_WRITE|REMOTE_READ) before checking the data. With VEMU_GDR_LAZY=1 the
 * receive buffer is "device memory" (a DMA-BUF registration of host memory): the data is checked to be
 * invisible before the flush and complete after it. Sizes include 0. */
#include "vt.h"

#include <sched.h>
#include <sys/mman.h>

#define NQP 2
#define NMSG 200
#define MAXMSG (1u << 20)
#define FIFO_N 32

struct cts {
	uint64_t addr;
	uint32_t rkey;
	uint32_t size;
	uint32_t seq; /* written last-ish: the sender polls it */
	uint32_t pad[11];
}; /* 64 bytes, like ncclIbSendFifo */

struct hello {
	uint32_t qpn[NQP];
	uint64_t fifo_addr;
	uint32_t fifo_rkey;
};

static struct vt_dev d;
static int lazy;

static uint32_t msg_size(int i)
{
	static const uint32_t s[] = { 0, 1, 8, 127, 128, 129, 4096, 65536, 100000, MAXMSG };
	return s[i % 10];
}

static char pattern(int msg, uint32_t off)
{
	return (char)(msg * 31 + (int)off * 7 + 1);
}

static void connect_all(struct ibv_qp **qp, const uint32_t *peer, unsigned access)
{
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 20; /* NCCL's defaults */
	rc.retry_cnt = 7;
	rc.rnr_retry = 7;
	rc.access = access;
	for (int i = 0; i < NQP; i++)
		vt_connect(&d, qp[i], peer[i], rc);
}

static void sender(int fd)
{
	vt_name = "nccl/sender";
	vt_open(&d, 0, 1024);
	struct ibv_qp *qp[NQP];
	for (int i = 0; i < NQP; i++)
		qp[i] = vt_qp(&d, 512, 64, NULL);
	volatile struct cts *fifo = aligned_alloc(4096, 4096); /* >= sizeof(struct cts) * FIFO_N */
	memset((void *)fifo, 0, sizeof(struct cts) * FIFO_N);
	struct ibv_mr *fmr = vt_mr(&d, (void *)fifo, sizeof(struct cts) * FIFO_N,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	char *data = aligned_alloc(4096, MAXMSG);
	volatile int ro = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *dmr = ibv_reg_mr(d.pd, data, MAXMSG, ro); /* lands in ibv_reg_mr_iova2 */
	CHECK(dmr);
	struct hello me = { { qp[0]->qp_num, qp[1]->qp_num }, (uintptr_t)fifo, fmr->rkey }, peer;
	vt_send(fd, &me, sizeof(me));
	vt_recv(fd, &peer, sizeof(peer));
	connect_all(qp, peer.qpn, IBV_ACCESS_REMOTE_WRITE);
	char c;
	vt_send(fd, "r", 1);
	vt_recv(fd, &c, 1);
	for (int m = 0; m < NMSG; m++) {
		uint32_t size = msg_size(m);
		for (uint32_t i = 0; i < size; i++)
			data[i] = pattern(m, i);
		/* wait for the receiver's CTS entry for message m (one-sided write into our memory) */
		struct cts *e = (struct cts *)&fifo[m % FIFO_N];
		uint64_t end = vt_now_ms() + 20000;
		/* (the entry is placed by one write of the sender's agent: poll every field we use, as the
		 * bytes of one write may land in any order; acquire loads, as on memory a NIC writes) */
		while (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != (uint32_t)m + 1 ||
		       __atomic_load_n(&e->size, __ATOMIC_ACQUIRE) != size ||
		       __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE) == 0 ||
		       __atomic_load_n(&e->rkey, __ATOMIC_ACQUIRE) == 0) {
			CHECK(vt_now_ms() < end);
			sched_yield();
		}
		uint64_t raddr = __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE);
		uint32_t rkey = __atomic_load_n(&e->rkey, __ATOMIC_ACQUIRE);
		/* split over the QPs, 128-byte aligned; each QP's part ends with WRITE_WITH_IMM (size in imm) */
		uint32_t chunk = ((size + NQP - 1) / NQP + 127) & ~127u;
		for (int q = 0; q < NQP; q++) {
			uint32_t off = (uint32_t)q * chunk;
			uint32_t len = off < size ? (size - off < chunk ? size - off : chunk) : 0;
			struct ibv_sge sge = { (uintptr_t)data + off, len, dmr->lkey };
			struct ibv_send_wr wr[2], *bad;
			memset(wr, 0, sizeof(wr));
			wr[0].wr_id = (uint64_t)m;
			wr[0].sg_list = &sge;
			wr[0].num_sge = len ? 1 : 0;
			wr[0].opcode = IBV_WR_RDMA_WRITE;
			wr[0].wr.rdma.remote_addr = raddr + off;
			wr[0].wr.rdma.rkey = rkey;
			wr[0].next = &wr[1];
			wr[1].wr_id = (uint64_t)m;
			wr[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
			wr[1].imm_data = htonl(size);
			wr[1].send_flags = IBV_SEND_SIGNALED;
			CHECK_EQ(ibv_post_send(qp[q], wr, &bad), 0);
		}
		/* NCCL waits for its send completions before reusing the buffer */
		struct ibv_wc wc[NQP];
		vt_wait(&d, d.cq, wc, NQP, 20000);
		for (int q = 0; q < NQP; q++) {
			CHECK_EQ(wc[q].status, IBV_WC_SUCCESS);
			CHECK_EQ(wc[q].wr_id, (uint64_t)m);
		}
	}
	vt_recv(fd, &c, 1);
	for (int i = 0; i < NQP; i++)
		CHECK_EQ(ibv_destroy_qp(qp[i]), 0);
	CHECK_EQ(ibv_dereg_mr(fmr), 0);
	CHECK_EQ(ibv_dereg_mr(dmr), 0);
	vt_close(&d);
	free((void *)fifo);
	free(data);
}

static void receiver(int fd)
{
	vt_name = "nccl/receiver";
	vt_open(&d, 0, 1024);
	struct ibv_qp *qp[NQP];
	for (int i = 0; i < NQP; i++)
		qp[i] = vt_qp(&d, 512, 64, NULL);
	/* the receive buffer: host memory, or "device memory" through DMA-BUF when GDR_LAZY is tested */
	char *buf = aligned_alloc(4096, MAXMSG);
	memset(buf, 0, MAXMSG);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *bmr;
	if (lazy) {
		int mfd = memfd_create("vemu-gpu", 0);
		bmr = ibv_reg_dmabuf_mr(d.pd, 0, MAXMSG, (uintptr_t)buf, mfd, acc);
		close(mfd);
	} else {
		bmr = ibv_reg_mr(d.pd, buf, MAXMSG, acc);
	}
	CHECK(bmr);
	/* the flush QP: connected to itself */
	struct vt_rc frc = VT_RC_DEFAULT;
	frc.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_qp *fqp = vt_qp(&d, 16, 0, NULL);
	vt_connect(&d, fqp, fqp->qp_num, frc);
	int *flush_int = aligned_alloc(64, 64);
	struct ibv_mr *imr = vt_mr(&d, flush_int, 64, IBV_ACCESS_LOCAL_WRITE);
	struct hello me = { { qp[0]->qp_num, qp[1]->qp_num }, 0, 0 }, peer;
	vt_recv(fd, &peer, sizeof(peer));
	vt_send(fd, &me, sizeof(me));
	connect_all(qp, peer.qpn, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	/* receives are pre-posted: no RNR in steady state */
	for (int q = 0; q < NQP; q++)
		for (int i = 0; i < 64; i++) {
			struct ibv_recv_wr wr = { .wr_id = (uint64_t)q }, *bad;
			CHECK_EQ(ibv_post_recv(qp[q], &wr, &bad), 0);
		}
	char c;
	vt_recv(fd, &c, 1);
	vt_send(fd, "r", 1);
	struct cts e;
	int lazy_seen = 0;
	for (int m = 0; m < NMSG; m++) {
		uint32_t size = msg_size(m);
		/* CTS: inline RDMA WRITE of 64 bytes into the sender's FIFO, signaled once in a while */
		memset(&e, 0, sizeof(e));
		e.addr = (uintptr_t)buf;
		e.rkey = bmr->rkey;
		e.size = size;
		e.seq = (uint32_t)m + 1;
		unsigned fl = IBV_SEND_INLINE | ((m % 16 == 15) ? IBV_SEND_SIGNALED : 0);
		CHECK_EQ(vt_post_write(qp[0], IBV_WR_RDMA_WRITE, &e, sizeof(e), 0,
				       peer.fifo_addr + sizeof(struct cts) * (uint64_t)(m % FIFO_N), peer.fifo_rkey, 1000,
				       fl, 0),
			 0);
		/* both QPs' immediates */
		int got = 0;
		while (got < NQP) {
			struct ibv_wc wc;
			vt_wait(&d, d.cq, &wc, 1, 20000);
			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			if (wc.wr_id == 1000)
				continue; /* a CTS completion */
			CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			CHECK_EQ(ntohl(wc.imm_data), size);
			struct ibv_recv_wr wr = { .wr_id = wc.wr_id }, *bad;
			CHECK_EQ(ibv_post_recv(qp[wc.wr_id], &wr, &bad), 0);
			got++;
		}
		if (lazy && size > 1000) {
			/* without the flush, device memory does not show the data yet */
			int stale = 0;
			for (uint32_t i = 0; i < size && !stale; i += 997)
				stale = buf[i] != pattern(m, i);
			lazy_seen += stale;
		}
		/* the GPUDirect flush */
		CHECK_EQ(vt_post_write(fqp, IBV_WR_RDMA_READ, flush_int, 1, imr->lkey, (uintptr_t)buf, bmr->rkey, 2000,
				       IBV_SEND_SIGNALED, 0),
			 0);
		struct ibv_wc fw;
		do
			vt_wait(&d, d.cq, &fw, 1, 20000);
		while (fw.wr_id == 1000);
		CHECK_EQ(fw.wr_id, 2000);
		CHECK_EQ(fw.status, IBV_WC_SUCCESS);
		for (uint32_t i = 0; i < size; i++)
			if (buf[i] != pattern(m, i)) {
				fprintf(stderr, "message %d size %u: byte %u wrong\n", m, size, i);
				CHECK(!"data");
			}
	}
	if (lazy)
		CHECK(lazy_seen > 0);
	vt_send(fd, "d", 1);
	for (int i = 0; i < NQP; i++)
		CHECK_EQ(ibv_destroy_qp(qp[i]), 0);
	CHECK_EQ(ibv_destroy_qp(fqp), 0);
	CHECK_EQ(ibv_dereg_mr(bmr), 0);
	CHECK_EQ(ibv_dereg_mr(imr), 0);
	vt_close(&d);
	free(buf);
	free(flush_int);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *l = getenv("VEMU_GDR_LAZY");
	lazy = l && !strcmp(l, "1");
	int sp[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sp[0]);
		receiver(sp[1]);
		exit(0);
	}
	close(sp[1]);
	sender(sp[0]);
	CHECK_EQ(vt_wait_child(pid), 0);
	printf("test_nccl_pattern%s: OK\n", lazy ? " (GDR_LAZY)" : "");
	return 0;
}
