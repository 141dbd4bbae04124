/* verbs emulator self-tests: small helpers shared by the test programs (header-only). */
#ifndef VT_H
#define VT_H

#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static const char *vt_name = "";

#define CHECK(cond)                                                                                              \
	do {                                                                                                     \
		if (!(cond)) {                                                                                   \
			fprintf(stderr, "FAIL %s:%d [%s] pid %d: %s (errno %d %s)\n", __FILE__, __LINE__,        \
				vt_name, (int)getpid(), #cond, errno, strerror(errno));                          \
			exit(1);                                                                                 \
		}                                                                                                \
	} while (0)

#define CHECK_EQ(a, b)                                                                                           \
	do {                                                                                                     \
		long long _a = (long long)(a), _b = (long long)(b);                                              \
		if (_a != _b) {                                                                                  \
			fprintf(stderr, "FAIL %s:%d [%s] pid %d: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, \
				vt_name, (int)getpid(), #a, #b, _a, _b);                                         \
			exit(1);                                                                                 \
		}                                                                                                \
	} while (0)

static inline uint64_t vt_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct vt_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_port_attr port;
	int is_ib;
};

static inline void vt_open(struct vt_dev *d, int index, int cqe)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l);
	CHECK(n > index);
	d->ctx = ibv_open_device(l[index]);
	CHECK(d->ctx);
	ibv_free_device_list(l);
	CHECK_EQ(ibv_query_port(d->ctx, 1, &d->port), 0);
	d->is_ib = d->port.link_layer == IBV_LINK_LAYER_INFINIBAND;
	d->pd = ibv_alloc_pd(d->ctx);
	CHECK(d->pd);
	d->ch = ibv_create_comp_channel(d->ctx);
	CHECK(d->ch);
	d->cq = ibv_create_cq(d->ctx, cqe, NULL, d->ch, 0);
	CHECK(d->cq);
}

static inline void vt_close(struct vt_dev *d)
{
	CHECK_EQ(ibv_destroy_cq(d->cq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(d->ch), 0);
	CHECK_EQ(ibv_dealloc_pd(d->pd), 0);
	CHECK_EQ(ibv_close_device(d->ctx), 0);
}

static inline struct ibv_qp *vt_qp(struct vt_dev *d, int depth, int inl, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.send_cq = cq ? cq : d->cq;
	a.recv_cq = cq ? cq : d->cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = (uint32_t)depth;
	a.cap.max_recv_wr = (uint32_t)depth;
	a.cap.max_send_sge = 4;
	a.cap.max_recv_sge = 4;
	a.cap.max_inline_data = (uint32_t)inl;
	struct ibv_qp *qp = ibv_create_qp(d->pd, &a);
	CHECK(qp);
	return qp;
}

struct vt_rc {
	int timeout, retry_cnt, rnr_retry, min_rnr_timer;
	unsigned access;
};
#define VT_RC_DEFAULT { 14, 7, 7, 12, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE }

static inline void vt_connect(struct vt_dev *d, struct ibv_qp *qp, uint32_t dest_qpn, struct vt_rc rc)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.pkey_index = 0;
	a.qp_access_flags = rc.access;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	CHECK_EQ(qp->state, IBV_QPS_INIT);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = (uint8_t)rc.min_rnr_timer;
	a.ah_attr.port_num = 1;
	if (d->is_ib) {
		a.ah_attr.dlid = d->port.lid;
	} else {
		a.ah_attr.is_global = 1;
		CHECK_EQ(ibv_query_gid(d->ctx, 1, 3, &a.ah_attr.grh.dgid), 0);
		a.ah_attr.grh.sgid_index = 3;
		a.ah_attr.grh.hop_limit = 1;
	}
	CHECK_EQ(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
		 0);
	CHECK_EQ(qp->state, IBV_QPS_RTR);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = (uint8_t)rc.timeout;
	a.retry_cnt = (uint8_t)rc.retry_cnt;
	a.rnr_retry = (uint8_t)rc.rnr_retry;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	CHECK_EQ(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				       IBV_QP_MAX_QP_RD_ATOMIC),
		 0);
}

/* wait for exactly n completions on cq, blocking on its completion channel (no sleeps, no spinning) */
static inline void vt_wait(struct vt_dev *d, struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms)
{
	int got = 0;
	uint64_t end = vt_now_ms() + (uint64_t)timeout_ms;
	while (got < n) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		CHECK(k >= 0);
		got += k;
		if (got >= n)
			break;
		CHECK_EQ(ibv_req_notify_cq(cq, 0), 0);
		k = ibv_poll_cq(cq, n - got, wc + got);
		CHECK(k >= 0);
		got += k;
		if (got >= n)
			break;
		uint64_t now = vt_now_ms();
		if (now >= end) {
			fprintf(stderr, "FAIL [%s] pid %d: timeout waiting for %d completions (got %d)\n", vt_name,
				(int)getpid(), n, got);
			exit(1);
		}
		struct pollfd p = { .fd = d->ch->fd, .events = POLLIN };
		int r = poll(&p, 1, (int)(end - now));
		CHECK(r >= 0);
		if (r == 1) {
			struct ibv_cq *ecq;
			void *ectx;
			CHECK_EQ(ibv_get_cq_event(d->ch, &ecq, &ectx), 0);
			ibv_ack_cq_events(ecq, 1);
		}
	}
}

/* expect that no completion arrives on cq within ms (used only to assert absence) */
static inline int vt_quiet(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	uint64_t end = vt_now_ms() + (uint64_t)ms;
	while (vt_now_ms() < end) {
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			return 0;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return 1;
}

static inline struct ibv_mr *vt_mr(struct vt_dev *d, void *buf, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, buf, len, access);
	CHECK(mr);
	return mr;
}

static inline int vt_post_write(struct ibv_qp *qp, int opcode, void *buf, uint32_t len, uint32_t lkey,
				uint64_t raddr, uint32_t rkey, uint64_t wr_id, unsigned flags, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = (enum ibv_wr_opcode)opcode;
	wr.send_flags = flags;
	wr.imm_data = imm;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static inline int vt_post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = len || buf ? 1 : 0;
	return ibv_post_recv(qp, &wr, &bad);
}

/* a blocking message channel between the processes of a test (socketpair) */
static inline void vt_send(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		CHECK(w > 0);
		c += w;
		n -= (size_t)w;
	}
}

static inline void vt_recv(int fd, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = read(fd, c, n);
		CHECK(r > 0);
		c += r;
		n -= (size_t)r;
	}
}

static inline int vt_wait_child(pid_t pid)
{
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	fprintf(stderr, "child %d died from signal %d\n", (int)pid, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
	return 100;
}

#endif
