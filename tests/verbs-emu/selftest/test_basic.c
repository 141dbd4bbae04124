/* devices, ports, GIDs, fake sysfs, the QP state table with its attribute masks, the compat query_port,
 * registration entry points and the verbs that are not emulated. VEMU_DEVICES=vemu0:roce,vemu1:ib */
#include "vt.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

static void read_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	ssize_t r = read(fd, buf, n - 1);
	CHECK(r > 0);
	buf[r] = 0;
	close(fd);
}

static void test_devices(void)
{
	vt_name = "devices";
	int n = -1;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l);
	CHECK_EQ(n, 2);
	CHECK(!strcmp(ibv_get_device_name(l[0]), "vemu0"));
	CHECK(!strcmp(ibv_get_device_name(l[1]), "vemu1"));
	CHECK(l[2] == NULL);
	CHECK(ibv_get_device_guid(l[0]) != 0);
	CHECK(ibv_get_device_guid(l[0]) != ibv_get_device_guid(l[1]));
	for (int i = 0; i < 2; i++) {
		struct ibv_context *c = ibv_open_device(l[i]);
		CHECK(c);
		CHECK(c->async_fd >= 0);
		struct ibv_device_attr da;
		CHECK_EQ(ibv_query_device(c, &da), 0);
		CHECK_EQ(da.phys_port_cnt, 1);
		CHECK(da.max_qp_wr >= 1024);
		CHECK(da.sys_image_guid == ibv_get_device_guid(l[i]));
		{
			/* max_cqe: 2^22 as mlx5, or VEMU_MAX_CQE; a larger CQ is refused */
			const char *mc = getenv("VEMU_MAX_CQE");
			int want = mc && *mc ? atoi(mc) : 1 << 22;
			CHECK_EQ(da.max_cqe, want);
			struct ibv_cq *cq = ibv_create_cq(c, da.max_cqe + 1, NULL, NULL, 0);
			CHECK(cq == NULL && errno == EINVAL);
			if (want <= 4096) {
				cq = ibv_create_cq(c, da.max_cqe, NULL, NULL, 0);
				CHECK(cq);
				CHECK_EQ(ibv_destroy_cq(cq), 0);
			}
		}
		struct ibv_port_attr pa;
		CHECK_EQ(ibv_query_port(c, 1, &pa), 0);
		CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
		CHECK_EQ(pa.active_mtu, IBV_MTU_4096);
		CHECK(pa.active_speed != 0 && pa.active_width != 0);
		CHECK(ibv_query_port(c, 2, &pa) != 0);
		union ibv_gid gid;
		char path[PATH_MAX], buf[256];
		snprintf(path, sizeof(path), "%s/device", l[i]->ibdev_path);
		struct stat st;
		CHECK_EQ(lstat(path, &st), 0);
		CHECK(S_ISLNK(st.st_mode));
		char *real = realpath(path, NULL);
		CHECK(real);
		const char *pci = getenv("VEMU_PCI_PATH");
		if (pci && *pci) {
			/* the link points at the given PCI device (e.g. a GPU's, to look near it) */
			char *want = realpath(pci, NULL);
			CHECK(want);
			CHECK(!strcmp(real, want));
			free(want);
		} else {
			snprintf(path, sizeof(path), "%s/vendor", real);
			read_file(path, buf, sizeof(buf));
			CHECK(!strncmp(buf, "0x15b3", 6));
		}
		free(real);
		if (i == 1) {
			CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
			CHECK(pa.lid != 0);
			CHECK_EQ(ibv_query_gid(c, 1, 0, &gid), 0);
			CHECK_EQ(gid.raw[0], 0xfe);
			continue;
		}
		CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
		CHECK(pa.gid_tbl_len >= 4);
		int ll = 0, v4 = 0, v1 = 0, v2 = 0;
		for (int k = 0; k < pa.gid_tbl_len; k++) {
			CHECK_EQ(ibv_query_gid(c, 1, k, &gid), 0);
			if (gid.raw[0] == 0xfe && gid.raw[1] == 0x80)
				ll++;
			if (gid.raw[10] == 0xff && gid.raw[11] == 0xff && gid.raw[12] == 127)
				v4++;
			snprintf(path, sizeof(path), "%s/ports/1/gid_attrs/types/%d", l[i]->ibdev_path, k);
			read_file(path, buf, sizeof(buf));
			if (!strcmp(buf, "IB/RoCE v1\n"))
				v1++;
			else if (!strcmp(buf, "RoCE v2\n"))
				v2++;
			else
				CHECK(!"unexpected gid type");
			struct ibv_gid_entry e;
			CHECK_EQ(ibv_query_gid_ex(c, 1, (uint32_t)k, &e, 0), 0);
			CHECK(!memcmp(&e.gid, &gid, sizeof(gid)));
			CHECK_EQ(e.gid_type, !strcmp(buf, "RoCE v2\n") ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1);
			snprintf(path, sizeof(path), "%s/ports/1/gid_attrs/ndevs/%d", l[i]->ibdev_path, k);
			read_file(path, buf, sizeof(buf));
		}
		CHECK(ll >= 1 && v4 >= 1 && v1 >= 1 && v2 >= 1);
		CHECK(ibv_query_gid(c, 1, pa.gid_tbl_len, &gid) != 0);
		struct ibv_gid_entry tab[16];
		CHECK_EQ(ibv_query_gid_table(c, tab, 16, 0), pa.gid_tbl_len);
		CHECK_EQ(ibv_close_device(c), 0);
	}
	ibv_free_device_list(l);
}

