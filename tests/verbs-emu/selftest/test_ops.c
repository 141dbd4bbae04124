/* every opcode inside one process: a pair of QPs and a QP connected to itself; zero-length, inline,
 * unsignaled, multi-SGE, CQ batches, the key/access matrix and the flush after an error.
 * Run with VEMU_DEVICES=vemu0:roce (and again with vemu0:ib). With VEMU_MAX_MSG_SZ set, only the max_msg_sz
 * check runs (at that size). */
#include <sys/mman.h>

#include "vt.h"

#define N 65536

static struct vt_dev d;
static char *src, *dst;
static struct ibv_mr *msrc, *mdst;

static struct ibv_qp *pair_a, *pair_b, *self_qp;

static void setup(void)
{
	vt_open(&d, 0, 4096);
	src = aligned_alloc(4096, N);
	dst = aligned_alloc(4096, N);
	for (int i = 0; i < N; i++)
		src[i] = (char)(i * 7 + 1);
	memset(dst, 0, N);
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	msrc = vt_mr(&d, src, N, all);
	mdst = vt_mr(&d, dst, N, all);
	struct vt_rc rc = VT_RC_DEFAULT;
	pair_a = vt_qp(&d, 256, 64, NULL);
	pair_b = vt_qp(&d, 256, 64, NULL);
	self_qp = vt_qp(&d, 256, 64, NULL);
	vt_connect(&d, pair_a, pair_b->qp_num, rc);
	vt_connect(&d, pair_b, pair_a->qp_num, rc);
	vt_connect(&d, self_qp, self_qp->qp_num, rc);
}

static void one(struct ibv_qp *qp, int op, void *buf, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		unsigned flags, int expect_status)
{
	struct ibv_wc wc;
	CHECK_EQ(vt_post_write(qp, op, buf, len, lkey, raddr, rkey, 42, flags | IBV_SEND_SIGNALED, 0), 0);
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.wr_id, 42);
	CHECK_EQ(wc.status, expect_status);
	CHECK_EQ(wc.qp_num, qp->qp_num);
	if (expect_status == IBV_WC_SUCCESS)
		CHECK_EQ(wc.opcode, op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE);
}

static void test_write_read(struct ibv_qp *qp)
{
	vt_name = "write_read";
	memset(dst, 0, N);
	one(qp, IBV_WR_RDMA_WRITE, src, N, msrc->lkey, (uintptr_t)dst, mdst->rkey, 0, IBV_WC_SUCCESS);
	CHECK(!memcmp(src, dst, N));
	/* a sub-range, unaligned */
	memset(dst, 0, N);
	one(qp, IBV_WR_RDMA_WRITE, src + 3, 1001, msrc->lkey, (uintptr_t)dst + 17, mdst->rkey, 0, IBV_WC_SUCCESS);
	CHECK(!memcmp(src + 3, dst + 17, 1001));
	CHECK_EQ(dst[16], 0);
	CHECK_EQ(dst[17 + 1001], 0);
	/* READ pulls it back */
	memset(dst, 0, N);
	one(qp, IBV_WR_RDMA_READ, dst, N / 2, mdst->lkey, (uintptr_t)src + N / 2, msrc->rkey, 0, IBV_WC_SUCCESS);
	CHECK(!memcmp(dst, src + N / 2, N / 2));
	/* zero-length WRITE and READ (no key checks on an empty range) */
	one(qp, IBV_WR_RDMA_WRITE, NULL, 0, 0, 0, 0, 0, IBV_WC_SUCCESS);
	one(qp, IBV_WR_RDMA_READ, NULL, 0, 0, 0, 0, 0, IBV_WC_SUCCESS);
	/* inline: the source may change right after the post */
	char tmp[64];
	memset(tmp, 'x', sizeof(tmp));
	struct ibv_wc wc;
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, tmp, 64, 0 /* lkey ignored */, (uintptr_t)dst, mdst->rkey, 7,
			       IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0),
		 0);
	memset(tmp, 'y', sizeof(tmp));
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(dst[0], 'x');
	CHECK_EQ(dst[63], 'x');
	/* inline larger than max_inline_data is refused at post time */
	char big[128];
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, big, 128, 0, (uintptr_t)dst, mdst->rkey, 7,
			       IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0),
		 EINVAL);
}

