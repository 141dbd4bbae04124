/* traffic between processes: the target of one-sided operations never calls into verbs for them.
 *   test_procs two     two processes: every opcode, 64 MiB writes (prints GB/s)
 *   test_procs order   10,000 random writes then WRITE_WITH_IMM: the target checks placement at its completion
 *   test_procs ring N  N processes in a ring, each writing to the next
 *   test_procs manyqp  two processes with 64 QP pairs used at once
 *   test_procs peerloss the target dies: RETRY_EXC_ERR after timeout*(retry_cnt+1), then flushes
 *   test_procs rnr      RNR recovered in time (rnr_retry=7) and exhausted (rnr_retry=2) */
#include "vt.h"

#include <fcntl.h>
#include <sys/mman.h>

struct info {
	uint32_t qpn;
	uint32_t rkey;
	uint64_t addr;
	uint64_t len;
};

static struct vt_dev d;

static uint64_t rng_state;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* open, create one QP and an MR of len bytes, exchange info with the peer over fd, connect */
static struct ibv_qp *setup(int fd, char **buf, size_t len, struct ibv_mr **mr, struct info *peer, struct vt_rc rc)
{
	vt_open(&d, 0, 8192);
	*buf = aligned_alloc(4096, len);
	CHECK(*buf);
	memset(*buf, 0, len);
	*mr = vt_mr(&d, *buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_qp *qp = vt_qp(&d, 1024, 64, NULL);
	struct info me = { qp->qp_num, (*mr)->rkey, (uintptr_t)*buf, len };
	vt_send(fd, &me, sizeof(me));
	vt_recv(fd, peer, sizeof(*peer));
	vt_connect(&d, qp, peer->qpn, rc);
	return qp;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ two */
#define BIG (64u << 20)

static void two_target(int fd)
{
	vt_name = "two/target";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *qp = setup(fd, &buf, BIG, &mr, &peer, rc);
	CHECK_EQ(vt_post_recv(qp, buf + 1024, 4096, mr->lkey, 1), 0);
	CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, 2), 0);
	char c;
	vt_send(fd, "r", 1);
	/* 1: the initiator wrote a pattern; we never called verbs for it */
	vt_recv(fd, &c, 1);
	for (int i = 0; i < 1024; i++)
		CHECK_EQ((unsigned char)buf[i], (unsigned char)(i * 3));
	vt_send(fd, "k", 1);
	/* 2: SEND then WRITE_WITH_IMM arrive as receive completions */
	struct ibv_wc wc[2];
	vt_wait(&d, d.cq, wc, 2, 10000);
	CHECK_EQ(wc[0].wr_id, 1);
	CHECK_EQ(wc[0].opcode, IBV_WC_RECV);
	CHECK_EQ(wc[0].byte_len, 11);
	CHECK(!memcmp(buf + 1024, "hello world", 11));
	CHECK_EQ(wc[1].wr_id, 2);
	CHECK_EQ(wc[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(ntohl(wc[1].imm_data), 0x1234);
	CHECK_EQ(wc[1].byte_len, 8192);
	for (int i = 0; i < 8192; i++)
		CHECK_EQ((unsigned char)buf[8192 + i], (unsigned char)(i ^ 0x5a));
	vt_send(fd, "k", 1);
	/* 3: big writes, the initiator reads back; then 4: answer each WRITE_WITH_IMM with one */
	vt_recv(fd, &c, 1);
	CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, 30), 0);
	vt_send(fd, "k", 1);
	for (int i = 0; i < 1000; i++) {
		struct ibv_wc w1;
		vt_wait(&d, d.cq, &w1, 1, 10000);
		CHECK_EQ(w1.status, IBV_WC_SUCCESS);
		CHECK_EQ(w1.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
		if (i < 999)
			CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, 30), 0);
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 8, mr->lkey, peer.addr, peer.rkey, 31, 0, 0),
			 0);
	}
	vt_recv(fd, &c, 1);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	free(buf);
}