/* the exported ibv_query_port (what dlvsym gives NCCL) writes only the compat prefix */
static void test_compat_query_port(struct vt_dev *d)
{
	vt_name = "compat_query_port";
	struct ibv_port_attr pa;
	memset(&pa, 0xab, sizeof(pa));
#undef ibv_query_port
	CHECK_EQ(ibv_query_port(d->ctx, 1, (struct _compat_ibv_port_attr *)&pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
	CHECK_EQ(pa.port_cap_flags2, 0xabab); /* beyond the compat prefix: untouched */
	struct verbs_context *vc = verbs_get_ctx_op(d->ctx, query_port);
	CHECK(vc != NULL);
	CHECK_EQ(vc->sz, sizeof(struct verbs_context));
}

static int mq(struct ibv_qp *qp, int state, int mask)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)state;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.sgid_index = 3;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = 1;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, mask);
}

static void test_state_table(struct vt_dev *d)
{
	vt_name = "state_table";
	const int S = IBV_QP_STATE;
	const int INIT = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const int RTR = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER;
	const int RTS = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	struct ibv_qp *qp = vt_qp(d, 16, 0, NULL);
	CHECK_EQ(qp->state, IBV_QPS_RESET);
	CHECK(qp->qp_num != 0 && qp->qp_num < (1u << 24));
	/* skipping states */
	CHECK_EQ(mq(qp, IBV_QPS_RTR, S | INIT | RTR), EINVAL);
	CHECK_EQ(mq(qp, IBV_QPS_RTS, S | RTS), EINVAL);
	/* each required bit of RESET->INIT */
	for (int bit = 1; bit < (1 << 21); bit <<= 1) {
		if (!(INIT & bit))
			continue;
		CHECK_EQ(mq(qp, IBV_QPS_INIT, S | (INIT & ~bit)), EINVAL);
		CHECK_EQ(qp->state, IBV_QPS_RESET);
	}
	/* an attribute not allowed on this transition */
	CHECK_EQ(mq(qp, IBV_QPS_INIT, S | INIT | IBV_QP_TIMEOUT), EINVAL);
	CHECK_EQ(mq(qp, IBV_QPS_INIT, S | INIT), 0);
	CHECK_EQ(qp->state, IBV_QPS_INIT);
	/* post_send before RTS */
	char b[8];
	CHECK_EQ(vt_post_write(qp, IBV_WR_SEND, b, 0, 0, 0, 0, 1, IBV_SEND_SIGNALED, 0), EINVAL);
	for (int bit = 1; bit < (1 << 21); bit <<= 1) {
		if (!(RTR & bit))
			continue;
		CHECK_EQ(mq(qp, IBV_QPS_RTR, S | (RTR & ~bit)), EINVAL);
		CHECK_EQ(qp->state, IBV_QPS_INIT);
	}
	CHECK_EQ(mq(qp, IBV_QPS_RTR, S | RTR | IBV_QP_RETRY_CNT), EINVAL);
	CHECK_EQ(mq(qp, IBV_QPS_RTR, S | RTR), 0);
	CHECK_EQ(qp->state, IBV_QPS_RTR);
	for (int bit = 1; bit < (1 << 21); bit <<= 1) {
		if (!(RTS & bit))
			continue;
		CHECK_EQ(mq(qp, IBV_QPS_RTS, S | (RTS & ~bit)), EINVAL);
		CHECK_EQ(qp->state, IBV_QPS_RTR);
	}
	CHECK_EQ(mq(qp, IBV_QPS_RTS, S | RTS | IBV_QP_DEST_QPN), EINVAL);
	CHECK_EQ(mq(qp, IBV_QPS_RTS, S | RTS), 0);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	/* RTS->RTS with an optional attribute; not with a required-only one */
	CHECK_EQ(mq(qp, IBV_QPS_RTS, S | IBV_QP_MIN_RNR_TIMER), 0);
	CHECK_EQ(mq(qp, IBV_QPS_RTS, S | IBV_QP_TIMEOUT), EINVAL);
	/* back to INIT is not a legal transition */
	CHECK_EQ(mq(qp, IBV_QPS_INIT, S | INIT), EINVAL);
	/* -> ERR -> RESET -> INIT again */
	CHECK_EQ(mq(qp, IBV_QPS_ERR, S), 0);
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(mq(qp, IBV_QPS_RTS, S | RTS), EINVAL);
	CHECK_EQ(mq(qp, IBV_QPS_RESET, S), 0);
	CHECK_EQ(qp->state, IBV_QPS_RESET);
	CHECK_EQ(mq(qp, IBV_QPS_INIT, S | INIT), 0);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK_EQ(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi), 0);
	CHECK_EQ(qa.qp_state, IBV_QPS_INIT);
	CHECK_EQ(qi.cap.max_send_wr, 16);
	/* bad values */
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 2;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	/* RoCE needs a GRH */
	qp = vt_qp(d, 4, 0, NULL);
	CHECK_EQ(mq(qp, IBV_QPS_INIT, S | INIT), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.ah_attr.dlid = 1;
	a.ah_attr.port_num = 1;
	CHECK_EQ(ibv_modify_qp(qp, &a, S | RTR), EINVAL);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	/* QPNs are unique */
	struct ibv_qp *qs[40];
	for (int i = 0; i < 40; i++) {
		qs[i] = vt_qp(d, 4, 0, NULL);
		for (int k = 0; k < i; k++)
			CHECK(qs[k]->qp_num != qs[i]->qp_num);
	}
	for (int i = 0; i < 40; i++)
		CHECK_EQ(ibv_destroy_qp(qs[i]), 0);
}