static void test_send_recv(struct ibv_qp *a, struct ibv_qp *b)
{
	vt_name = "send_recv";
	memset(dst, 0, N);
	/* multi-SGE receive, multi-SGE send */
	struct ibv_sge rs[3] = { { (uintptr_t)dst, 10, mdst->lkey },
				 { (uintptr_t)dst + 100, 20, mdst->lkey },
				 { (uintptr_t)dst + 1000, 4000, mdst->lkey } };
	struct ibv_recv_wr rw = { .wr_id = 500, .sg_list = rs, .num_sge = 3 }, *rbad;
	CHECK_EQ(ibv_post_recv(b, &rw, &rbad), 0);
	struct ibv_sge ss[2] = { { (uintptr_t)src, 25, msrc->lkey }, { (uintptr_t)src + 50, 100, msrc->lkey } };
	struct ibv_send_wr sw, *sbad;
	memset(&sw, 0, sizeof(sw));
	sw.wr_id = 501;
	sw.sg_list = ss;
	sw.num_sge = 2;
	sw.opcode = IBV_WR_SEND_WITH_IMM;
	sw.imm_data = htonl(0xabcd);
	sw.send_flags = IBV_SEND_SIGNALED;
	CHECK_EQ(ibv_post_send(a, &sw, &sbad), 0);
	struct ibv_wc wc[2];
	vt_wait(&d, d.cq, wc, 2, 5000);
	int ri = wc[0].wr_id == 500 ? 0 : 1;
	CHECK_EQ(wc[ri].wr_id, 500);
	CHECK_EQ(wc[ri].status, IBV_WC_SUCCESS);
	CHECK_EQ(wc[ri].opcode, IBV_WC_RECV);
	CHECK_EQ(wc[ri].byte_len, 125);
	CHECK(wc[ri].wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(ntohl(wc[ri].imm_data), 0xabcd);
	CHECK_EQ(wc[ri].qp_num, b->qp_num);
	CHECK_EQ(wc[ri].src_qp, a->qp_num);
	CHECK_EQ(wc[1 - ri].wr_id, 501);
	CHECK_EQ(wc[1 - ri].opcode, IBV_WC_SEND);
	char expect[125];
	memcpy(expect, src, 25);
	memcpy(expect + 25, src + 50, 100);
	CHECK(!memcmp(dst, expect, 10));
	CHECK(!memcmp(dst + 100, expect + 10, 20));
	CHECK(!memcmp(dst + 1000, expect + 30, 95));
	CHECK_EQ(dst[1000 + 95], 0);
	/* WRITE_WITH_IMM consumes a receive; byte_len is the written length */
	memset(dst, 0, N);
	CHECK_EQ(vt_post_recv(b, NULL, 0, 0, 600), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE_WITH_IMM, src, 3000, msrc->lkey, (uintptr_t)dst + 8, mdst->rkey, 601,
			       IBV_SEND_SIGNALED, htonl(77)),
		 0);
	vt_wait(&d, d.cq, wc, 2, 5000);
	ri = wc[0].wr_id == 600 ? 0 : 1;
	CHECK_EQ(wc[ri].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc[ri].byte_len, 3000);
	CHECK_EQ(ntohl(wc[ri].imm_data), 77);
	CHECK(!memcmp(dst + 8, src, 3000));
	/* zero-length SEND and zero-length WRITE_WITH_IMM */
	CHECK_EQ(vt_post_recv(b, dst, 16, mdst->lkey, 700), 0);
	CHECK_EQ(vt_post_recv(b, NULL, 0, 0, 701), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_SEND, NULL, 0, 0, 0, 0, 702, IBV_SEND_SIGNALED, 0), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE_WITH_IMM, NULL, 0, 0, 0, 0, 703, IBV_SEND_SIGNALED, htonl(5)), 0);
	struct ibv_wc w4[4];
	vt_wait(&d, d.cq, w4, 4, 5000);
	int seen = 0;
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(w4[i].status, IBV_WC_SUCCESS);
		seen |= 1 << (w4[i].wr_id - 700);
		if (w4[i].wr_id == 700) {
			CHECK_EQ(w4[i].opcode, IBV_WC_RECV);
			CHECK_EQ(w4[i].byte_len, 0);
		}
		if (w4[i].wr_id == 701) {
			CHECK_EQ(w4[i].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			CHECK_EQ(ntohl(w4[i].imm_data), 5);
		}
	}
	CHECK_EQ(seen, 15);
	/* inline SEND */
	CHECK_EQ(vt_post_recv(b, dst, 64, mdst->lkey, 800), 0);
	char msg[32] = "inline hello";
	CHECK_EQ(vt_post_write(a, IBV_WR_SEND, msg, 32, 0, 0, 0, 801, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0), 0);
	memset(msg, 0, sizeof(msg));
	vt_wait(&d, d.cq, wc, 2, 5000);
	CHECK(!strcmp(dst, "inline hello"));
}

