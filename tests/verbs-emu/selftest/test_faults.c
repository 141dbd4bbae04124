/* VEMU_FAULTS rules, async events (also of destroyed QPs), completion channels, CQ overrun, VEMU_TRACE and VEMU_GDR_LAZY.
 *   test_faults <scenario>   the scenario's VEMU_* variables are set by CTest (see CMakeLists.txt) except
 *                            where a scenario forks and sets them in one process only. */
#include "vt.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>

static struct vt_dev d;
static char *buf;
static struct ibv_mr *mr;
#define BUFSZ (1 << 20)

static void open_all(int cqe)
{
	vt_open(&d, 0, cqe);
	buf = aligned_alloc(4096, BUFSZ);
	memset(buf, 0, BUFSZ);
	mr = vt_mr(&d, buf, BUFSZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

static void pair(struct ibv_qp **a, struct ibv_qp **b, struct vt_rc rc)
{
	*a = vt_qp(&d, 64, 0, NULL);
	*b = vt_qp(&d, 64, 0, NULL);
	vt_connect(&d, *a, (*b)->qp_num, rc);
	vt_connect(&d, *b, (*a)->qp_num, rc);
}

/* wait for one async event on the context (blocking on async_fd with a timeout) */
static void async_wait(struct ibv_async_event *ev, int timeout_ms)
{
	struct pollfd p = { .fd = d.ctx->async_fd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);
	CHECK_EQ(r, 1);
	CHECK_EQ(ibv_get_async_event(d.ctx, ev), 0);
	ibv_ack_async_event(ev);
}

static void async_expect(enum ibv_event_type type, struct ibv_async_event *ev, int timeout_ms)
{
	uint64_t end = vt_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		CHECK(vt_now_ms() < end);
		async_wait(ev, (int)(end - vt_now_ms()) + 1);
		if (ev->event_type == type)
			return;
	}
}

static void expect_wcs(const uint64_t *ids, const int *status, int n)
{
	struct ibv_wc wc[32];
	vt_wait(&d, d.cq, wc, n, 10000);
	for (int i = 0; i < n; i++) {
		CHECK_EQ(wc[i].wr_id, ids[i]);
		CHECK_EQ(wc[i].status, status[i]);
	}
}

/* ---------------------------------------------------------------- wc */
static void sc_wc(void)
{
	/* VEMU_FAULTS=wc:op=write:nth=3:status=rem_access;wc:op=read:nth=2:status=retry_exc;
	 *             wc:op=send:nth=1:status=rnr_retry_exc;wc:op=write_imm:nth=1:status=rem_op;
	 *             wc:op=write:nth=7:status=loc_prot */
	open_all(256);
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a, *b;
	pair(&a, &b, rc);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 64, mr->lkey, (uintptr_t)buf + 4096, mr->rkey,
				       (uint64_t)i, IBV_SEND_SIGNALED, 0),
			 0);
	uint64_t ids[] = { 0, 1, 2, 3, 4 };
	int st[] = { 0, 0, IBV_WC_REM_ACCESS_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR };
	expect_wcs(ids, st, 5);
	CHECK_EQ(a->state, IBV_QPS_ERR);
	/* reads: the 2nd fails */
	struct ibv_qp *c, *e;
	pair(&c, &e, rc);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(vt_post_write(c, IBV_WR_RDMA_READ, buf, 64, mr->lkey, (uintptr_t)buf + 8192, mr->rkey,
				       (uint64_t)(10 + i), IBV_SEND_SIGNALED, 0),
			 0);
	uint64_t ids2[] = { 10, 11, 12 };
	int st2[] = { 0, IBV_WC_RETRY_EXC_ERR, IBV_WC_WR_FLUSH_ERR };
	expect_wcs(ids2, st2, 3);
	/* send and write_imm: the first of each fails */
	struct ibv_qp *f, *g2;
	pair(&f, &g2, rc);
	CHECK_EQ(vt_post_recv(g2, buf, 64, mr->lkey, 99), 0);
	CHECK_EQ(vt_post_write(f, IBV_WR_SEND, buf, 8, mr->lkey, 0, 0, 20, IBV_SEND_SIGNALED, 0), 0);
	uint64_t ids3[] = { 20 };
	int st3[] = { IBV_WC_RNR_RETRY_EXC_ERR };
	expect_wcs(ids3, st3, 1);
	struct ibv_qp *h, *k;
	pair(&h, &k, rc);
	CHECK_EQ(vt_post_write(h, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 8, mr->lkey, (uintptr_t)buf, mr->rkey, 30,
			       IBV_SEND_SIGNALED, 0),
		 0);
	uint64_t ids4[] = { 30 };
	int st4[] = { IBV_WC_REM_OP_ERR };
	expect_wcs(ids4, st4, 1);
	/* writes 6 and 7 (counted per process across QPs): the 7th fails with loc_prot */
	struct ibv_qp *m, *n;
	pair(&m, &n, rc);
	CHECK_EQ(vt_post_write(m, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf, mr->rkey, 40, IBV_SEND_SIGNALED,
			       0),
		 0);
	CHECK_EQ(vt_post_write(m, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf, mr->rkey, 41, IBV_SEND_SIGNALED,
			       0),
		 0);
	uint64_t ids5[] = { 40, 41 };
	int st5[] = { 0, IBV_WC_LOC_PROT_ERR };
	expect_wcs(ids5, st5, 2);
	/* the 8th write is fine again (each rule fires once) */
	struct ibv_qp *o, *p;
	pair(&o, &p, rc);
	CHECK_EQ(vt_post_write(o, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf, mr->rkey, 50, IBV_SEND_SIGNALED,
			       0),
		 0);
	uint64_t ids6[] = { 50 };
	int st6[] = { 0 };
	expect_wcs(ids6, st6, 1);
}