static void test_registration(struct vt_dev *d)
{
	vt_name = "registration";
	static char buf[4096];
	struct ibv_mr *a = ibv_reg_mr(d->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(a);
	CHECK(a->lkey == a->rkey);
	CHECK(a->addr == buf && a->length == sizeof(buf));
	volatile int flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *b = ibv_reg_mr(d->pd, buf, sizeof(buf), flags); /* lands in ibv_reg_mr_iova2 */
	CHECK(b);
	CHECK(b->lkey != a->lkey);
	struct ibv_mr *c = ibv_reg_mr_iova2(d->pd, buf, sizeof(buf), 0x10000, IBV_ACCESS_LOCAL_WRITE);
	CHECK(c);
	/* remote write without local write is invalid */
	errno = 0;
	CHECK(ibv_reg_mr(d->pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE) == NULL);
	CHECK_EQ(errno, EINVAL);
	/* the DMA-BUF probe */
	errno = 0;
	CHECK(ibv_reg_dmabuf_mr(d->pd, 0, 0, 0, -1, 0) == NULL);
	CHECK_EQ(errno, EBADF);
	CHECK_EQ(ibv_dereg_mr(a), 0);
	CHECK_EQ(ibv_dereg_mr(b), 0);
	CHECK_EQ(ibv_dereg_mr(c), 0);
	/* PD busy while a QP uses it */
	struct ibv_pd *pd = ibv_alloc_pd(d->ctx);
	CHECK(pd);
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = d->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	CHECK_EQ(ibv_destroy_cq(d->cq), EBUSY);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
	/* UD QPs and SRQs are not emulated */
	ia.qp_type = IBV_QPT_UD;
	errno = 0;
	CHECK(ibv_create_qp(d->pd, &ia) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
}

static void test_unsupported(struct vt_dev *d)
{
	vt_name = "unsupported";
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof(sa));
	errno = 0;
	CHECK(ibv_create_srq(d->pd, &sa) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	struct ibv_ah_attr ah;
	memset(&ah, 0, sizeof(ah));
	errno = 0;
	CHECK(ibv_create_ah(d->pd, &ah) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	CHECK(ibv_alloc_mw(d->pd, IBV_MW_TYPE_1) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	CHECK_EQ(ibv_resize_cq(d->cq, 100), EOPNOTSUPP);
	struct ibv_ece ece;
	struct ibv_qp *qp = vt_qp(d, 1, 0, NULL);
	CHECK_EQ(ibv_query_ece(qp, &ece), EOPNOTSUPP);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK(ibv_alloc_dm(d->ctx, &(struct ibv_alloc_dm_attr){ .length = 64 }) == NULL);
	CHECK(strlen(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)) > 0);
	CHECK(strlen(ibv_event_type_str(IBV_EVENT_PORT_ERR)) > 0);
}

/* a child forked after the parent used the emulator starts over with its own agent; the parent is unaffected */
static void test_fork(struct vt_dev *d)
{
	vt_name = "fork";
	static char buf[4096];
#if defined(__SANITIZE_ADDRESS__)
	/* GCC 12's ASan takes no lock around fork (upstream added one in LLVM 18): its allocator's locks can be copied
	 * held into the child of this two-thread process, and the child's first thread start (its agent) then hangs on
	 * one. Seen about 1 run in 170 under load, with the emulator's agent held out of its work across the fork, so
	 * not from our threads. The release build runs this case. */
	(void)d;
	(void)buf;
	printf("fork: skipped under ASan (its allocator is not fork-safe in a multi-threaded process)\n");
	return;
#endif
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		struct vt_dev c;
		vt_open(&c, 0, 16);
		struct ibv_mr *m = vt_mr(&c, buf, sizeof(buf),
					 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
		struct ibv_qp *q = vt_qp(&c, 4, 0, NULL);
		struct vt_rc rc = VT_RC_DEFAULT;
		vt_connect(&c, q, q->qp_num, rc);
		memcpy(buf, "child", 6);
		CHECK_EQ(vt_post_write(q, IBV_WR_RDMA_WRITE, buf, 6, m->lkey, (uintptr_t)buf + 100, m->rkey, 1,
				       IBV_SEND_SIGNALED, 0),
			 0);
		struct ibv_wc wc;
		vt_wait(&c, c.cq, &wc, 1, 5000);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK(!strcmp(buf + 100, "child"));
		_exit(0);
	}
	CHECK_EQ(vt_wait_child(p), 0);
	/* the parent still works */
	struct ibv_mr *m = vt_mr(d, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp *q = vt_qp(d, 4, 0, NULL);
	struct vt_rc rc = VT_RC_DEFAULT;
	vt_connect(d, q, q->qp_num, rc);
	memcpy(buf, "parent", 7);
	CHECK_EQ(vt_post_write(q, IBV_WR_RDMA_WRITE, buf, 7, m->lkey, (uintptr_t)buf + 200, m->rkey, 2, IBV_SEND_SIGNALED,
			       0),
		 0);
	struct ibv_wc wc;
	vt_wait(d, d->cq, &wc, 1, 5000);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(!strcmp(buf + 200, "parent"));
	CHECK_EQ(ibv_destroy_qp(q), 0);
	CHECK_EQ(ibv_dereg_mr(m), 0);
}

int main(void)
{
	test_devices();
	struct vt_dev d;
	vt_open(&d, 0, 64);
	test_compat_query_port(&d);
	test_state_table(&d);
	test_registration(&d);
	test_unsupported(&d);
	test_fork(&d);
	vt_close(&d);
	printf("test_basic: OK\n");
	return 0;
}