/* unsignaled WRs produce no completion; CQ polled in batches */
static void test_unsignaled_batch(struct ibv_qp *qp)
{
	vt_name = "unsignaled_batch";
	struct ibv_wc wc[64];
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 100; i++) {
			unsigned fl = (i % 10 == 9) ? IBV_SEND_SIGNALED : 0;
			CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, src + i * 64, 64, msrc->lkey, (uintptr_t)dst + i * 64,
					       mdst->rkey, (uint64_t)i, fl, 0),
				 0);
		}
		vt_wait(&d, d.cq, wc, 10, 5000);
		for (int i = 0; i < 10; i++) {
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
			CHECK_EQ(wc[i].wr_id, (uint64_t)(i * 10 + 9)); /* in order */
		}
		CHECK(!memcmp(dst, src, 6400));
		CHECK_EQ(ibv_poll_cq(d.cq, 64, wc), 0);
	}
	/* a batch larger than the poll size */
	for (int i = 0; i < 50; i++)
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, src, 8, msrc->lkey, (uintptr_t)dst, mdst->rkey, (uint64_t)i,
				       IBV_SEND_SIGNALED, 0),
			 0);
	int got = 0;
	while (got < 50) {
		vt_wait(&d, d.cq, wc, 1, 5000);
		CHECK_EQ(wc[0].wr_id, (uint64_t)got);
		got++;
		int k = ibv_poll_cq(d.cq, 7, wc);
		for (int i = 0; i < k; i++)
			CHECK_EQ(wc[i].wr_id, (uint64_t)got + (uint64_t)i);
		got += k;
	}
	/* sq_sig_all */
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = d.cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.sq_sig_all = 1;
	struct ibv_qp *s = ibv_create_qp(d.pd, &ia);
	CHECK(s);
	struct vt_rc rc = VT_RC_DEFAULT;
	vt_connect(&d, s, s->qp_num, rc);
	CHECK_EQ(vt_post_write(s, IBV_WR_RDMA_WRITE, src, 8, msrc->lkey, (uintptr_t)dst, mdst->rkey, 9, 0, 0), 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].wr_id, 9);
	CHECK_EQ(ibv_destroy_qp(s), 0);
	/* send-queue slots, as on hardware: unsignaled WRs keep theirs until a later completion is polled */
	ia.sq_sig_all = 0;
	s = ibv_create_qp(d.pd, &ia); /* max_send_wr = 4 */
	CHECK(s);
	vt_connect(&d, s, s->qp_num, rc);
	CHECK_EQ(ibv_req_notify_cq(d.cq, 0), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(vt_post_write(s, IBV_WR_RDMA_WRITE, src, 8, msrc->lkey, (uintptr_t)dst, mdst->rkey,
				       (uint64_t)(20 + i), i == 3 ? IBV_SEND_SIGNALED : 0, 0),
			 0);
	CHECK_EQ(vt_post_write(s, IBV_WR_RDMA_WRITE, src, 8, msrc->lkey, (uintptr_t)dst, mdst->rkey, 24, 0, 0), ENOMEM);
	/* the signaled completion has arrived (event) but is not polled yet: still full */
	struct ibv_cq *ecq;
	void *ectx;
	CHECK_EQ(ibv_get_cq_event(d.ch, &ecq, &ectx), 0);
	ibv_ack_cq_events(ecq, 1);
	CHECK_EQ(vt_post_write(s, IBV_WR_RDMA_WRITE, src, 8, msrc->lkey, (uintptr_t)dst, mdst->rkey, 24, 0, 0), ENOMEM);
	CHECK_EQ(ibv_poll_cq(d.cq, 8, wc), 1);
	CHECK_EQ(wc[0].wr_id, 23);
	/* polled: all four slots are free again */
	for (int i = 0; i < 4; i++)
		CHECK_EQ(vt_post_write(s, IBV_WR_RDMA_WRITE, src, 8, msrc->lkey, (uintptr_t)dst, mdst->rkey,
				       (uint64_t)(30 + i), i == 3 ? IBV_SEND_SIGNALED : 0, 0),
			 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].wr_id, 33);
	CHECK_EQ(ibv_destroy_qp(s), 0);
}