/* ---------------------------------------------------------------- qp_fatal */
static void sc_qp_fatal(void)
{
	/* VEMU_FAULTS=qp_fatal:nth=2 */
	open_all(64);
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a = vt_qp(&d, 8, 0, NULL), *b = vt_qp(&d, 8, 0, NULL), *c = vt_qp(&d, 8, 0, NULL);
	vt_connect(&d, a, a->qp_num, rc);
	CHECK_EQ(a->state, IBV_QPS_RTS);
	/* vt_connect checks modify_qp's return; the 2nd QP to reach RTS fails right after */
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	vt_connect(&d, b, b->qp_num, rc);
	CHECK_EQ(b->state, IBV_QPS_ERR);
	struct ibv_async_event ev;
	async_expect(IBV_EVENT_QP_FATAL, &ev, 5000);
	CHECK(ev.element.qp == b);
	CHECK_EQ(vt_post_recv(b, buf, 8, mr->lkey, 1), 0); /* posted in ERR: flushed */
	struct ibv_wc wc;
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	vt_connect(&d, c, c->qp_num, rc);
	CHECK_EQ(c->state, IBV_QPS_RTS);
	CHECK_EQ(vt_post_write(c, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf + 64, mr->rkey, 2,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
}

/* ---------------------------------------------------------------- fail */
static void sc_fail(void)
{
	/* VEMU_FAULTS=fail:call=alloc_pd:nth=2:errno=EPERM;fail:call=create_cq:nth=2:errno=ENOMEM;
	 *   fail:call=reg_mr:nth=2:errno=ENOMEM;fail:call=create_qp:nth=1:errno=EAGAIN;
	 *   fail:call=modify_qp:nth=3:errno=EIO;fail:call=reg_dmabuf_mr:nth=1:errno=EFAULT */
	open_all(64); /* alloc_pd #1, create_cq #1, reg_mr #1 */
	errno = 0;
	CHECK(ibv_alloc_pd(d.ctx) == NULL);
	CHECK_EQ(errno, EPERM);
	struct ibv_pd *pd = ibv_alloc_pd(d.ctx);
	CHECK(pd);
	errno = 0;
	CHECK(ibv_create_cq(d.ctx, 4, NULL, NULL, 0) == NULL);
	CHECK_EQ(errno, ENOMEM);
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 4, NULL, NULL, 0);
	CHECK(cq);
	errno = 0;
	CHECK(ibv_reg_mr(d.pd, buf, 64, IBV_ACCESS_LOCAL_WRITE) == NULL);
	CHECK_EQ(errno, ENOMEM);
	struct ibv_mr *m = ibv_reg_mr(d.pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(m);
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = d.cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	errno = 0;
	CHECK(ibv_create_qp(d.pd, &ia) == NULL);
	CHECK_EQ(errno, EAGAIN);
	struct ibv_qp *qp = ibv_create_qp(d.pd, &ia);
	CHECK(qp);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	CHECK_EQ(ibv_modify_qp(qp, &a, mask), 0);
	a.qp_state = IBV_QPS_RESET;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_INIT;
	CHECK_EQ(ibv_modify_qp(qp, &a, mask), EIO);
	CHECK_EQ(qp->state, IBV_QPS_RESET);
	CHECK_EQ(ibv_modify_qp(qp, &a, mask), 0);
	/* the fd=-1 probe does not count as a registration */
	errno = 0;
	CHECK(ibv_reg_dmabuf_mr(d.pd, 0, 0, 0, -1, 0) == NULL);
	CHECK_EQ(errno, EBADF);
	int fd = memfd_create("vemu", 0);
	CHECK(fd >= 0);
	errno = 0;
	CHECK(ibv_reg_dmabuf_mr(d.pd, 0, 4096, (uintptr_t)buf, fd, IBV_ACCESS_LOCAL_WRITE) == NULL);
	CHECK_EQ(errno, EFAULT);
	struct ibv_mr *dm = ibv_reg_dmabuf_mr(d.pd, 0, 4096, (uintptr_t)buf, fd, IBV_ACCESS_LOCAL_WRITE);
	CHECK(dm);
	close(fd);
	CHECK_EQ(ibv_dereg_mr(dm), 0);
	CHECK_EQ(ibv_dereg_mr(m), 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* ---------------------------------------------------------------- no_recv_credit */
static void sc_no_recv_credit(void)
{
	/* VEMU_FAULTS=no_recv_credit:nth=2 */
	open_all(64);
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.rnr_retry = 0; /* a single RNR exhausts the retries */
	struct ibv_qp *a, *b;
	pair(&a, &b, rc);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(vt_post_recv(b, buf + 64 * i, 64, mr->lkey, (uint64_t)(100 + i)), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(vt_post_write(a, IBV_WR_SEND, buf + 4096, 8, mr->lkey, 0, 0, (uint64_t)i, IBV_SEND_SIGNALED, 0),
			 0);
	struct ibv_wc wc[8];
	vt_wait(&d, d.cq, wc, 4, 10000);
	int send_ok = 0, send_rnr = 0, send_flush = 0, recv_ok = 0;
	for (int i = 0; i < 4; i++) {
		if (wc[i].wr_id == 0 && wc[i].status == IBV_WC_SUCCESS)
			send_ok++;
		else if (wc[i].wr_id == 1 && wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR)
			send_rnr++;
		else if (wc[i].wr_id == 2 && wc[i].status == IBV_WC_WR_FLUSH_ERR)
			send_flush++;
		else if (wc[i].wr_id == 100 && wc[i].status == IBV_WC_SUCCESS)
			recv_ok++;
		else
			CHECK(!"unexpected completion");
	}
	CHECK(send_ok == 1 && send_rnr == 1 && send_flush == 1 && recv_ok == 1);
	/* the receiver is unharmed: the next connection gets its receives */
	CHECK_EQ(b->state, IBV_QPS_RTS);
	/* with retries, the forced RNR is recovered (rule counted once, already spent: use a fresh rule-free path) */
}

/* ---------------------------------------------------------------- port_down */
static void sc_port_down(void)
{
	/* VEMU_DEVICES=vemu0:roce,vemu1:roce
	 * VEMU_FAULTS=port_down:dev=vemu0:after_ms=100:for_ms=300;port_down:dev=vemu1:after_ms=100 */
	uint64_t t_open = vt_now_ms(); /* the agent starts after this: the port is back at >= t_open + 400 */
	open_all(64);
	struct vt_dev d1;
	vt_open(&d1, 1, 64);
	struct ibv_mr *mr1 = vt_mr(&d1, buf, BUFSZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 18; /* 1.07 s x 8: survives the 300 ms outage */
	struct ibv_qp *a, *b;
	pair(&a, &b, rc);
	struct vt_rc rc1 = VT_RC_DEFAULT;
	rc1.timeout = 12; /* 16.8 ms x (3+1): times out while vemu1 stays down */
	rc1.retry_cnt = 3;
	struct ibv_qp *x = vt_qp(&d1, 8, 0, NULL), *y = vt_qp(&d1, 8, 0, NULL);
	vt_connect(&d1, x, y->qp_num, rc1);
	vt_connect(&d1, y, x->qp_num, rc1);
	struct ibv_async_event ev;
	async_expect(IBV_EVENT_PORT_ERR, &ev, 5000);
	CHECK_EQ(ev.element.port_num, 1);
	struct ibv_port_attr pa;
	CHECK_EQ(ibv_query_port(d.ctx, 1, &pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_DOWN);
	uint64_t t0 = vt_now_ms();
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 64, mr->lkey, (uintptr_t)buf + 4096, mr->rkey, 1,
			       IBV_SEND_SIGNALED, 0),
		 0);
	CHECK(vt_quiet(d.cq, 50)); /* nothing moves while the port is down */
	async_expect(IBV_EVENT_PORT_ACTIVE, &ev, 5000);
	struct ibv_wc wc;
	vt_wait(&d, d.cq, &wc, 1, 10000);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(vt_now_ms() >= t_open + 399); /* not before the port came back */
	(void)t0;
	CHECK_EQ(ibv_query_port(d.ctx, 1, &pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
	/* vemu1 stays down: its traffic times out */
	struct ibv_async_event ev1;
	struct pollfd p = { .fd = d1.ctx->async_fd, .events = POLLIN };
	CHECK_EQ(poll(&p, 1, 5000), 1);
	CHECK_EQ(ibv_get_async_event(d1.ctx, &ev1), 0);
	CHECK_EQ(ev1.event_type, IBV_EVENT_PORT_ERR);
	ibv_ack_async_event(&ev1);
	CHECK_EQ(vt_post_write(x, IBV_WR_RDMA_WRITE, buf, 64, mr1->lkey, (uintptr_t)buf + 8192, mr1->rkey, 2,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d1, d1.cq, &wc, 1, 10000);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
}

/* ---------------------------------------------------------------- device_fatal */
static void sc_device_fatal(void)
{
	/* VEMU_DEVICES=vemu0:roce,vemu1:roce VEMU_FAULTS=device_fatal:dev=vemu0:after_ms=200 */
	open_all(64);
	struct vt_dev d1;
	vt_open(&d1, 1, 64);
	struct ibv_mr *mr1 = vt_mr(&d1, buf, BUFSZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a, *b;
	pair(&a, &b, rc);
	struct ibv_qp *x = vt_qp(&d1, 8, 0, NULL);
	vt_connect(&d1, x, x->qp_num, rc);
	/* alive before the deadline */
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 64, mr->lkey, (uintptr_t)buf + 4096, mr->rkey, 1,
			       IBV_SEND_SIGNALED, 0),
		 0);
	struct ibv_wc wc;
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	struct ibv_async_event ev;
	async_expect(IBV_EVENT_DEVICE_FATAL, &ev, 5000);
	/* every QP of the device is in ERR: a receive posted now is flushed */
	CHECK_EQ(a->state, IBV_QPS_ERR);
	CHECK_EQ(b->state, IBV_QPS_ERR);
	CHECK_EQ(vt_post_recv(b, buf, 8, mr->lkey, 2), 0);
	vt_wait(&d, d.cq, &wc, 1, 5000);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	struct ibv_port_attr pa;
	CHECK_EQ(ibv_query_port(d.ctx, 1, &pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_DOWN);
	/* nothing new on it: EIO for QPs, CQs, MRs and QP changes other than to ERR/RESET */
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = d.cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	errno = 0;
	CHECK(ibv_create_qp(d.pd, &ia) == NULL);
	CHECK_EQ(errno, EIO);
	errno = 0;
	CHECK(ibv_create_cq(d.ctx, 8, NULL, NULL, 0) == NULL);
	CHECK_EQ(errno, EIO);
	errno = 0;
	CHECK(ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL);
	CHECK_EQ(errno, EIO);
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.pkey_index = 0;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	at.qp_state = IBV_QPS_RESET;
	CHECK_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE), 0); /* cleanup still works */
	at.qp_state = IBV_QPS_INIT;
	CHECK_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), EIO);
	/* the other device lives on */
	CHECK_EQ(x->state, IBV_QPS_RTS);
	CHECK_EQ(vt_post_write(x, IBV_WR_RDMA_WRITE, buf, 64, mr1->lkey, (uintptr_t)buf + 8192, mr1->rkey, 3,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d1, d1.cq, &wc, 1, 5000);
	CHECK_EQ(wc.wr_id, 3);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(ibv_destroy_qp(a), 0);
	CHECK_EQ(ibv_destroy_qp(b), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
}

/* ---------------------------------------------------------------- peer_loss */
static void sc_peer_loss(void)
{
	/* the target process alone gets VEMU_FAULTS=peer_loss:after_bytes=200000 */
	int sp[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	struct vt_rc rc = VT_RC_DEFAULT;
	rc.timeout = 14; /* 67 ms x 8 */
	uint32_t info[4];
	if (pid == 0) {
		vt_name = "peer_loss/target";
		setenv("VEMU_FAULTS", "peer_loss:after_bytes=200000", 1);
		open_all(64);
		struct ibv_qp *qp = vt_qp(&d, 64, 0, NULL);
		uint32_t me[4] = { qp->qp_num, mr->rkey, (uint32_t)((uintptr_t)buf >> 32), (uint32_t)(uintptr_t)buf };
		vt_send(sp[1], me, sizeof(me));
		vt_recv(sp[1], info, sizeof(info));
		vt_connect(&d, qp, info[0], rc);
		vt_send(sp[1], "r", 1);
		char c;
		vt_recv(sp[1], &c, 1); /* the initiator is done */
		exit(0);
	}
	vt_name = "peer_loss/initiator";
	open_all(64);
	struct ibv_qp *qp = vt_qp(&d, 64, 0, NULL);
	uint32_t me[4] = { qp->qp_num, 0, 0, 0 };
	vt_recv(sp[0], info, sizeof(info));
	vt_send(sp[0], me, sizeof(me));
	vt_connect(&d, qp, info[0], rc);
	uint64_t raddr = (uint64_t)info[2] << 32 | info[3];
	char r;
	vt_recv(sp[0], &r, 1); /* the target's QP is ready */
	struct ibv_wc wc;
	int ok = 0, failed = 0;
	for (int i = 0; i < 10 && !failed; i++) {
		CHECK_EQ(vt_post_write(qp, IBV_WR_RDMA_WRITE, buf, 65536, mr->lkey, raddr, info[1], (uint64_t)i,
				       IBV_SEND_SIGNALED, 0),
			 0);
		vt_wait(&d, d.cq, &wc, 1, 20000);
		if (wc.status == IBV_WC_SUCCESS)
			ok++;
		else {
			CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
			failed = 1;
		}
	}
	/* 200000 bytes: three 64 KiB writes get through, the 4th is not answered */
	CHECK_EQ(ok, 3);
	CHECK(failed);
	vt_send(sp[0], "d", 1);
	CHECK_EQ(vt_wait_child(pid), 0);
}

/* ---------------------------------------------------------------- events: comp channel, CQ overrun */
static void sc_events(void)
{
	open_all(4); /* a 4-entry CQ */
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a = vt_qp(&d, 16, 0, NULL);
	vt_connect(&d, a, a->qp_num, rc);
	/* a completion channel wakes a blocked reader */
	CHECK_EQ(ibv_req_notify_cq(d.cq, 0), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf + 64, mr->rkey, 1,
			       IBV_SEND_SIGNALED, 0),
		 0);
	struct ibv_cq *ecq;
	void *ectx;
	CHECK_EQ(ibv_get_cq_event(d.ch, &ecq, &ectx), 0); /* blocks until the completion */
	CHECK(ecq == d.cq);
	ibv_ack_cq_events(ecq, 1);
	struct ibv_wc wc[8];
	CHECK_EQ(ibv_poll_cq(d.cq, 8, wc), 1);
	/* not re-armed: no event for the next completion */
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf + 64, mr->rkey, 2,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000); /* vt_wait arms it again and consumes the event if any */
	/* CQ overrun: 6 completions into 4 entries raise IBV_EVENT_CQ_ERR */
	struct ibv_qp *b = vt_qp(&d, 16, 0, NULL);
	vt_connect(&d, b, b->qp_num, rc);
	for (int i = 0; i < 6; i++)
		CHECK_EQ(vt_post_write(b, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey, (uintptr_t)buf + 64, mr->rkey,
				       (uint64_t)(10 + i), IBV_SEND_SIGNALED, 0),
			 0);
	struct ibv_async_event ev;
	async_expect(IBV_EVENT_CQ_ERR, &ev, 5000);
	CHECK(ev.element.cq == d.cq);
	CHECK_EQ(ibv_poll_cq(d.cq, 8, wc), 4);
}

/* ---------------------------------------------------------------- trace */
static int count_lines(const char *path, const char *a, const char *b)
{
	FILE *f = fopen(path, "r");
	CHECK(f);
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, a) && (!b || strstr(line, b)))
			n++;
	fclose(f);
	return n;
}

static void sc_trace(void)
{
	/* VEMU_TRACE=<VEMU_DIR>/trace.log */
	const char *path = getenv("VEMU_TRACE");
	CHECK(path);
	unlink(path);
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", getenv("VEMU_DIR"));
	mkdir(dir, 0700);
	open_all(64);
	volatile int flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *ro = ibv_reg_mr(d.pd, buf + 8192, 4096, flags);
	CHECK(ro);
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a = vt_qp(&d, 16, 16, NULL);
	vt_connect(&d, a, a->qp_num, rc);
	char qp[32];
	snprintf(qp, sizeof(qp), "qp=0x%x ", a->qp_num);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 100, mr->lkey, (uintptr_t)buf + 8192, ro->rkey,
				       (uint64_t)i, i == 2 ? IBV_SEND_SIGNALED : 0, 0),
			 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_READ, buf, 10, mr->lkey, (uintptr_t)buf + 4096, mr->rkey, 3,
			       IBV_SEND_SIGNALED, 0),
		 0);
	struct ibv_wc wc[2];
	vt_wait(&d, d.cq, wc, 2, 5000);
	CHECK_EQ(count_lines(path, "post ", "op=WRITE wr_id") - count_lines(path, "post ", "op=WRITE_IMM"), 3);
	CHECK_EQ(count_lines(path, "post ", "op=READ"), 1);
	char execq[48];
	snprintf(execq, sizeof(execq), "exec qp=0x%x ", a->qp_num);
	CHECK_EQ(count_lines(path, execq, NULL), 4);
	CHECK_EQ(count_lines(path, "exec target ", "op=WRITE len=100"), 3);
	CHECK_EQ(count_lines(path, "exec target ", "access=LOCAL_WRITE|REMOTE_WRITE|RELAXED_ORDERING"), 3);
	CHECK_EQ(count_lines(path, "exec target ", "op=READ len=10 "), 1);
	CHECK_EQ(count_lines(path, "ack ", qp), 4);
	CHECK_EQ(count_lines(path, "cqe ", qp), 2);
	CHECK_EQ(count_lines(path, "flags=UNSIGNALED", qp), 2);
	CHECK_EQ(count_lines(path, "mr reg", "access=LOCAL_WRITE|REMOTE_WRITE|RELAXED_ORDERING"), 1);
	CHECK_EQ(count_lines(path, "mr reg", "access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ mem=host"), 1);
	/* the address vector's service level and GRH traffic class are on the qp state lines from RTR on */
	struct ibv_qp *b = vt_qp(&d, 16, 16, NULL);
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK_EQ(ibv_modify_qp(b, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_4096;
	at.dest_qp_num = b->qp_num;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.port_num = 1;
	at.ah_attr.sl = 5;
	at.ah_attr.dlid = d.port.lid;
	at.ah_attr.is_global = 1;
	CHECK_EQ(ibv_query_gid(d.ctx, 1, 0, &at.ah_attr.grh.dgid), 0);
	at.ah_attr.grh.sgid_index = 0;
	at.ah_attr.grh.hop_limit = 1;
	at.ah_attr.grh.traffic_class = 106;
	CHECK_EQ(ibv_modify_qp(b, &at,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
		 0);
	char qpb[48];
	snprintf(qpb, sizeof(qpb), "qp state qp=0x%x 1->2 ", b->qp_num);
	CHECK_EQ(count_lines(path, qpb, "sl=5 global=1 tc=106"), 1);
	snprintf(qpb, sizeof(qpb), "qp state qp=0x%x 1->2 ", a->qp_num); /* vt_connect: no traffic class */
	CHECK_EQ(count_lines(path, qpb, " tc=0"), 1);
	CHECK_EQ(ibv_destroy_qp(b), 0);
}

/* ---------------------------------------------------------------- GDR_LAZY */
static void sc_gdr_lazy(void)
{
	/* VEMU_GDR_LAZY=1: host memory registered through ibv_reg_dmabuf_mr plays device memory */
	open_all(64);
	int fd = memfd_create("vemu-devmem", 0);
	CHECK(fd >= 0);
	char *dev = aligned_alloc(4096, 65536);
	memset(dev, 0, 65536);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *dmr = ibv_reg_dmabuf_mr(d.pd, 0, 65536, (uintptr_t)dev, fd, acc);
	CHECK(dmr);
	close(fd); /* as NCCL does right after the registration */
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a, *b;
	pair(&a, &b, rc);
	struct ibv_qp *flush = vt_qp(&d, 8, 0, NULL);
	vt_connect(&d, flush, flush->qp_num, rc);
	memset(buf, 'D', 4096);
	struct ibv_wc wc[2];
	/* a WRITE_WITH_IMM completes at the target, but device memory has not seen the bytes yet */
	CHECK_EQ(vt_post_recv(b, NULL, 0, 0, 1), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 4096, mr->lkey, (uintptr_t)dev, dmr->rkey, 2,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 2, 5000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(wc[1].status, IBV_WC_SUCCESS);
	CHECK_EQ(dev[0], 0);
	CHECK_EQ(dev[4095], 0);
	/* a SEND into device memory is lazy too */
	CHECK_EQ(vt_post_recv(b, dev + 8192, 64, dmr->lkey, 3), 0);
	CHECK_EQ(vt_post_write(a, IBV_WR_SEND, buf, 64, mr->lkey, 0, 0, 4, IBV_SEND_SIGNALED, 0), 0);
	vt_wait(&d, d.cq, wc, 2, 5000);
	CHECK_EQ(dev[8192], 0);
	/* the flush: an RDMA READ on the device makes everything visible */
	CHECK_EQ(vt_post_write(flush, IBV_WR_RDMA_READ, buf + 65536, 1, mr->lkey, (uintptr_t)dev, dmr->rkey, 5,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(dev[0], 'D');
	CHECK_EQ(dev[4095], 'D');
	CHECK_EQ(dev[8192], 'D');
	CHECK_EQ(buf[65536], 'D'); /* the READ itself saw the flushed bytes */
	/* host MRs are never lazy */
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 16, mr->lkey, (uintptr_t)buf + 100000, mr->rkey, 6,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(buf[100000], 'D');
	/* destroying the target QP applies what it acknowledged (a real HCA finishes a QP's DMA before its destroy
	 * completes): no later READ of another QP may land those bytes over newer data */
	memset(buf, 'E', 4096);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 4096, mr->lkey, (uintptr_t)dev + 16384, dmr->rkey, 7,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(dev[16384], 0);
	CHECK_EQ(ibv_destroy_qp(b), 0);
	CHECK_EQ(dev[16384], 'E');
	CHECK_EQ(dev[16384 + 4095], 'E');
	memset(dev + 16384, 'N', 4096); /* newer data (another path) */
	CHECK_EQ(vt_post_write(flush, IBV_WR_RDMA_READ, buf + 65536, 1, mr->lkey, (uintptr_t)dev + 16384, dmr->rkey, 8,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(dev[16384], 'N');
	CHECK_EQ(buf[65536], 'N');
	/* deregistering the target MR applies what was acknowledged into it (the NIC's writes left it before their
	 * completion; only their visibility is lazy): a registration released after a device loss, before any flush
	 * READ could run, must not take back bytes the receiver was told are there */
	struct ibv_qp *a2, *b2;
	pair(&a2, &b2, rc);
	memset(buf, 'F', 4096);
	CHECK_EQ(vt_post_write(a2, IBV_WR_RDMA_WRITE, buf, 4096, mr->lkey, (uintptr_t)dev + 24576, dmr->rkey, 9,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(dev[24576], 0);
	CHECK_EQ(ibv_dereg_mr(dmr), 0);
	CHECK_EQ(dev[24576], 'F');
	CHECK_EQ(dev[24576 + 4095], 'F');
	CHECK_EQ(ibv_destroy_qp(a2), 0);
	CHECK_EQ(ibv_destroy_qp(b2), 0);
	CHECK_EQ(ibv_destroy_qp(a), 0);
	CHECK_EQ(ibv_destroy_qp(flush), 0);
	free(dev);
}

/* ---------------------------------------------------------------- device_fatal, then back */
static void sc_device_back(void)
{
	/* VEMU_FAULTS=device_fatal:dev=vemu0:after_ms=100:for_ms=300 */
	open_all(64);
	struct ibv_async_event ev;
	async_expect(IBV_EVENT_DEVICE_FATAL, &ev, 5000);
	struct ibv_port_attr pa;
	CHECK_EQ(ibv_query_port(d.ctx, 1, &pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_DOWN);
	/* while it is dead, a context opened on it is dead too */
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0]);
	struct ibv_context *early = ibv_open_device(list[0]);
	CHECK(early);
	errno = 0;
	CHECK(ibv_create_cq(early, 8, NULL, NULL, 0) == NULL);
	CHECK_EQ(errno, EIO);
	/* back after for_ms: wait for a new context to find the port ACTIVE (polled: the time is the emulator's) */
	struct ibv_context *nc = NULL;
	uint64_t end = vt_now_ms() + 5000;
	for (;;) {
		CHECK(vt_now_ms() < end);
		struct ibv_context *t = ibv_open_device(list[0]);
		CHECK(t);
		CHECK_EQ(ibv_query_port(t, 1, &pa), 0);
		if (pa.state == IBV_PORT_ACTIVE) {
			nc = t;
			break;
		}
		CHECK_EQ(ibv_close_device(t), 0);
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL); /* between probes, not a synchronisation: the loop's condition is the port */
	}
	/* the old contexts stay dead: port DOWN, EIO */
	CHECK_EQ(ibv_query_port(d.ctx, 1, &pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_DOWN);
	errno = 0;
	CHECK(ibv_create_cq(d.ctx, 8, NULL, NULL, 0) == NULL);
	CHECK_EQ(errno, EIO);
	CHECK(ibv_create_cq(early, 8, NULL, NULL, 0) == NULL);
	/* the new one works: a WRITE between two of its QPs */
	struct vt_dev n2;
	memset(&n2, 0, sizeof(n2));
	n2.ctx = nc;
	n2.pd = ibv_alloc_pd(nc);
	CHECK(n2.pd);
	n2.ch = ibv_create_comp_channel(nc);
	CHECK(n2.ch);
	n2.cq = ibv_create_cq(nc, 64, NULL, n2.ch, 0);
	CHECK(n2.cq);
	struct ibv_mr *m2 = vt_mr(&n2, buf, BUFSZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a = vt_qp(&n2, 8, 0, NULL), *b = vt_qp(&n2, 8, 0, NULL);
	vt_connect(&n2, a, b->qp_num, rc);
	vt_connect(&n2, b, a->qp_num, rc);
	memset(buf, 'R', 64);
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE, buf, 64, m2->lkey, (uintptr_t)buf + 4096, m2->rkey, 1,
			       IBV_SEND_SIGNALED, 0),
		 0);
	struct ibv_wc wc;
	vt_wait(&n2, n2.cq, &wc, 1, 5000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(buf[4096], 'R');
	CHECK_EQ(ibv_destroy_qp(a), 0);
	CHECK_EQ(ibv_destroy_qp(b), 0);
	CHECK_EQ(ibv_dereg_mr(m2), 0);
	CHECK_EQ(ibv_destroy_cq(n2.cq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(n2.ch), 0);
	CHECK_EQ(ibv_dealloc_pd(n2.pd), 0);
	CHECK_EQ(ibv_close_device(nc), 0);
	CHECK_EQ(ibv_close_device(early), 0);
	ibv_free_device_list(list);
}

/* ---------------------------------------------------------------- every= */
static void sc_wc_every(void)
{
	/* VEMU_FAULTS=wc:op=write:nth=2:every=3:status=rem_op: writes 2, 5 and 8 fail (one QP each: a failed WR
	 * takes its QP to ERR) */
	open_all(64);
	struct vt_rc rc = VT_RC_DEFAULT;
	for (int k = 1; k <= 8; k++) {
		struct ibv_qp *q = vt_qp(&d, 8, 0, NULL);
		vt_connect(&d, q, q->qp_num, rc);
		CHECK_EQ(vt_post_write(q, IBV_WR_RDMA_WRITE, buf, 64, mr->lkey, (uintptr_t)buf + 4096, mr->rkey,
				       (uint64_t)k, IBV_SEND_SIGNALED, 0),
			 0);
		struct ibv_wc wc;
		vt_wait(&d, d.cq, &wc, 1, 5000);
		CHECK_EQ(wc.wr_id, (uint64_t)k);
		CHECK_EQ(wc.status, (k == 2 || k == 5 || k == 8) ? IBV_WC_REM_OP_ERR : IBV_WC_SUCCESS);
		CHECK_EQ(ibv_destroy_qp(q), 0);
	}
}

/* ---------------------------------------------------------------- late_cqe */
static void sc_late_cqe(void)
{
	/* VEMU_FAULTS=late_cqe:nth=2:ms=300: the 2nd incoming WRITE_WITH_IMM is acknowledged (the sender completes),
	 * its QP fails, and its receive completion is written 300 ms later, ahead of the flushed ones */
	open_all(64);
	struct ibv_cq *rcq = ibv_create_cq(d.ctx, 64, NULL, d.ch, 0); /* its own CQ: the lagging completion holds back only that one */
	CHECK(rcq);
	struct vt_rc rc = VT_RC_DEFAULT;
	struct ibv_qp *a = vt_qp(&d, 64, 0, NULL), *b = vt_qp(&d, 64, 0, rcq);
	vt_connect(&d, a, b->qp_num, rc);
	vt_connect(&d, b, a->qp_num, rc);
	struct ibv_wc wc[4];
	for (int i = 1; i <= 3; i++)
		CHECK_EQ(vt_post_recv(b, NULL, 0, 0, (uint64_t)(10 + i)), 0);
	/* the first one is ordinary */
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 64, mr->lkey, (uintptr_t)buf + 4096, mr->rkey, 1,
			       IBV_SEND_SIGNALED, 0),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	vt_wait(&d, rcq, wc, 1, 5000);
	CHECK_EQ(wc[0].wr_id, 11);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	/* the second: the sender is told "done", the target's QP fails, and its CQ is empty for now */
	uint64_t t0 = vt_now_ms();
	CHECK_EQ(vt_post_write(a, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 64, mr->lkey, (uintptr_t)buf + 8192, mr->rkey, 2,
			       IBV_SEND_SIGNALED, 2),
		 0);
	vt_wait(&d, d.cq, wc, 1, 5000);
	CHECK_EQ(wc[0].wr_id, 2);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	struct ibv_async_event ev;
	async_expect(IBV_EVENT_QP_FATAL, &ev, 5000);
	CHECK(ev.element.qp == b);
	CHECK_EQ(b->state, IBV_QPS_ERR);
	if (vt_now_ms() - t0 < 250)
		CHECK_EQ(ibv_poll_cq(rcq, 4, wc), 0); /* the lagging completion is not there yet */
	/* a marker posted now (as ib_drain_qp does) completes after it */
	CHECK_EQ(vt_post_recv(b, NULL, 0, 0, 99), 0);
	vt_wait(&d, rcq, wc, 3, 5000);
	CHECK(vt_now_ms() - t0 >= 290);
	CHECK_EQ(wc[0].wr_id, 12);
	CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
	CHECK_EQ(wc[0].imm_data, 2u);
	CHECK_EQ(wc[1].wr_id, 13);
	CHECK_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(wc[2].wr_id, 99);
	CHECK_EQ(wc[2].status, IBV_WC_WR_FLUSH_ERR);
	CHECK_EQ(ibv_destroy_qp(b), 0);
	CHECK_EQ(ibv_destroy_qp(a), 0);
	CHECK_EQ(ibv_destroy_cq(rcq), 0);
}

/* ---------------------------------------------------------------- malformed rules */
/* A child with var=val (and no VEMU_FAULTS unless var is it): ibv_get_device_list must fail; its stderr in msg. */
static void init_fails(const char *var, const char *val, char *msg, size_t len)
{
	int p[2];
	CHECK_EQ(pipe(p), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		unsetenv("VEMU_FAULTS");
		setenv(var, val, 1);
		int n = 5;
		struct ibv_device **l = ibv_get_device_list(&n);
		exit(l == NULL && n == 0 ? 0 : 1);
	}
	close(p[1]);
	memset(msg, 0, len);
	size_t got = 0;
	ssize_t r;
	while ((r = read(p[0], msg + got, len - 1 - got)) > 0)
		got += (size_t)r;
	close(p[0]);
	CHECK_EQ(vt_wait_child(pid), 0);
}

static void sc_malformed(void)
{
	const char *bad[] = {
		"wc:op=write:nth=0:status=rem_access", "wc:op=bogus:nth=1:status=rem_access",
		"wc:op=write:nth=1", "qp_fatal", "peer_loss:after_bytes=x", "port_down:dev=vemu0",
		"fail:call=reg_mr:nth=1:errno=EWHATEVER", "fail:call=post_send:nth=1:errno=EIO",
		"no_recv_credit:nth=1:extra=2", "nonsense:nth=1", "wc:op=write:nth=1:status=rem_access;junk",
	};
	char msg[1024];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		init_fails("VEMU_FAULTS", bad[i], msg, sizeof(msg));
		CHECK(strstr(msg, "VEMU_FAULTS") != NULL);
		CHECK(strstr(msg, "malformed rule") != NULL);
	}
	/* a malformed VEMU_ACK_WAIT_S is named too */
	const char *bad_wait[] = { "soon", "0", "-5", "86401", "20s" };
	for (size_t i = 0; i < sizeof(bad_wait) / sizeof(bad_wait[0]); i++) {
		init_fails("VEMU_ACK_WAIT_S", bad_wait[i], msg, sizeof(msg));
		CHECK(strstr(msg, "VEMU_ACK_WAIT_S") != NULL);
	}
	/* a good list parses */
	setenv("VEMU_FAULTS", "wc:op=write|read:nth=5:status=loc_prot;port_down:dev=none:after_ms=1:for_ms=1", 1);
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l);
	CHECK(n >= 1);
	ibv_free_device_list(l);
}

/* ---------------------------------------------------------------- async events of destroyed QPs */
static atomic_int destroyed_flag;

static void *destroy_thread(void *qp)
{
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	atomic_store(&destroyed_flag, 1);
	return NULL;
}

static void sc_async_destroyed(void)
{
	/* VEMU_FAULTS=qp_fatal:nth=1;qp_fatal:nth=2;qp_fatal:nth=3 */
	open_all(64);
	struct vt_rc rc = VT_RC_DEFAULT;
	int fl = fcntl(d.ctx->async_fd, F_GETFL);
	CHECK(fl >= 0);
	CHECK_EQ(fcntl(d.ctx->async_fd, F_SETFL, fl | O_NONBLOCK), 0);
	/* a's QP_FATAL is not read before a is destroyed: it is never delivered, also not to b, which may well sit at
	 * a's address (the kernel drops an object's unread events at destroy) */
	struct ibv_qp *a = vt_qp(&d, 8, 0, NULL);
	vt_connect(&d, a, a->qp_num, rc);
	CHECK_EQ(a->state, IBV_QPS_ERR);
	CHECK_EQ(ibv_destroy_qp(a), 0);
	struct ibv_qp *b = vt_qp(&d, 8, 0, NULL);
	vt_connect(&d, b, b->qp_num, rc);
	CHECK_EQ(b->state, IBV_QPS_ERR);
	struct ibv_async_event ev;
	CHECK_EQ(ibv_get_async_event(d.ctx, &ev), 0); /* (both records were written before the first read) */
	CHECK_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
	CHECK(ev.element.qp == b);
	ibv_ack_async_event(&ev);
	errno = 0;
	CHECK_EQ(ibv_get_async_event(d.ctx, &ev), -1); /* one event only: b's */
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(ibv_destroy_qp(b), 0);
	/* an event read and not yet acked: ibv_destroy_qp returns only after the ack */
	struct ibv_qp *c = vt_qp(&d, 8, 0, NULL);
	vt_connect(&d, c, c->qp_num, rc);
	CHECK_EQ(ibv_get_async_event(d.ctx, &ev), 0);
	CHECK(ev.element.qp == c);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, destroy_thread, c), 0);
	for (int i = 0; i < 20; i++) { /* 200 ms in which it must not return */
		CHECK_EQ(atomic_load(&destroyed_flag), 0);
		CHECK_EQ(poll(NULL, 0, 10), 0);
	}
	ibv_ack_async_event(&ev);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(atomic_load(&destroyed_flag), 1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *s = argc > 1 ? argv[1] : "";
	vt_name = s;
	/* each scenario's environment, set before the first verbs call (VEMU_FAULTS uses ';') */
	struct {
		const char *name;
		void (*fn)(void);
		const char *faults, *devices, *extra;
	} t[] = {
		{ "wc", sc_wc,
		  "wc:op=write:nth=3:status=rem_access;wc:op=read:nth=2:status=retry_exc;"
		  "wc:op=send:nth=1:status=rnr_retry_exc;wc:op=write_imm:nth=1:status=rem_op;"
		  "wc:op=write:nth=7:status=loc_prot",
		  NULL, NULL },
		{ "qp_fatal", sc_qp_fatal, "qp_fatal:nth=2", NULL, NULL },
		{ "fail", sc_fail,
		  "fail:call=alloc_pd:nth=2:errno=EPERM;fail:call=create_cq:nth=2:errno=ENOMEM;"
		  "fail:call=reg_mr:nth=2:errno=ENOMEM;fail:call=create_qp:nth=1:errno=EAGAIN;"
		  "fail:call=modify_qp:nth=3:errno=EIO;fail:call=reg_dmabuf_mr:nth=1:errno=EFAULT",
		  NULL, NULL },
		{ "no_recv_credit", sc_no_recv_credit, "no_recv_credit:nth=2", NULL, NULL },
		{ "port_down", sc_port_down,
		  "port_down:dev=vemu0:after_ms=100:for_ms=300;port_down:dev=vemu1:after_ms=100", "vemu0:roce,vemu1:ib",
		  NULL },
		{ "device_fatal", sc_device_fatal, "device_fatal:dev=vemu0:after_ms=200", "vemu0:roce,vemu1:roce", NULL },
		{ "peer_loss", sc_peer_loss, NULL, NULL, NULL },
		{ "events", sc_events, NULL, NULL, NULL },
		{ "trace", sc_trace, NULL, NULL, "VEMU_TRACE" },
		{ "gdr_lazy", sc_gdr_lazy, NULL, NULL, "VEMU_GDR_LAZY" },
		{ "malformed", sc_malformed, NULL, NULL, NULL },
		{ "late_cqe", sc_late_cqe, "late_cqe:nth=2:ms=300", NULL, NULL },
		{ "wc_every", sc_wc_every, "wc:op=write:nth=2:every=3:status=rem_op", NULL, NULL },
		{ "device_back", sc_device_back, "device_fatal:dev=vemu0:after_ms=100:for_ms=300", NULL, NULL },
		{ "async_destroyed", sc_async_destroyed, "qp_fatal:nth=1;qp_fatal:nth=2;qp_fatal:nth=3", NULL, NULL },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (strcmp(s, t[i].name))
			continue;
		if (t[i].faults)
			setenv("VEMU_FAULTS", t[i].faults, 1);
		else
			unsetenv("VEMU_FAULTS");
		if (t[i].devices)
			setenv("VEMU_DEVICES", t[i].devices, 1);
		if (t[i].extra && !strcmp(t[i].extra, "VEMU_GDR_LAZY"))
			setenv("VEMU_GDR_LAZY", "1", 1);
		if (t[i].extra && !strcmp(t[i].extra, "VEMU_TRACE")) {
			static char path[4096];
			const char *dir = getenv("VEMU_DIR");
			snprintf(path, sizeof(path), "%s/trace.log", dir ? dir : "/tmp");
			setenv("VEMU_TRACE", path, 1);
		}
		t[i].fn();
		printf("test_faults %s: OK\n", s);
		return 0;
	}
	fprintf(stderr, "unknown scenario '%s'\n", s);
	return 2;
}