static void two_initiator(int fd)
{
	vt_name = "two/initiator";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *qp = setup(fd, &buf, BIG, &mr, &peer, rc);
	char c;
	vt_recv(fd, &c, 1); /* receives posted */
	struct ibv_wc wc;
	for (int i = 0; i < 1024; i++)
		buf[i] = (char)(i * 3);
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 1024, mr->lkey, peer.addr, peer.rkey, 1, IBV_SEND_SIGNALED,
			       0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 10000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	vt_send(fd, "1", 1);
	vt_recv(fd, &c, 1);
	memcpy(buf + 100, "hello world", 11);
	CHECK_EQ(vt_post_write(qp, IBV_WR_SEND, buf + 100, 11, mr->lkey, 0, 0, 2, IBV_SEND_SIGNALED, 0), 0);
	for (int i = 0; i < 8192; i++)
		buf[16384 + i] = (char)(i ^ 0x5a);
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, buf + 16384, 8192, mr->lkey, peer.addr + 8192,
			       peer.rkey, 3, IBV_SEND_SIGNALED, htonl(0x1234)),
		 0);
	struct ibv_wc w2[2];
	vt_wait(&d, d.cq, w2, 2, 10000);
	CHECK_EQ(w2[0].wr_id, 2);
	CHECK_EQ(w2[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(w2[1].wr_id, 3);
	CHECK_EQ(w2[1].status, IBV_WC_SUCCESS);
	vt_recv(fd, &c, 1);
	/* big writes */
	for (size_t i = 0; i < BIG; i += 4096)
		buf[i] = (char)(i >> 12);
	int iters = 8;
	double t0 = now_s();
	for (int it = 0; it < iters; it++)
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, BIG, mr->lkey, peer.addr, peer.rkey, 10,
				       it == iters - 1 ? IBV_SEND_SIGNALED : 0, 0),
			 0);
	vt_wait(&d, d.cq, &wc, 1, 60000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	double t1 = now_s();
	printf("two: RDMA WRITE %u MiB x %d: %.2f GB/s\n", BIG >> 20, iters, (double)BIG * iters / (t1 - t0) / 1e9);
	/* read it back into the second half of a scratch buffer */
	memset(buf, 0, BIG);
	t0 = now_s();
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_READ, buf, BIG, mr->lkey, peer.addr, peer.rkey, 11, IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 60000);
	t1 = now_s();
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	printf("two: RDMA READ %u MiB: %.2f GB/s\n", BIG >> 20, (double)BIG / (t1 - t0) / 1e9);
	for (size_t i = 0; i < BIG; i += 4096)
		CHECK_EQ(buf[i], (char)(i >> 12));
	/* small-message rate */
	t0 = now_s();
	int nsmall = 20000;
	for (int i = 0; i < nsmall; i++) {
		unsigned fl = (i % 64 == 63) ? IBV_SEND_SIGNALED : 0;
		int r;
		while ((r = vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, peer.addr, peer.rkey, 12, fl, 0)) ==
		       ENOMEM)
			vt_wait(&d, d.cq, &wc, 1, 10000);
		CHECK_EQ(r, 0);
	}
	int left = 0;
	while (ibv_poll_cq(d.cq, 1, &wc) > 0)
		;
	(void)left;
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, peer.addr, peer.rkey, 13, IBV_SEND_SIGNALED, 0),
		 0);
	do
		vt_wait(&d, d.cq, &wc, 1, 10000);
	while (wc.wr_id != 13);
	t1 = now_s();
	printf("two: 8-byte WRITEs: %.0f k/s\n", nsmall / (t1 - t0) / 1e3);
	/* ping-pong latency: WRITE_WITH_IMM each way, both sides blocked on their completion channel */
	vt_send(fd, "2", 1);
	vt_recv(fd, &c, 1);
	int nlat = 1000;
	t0 = now_s();
	for (int i = 0; i < nlat; i++) {
		CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, 20), 0);
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 8, mr->lkey, peer.addr, peer.rkey, 21,
				       IBV_SEND_SIGNALED, 0),
			 0);
		struct ibv_wc w2[2];
		vt_wait(&d, d.cq, w2, 2, 10000);
		CHECK_EQ(w2[0].status, IBV_WC_SUCCESS);
		CHECK_EQ(w2[1].status, IBV_WC_SUCCESS);
	}
	t1 = now_s();
	printf("two: WRITE_WITH_IMM ping-pong: %.1f us round trip\n", (t1 - t0) / nlat * 1e6);
	vt_send(fd, "3", 1);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	free(buf);
}

/* ------------------------------------------------------------ order */
#define OBUF (1u << 20)
#define NWRITES 10000

static void order_target(int fd)
{
	vt_name = "order/target";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *qp = setup(fd, &buf, OBUF, &mr, &peer, rc);
	CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, 1), 0);
	vt_send(fd, "r", 1);
	struct ibv_wc wc;
	vt_wait(&d, d.cq, &wc, 1, 60000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	/* replay the same writes on a shadow: every earlier write must be placed, in order */
	char *shadow = calloc(1, OBUF);
	rng_state = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < NWRITES; i++) {
		uint32_t len = (uint32_t)(rng() % 4096) + 1;
		uint64_t off = rng() % (OBUF - len);
		char v = (char)rng();
		memset(shadow + off, v, len);
	}
	CHECK(!memcmp(shadow, buf, OBUF));
	vt_send(fd, "k", 1);
	char c;
	vt_recv(fd, &c, 1);
	free(shadow);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	free(buf);
}

