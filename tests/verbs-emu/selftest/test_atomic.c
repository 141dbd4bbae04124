/* RDMA atomics, RDMA READ size classes and the READ/atomic depth limits, as an HCA has them and as NCCL IB's GIN
 * proxy (2.28.9 ncclGinIbProxyIPutSignal, 2.30.7 ncclRmaIbProxyIPutSignal/IGet) uses them.
 *   test_atomic ops    one process: FETCH_AND_ADD / CMP_AND_SWP return values, the 8-byte result in the local sge,
 *                      completion opcodes and byte_len, NCCL's put+signal chain (unsignaled WRITE then a signaled
 *                      FETCH_AND_ADD in one post), post-time errors (sge not 8 bytes, inline), misaligned -> REM_INV_REQ,
 *                      no REMOTE_ATOMIC on the MR or the QP -> REM_ACCESS, no LOCAL_WRITE on the result -> LOC_PROT,
 *                      max_rd_atomic 0 / larger than the responder's max_dest_rd_atomic, the device's atomic_cap,
 *                      READ of every size class, IBV_SEND_FENCE after a READ, and (with VEMU_TRACE) the trace lines of the new opcodes and the
 *                      one-at-a-time issue of READs and atomics under max_rd_atomic = 1
 *   test_atomic none   VEMU_ATOMIC_CAP=none: atomic_cap NONE, atomics refused at post (EOPNOTSUPP), WRITEs still work
 *   test_atomic procs  several processes: two target processes register one MAP_SHARED word each (the same page),
 *                      initiator processes FETCH_AND_ADD and CAS-increment it through both targets while a target's
 *                      own thread adds to it with an atomic instruction: the final value is the sum, every fetched
 *                      value distinct (together a permutation of 0..sum-1) */
#include <sys/mman.h>

#include "vt.h"

static struct vt_dev d;

struct rdspec {
	int init_depth, dest_depth;
	unsigned access;
};

/* vt_connect with the READ/atomic depths and the QP access flags of the caller's choice */
static void connect_rd(struct vt_dev *dv, struct ibv_qp *qp, uint32_t dest, struct rdspec s)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = s.access;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = (uint8_t)s.dest_depth;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	if (dv->is_ib) {
		a.ah_attr.dlid = dv->port.lid;
	} else {
		a.ah_attr.is_global = 1;
		CHECK_EQ(ibv_query_gid(dv->ctx, 1, 3, &a.ah_attr.grh.dgid), 0);
		a.ah_attr.grh.sgid_index = 3;
		a.ah_attr.grh.hop_limit = 1;
	}
	CHECK_EQ(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
		 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = (uint8_t)s.init_depth;
	CHECK_EQ(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				       IBV_QP_MAX_QP_RD_ATOMIC),
		 0);
}

#define ALL_ACCESS \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* a fresh connected pair (a -> b) inside this process */
static void pair(struct ibv_qp **a, struct ibv_qp **b, struct rdspec sa, struct rdspec sb)
{
	*a = vt_qp(&d, 256, 64, NULL);
	*b = vt_qp(&d, 256, 64, NULL);
	connect_rd(&d, *a, (*b)->qp_num, sa);
	connect_rd(&d, *b, (*a)->qp_num, sb);
}

static void unpair(struct ibv_qp *a, struct ibv_qp *b)
{
	struct ibv_wc wc[16];
	while (ibv_poll_cq(d.cq, 16, wc) > 0)
		;
	CHECK_EQ(ibv_destroy_qp(a), 0);
	CHECK_EQ(ibv_destroy_qp(b), 0);
}