/* the key/access matrix on fresh QP pairs: errors complete at the initiator and move the QP to ERR */
static struct ibv_qp *fresh(struct ibv_qp **peer, unsigned peer_access)
{
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a = vt_qp(&d, 16, 0, NULL);
	struct ibv_qp *b = vt_qp(&d, 16, 0, NULL);
	vt_connect(&d, a, b->qp_num, rc);
	rc.access = peer_access;
	vt_connect(&d, b, a->qp_num, rc);
	*peer = b;
	return a;
}

static void drain_flush(struct ibv_qp *qp)
{
	/* after an error every later WR is flushed */
	struct ibv_wc wc;
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, src, 8, msrc->lkey, (uintptr_t)dst, mdst->rkey, 99,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc.wr_id, 99);
}

static void settle_err(struct ibv_qp *qp)
{
	/* the QP state is updated by the agent; ibv_query_qp reads it under the lock */
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	CHECK_EQ(a.qp_state, IBV_QPS_ERR);
}

static void test_access_matrix(void)
{
	vt_name = "access_matrix";
	static char buf[4096];
	struct ibv_wc wc;
	struct {
		int mr_access;
		int op;
		int expect;
	} cases[] = {
		{ IBV_ACCESS_LOCAL_WRITE, IBV_WR_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, IBV_WR_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, IBV_WR_RDMA_WRITE, IBV_WC_SUCCESS },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, IBV_WR_RDMA_READ, IBV_WC_REM_ACCESS_ERR },
		{ IBV_ACCESS_REMOTE_READ, IBV_WR_RDMA_READ, IBV_WC_SUCCESS },
		{ 0, IBV_WR_RDMA_READ, IBV_WC_REM_ACCESS_ERR },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ibv_qp *peer;
		struct ibv_qp *qp = fresh(&peer, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
		struct ibv_mr *m = ibv_reg_mr(d.pd, buf, sizeof(buf), cases[i].mr_access);
		CHECK(m);
		one(qp, cases[i].op, dst, 64, mdst->lkey, (uintptr_t)buf, m->rkey, 0, cases[i].expect);
		if (cases[i].expect != IBV_WC_SUCCESS) {
			settle_err(qp);
			drain_flush(qp);
		}
		CHECK_EQ(ibv_dereg_mr(m), 0);
		CHECK_EQ(ibv_destroy_qp(qp), 0);
		CHECK_EQ(ibv_destroy_qp(peer), 0);
	}
	/* bad rkey, out of bounds, rkey of another PD, QP without remote write access */
	struct ibv_pd *pd2 = ibv_alloc_pd(d.ctx);
	struct ibv_mr *other = ibv_reg_mr(pd2, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(other);
	for (int k = 0; k < 4; k++) {
		struct ibv_qp *peer;
		unsigned pacc = k == 3 ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
		struct ibv_qp *qp = fresh(&peer, pacc);
		uint32_t rkey = k == 0 ? mdst->rkey ^ 0x5a5a00 : k == 2 ? other->rkey : mdst->rkey;
		uint64_t raddr = k == 1 ? (uintptr_t)dst + N - 8 : (uintptr_t)dst;
		one(qp, IBV_WR_RDMA_WRITE, src, 64, msrc->lkey, raddr, rkey, 0, IBV_WC_REM_ACCESS_ERR);
		settle_err(qp);
		drain_flush(qp);
		CHECK_EQ(ibv_destroy_qp(qp), 0);
		CHECK_EQ(ibv_destroy_qp(peer), 0);
	}
	CHECK_EQ(ibv_dereg_mr(other), 0);
	CHECK_EQ(ibv_dealloc_pd(pd2), 0);
	/* local errors: bad lkey, out of bounds, READ into a MR without LOCAL_WRITE */
	struct ibv_mr *ro = ibv_reg_mr(d.pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_READ);
	for (int k = 0; k < 3; k++) {
		struct ibv_qp *peer;
		struct ibv_qp *qp = fresh(&peer, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
		if (k == 0)
			one(qp, IBV_WR_RDMA_WRITE, src, 64, msrc->lkey + 1, (uintptr_t)dst, mdst->rkey, 0,
			    IBV_WC_LOC_PROT_ERR);
		else if (k == 1)
			one(qp, IBV_WR_RDMA_WRITE, src + N - 8, 64, msrc->lkey, (uintptr_t)dst, mdst->rkey, 0,
			    IBV_WC_LOC_PROT_ERR);
		else
			one(qp, IBV_WR_RDMA_READ, buf, 64, ro->lkey, (uintptr_t)src, msrc->rkey, 0, IBV_WC_LOC_PROT_ERR);
		settle_err(qp);
		drain_flush(qp);
		CHECK_EQ(ibv_destroy_qp(qp), 0);
		CHECK_EQ(ibv_destroy_qp(peer), 0);
	}
	CHECK_EQ(ibv_dereg_mr(ro), 0);
	/* a receive too small for the SEND: LOC_LEN_ERR at the receiver, REM_INV_REQ at the sender */
	struct ibv_qp *peer;
	struct ibv_qp *qp = fresh(&peer, IBV_ACCESS_REMOTE_WRITE);
	CHECK_EQ(vt_post_recv(peer, dst, 16, mdst->lkey, 1), 0);
	CHECK_EQ(vt_post_recv(peer, dst, 16, mdst->lkey, 2), 0);
	CHECK_EQ(vt_post_write(qp, IBV_WR_SEND, src, 64, msrc->lkey, 0, 0, 3, IBV_SEND_SIGNALED, 0), 0);
	struct ibv_wc w3[3];
	vt_wait(&d, d.cq, w3, 3, 5000);
	int saw = 0;
	for (int i = 0; i < 3; i++) {
		if (w3[i].wr_id == 1) {
			CHECK_EQ(w3[i].status, IBV_WC_LOC_LEN_ERR);
			saw |= 1;
		} else if (w3[i].wr_id == 2) {
			CHECK_EQ(w3[i].status, IBV_WC_WR_FLUSH_ERR); /* the responder went to ERR */
			saw |= 2;
		} else {
			CHECK_EQ(w3[i].wr_id, 3);
			CHECK_EQ(w3[i].status, IBV_WC_REM_INV_REQ_ERR);
			saw |= 4;
		}
	}
	CHECK_EQ(saw, 7);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_qp(peer), 0);
	(void)wc;
}

/* an error in the middle: earlier WRs complete first, the failing one, then flushes; receives flush too */
static void test_flush_order(void)
{
	vt_name = "flush_order";
	struct ibv_qp *peer;
	struct ibv_qp *qp = fresh(&peer, IBV_ACCESS_REMOTE_WRITE);
	CHECK_EQ(vt_post_recv(qp, dst, 8, mdst->lkey, 50), 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, src, 4096, msrc->lkey, (uintptr_t)dst, mdst->rkey,
				       (uint64_t)i, IBV_SEND_SIGNALED, 0),
			 0);
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, src, 64, 12345, (uintptr_t)dst, mdst->rkey, 5, IBV_SEND_SIGNALED,
			       0),
		 0);
	for (int i = 6; i < 9; i++)
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, src, 64, msrc->lkey, (uintptr_t)dst, mdst->rkey,
				       (uint64_t)i, 0 /* unsignaled: flushed ones still complete */, 0),
			 0);
	struct ibv_wc wc[10];
	vt_wait(&d, d.cq, wc, 10, 5000);
	int recv_seen = 0, k = 0;
	for (int i = 0; i < 10; i++) {
		if (wc[i].wr_id == 50) {
			CHECK_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
			recv_seen = 1;
			continue;
		}
		CHECK_EQ(wc[i].wr_id, (uint64_t)k);
		CHECK_EQ(wc[i].status, k < 5 ? IBV_WC_SUCCESS : k == 5 ? IBV_WC_LOC_PROT_ERR : IBV_WC_WR_FLUSH_ERR);
		k++;
	}
	CHECK(recv_seen);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	/* RESET then reconnect works again */
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	CHECK_EQ(ibv_modify_qp(peer, &a, IBV_QP_STATE), 0); /* both sides restart their PSNs */
	struct vt_rc rc = VT_RC_DEFAULT;
	vt_connect(&d, qp, peer->qp_num, rc);
	vt_connect(&d, peer, qp->qp_num, rc);
	one(qp, IBV_WR_RDMA_WRITE, src, 64, msrc->lkey, (uintptr_t)dst, mdst->rkey, 0, IBV_WC_SUCCESS);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_qp(peer), 0);
}