static void order_initiator(int fd)
{
	vt_name = "order/initiator";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *qp = setup(fd, &buf, OBUF, &mr, &peer, rc);
	/* sources: one 4 KiB slot per possible value, so a source is never rewritten while in flight */
	char *srcs = aligned_alloc(4096, 256 * 4096);
	for (int v = 0; v < 256; v++)
		memset(srcs + v * 4096, v, 4096);
	struct ibv_mr *ms = vt_mr(&d, srcs, 256 * 4096, IBV_ACCESS_LOCAL_WRITE);
	char c;
	vt_recv(fd, &c, 1);
	rng_state = 0x9e3779b97f4a7c15ull;
	struct ibv_wc wc[16];
	int outstanding = 0;
	for (int i = 0; i < NWRITES; i++) {
		uint32_t len = (uint32_t)(rng() % 4096) + 1;
		uint64_t off = rng() % (OBUF - len);
		unsigned char v = (unsigned char)rng();
		unsigned fl = (i % 32 == 31) ? IBV_SEND_SIGNALED : 0;
		/* keep the send queue below its depth: wait for signaled completions */
		while (outstanding >= 16) {
			vt_wait(&d, d.cq, wc, 1, 10000);
			CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
			outstanding--;
		}
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, srcs + v * 4096, len, ms->lkey, peer.addr + off, peer.rkey,
				       (uint64_t)i, fl, 0),
			 0);
		if (fl)
			outstanding++;
	}
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, NULL, 0, 0, 0, 0, 99999, IBV_SEND_SIGNALED, htonl(1)), 0);
	outstanding++;
	while (outstanding) {
		vt_wait(&d, d.cq, wc, 1, 10000);
		CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
		outstanding--;
	}
	vt_recv(fd, &c, 1);
	vt_send(fd, "k", 1);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	CHECK_EQ(ibv_dereg_mr(ms), 0);
	vt_close(&d);
	free(buf);
	free(srcs);
}

/* ------------------------------------------------------------ ring of N processes */
#define RBUF (256 * 1024)

static void ring_member(int rank, int n, int *left_fd, int *right_fd)
{
	static char name[32];
	snprintf(name, sizeof(name), "ring/%d", rank);
	vt_name = name;
	vt_open(&d, 0, 1024);
	char *rx = aligned_alloc(4096, RBUF), *tx = aligned_alloc(4096, RBUF);
	memset(rx, 0, RBUF);
	for (int i = 0; i < RBUF; i++)
		tx[i] = (char)(rank * 31 + i);
	struct ibv_mr *mrx = vt_mr(&d, rx, RBUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *mtx = vt_mr(&d, tx, RBUF, IBV_ACCESS_LOCAL_WRITE);
	/* qp_r talks to the right neighbour, qp_l to the left one */
	struct ibv_qp *qp_r = vt_qp(&d, 64, 0, NULL), *qp_l = vt_qp(&d, 64, 0, NULL);
	struct info me_l = { qp_l->qp_num, mrx->rkey, (uintptr_t)rx, RBUF }, me_r = { qp_r->qp_num, 0, 0, 0 };
	struct info from_right, from_left;
	vt_send(*right_fd, &me_r, sizeof(me_r));
	vt_send(*left_fd, &me_l, sizeof(me_l));
	vt_recv(*left_fd, &from_left, sizeof(from_left));
	vt_recv(*right_fd, &from_right, sizeof(from_right));
	struct vt_rc rc = VT_RC_DEFAULT;
	vt_connect(&d, qp_r, from_right.qpn, rc);
	vt_connect(&d, qp_l, from_left.qpn, rc);
	CHECK_EQ(vt_post_recv(qp_l, NULL, 0, 0, 1), 0);
	/* tell the left we're ready to receive; wait for the right to be ready */
	vt_send(*left_fd, "r", 1);
	char c;
	vt_recv(*right_fd, &c, 1);
	for (int k = 0; k < 16; k++)
		CHECK_EQ(vt_post_write(qp_r, IBV_WR_RDMA_WRITE, tx + k * (RBUF / 16), RBUF / 16, mtx->lkey,
				       from_right.addr + (uint64_t)k * (RBUF / 16), from_right.rkey, 100, 0, 0),
			 0);
	CHECK_EQ(vt_post_write(qp_r, IBV_WR_RDMA_WRITE_WITH_IMM, NULL, 0, 0, 0, 0, 101, IBV_SEND_SIGNALED,
			       htonl((uint32_t)rank)),
		 0);
	struct ibv_wc wc[2];
	vt_wait(&d, d.cq, wc, 2, 20000);
	int saw = 0;
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		if (wc[i].wr_id == 1) {
			CHECK_EQ(ntohl(wc[i].imm_data), (uint32_t)((rank + n - 1) % n));
			int l = (rank + n - 1) % n;
			for (int k = 0; k < RBUF; k++)
				CHECK_EQ(rx[k], (char)(l * 31 + k));
			saw |= 1;
		} else {
			CHECK_EQ(wc[i].wr_id, 101);
			saw |= 2;
		}
	}
	CHECK_EQ(saw, 3);
	/* done: make sure nobody tears down while a neighbour still reads */
	vt_send(*left_fd, "d", 1);
	vt_recv(*right_fd, &c, 1);
	CHECK_EQ(ibv_destroy_qp(qp_r), 0);
	CHECK_EQ(ibv_destroy_qp(qp_l), 0);
	CHECK_EQ(ibv_dereg_mr(mrx), 0);
	CHECK_EQ(ibv_dereg_mr(mtx), 0);
	vt_close(&d);
	free(rx);
	free(tx);
}