static int post_atomic(struct ibv_qp *qp, int op, uint64_t *res, uint32_t lkey, uint32_t len, uint64_t raddr,
		       uint32_t rkey, uint64_t cmp_add, uint64_t swap, uint64_t wr_id, unsigned flags)
{
	struct ibv_sge sge = { .addr = (uintptr_t)res, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = (enum ibv_wr_opcode)op;
	wr.send_flags = flags;
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = cmp_add;
	wr.wr.atomic.swap = swap;
	return ibv_post_send(qp, &wr, &bad);
}

/* one signaled atomic, its completion checked; returns the fetched value */
static uint64_t atomic1(struct ibv_qp *qp, int op, uint64_t *res, uint32_t lkey, uint64_t raddr, uint32_t rkey,
			uint64_t cmp_add, uint64_t swap, int expect)
{
	struct ibv_wc wc;
	*res = 0xdeadbeefdeadbeefull;
	CHECK_EQ(post_atomic(qp, op, res, lkey, 8, raddr, rkey, cmp_add, swap, 77, IBV_SEND_SIGNALED), 0);
	vt_wait(&d, d.cq, &wc, 1, 10000);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.status, expect);
	CHECK_EQ(wc.qp_num, qp->qp_num);
	if (expect == IBV_WC_SUCCESS) {
		CHECK_EQ(wc.opcode, op == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
		CHECK_EQ(wc.byte_len, 8);
	}
	return *res;
}

static void test_ops(void)
{
	vt_open(&d, 0, 4096);
	vt_name = "ops/attr";
	struct ibv_device_attr da;
	CHECK_EQ(ibv_query_device(d.ctx, &da), 0);
	CHECK_EQ(da.atomic_cap, IBV_ATOMIC_HCA);
	CHECK(da.max_qp_rd_atom >= 1 && da.max_qp_init_rd_atom >= 1);

	uint64_t *words = aligned_alloc(4096, 4096), *res = aligned_alloc(4096, 4096);
	memset(words, 0, 4096);
	memset(res, 0, 4096);
	char *data = aligned_alloc(4096, 1 << 20), *sink = aligned_alloc(4096, 1 << 20);
	struct ibv_mr *mw = vt_mr(&d, words, 4096, ALL_ACCESS);
	struct ibv_mr *mres = vt_mr(&d, res, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mres_ro = vt_mr(&d, res + 256, 8, 0); /* no LOCAL_WRITE */
	struct ibv_mr *mw_noatom =
		vt_mr(&d, words + 256, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	/* iova aligned, memory not: words + 4 registered at iova 0x100000 */
	struct ibv_mr *mw_skew = ibv_reg_mr_iova2(d.pd, (char *)words + 4, 64, 0x100000, ALL_ACCESS);
	CHECK(mw_skew);
	struct ibv_mr *mdata = vt_mr(&d, data, 1 << 20, ALL_ACCESS);
	struct ibv_mr *msink = vt_mr(&d, sink, 1 << 20, ALL_ACCESS);
	struct rdspec std = { 1, 1, ALL_ACCESS };
	struct ibv_qp *a, *b;

	vt_name = "ops/values";
	pair(&a, &b, std, std);
	words[0] = 40;
	CHECK_EQ(atomic1(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, (uintptr_t)&words[0], mw->rkey, 2, 0,
			 IBV_WC_SUCCESS),
		 40);
	CHECK_EQ(words[0], 42);
	/* the add wraps at 64 bits */
	words[1] = ~0ull;
	CHECK_EQ(atomic1(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, (uintptr_t)&words[1], mw->rkey, 3, 0,
			 IBV_WC_SUCCESS),
		 (long long)~0ull);
	CHECK_EQ(words[1], 2);
	/* compare-and-swap: equal -> swapped, returns the old value; different -> unchanged, returns the current */
	words[2] = 0x1122334455667788ull;
	CHECK_EQ(atomic1(a, IBV_WR_ATOMIC_CMP_AND_SWP, res, mres->lkey, (uintptr_t)&words[2], mw->rkey,
			 0x1122334455667788ull, 0x99, IBV_WC_SUCCESS),
		 0x1122334455667788ll);
	CHECK_EQ(words[2], 0x99);
	CHECK_EQ(atomic1(a, IBV_WR_ATOMIC_CMP_AND_SWP, res, mres->lkey, (uintptr_t)&words[2], mw->rkey, 5, 6,
			 IBV_WC_SUCCESS),
		 0x99);
	CHECK_EQ(words[2], 0x99);
	/* the result lands at the sge's address (here an unaligned one inside the MR), nothing around it */
	memset(res, 0xab, 64);
	struct ibv_wc wc[8];
	CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, (uint64_t *)((char *)res + 3), mres->lkey, 8,
			     (uintptr_t)&words[0], mw->rkey, 1, 0, 5, IBV_SEND_SIGNALED),
		 0);
	vt_wait(&d, d.cq, wc, 1, 10000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	uint64_t got;
	memcpy(&got, (char *)res + 3, 8);
	CHECK_EQ(got, 42);
	CHECK_EQ(((unsigned char *)res)[2], 0xab);
	CHECK_EQ(((unsigned char *)res)[11], 0xab);
	CHECK_EQ(words[0], 43);
	/* a QP connected to itself */
	struct ibv_qp *self = vt_qp(&d, 64, 0, NULL);
	connect_rd(&d, self, self->qp_num, std);
	CHECK_EQ(atomic1(self, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, (uintptr_t)&words[0], mw->rkey, 7, 0,
			 IBV_WC_SUCCESS),
		 43);
	CHECK_EQ(words[0], 50);
	CHECK_EQ(ibv_destroy_qp(self), 0);

	vt_name = "ops/put_signal";
	/* NCCL's putSignal: WRITE (unsignaled) then FETCH_AND_ADD (signaled) in one post; one completion, the data is
	 * in place when it arrives, the signal counted once per chain */
	for (int round = 0; round < 20; round++) {
		uint32_t len = 1u << (round % 20);
		for (uint32_t i = 0; i < len; i++)
			data[i] = (char)(i * 13 + round);
		struct ibv_sge s0 = { (uintptr_t)data, len, mdata->lkey }, s1 = { (uintptr_t)res, 8, mres->lkey };
		struct ibv_send_wr w[2], *bad;
		memset(w, 0, sizeof(w));
		w[0].opcode = IBV_WR_RDMA_WRITE;
		w[0].wr_id = 100 + (uint64_t)round;
		w[0].sg_list = &s0;
		w[0].num_sge = 1;
		w[0].wr.rdma.remote_addr = (uintptr_t)sink;
		w[0].wr.rdma.rkey = msink->rkey;
		w[0].next = &w[1];
		w[1].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		w[1].send_flags = IBV_SEND_SIGNALED;
		w[1].wr_id = 100 + (uint64_t)round;
		w[1].sg_list = &s1;
		w[1].num_sge = 1;
		w[1].wr.atomic.remote_addr = (uintptr_t)&words[8];
		w[1].wr.atomic.rkey = mw->rkey;
		w[1].wr.atomic.compare_add = round % 2 ? 1 : (uint64_t)round;
		uint64_t before = words[8];
		CHECK_EQ(ibv_post_send(a, w, &bad), 0);
		vt_wait(&d, d.cq, wc, 1, 10000);
		CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[0].opcode, IBV_WC_FETCH_ADD);
		CHECK_EQ(res[0], before);
		CHECK_EQ(words[8], before + (round % 2 ? 1 : (uint64_t)round));
		CHECK(!memcmp(data, sink, len));
		CHECK(vt_quiet(d.cq, 0));
	}
	unpair(a, b);

	vt_name = "ops/post_errors";
	pair(&a, &b, std, std);
	/* the result sge must be one 8-byte entry; no inline atomics */
	CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, 4, (uintptr_t)&words[0], mw->rkey, 1, 0,
			     1, IBV_SEND_SIGNALED),
		 EINVAL);
	CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, res, mres->lkey, 16, (uintptr_t)&words[0], mw->rkey, 1, 0, 1,
			     IBV_SEND_SIGNALED),
		 EINVAL);
	CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, 8, (uintptr_t)&words[0], mw->rkey, 1, 0,
			     1, IBV_SEND_SIGNALED | IBV_SEND_INLINE),
		 EINVAL);
	CHECK(vt_quiet(d.cq, 20));
	/* the QP still works */
	CHECK_EQ(atomic1(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, (uintptr_t)&words[3], mw->rkey, 1, 0,
			 IBV_WC_SUCCESS),
		 0);
	unpair(a, b);

	/* completion errors: each on a fresh pair (the QP goes to ERR), the target word untouched */
	struct {
		const char *name;
		uint64_t raddr;
		uint32_t rkey, lkey;
		uint64_t *res;
		struct rdspec sa, sb;
		int expect;
	} errs[] = {
		{ "misaligned", (uintptr_t)words + 4, mw->rkey, mres->lkey, res, std, std, IBV_WC_REM_INV_REQ_ERR },
		{ "misaligned_1", (uintptr_t)words + 1, mw->rkey, mres->lkey, res, std, std, IBV_WC_REM_INV_REQ_ERR },
		{ "mr_no_remote_atomic", (uintptr_t)(words + 256), mw_noatom->rkey, mres->lkey, res, std, std,
		  IBV_WC_REM_ACCESS_ERR },
		{ "qp_no_remote_atomic",
		  (uintptr_t)words,
		  mw->rkey,
		  mres->lkey,
		  res,
		  std,
		  { 1, 1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ },
		  IBV_WC_REM_ACCESS_ERR },
		{ "memory_misaligned", 0x100000, mw_skew->rkey, mres->lkey, res, std, std, IBV_WC_REM_INV_REQ_ERR },
		{ "bad_rkey", (uintptr_t)words, mw->rkey ^ 0x5a5a00, mres->lkey, res, std, std, IBV_WC_REM_ACCESS_ERR },
		{ "out_of_range", (uintptr_t)words + 4096, mw->rkey, mres->lkey, res, std, std, IBV_WC_REM_ACCESS_ERR },
		{ "result_no_local_write", (uintptr_t)words, mw->rkey, mres_ro->lkey, res + 256, std, std,
		  IBV_WC_LOC_PROT_ERR },
		{ "init_depth_0",
		  (uintptr_t)words,
		  mw->rkey,
		  mres->lkey,
		  res,
		  { 0, 1, ALL_ACCESS },
		  std,
		  IBV_WC_LOC_QP_OP_ERR },
	};
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		vt_name = errs[i].name;
		pair(&a, &b, errs[i].sa, errs[i].sb);
		uint64_t snap[8];
		memcpy(snap, words, sizeof(snap));
		struct ibv_wc ew;
		*errs[i].res = 0x5555;
		CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, errs[i].res, errs[i].lkey, 8, errs[i].raddr,
				     errs[i].rkey, 1000, 0, 9, IBV_SEND_SIGNALED),
			 0);
		vt_wait(&d, d.cq, &ew, 1, 10000);
		CHECK_EQ(ew.wr_id, 9);
		CHECK_EQ(ew.status, errs[i].expect);
		CHECK(!memcmp(snap, words, sizeof(snap)));
		CHECK_EQ(*errs[i].res, 0x5555);
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		CHECK_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi), 0);
		CHECK_EQ(qa.qp_state, IBV_QPS_ERR);
		unpair(a, b);
	}

	vt_name = "ops/depth";
	/* the initiator issues more READs/atomics at once than the responder accepts: REM_INV_REQ */
	pair(&a, &b, (struct rdspec){ 4, 1, ALL_ACCESS }, (struct rdspec){ 1, 1, ALL_ACCESS });
	{
		/* one post: the four leave together, the responder sees 1, 2, 3 and 4 outstanding */
		struct ibv_sge sg[4];
		struct ibv_send_wr sw[4], *bad;
		memset(sw, 0, sizeof(sw));
		for (int i = 0; i < 4; i++) {
			sg[i] = (struct ibv_sge){ (uintptr_t)sink + (uint64_t)i * 4096, 4096, msink->lkey };
			sw[i].wr_id = 200 + (uint64_t)i;
			sw[i].sg_list = &sg[i];
			sw[i].num_sge = 1;
			sw[i].opcode = IBV_WR_RDMA_READ;
			sw[i].send_flags = IBV_SEND_SIGNALED;
			sw[i].wr.rdma.remote_addr = (uintptr_t)data;
			sw[i].wr.rdma.rkey = mdata->rkey;
			sw[i].next = i < 3 ? &sw[i + 1] : NULL;
		}
		CHECK_EQ(ibv_post_send(a, sw, &bad), 0);
	}
	vt_wait(&d, d.cq, wc, 4, 10000);
	CHECK_EQ(wc[0].wr_id, 200);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(wc[1].wr_id, 201);
	CHECK_EQ(wc[1].status, IBV_WC_REM_INV_REQ_ERR);
	CHECK_EQ(wc[2].status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc[3].status, IBV_WC_WR_FLUSH_ERR);
	unpair(a, b);
	/* both sides at 4 (and 16, the device maximum): all complete */
	for (int depth = 4; depth <= 16; depth += 12) {
		pair(&a, &b, (struct rdspec){ depth, depth, ALL_ACCESS }, (struct rdspec){ depth, depth, ALL_ACCESS });
		for (int i = 0; i < 8; i++) {
			if (i % 2)
				CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_READ, sink + i * 4096, 4096, msink->lkey,
						       (uintptr_t)data, mdata->rkey, 300 + (uint64_t)i,
						       IBV_SEND_SIGNALED, 0),
					 0);
			else
				CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res + i, mres->lkey, 8,
						     (uintptr_t)&words[4], mw->rkey, 1, 0, 300 + (uint64_t)i,
						     IBV_SEND_SIGNALED),
					 0);
		}
		vt_wait(&d, d.cq, wc, 8, 10000);
		for (int i = 0; i < 8; i++) {
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
			CHECK_EQ(wc[i].wr_id, 300 + i); /* in order */
		}
		unpair(a, b);
	}
	/* over the device limit: refused by modify_qp */
	{
		struct ibv_qp *q = vt_qp(&d, 16, 0, NULL);
		struct ibv_qp_attr qa;
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = IBV_QPS_INIT;
		qa.port_num = 1;
		qa.qp_access_flags = ALL_ACCESS;
		CHECK_EQ(ibv_modify_qp(q, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
			 0);
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = IBV_QPS_RTR;
		qa.path_mtu = IBV_MTU_4096;
		qa.dest_qp_num = q->qp_num;
		qa.max_dest_rd_atomic = (uint8_t)(da.max_qp_rd_atom + 1);
		qa.ah_attr.port_num = 1;
		qa.ah_attr.dlid = d.port.lid;
		qa.ah_attr.is_global = !d.is_ib;
		qa.ah_attr.grh.sgid_index = 3;
		CHECK_EQ(ibv_modify_qp(q, &qa,
				       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
			 EINVAL);
		CHECK_EQ(ibv_destroy_qp(q), 0);
	}

	vt_name = "ops/read_sizes";
	/* READ of every size class, single and multi-SGE sinks, at odd offsets */
	pair(&a, &b, (struct rdspec){ 16, 16, ALL_ACCESS }, (struct rdspec){ 16, 16, ALL_ACCESS });
	for (int i = 0; i < (1 << 20); i++)
		data[i] = (char)(i * 31 + 7);
	static const uint32_t sizes[] = { 0,	1,    2,    3,	  7,	 8,	63,    64,     65,
					  1000, 4095, 4096, 4097, 65535, 65536, 65537, 262144, 1000003 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t n = sizes[i], off = (uint32_t)(i * 5) % 37;
		if (n + off > (1u << 20))
			off = 0;
		memset(sink, 0, 1 << 20);
		struct ibv_wc rw;
		CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_READ, n ? sink + off : NULL, n, msink->lkey,
				       (uintptr_t)data + off, mdata->rkey, 400 + i, IBV_SEND_SIGNALED, 0),
			 0);
		vt_wait(&d, d.cq, &rw, 1, 20000);
		CHECK_EQ(rw.status, IBV_WC_SUCCESS);
		CHECK_EQ(rw.opcode, IBV_WC_RDMA_READ);
		CHECK_EQ(rw.byte_len, n);
		CHECK(!memcmp(sink + off, data + off, n));
		if (off)
			CHECK_EQ(sink[off - 1], 0);
		if (n + off < (1u << 20))
			CHECK_EQ(sink[off + n], 0);
		/* three SGEs */
		if (n >= 3) {
			memset(sink, 0, 1 << 20);
			uint32_t k1 = n / 3, k2 = n / 3;
			struct ibv_sge sg[3] = { { (uintptr_t)sink + 100, k1, msink->lkey },
						 { (uintptr_t)sink + 300000, k2, msink->lkey },
						 { (uintptr_t)sink + 700000, n - k1 - k2, msink->lkey } };
			if (n > 200000) {
				sg[0].addr = (uintptr_t)sink;
				sg[1].addr = (uintptr_t)sink + k1;
				sg[2].addr = (uintptr_t)sink + k1 + k2;
			}
			struct ibv_send_wr sw, *bad;
			memset(&sw, 0, sizeof(sw));
			sw.wr_id = 500 + i;
			sw.sg_list = sg;
			sw.num_sge = 3;
			sw.opcode = IBV_WR_RDMA_READ;
			sw.send_flags = IBV_SEND_SIGNALED;
			sw.wr.rdma.remote_addr = (uintptr_t)data;
			sw.wr.rdma.rkey = mdata->rkey;
			CHECK_EQ(ibv_post_send(a, &sw, &bad), 0);
			vt_wait(&d, d.cq, &rw, 1, 20000);
			CHECK_EQ(rw.status, IBV_WC_SUCCESS);
			CHECK(!memcmp((char *)(uintptr_t)sg[0].addr, data, k1));
			CHECK(!memcmp((char *)(uintptr_t)sg[1].addr, data + k1, k2));
			CHECK(!memcmp((char *)(uintptr_t)sg[2].addr, data + k1 + k2, n - k1 - k2));
		}
	}
	unpair(a, b);

	/* IBV_SEND_FENCE: a WRITE whose source a READ before it fills, posted in one chain, sends what the READ
	 * brought (the fenced WRITE waits for the READ's response); 64 KiB so the READ is still out when the WRITE
	 * would otherwise leave */
	vt_name = "ops/fence";
	pair(&a, &b, (struct rdspec){ 4, 4, ALL_ACCESS }, (struct rdspec){ 4, 4, ALL_ACCESS });
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 65536; i++)
			data[i] = (char)(i * 3 + round * 11 + 1);
		memset(sink, 0, 2 * 65536);
		struct ibv_sge rs = { (uintptr_t)sink, 65536, msink->lkey },
			       ws = { (uintptr_t)sink, 65536, msink->lkey };
		struct ibv_send_wr w[2], *bad;
		memset(w, 0, sizeof(w));
		w[0].opcode = IBV_WR_RDMA_READ;
		w[0].wr_id = 700;
		w[0].sg_list = &rs;
		w[0].num_sge = 1;
		w[0].wr.rdma.remote_addr = (uintptr_t)data;
		w[0].wr.rdma.rkey = mdata->rkey;
		w[0].next = &w[1];
		w[1].opcode = IBV_WR_RDMA_WRITE;
		w[1].wr_id = 701;
		w[1].send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
		w[1].sg_list = &ws;
		w[1].num_sge = 1;
		w[1].wr.rdma.remote_addr = (uintptr_t)sink + 65536;
		w[1].wr.rdma.rkey = msink->rkey;
		CHECK_EQ(ibv_post_send(a, w, &bad), 0);
		vt_wait(&d, d.cq, wc, 1, 10000);
		CHECK_EQ(wc[0].wr_id, 701);
		CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
		CHECK(!memcmp(sink + 65536, data, 65536));
	}
	unpair(a, b);

	/* max_rd_atomic = 1: four READs and four atomics issued one at a time (the trace shows each one's response
	 * before the next one is put on the wire); the WRITE behind them waits its turn */
	vt_name = "ops/depth1_trace";
	pair(&a, &b, std, std);
	for (int i = 0; i < 8; i++) {
		if (i % 2)
			CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_READ, sink + i * 64, 64, msink->lkey, (uintptr_t)data,
					       mdata->rkey, 600 + (uint64_t)i, IBV_SEND_SIGNALED, 0),
				 0);
		else
			CHECK_EQ(post_atomic(a, i % 4 ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD,
					     res + i, mres->lkey, 8, (uintptr_t)&words[5], mw->rkey, 0, 1,
					     600 + (uint64_t)i, IBV_SEND_SIGNALED),
				 0);
	}
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, data, 64, mdata->lkey, (uintptr_t)sink, msink->rkey, 608,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 8, 10000);
	struct ibv_wc last;
	vt_wait(&d, d.cq, &last, 1, 10000);
	for (int i = 0; i < 8; i++) {
		CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].wr_id, 600 + i);
	}
	CHECK_EQ(last.wr_id, 608);
	const char *tr = getenv("VEMU_TRACE");
	if (tr) {
		FILE *f = fopen(tr, "r");
		CHECK(f);
		char line[512], want[64];
		snprintf(want, sizeof(want), "qp=0x%x ", a->qp_num);
		int outstanding = 0, maxout = 0, fa = 0, cs = 0, tfa = 0, tcs = 0, resp = 0;
		while (fgets(line, sizeof(line), f)) {
			if (strstr(line, "exec target") && strstr(line, "op=FETCH_ADD"))
				tfa++;
			if (strstr(line, "exec target") && strstr(line, "op=CMP_SWAP"))
				tcs++;
			if (!strstr(line, want))
				continue;
			if (strstr(line, " exec qp=") &&
			    (strstr(line, "op=READ") || strstr(line, "op=FETCH_ADD") || strstr(line, "op=CMP_SWAP"))) {
				/* a READ/atomic of this QP put on the wire */
				outstanding++;
				if (outstanding > maxout)
					maxout = outstanding;
			}
			if (strstr(line, "kind=READ_RESP") || strstr(line, "kind=ATOMIC_RESP")) {
				outstanding--;
				resp++;
			}
			if (strstr(line, " post qp=") && strstr(line, "op=FETCH_ADD"))
				fa++;
			if (strstr(line, " post qp=") && strstr(line, "op=CMP_SWAP"))
				cs++;
		}
		fclose(f);
		printf("trace: post FETCH_ADD %d CMP_SWAP %d on qp 0x%x, responses %d, most outstanding %d; target "
		       "FETCH_ADD %d CMP_SWAP %d\n",
		       fa, cs, a->qp_num, resp, maxout, tfa, tcs);
		CHECK_EQ(fa, 2);
		CHECK_EQ(cs, 2);
		CHECK_EQ(resp, 8);
		CHECK_EQ(maxout, 1);
		CHECK(tfa >= 2 && tcs >= 2);
	}
	unpair(a, b);
	vt_name = "ops";
	printf("test_atomic ops: OK\n");
}