/* The port's max_msg_sz (VEMU_MAX_MSG_SZ, default 1 GiB): a WRITE of exactly that many bytes goes through; one
 * byte more is posted fine and completes with LOC_LEN_ERR, its QP in ERR (as an HCA). The buffer is a mapping that
 * is never touched beyond what a successful WRITE reads. */
static void test_max_msg(void)
{
	vt_name = "max_msg";
	const char *env = getenv("VEMU_MAX_MSG_SZ");
	uint64_t want = env ? strtoull(env, NULL, 0) : 1ull << 30;
	CHECK_EQ(d.port.max_msg_sz, want);
	size_t len = (size_t)want + 4096;
	char *big = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	CHECK(big != MAP_FAILED);
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mb = vt_mr(&d, big, len, all);
	struct ibv_qp *peer;
	struct ibv_qp *qp = fresh(&peer, IBV_ACCESS_REMOTE_WRITE);
	struct ibv_wc wc;
	if (want <= 4096) { /* small enough to move for real, into the 4 KiB past it */
		memset(big, 0x5a, (size_t)want);
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, big, (uint32_t)want, mb->lkey, (uintptr_t)big + want, mb->rkey,
				       7, IBV_SEND_SIGNALED, 0),
			 0);
		vt_wait(&d, d.cq, &wc, 1, 5000);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(big[want + want - 1], 0x5a);
	}
	CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, big, (uint32_t)(want + 1), mb->lkey, (uintptr_t)big, mb->rkey, 8,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.wr_id, 8);
	CHECK_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
	settle_err(qp);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_qp(peer), 0);
	CHECK_EQ(ibv_dereg_mr(mb), 0);
	CHECK_EQ(munmap(big, len), 0);
}

int main(void)
{
	setup();
	if (getenv("VEMU_MAX_MSG_SZ")) {
		test_max_msg();
		printf("test_ops: max_msg_sz OK\n");
		return 0;
	}
	test_write_read(pair_a);
	test_write_read(self_qp);
	test_send_recv(pair_a, pair_b);
	test_send_recv(self_qp, self_qp);
	test_unsignaled_batch(pair_a);
	test_unsignaled_batch(self_qp);
	test_access_matrix();
	test_flush_order();
	test_max_msg();
	CHECK_EQ(ibv_destroy_qp(pair_a), 0);
	CHECK_EQ(ibv_destroy_qp(pair_b), 0);
	CHECK_EQ(ibv_destroy_qp(self_qp), 0);
	CHECK_EQ(ibv_dereg_mr(msrc), 0);
	CHECK_EQ(ibv_dereg_mr(mdst), 0);
	vt_close(&d);
	printf("test_ops: OK\n");
	return 0;
}