static int run_ring(int n)
{
	int (*sp)[2] = calloc((size_t)n, sizeof(*sp)); /* sp[i]: link between i and i+1 */
	for (int i = 0; i < n; i++)
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp[i]), 0);
	pid_t *pids = calloc((size_t)n, sizeof(pid_t));
	for (int r = 0; r < n; r++) {
		pids[r] = fork();
		CHECK(pids[r] >= 0);
		if (pids[r] == 0) {
			int right = sp[r][0], left = sp[(r + n - 1) % n][1];
			for (int i = 0; i < n; i++) {
				if (sp[i][0] != right)
					close(sp[i][0]);
				if (sp[i][1] != left)
					close(sp[i][1]);
			}
			ring_member(r, n, &left, &right);
			free(sp);
			free(pids);
			exit(0);
		}
	}
	for (int i = 0; i < n; i++) {
		close(sp[i][0]);
		close(sp[i][1]);
	}
	int rc = 0;
	for (int r = 0; r < n; r++)
		rc |= vt_wait_child(pids[r]);
	free(sp);
	free(pids);
	return rc;
}

/* ------------------------------------------------------------ many QPs */
#define NQP 64

static void manyqp_side(int fd, int initiator)
{
	vt_name = initiator ? "manyqp/initiator" : "manyqp/target";
	vt_open(&d, 0, 4 * NQP + 16);
	char *buf = aligned_alloc(4096, NQP * 4096);
	for (int i = 0; i < NQP * 4096; i++)
		buf[i] = initiator ? (char)(i / 4096 + i) : 0;
	struct ibv_mr *mr = vt_mr(&d, buf, NQP * 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp *qp[NQP];
	struct info me[NQP], peer[NQP];
	for (int i = 0; i < NQP; i++) {
		qp[i] = vt_qp(&d, 8, 0, NULL);
		me[i] = (struct info){ qp[i]->qp_num, mr->rkey, (uintptr_t)buf, NQP * 4096 };
	}
	vt_send(fd, me, sizeof(me));
	vt_recv(fd, peer, sizeof(peer));
	struct vt_rc rc = VT_RC_DEFAULT;
	for (int i = 0; i < NQP; i++)
		vt_connect(&d, qp[i], peer[i].qpn, rc);
	struct ibv_wc wc[NQP];
	char c;
	if (initiator) {
		vt_recv(fd, &c, 1);
		for (int i = 0; i < NQP; i++)
			CHECK_EQ(vt_post_write(qp[i], IBV_WR_RDMA_WRITE_WITH_IMM, buf + i * 4096, 4096, mr->lkey,
					       peer[i].addr + (uint64_t)i * 4096, peer[i].rkey, (uint64_t)i,
					       IBV_SEND_SIGNALED, htonl((uint32_t)i)),
				 0);
		vt_wait(&d, d.cq, wc, NQP, 20000);
		for (int i = 0; i < NQP; i++)
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		vt_recv(fd, &c, 1);
	} else {
		for (int i = 0; i < NQP; i++)
			CHECK_EQ(vt_post_recv(qp[i], NULL, 0, 0, (uint64_t)i), 0);
		vt_send(fd, "r", 1);
		vt_wait(&d, d.cq, wc, NQP, 20000);
		int seen[NQP] = { 0 };
		for (int i = 0; i < NQP; i++) {
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
			int q = (int)ntohl(wc[i].imm_data);
			CHECK(q >= 0 && q < NQP);
			CHECK_EQ(wc[i].qp_num, qp[q]->qp_num);
			seen[q]++;
			for (int k = 0; k < 4096; k++)
				CHECK_EQ(buf[q * 4096 + k], (char)(q + q * 4096 + k));
		}
		for (int i = 0; i < NQP; i++)
			CHECK_EQ(seen[i], 1);
		vt_send(fd, "d", 1);
	}
	for (int i = 0; i < NQP; i++)
		CHECK_EQ(ibv_destroy_qp(qp[i]), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	free(buf);
}

/* ------------------------------------------------------------ bidirectional bulk */
#define BIDIR (16u << 20)

/* both processes write and read 4 MiB messages to each other at the same time (full socket buffers both
 * ways must not deadlock the agents), each with its own pattern */
static void bidir_side(int fd, int side)
{
	vt_name = side ? "bidir/b" : "bidir/a";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *qp = setup(fd, &buf, 2 * BIDIR, &mr, &peer, rc);
	/* first half: what I send (and what the peer reads back), second half: what the peer writes to me */
	for (size_t i = 0; i < BIDIR; i++)
		buf[i] = (char)(i * 13 + (size_t)side * 101);
	char c;
	vt_send(fd, "r", 1);
	vt_recv(fd, &c, 1);
	int n = 0;
	for (uint32_t off = 0; off < BIDIR; off += 4u << 20) {
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf + off, 4u << 20, mr->lkey, peer.addr + BIDIR + off,
				       peer.rkey, (uint64_t)n, IBV_SEND_SIGNALED, 0),
			 0);
		n++;
	}
	char *rd = malloc(BIDIR);
	struct ibv_mr *rmr = vt_mr(&d, rd, BIDIR, IBV_ACCESS_LOCAL_WRITE);
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_READ, rd, BIDIR, rmr->lkey, peer.addr, peer.rkey, 100, IBV_SEND_SIGNALED,
			       0),
		 0);
	n++;
	struct ibv_wc wc[8];
	vt_wait(&d, d.cq, wc, n, 60000);
	for (int i = 0; i < n; i++)
		CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
	for (size_t i = 0; i < BIDIR; i += 4093)
		CHECK_EQ(rd[i], (char)(i * 13 + (size_t)(1 - side) * 101));
	vt_send(fd, "w", 1); /* my writes are complete at the peer */
	vt_recv(fd, &c, 1);
	for (size_t i = 0; i < BIDIR; i += 4093)
		CHECK_EQ(buf[BIDIR + i], (char)(i * 13 + (size_t)(1 - side) * 101));
	vt_send(fd, "d", 1);
	vt_recv(fd, &c, 1);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	CHECK_EQ(ibv_dereg_mr(rmr), 0);
	vt_close(&d);
	free(buf);
	free(rd);
}