/* VEMU_FAULTS=wc:op=atomic:nth=2:status=rem_access: the second atomic fails with that status without touching the
 * word, the first and a READ before it (not counted) succeed */
static void test_fault(void)
{
	vt_name = "fault";
	vt_open(&d, 0, 256);
	uint64_t *words = aligned_alloc(4096, 4096), *res = aligned_alloc(4096, 4096);
	memset(words, 0, 4096);
	struct ibv_mr *mw = vt_mr(&d, words, 4096, ALL_ACCESS), *mres = vt_mr(&d, res, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct rdspec std = { 1, 1, ALL_ACCESS };
	struct ibv_qp *a, *b;
	pair(&a, &b, std, std);
	struct ibv_wc wc;
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_READ, res + 8, 64, mres->lkey, (uintptr_t)words, mw->rkey, 1,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 10000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(atomic1(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, (uintptr_t)words, mw->rkey, 3, 0,
			 IBV_WC_SUCCESS),
		 0);
	atomic1(a, IBV_WR_ATOMIC_CMP_AND_SWP, res, mres->lkey, (uintptr_t)words, mw->rkey, 3, 9, IBV_WC_REM_ACCESS_ERR);
	CHECK_EQ(words[0], 3);
	unpair(a, b);
	printf("test_atomic fault: OK\n");
}

/* VEMU_ATOMIC_CAP=none: the device reports atomic_cap NONE and refuses atomics at post (EOPNOTSUPP), nothing sent
 * (the word is untouched, no completion), while a WRITE on the same QP still works */
static void test_none(void)
{
	vt_name = "none";
	vt_open(&d, 0, 256);
	struct ibv_device_attr da;
	CHECK_EQ(ibv_query_device(d.ctx, &da), 0);
	CHECK_EQ(da.atomic_cap, IBV_ATOMIC_NONE);
	uint64_t *words = aligned_alloc(4096, 4096), *res = aligned_alloc(4096, 4096);
	memset(words, 0, 4096);
	struct ibv_mr *mw = vt_mr(&d, words, 4096, ALL_ACCESS), *mres = vt_mr(&d, res, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct rdspec std = { 1, 1, ALL_ACCESS };
	struct ibv_qp *a, *b;
	pair(&a, &b, std, std);
	struct ibv_wc wc;
	CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, mres->lkey, 8, (uintptr_t)words, mw->rkey, 3, 0, 5,
			     IBV_SEND_SIGNALED),
		 EOPNOTSUPP);
	CHECK_EQ(post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, res, mres->lkey, 8, (uintptr_t)words, mw->rkey, 0, 9, 6,
			     IBV_SEND_SIGNALED),
		 EOPNOTSUPP);
	res[8] = 0x1122334455667788ull;
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, res + 8, 8, mres->lkey, (uintptr_t)(words + 1), mw->rkey, 7,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 10000);
	CHECK_EQ(wc.wr_id, 7);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(words[0], 0);
	CHECK_EQ(words[1], 0x1122334455667788ull);
	unpair(a, b);
	printf("test_atomic none: OK\n");
}