/* ------------------------------------------------------------ teardown under traffic */
/* the target destroys its QP and deregisters its memory while writes stream in; the initiator's QP fails
 * with RETRY_EXC_ERR (what follows is flushed) and nobody crashes; then the initiator destroys its QP with
 * work still queued, and both close their devices. */
static void teardown_side(int fd, int initiator)
{
	vt_name = initiator ? "teardown/initiator" : "teardown/target";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 12; /* 16.8 ms x 8 */
	struct ibv_qp *qp = setup(fd, &buf, 8u << 20, &mr, &peer, rc);
	char c;
	vt_send(fd, "r", 1);
	vt_recv(fd, &c, 1);
	if (!initiator) {
		vt_recv(fd, &c, 1); /* traffic is flowing */
		CHECK_EQ(ibv_destroy_qp(qp), 0);
		CHECK_EQ(ibv_dereg_mr(mr), 0);
		vt_send(fd, "x", 1);
		vt_recv(fd, &c, 1);
		vt_close(&d);
		free(buf);
		return;
	}
	struct ibv_wc wc[64];
	int failed = 0, n = 0, told = 0, flushed = 0;
	uint64_t end = vt_now_ms() + 30000;
	while (!failed) {
		CHECK(vt_now_ms() < end);
		int r = vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 1u << 20, mr->lkey, peer.addr, peer.rkey, (uint64_t)n,
				      n % 8 == 7 ? IBV_SEND_SIGNALED : 0, 0);
		if (r == ENOMEM || n % 8 == 7) {
			vt_wait(&d, d.cq, wc, 1, 20000);
			if (wc[0].status != IBV_WC_SUCCESS) {
				CHECK_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
				failed = 1;
			}
		} else {
			CHECK_EQ(r, 0);
		}
		if (r == 0)
			n++;
		if (n == 16 && !told) {
			vt_send(fd, "g", 1);
			vt_recv(fd, &c, 1); /* the target's QP is gone */
			told = 1;
		}
	}
	/* everything after the failure is flushed */
	int k;
	while ((k = ibv_poll_cq(d.cq, 64, wc)) > 0)
		for (int i = 0; i < k; i++) {
			CHECK_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
			flushed++;
		}
	printf("teardown: %d writes posted, RETRY_EXC then %d flushed\n", n, flushed);
	/* destroy with work still queued */
	for (int i = 0; i < 3; i++)
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 4096, mr->lkey, peer.addr, peer.rkey, 1000, 0, 0), 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_send(fd, "d", 1);
	vt_close(&d);
	free(buf);
}