/* ------------------------------------------------------------ procs */
#define NTGT 2
#define NINI 3
#define K_FA 1500      /* FETCH_AND_ADDs per initiator */
#define K_CAS 150      /* CAS increments per initiator */
#define L_LOCAL 200000 /* at most this many local atomic adds by target 0's own thread */

struct tinfo {
	uint32_t qpn[NINI];
	uint32_t rkey;
	uint64_t addr;
};

static volatile uint64_t *shared_words; /* MAP_SHARED: [0] the FETCH_AND_ADD word, [1] the CAS word */

static void target(int idx, int fd)
{
	char nm[32];
	snprintf(nm, sizeof(nm), "procs/target%d", idx);
	vt_name = nm;
	vt_open(&d, 0, 4096);
	struct ibv_mr *mr = vt_mr(&d, (void *)shared_words, 4096, ALL_ACCESS);
	struct ibv_qp *qp[NINI];
	struct tinfo me = { .rkey = mr->rkey, .addr = (uintptr_t)shared_words };
	for (int i = 0; i < NINI; i++) {
		qp[i] = vt_qp(&d, 64, 0, NULL);
		me.qpn[i] = qp[i]->qp_num;
	}
	vt_send(fd, &me, sizeof(me));
	uint32_t peer[NINI];
	vt_recv(fd, peer, sizeof(peer));
	for (int i = 0; i < NINI; i++)
		connect_rd(&d, qp[i], peer[i], (struct rdspec){ 16, 16, ALL_ACCESS });
	char go;
	vt_send(fd, "r", 1);
	vt_recv(fd, &go, 1);
	/* target 0's own thread adds to the word with an atomic instruction while the remote atomics land, until
	 * the initiators are done (the parent's "d") or L_LOCAL adds */
	if (idx == 0) {
		uint64_t *mine = malloc(sizeof(uint64_t) * L_LOCAL);
		CHECK(mine);
		uint64_t n = 0;
		for (;;) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			if (n == L_LOCAL || poll(&p, 1, 0) == 1)
				break;
			for (int i = 0; i < 4 && n < L_LOCAL; i++)
				mine[n++] = __atomic_fetch_add((uint64_t *)&shared_words[0], 1, __ATOMIC_SEQ_CST);
		}
		vt_recv(fd, &go, 1);
		vt_send(fd, &n, sizeof(n));
		vt_send(fd, mine, sizeof(uint64_t) * n);
	} else {
		vt_recv(fd, &go, 1); /* the initiators are done */
	}
	for (int i = 0; i < NINI; i++)
		CHECK_EQ(ibv_destroy_qp(qp[i]), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	vt_close(&d);
	exit(0);
}

static void initiator(int idx, int fd)
{
	char nm[32];
	snprintf(nm, sizeof(nm), "procs/initiator%d", idx);
	vt_name = nm;
	vt_open(&d, 0, 8192);
	size_t rlen = (sizeof(uint64_t) * (K_FA + 64) + 4095) & ~(size_t)4095; /* aligned_alloc: a multiple of 4096 */
	uint64_t *res = aligned_alloc(4096, rlen);
	CHECK(res);
	struct ibv_mr *mres = vt_mr(&d, res, rlen, IBV_ACCESS_LOCAL_WRITE);
	struct tinfo t[NTGT];
	vt_recv(fd, t, sizeof(t));
	struct ibv_qp *qp[NTGT];
	uint32_t mine[NTGT];
	for (int k = 0; k < NTGT; k++) {
		qp[k] = vt_qp(&d, 256, 0, NULL);
		mine[k] = qp[k]->qp_num;
	}
	vt_send(fd, mine, sizeof(mine));
	for (int k = 0; k < NTGT; k++)
		connect_rd(&d, qp[k], t[k].qpn[idx], (struct rdspec){ 16, 16, ALL_ACCESS });
	char go;
	vt_send(fd, "r", 1);
	vt_recv(fd, &go, 1);
	/* FETCH_AND_ADD(1), alternating over the two targets (the same physical word), 32 in flight */
	int posted = 0, done = 0;
	struct ibv_wc wc[32];
	while (done < K_FA) {
		while (posted < K_FA && posted - done < 32) {
			int k = posted % NTGT;
			CHECK_EQ(post_atomic(qp[k], IBV_WR_ATOMIC_FETCH_AND_ADD, &res[posted], mres->lkey, 8, t[k].addr,
					     t[k].rkey, 1, 0, (uint64_t)posted, IBV_SEND_SIGNALED),
				 0);
			posted++;
		}
		int want = posted - done < 32 ? posted - done : 32;
		vt_wait(&d, d.cq, wc, want, 30000);
		for (int i = 0; i < want; i++)
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		done += want;
	}
	/* CAS increments of the second word: retry with the value the CAS returned */
	uint64_t guess = 0;
	for (int n = 0, k = 0; n < K_CAS; k++) {
		struct ibv_wc w1;
		CHECK_EQ(post_atomic(qp[k % NTGT], IBV_WR_ATOMIC_CMP_AND_SWP, &res[K_FA], mres->lkey, 8,
				     t[k % NTGT].addr + 8, t[k % NTGT].rkey, guess, guess + 1, 1, IBV_SEND_SIGNALED),
			 0);
		vt_wait(&d, d.cq, &w1, 1, 30000);
		CHECK_EQ(w1.status, IBV_WC_SUCCESS);
		uint64_t old = res[K_FA];
		if (old == guess) {
			n++;
			guess++;
		} else {
			CHECK(old > guess);
			guess = old;
		}
	}
	vt_send(fd, res, sizeof(uint64_t) * K_FA);
	for (int k = 0; k < NTGT; k++)
		CHECK_EQ(ibv_destroy_qp(qp[k]), 0);
	CHECK_EQ(ibv_dereg_mr(mres), 0);
	vt_close(&d);
	exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void test_procs(void)
{
	vt_name = "procs";
	shared_words = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(shared_words != MAP_FAILED);
	int tfd[NTGT], ifd[NINI];
	pid_t pids[NTGT + NINI];
	for (int i = 0; i < NTGT + NINI; i++) {
		int sv[2];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			close(sv[0]);
			if (i < NTGT)
				target(i, sv[1]);
			else
				initiator(i - NTGT, sv[1]);
		}
		close(sv[1]);
		pids[i] = p;
		if (i < NTGT)
			tfd[i] = sv[0];
		else
			ifd[i - NTGT] = sv[0];
	}
	struct tinfo t[NTGT];
	for (int k = 0; k < NTGT; k++)
		vt_recv(tfd[k], &t[k], sizeof(t[k]));
	uint32_t iq[NINI][NTGT];
	for (int i = 0; i < NINI; i++) {
		vt_send(ifd[i], t, sizeof(t));
		vt_recv(ifd[i], iq[i], sizeof(iq[i]));
	}
	for (int k = 0; k < NTGT; k++) {
		uint32_t peer[NINI];
		for (int i = 0; i < NINI; i++)
			peer[i] = iq[i][k];
		vt_send(tfd[k], peer, sizeof(peer));
	}
	char r;
	for (int k = 0; k < NTGT; k++)
		vt_recv(tfd[k], &r, 1);
	for (int i = 0; i < NINI; i++)
		vt_recv(ifd[i], &r, 1);
	for (int k = 0; k < NTGT; k++)
		vt_send(tfd[k], "g", 1);
	for (int i = 0; i < NINI; i++)
		vt_send(ifd[i], "g", 1);
	size_t total = (size_t)NINI * K_FA + L_LOCAL;
	uint64_t *all = malloc(sizeof(uint64_t) * total);
	CHECK(all);
	for (int i = 0; i < NINI; i++)
		vt_recv(ifd[i], all + (size_t)i * K_FA, sizeof(uint64_t) * K_FA);
	for (int k = 0; k < NTGT; k++)
		vt_send(tfd[k], "d", 1);
	uint64_t nlocal = 0;
	vt_recv(tfd[0], &nlocal, sizeof(nlocal));
	CHECK(nlocal <= L_LOCAL);
	vt_recv(tfd[0], all + (size_t)NINI * K_FA, sizeof(uint64_t) * nlocal);
	total = (size_t)NINI * K_FA + nlocal;
	for (int i = 0; i < NTGT + NINI; i++)
		CHECK_EQ(vt_wait_child(pids[i]), 0);
	printf("procs: word %llu (want %zu), CAS word %llu (want %d)\n", (unsigned long long)shared_words[0], total,
	       (unsigned long long)shared_words[1], NINI * K_CAS);
	CHECK_EQ(shared_words[0], total);
	CHECK_EQ(shared_words[1], NINI * K_CAS);
	qsort(all, total, sizeof(uint64_t), cmp_u64);
	for (size_t i = 0; i < total; i++)
		if (all[i] != i) {
			fprintf(stderr, "FAIL [procs]: fetched values are not distinct: sorted[%zu] = %llu\n", i,
				(unsigned long long)all[i]);
			exit(1);
		}
	free(all);
	CHECK_EQ(munmap((void *)shared_words, 4096), 0);
	printf("test_atomic procs: OK (%zu fetched values, %llu of them by the target's own thread, a permutation of "
	       "0..%zu)\n",
	       total, (unsigned long long)nlocal, total - 1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: test_atomic ops|procs|fault|none\n");
		return 2;
	}
	const char *tr = getenv("VEMU_TRACE");
	if (tr && truncate(tr, 0) && errno != ENOENT) { /* this run's lines only */
		perror(tr);
		return 1;
	}
	if (!strcmp(argv[1], "ops"))
		test_ops();
	else if (!strcmp(argv[1], "fault"))
		test_fault();
	else if (!strcmp(argv[1], "procs"))
		test_procs();
	else if (!strcmp(argv[1], "none"))
		test_none();
	else
		return 2;
	return 0;
}