/* ------------------------------------------------------------ peer loss */
static void peerloss_initiator(int fd, pid_t target)
{
	vt_name = "peerloss/initiator";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 18;  /* 1.07 s, x VEMU_TIME_SCALE */
	rc.retry_cnt = 3;
	struct ibv_qp *qp = setup(fd, &buf, 4096, &mr, &peer, rc);
	struct ibv_wc wc[3];
	/* first, it works */
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 64, mr->lkey, peer.addr, peer.rkey, 1, IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 10000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	/* the target is gone */
	kill(target, SIGKILL);
	CHECK_EQ(vt_wait_child(target), 100);
	const char *ts = getenv("VEMU_TIME_SCALE");
	double scale = ts ? atof(ts) : 1.0;
	double expect = 4.096e-6 * (double)(1u << 18) * (3 + 1) * scale;
	double t0 = now_s();
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 64, mr->lkey, peer.addr, peer.rkey, 2, IBV_SEND_SIGNALED, 0),
		 0);
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_READ, buf, 64, mr->lkey, peer.addr, peer.rkey, 3, 0, 0), 0);
	vt_wait(&d, d.cq, wc, 2, 20000 + (int)(expect * 2000));
	double el = now_s() - t0;
	CHECK_EQ(wc[0].wr_id, 2);
	CHECK_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(wc[1].wr_id, 3);
	CHECK_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	printf("peerloss: RETRY_EXC after %.1f ms (expected %.1f ms)\n", el * 1e3, expect * 1e3);
	CHECK(el >= expect * 0.95);
	CHECK(el < expect * 3 + 2.0);
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	CHECK_EQ(a.qp_state, IBV_QPS_ERR);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	free(buf);
}

static void peerloss_target(int fd)
{
	vt_name = "peerloss/target";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	setup(fd, &buf, 4096, &mr, &peer, rc);
	for (;;)
		pause(); /* killed by the initiator */
}

/* ------------------------------------------------------------ RNR */
static int trace_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char line[512];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

static void rnr_target(int fd)
{
	vt_name = "rnr/target";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.min_rnr_timer = 20; /* 10.24 ms x VEMU_TIME_SCALE */
	struct ibv_qp *qp = setup(fd, &buf, 4096, &mr, &peer, rc);
	char c;
	/* phase 1: the SEND meets no receive; once the RNR shows in the trace, post one in time */
	vt_send(fd, "1", 1);
	const char *tr = getenv("VEMU_TRACE");
	CHECK(tr);
	char needle[64];
	snprintf(needle, sizeof(needle), "rnr qp=0x%x", qp->qp_num);
	uint64_t end = vt_now_ms() + 20000;
	while (!trace_has(tr, needle)) {
		CHECK(vt_now_ms() < end);
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL); /* polling the trace file for a condition, not timing */
	}
	struct ibv_wc wc;
	CHECK(vt_quiet(d.cq, 1));
	CHECK_EQ(vt_post_recv(qp, buf, 64, mr->lkey, 7), 0);
	vt_wait(&d, d.cq, &wc, 1, 10000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 5);
	CHECK(!memcmp(buf, "early", 5));
	/* phase 2: a second QP pair; no receive ever: the initiator's rnr_retry=2 is exhausted */
	struct ibv_qp *qp2 = vt_qp(&d, 16, 0, NULL);
	struct info me2 = { qp2->qp_num, mr->rkey, (uintptr_t)buf, 4096 }, peer2;
	vt_send(fd, &me2, sizeof(me2));
	vt_recv(fd, &peer2, sizeof(peer2));
	vt_connect(&d, qp2, peer2.qpn, rc);
	vt_send(fd, "2", 1);
	vt_recv(fd, &c, 1);
	CHECK_EQ(ibv_poll_cq(d.cq, 1, &wc), 0);
	vt_send(fd, "3", 1);
	vt_recv(fd, &c, 1);
	CHECK_EQ(ibv_destroy_qp(qp2), 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	free(buf);
}

static void rnr_initiator(int fd)
{
	vt_name = "rnr/initiator";
	char *buf;
	struct ibv_mr *mr;
	struct info peer;
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.rnr_retry = 7;
	struct ibv_qp *qp = setup(fd, &buf, 4096, &mr, &peer, rc);
	char c;
	vt_recv(fd, &c, 1);
	memcpy(buf, "early", 5);
	CHECK_EQ(vt_post_write(qp, IBV_WR_SEND, buf, 5, mr->lkey, 0, 0, 1, IBV_SEND_SIGNALED, 0), 0);
	struct ibv_wc wc;
	vt_wait(&d, d.cq, &wc, 1, 20000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	/* phase 2: a fresh connection with rnr_retry = 2 */
	struct ibv_qp *qp1 = qp;
	qp = vt_qp(&d, 16, 0, NULL);
	struct info me2 = { qp->qp_num, mr->rkey, (uintptr_t)buf, 4096 }, peer2;
	vt_recv(fd, &peer2, sizeof(peer2));
	vt_send(fd, &me2, sizeof(me2));
	rc.rnr_retry = 2;
	vt_connect(&d, qp, peer2.qpn, rc);
	vt_recv(fd, &c, 1);
	peer = peer2;
	double t0 = now_s();
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 5, mr->lkey, peer.addr, peer.rkey, 2,
			       IBV_SEND_SIGNALED, 0),
		 0);
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 5, mr->lkey, peer.addr, peer.rkey, 3, 0, 0), 0);
	struct ibv_wc w2[2];
	vt_wait(&d, d.cq, w2, 2, 20000);
	double el = now_s() - t0;
	CHECK_EQ(w2[0].wr_id, 2);
	CHECK_EQ(w2[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
	CHECK_EQ(w2[1].wr_id, 3);
	CHECK_EQ(w2[1].status, IBV_WC_WR_FLUSH_ERR);
	const char *ts = getenv("VEMU_TIME_SCALE");
	double expect = 10.24e-3 * 2 * (ts ? atof(ts) : 1.0);
	printf("rnr: exhausted after %.2f ms (>= %.2f ms expected)\n", el * 1e3, expect * 1e3);
	CHECK(el >= expect * 0.9);
	vt_send(fd, "x", 1);
	vt_recv(fd, &c, 1);
	vt_send(fd, "y", 1);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_qp(qp1), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	free(buf);
}

/* ------------------------------------------------------------ main */
/* ------------------------------------------------------------ dereg under traffic, memory gone right after */
/* As with a real HCA, once ibv_dereg_mr returns the emulator must not touch that memory any more, even for a
 * request it is in the middle of: the caller frees it (NCCL's deregMr then cudaFree/free; the plugin's abort test
 * saw the agent write into freed memory). Here the memory is remapped PROT_NONE right after dereg, so a late
 * access faults (SIGSEGV, or EFAULT from readv/sendmsg, which killed the connection: RETRY_EXC_ERR).
 * A: the initiator deregisters the source of a 64 MiB WRITE_WITH_IMM while the target process is stopped
 * (SIGSTOP, confirmed by waitpid), so the target cannot have read it whole and nothing can have acknowledged it
 * (the stream's buffers hold far less than 64 MiB). A NIC cannot send the rest: the WRITE fails with LOC_PROT_ERR, and the target completes nothing (its receive stays posted; the
 * emulator's frame goes out void, zeros in place of the bytes: the frame trailer, agent.c). B, on a second QP: the
 * target deregisters the sink of a 64 MiB WRITE as soon as its first bytes land; the rest is dropped and the WRITE
 * completes. Nothing faults. */
#define DBIG (64u << 20)

static pid_t pair_child; /* run_pair's target process, for the initiator (dereg_busy stops it) */

static char *map_rw(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	return p;
}

static void unmap_keep(char *p, size_t len)
{
	/* gone, but the range stays reserved: nothing else can be mapped there and silently absorb a late access */
	CHECK(mmap(p, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == (void *)p);
}

/* a connected QP; the peer learns its number (and this side's buffer and key, for the target) */
static struct ibv_qp *dqp(int fd, struct ibv_mr *mr, char *buf, struct info *peer)
{
	struct ibv_qp *qp = vt_qp(&d, 64, 16, NULL);
	struct info me = { qp->qp_num, mr ? mr->rkey : 0, (uintptr_t)buf, DBIG };
	vt_send(fd, &me, sizeof(me));
	vt_recv(fd, peer, sizeof(*peer));
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 18; /* 1.07 s x 8: a dead connection shows in ~9 s */
	vt_connect(&d, qp, peer->qpn, rc);
	return qp;
}

static void dereg_target(int fd)
{
	vt_name = "dereg_busy/target";
	char *buf = map_rw(DBIG), c;
	struct ibv_mr *mr;
	struct info peer;
	struct ibv_wc wc;
	vt_open(&d, 0, 64);
	mr = vt_mr(&d, buf, DBIG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_qp *qp = dqp(fd, mr, buf, &peer);
	CHECK_EQ(vt_post_recv(qp, NULL, 0, 0, 77), 0); /* for A's immediate */
	vt_send(fd, "r", 1);
	vt_recv(fd, &c, 1); /* A failed at the initiator (this process was stopped meanwhile): the NAK that failed it
			     * left after this side's decision */
	int k = ibv_poll_cq(d.cq, 1, &wc);
	if (k != 0)
		fprintf(stderr, "FAIL [%s]: a void WRITE_WITH_IMM completed here (wr_id %llu, status %s)\n", vt_name,
			(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	CHECK_EQ(k, 0);
	struct ibv_qp *qp2 = dqp(fd, NULL, buf, &peer);
	uint64_t end = vt_now_ms() + 30000;
	while (__atomic_load_n((volatile char *)buf, __ATOMIC_ACQUIRE) != 0x22) { /* B's first bytes */
		CHECK(vt_now_ms() < end);
		struct timespec ts = { 0, 100 * 1000 };
		nanosleep(&ts, NULL);
	}
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	unmap_keep(buf, DBIG);
	vt_send(fd, "x", 1);
	vt_recv(fd, &c, 1);
	CHECK_EQ(ibv_destroy_qp(qp2), 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	vt_close(&d);
}

static void dereg_initiator(int fd)
{
	vt_name = "dereg_busy/initiator";
	char *src = map_rw(DBIG), c;
	memset(src, 0x11, DBIG);
	struct ibv_mr *mr;
	struct info peer;
	vt_open(&d, 0, 64);
	mr = vt_mr(&d, src, DBIG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_qp *qp = dqp(fd, mr, src, &peer);
	vt_recv(fd, &c, 1);
	struct ibv_wc wc;
	/* A: the source goes away while the target is stopped: the frame is under way or not started, or the WR not
	 * yet on the wire (its lkey gone: LOC_PROT_ERR too, as on hardware); it fails in every case */
	int st;
	CHECK_EQ(kill(pair_child, SIGSTOP), 0);
	CHECK(waitpid(pair_child, &st, WUNTRACED) == pair_child && WIFSTOPPED(st));
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, src, DBIG, mr->lkey, peer.addr, peer.rkey, 1,
			       IBV_SEND_SIGNALED, 0xa),
		 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	unmap_keep(src, DBIG);
	CHECK_EQ(kill(pair_child, SIGCONT), 0);
	vt_wait(&d, d.cq, &wc, 1, 30000);
	if (wc.status != IBV_WC_LOC_PROT_ERR)
		fprintf(stderr, "FAIL [%s]: the WRITE whose source went away mid-transfer ended %s\n", vt_name,
			ibv_wc_status_str(wc.status));
	CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
	vt_send(fd, "a", 1);
	/* B: the sink goes away while the payload streams in (a second QP: A's is in error) */
	struct info peer2;
	struct ibv_qp *qp2 = dqp(fd, NULL, NULL, &peer2);
	char *src2 = map_rw(DBIG);
	memset(src2, 0x22, DBIG);
	struct ibv_mr *mr2 = vt_mr(&d, src2, DBIG, IBV_ACCESS_LOCAL_WRITE);
	CHECK_EQ(vt_post_write(qp2, IBV_WR_RDMA_WRITE, src2, DBIG, mr2->lkey, peer.addr, peer.rkey, 2, IBV_SEND_SIGNALED,
			       0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 30000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	vt_recv(fd, &c, 1); /* the target deregistered and unmapped */
	/* a new request for the gone rkey is refused */
	CHECK_EQ(vt_post_write(qp2, IBV_WR_RDMA_WRITE, src2, 4096, mr2->lkey, peer.addr, peer.rkey, 3, IBV_SEND_SIGNALED,
			       0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 30000);
	CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
	printf("dereg_busy: a WRITE_WITH_IMM whose source went away mid-transfer failed (LOC_PROT_ERR) and completed "
	       "nothing at the target; a WRITE whose sink went away completed; the old rkey is refused\n");
	vt_send(fd, "d", 1);
	CHECK_EQ(ibv_destroy_qp(qp2), 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dereg_mr(mr2), 0);
	munmap(src2, DBIG);
	vt_close(&d);
}

static int run_pair(void (*initiator)(int), void (*target)(int))
{
	int sp[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	pid_t p = fork();
	pair_child = p;
	CHECK(p >= 0);
	if (p == 0) {
		close(sp[0]);
		target(sp[1]);
		exit(0);
	}
	close(sp[1]);
	initiator(sp[0]);
	return vt_wait_child(p);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *t = argc > 1 ? argv[1] : "two";
	if (!strcmp(t, "two"))
		return run_pair(two_initiator, two_target);
	if (!strcmp(t, "order"))
		return run_pair(order_initiator, order_target);
	if (!strcmp(t, "ring"))
		return run_ring(argc > 2 ? atoi(argv[2]) : 3);
	if (!strcmp(t, "manyqp")) {
		int sp[2];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			manyqp_side(sp[1], 0);
			exit(0);
		}
		manyqp_side(sp[0], 1);
		return vt_wait_child(p);
	}
	if (!strcmp(t, "teardown")) {
		int sp[2];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			teardown_side(sp[1], 0);
			exit(0);
		}
		teardown_side(sp[0], 1);
		return vt_wait_child(p);
	}
	if (!strcmp(t, "bidir")) {
		int sp[2];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			bidir_side(sp[1], 1);
			exit(0);
		}
		bidir_side(sp[0], 0);
		return vt_wait_child(p);
	}
	if (!strcmp(t, "peerloss")) {
		int sp[2];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			peerloss_target(sp[1]);
			exit(0);
		}
		peerloss_initiator(sp[0], p);
		return 0;
	}
	if (!strcmp(t, "rnr"))
		return run_pair(rnr_initiator, rnr_target);
	if (!strcmp(t, "dereg_busy"))
		return run_pair(dereg_initiator, dereg_target);
	fprintf(stderr, "unknown test %s\n", t);
	return 2;
}
