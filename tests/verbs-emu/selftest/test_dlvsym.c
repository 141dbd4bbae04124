/* the emulator resolves like rdma-core's libibverbs through dlopen + dlvsym at its version nodes, the way
 * stock NCCL loads it; then NCCL's first steps through those pointers. Run with LD_LIBRARY_PATH set to the
 * emulator's directory (CTest does). */
#include "vt.h"

#include <dlfcn.h>
#include <link.h>

static void *h;

static void *sym(const char *name, const char *ver)
{
	void *p = dlvsym(h, name, ver);
	if (!p)
		fprintf(stderr, "dlvsym(%s, %s): %s\n", name, ver, dlerror());
	return p;
}

/* call through the pointer dlvsym gives, typed like the declaration in verbs.h */
#define F(name) ((__typeof__(&name))sym(#name, "IBVERBS_1.1"))

int main(void)
{
	vt_name = "dlvsym";
	/* NCCL tries "libibverbs.so" first, then "libibverbs.so.1" */
	h = dlopen("libibverbs.so", RTLD_NOW);
	CHECK(h);
	void *h1 = dlopen("libibverbs.so.1", RTLD_NOW);
	CHECK(h1 == h);
	struct link_map *lm = NULL;
	CHECK_EQ(dlinfo(h, RTLD_DI_LINKMAP, &lm), 0);
	CHECK(strstr(lm->l_name, "verbs-emu") != NULL); /* the emulator, not the system library */
	const char *nccl11[] = { "ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name",
				 "ibv_open_device",	"ibv_close_device",     "ibv_get_async_event",
				 "ibv_ack_async_event", "ibv_query_device",     "ibv_query_port",
				 "ibv_query_gid",	"ibv_query_qp",	 "ibv_alloc_pd",
				 "ibv_dealloc_pd",	"ibv_reg_mr",	   "ibv_dereg_mr",
				 "ibv_create_cq",	"ibv_destroy_cq",       "ibv_create_qp",
				 "ibv_modify_qp",	"ibv_destroy_qp",       "ibv_fork_init",
				 "ibv_event_type_str",  "ibv_get_cq_event",     "ibv_ack_cq_events",
				 "ibv_wc_status_str" };
	for (size_t i = 0; i < sizeof(nccl11) / sizeof(nccl11[0]); i++)
		CHECK(sym(nccl11[i], "IBVERBS_1.1") != NULL);
	struct {
		const char *name, *ver;
	} later[] = {
		{ "ibv_create_comp_channel", "IBVERBS_1.0" }, { "ibv_read_sysfs_file", "IBVERBS_1.0" },
		{ "ibv_destroy_comp_channel", "IBVERBS_1.0" },
		{ "ibv_get_pkey_index", "IBVERBS_1.5" },      { "ibv_qp_to_qp_ex", "IBVERBS_1.6" },
		{ "ibv_reg_mr_iova", "IBVERBS_1.7" },	      { "ibv_reg_mr_iova2", "IBVERBS_1.8" },
		{ "ibv_get_device_index", "IBVERBS_1.9" },    { "ibv_query_ece", "IBVERBS_1.10" },
		{ "ibv_set_ece", "IBVERBS_1.10" },	      { "_ibv_query_gid_ex", "IBVERBS_1.11" },
		{ "_ibv_query_gid_table", "IBVERBS_1.11" },   { "ibv_reg_dmabuf_mr", "IBVERBS_1.12" },
		{ "ibv_is_fork_initialized", "IBVERBS_1.13" }, { "ibv_query_qp_data_in_order", "IBVERBS_1.14" },
		{ "ibv_query_gid_type", "IBVERBS_PRIVATE_34" },
	};
	for (size_t i = 0; i < sizeof(later) / sizeof(later[0]); i++)
		CHECK(sym(later[i].name, later[i].ver) != NULL);
	/* symbols are not visible at nodes older than the one that introduced them, nor at made-up nodes */
	CHECK(dlvsym(h, "ibv_reg_dmabuf_mr", "IBVERBS_1.1") == NULL);
	CHECK(dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.7") == NULL);
	CHECK(dlvsym(h, "ibv_get_device_list", "IBVERBS_9.9") == NULL);
	CHECK(dlvsym(h, "ibv_create_comp_channel", "IBVERBS_1.1") == NULL); /* 1.0 only, as in rdma-core */
	/* internal helpers are not exported */
	CHECK(dlsym(h, "vemu_qp_find") == NULL);
	CHECK(dlsym(h, "g") == NULL);

	/* NCCL's first steps, through the resolved pointers */
	struct ibv_device **(*get_list)(int *) = sym("ibv_get_device_list", "IBVERBS_1.1");
	struct ibv_context *(*open_dev)(struct ibv_device *) = sym("ibv_open_device", "IBVERBS_1.1");
	int (*query_dev)(struct ibv_context *, struct ibv_device_attr *) = sym("ibv_query_device", "IBVERBS_1.1");
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *) = sym("ibv_query_port", "IBVERBS_1.1");
	struct ibv_pd *(*alloc_pd)(struct ibv_context *) = sym("ibv_alloc_pd", "IBVERBS_1.1");
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int) = sym("ibv_reg_mr", "IBVERBS_1.1");
	struct ibv_mr *(*reg_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned) =
		sym("ibv_reg_mr_iova2", "IBVERBS_1.8");
	struct ibv_mr *(*reg_dmabuf)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int) =
		sym("ibv_reg_dmabuf_mr", "IBVERBS_1.12");
	int (*query_ece)(struct ibv_qp *, struct ibv_ece *) = sym("ibv_query_ece", "IBVERBS_1.10");
	int n = 0;
	struct ibv_device **l = get_list(&n);
	CHECK(l && n >= 1);
	struct ibv_context *ctx = open_dev(l[0]);
	CHECK(ctx);
	struct ibv_device_attr da;
	CHECK_EQ(query_dev(ctx, &da), 0);
	CHECK_EQ(da.phys_port_cnt, 1);
	/* NCCL: memset, then the compat entry point */
	struct ibv_port_attr pa;
	memset(&pa, 0, sizeof(pa));
	CHECK_EQ(query_port(ctx, 1, &pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
	CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET || pa.link_layer == IBV_LINK_LAYER_INFINIBAND);
	/* NCCL's ibv_query_port_ex: through verbs_context->query_port with a larger struct */
	struct verbs_context *vc = verbs_get_ctx_op(ctx, query_port);
	CHECK(vc);
	char big[sizeof(struct ibv_port_attr) + 16];
	memset(big, 0x77, sizeof(big));
	CHECK_EQ(vc->query_port(ctx, 1, (struct ibv_port_attr *)big, sizeof(big)), 0);
	CHECK_EQ(big[sizeof(big) - 1], 0); /* unknown tail (active_speed_ex...) zeroed */
	struct ibv_pd *pd = alloc_pd(ctx);
	CHECK(pd);
	static char buf[4096];
	struct ibv_mr *mr = reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr);
	struct ibv_mr *mr2 = reg_iova2(pd, buf, sizeof(buf), (uintptr_t)buf,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	CHECK(mr2);
	errno = 0;
	CHECK(reg_dmabuf(pd, 0, 0, 0, -1, 0) == NULL);
	CHECK_EQ(errno, EBADF); /* "supported" */
	struct ibv_cq *cq = F(ibv_create_cq)(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = F(ibv_create_qp)(pd, &ia);
	CHECK(qp);
	struct ibv_ece ece;
	CHECK_EQ(query_ece(qp, &ece), EOPNOTSUPP);
	CHECK_EQ(F(ibv_destroy_qp)(qp), 0);
	CHECK_EQ(F(ibv_destroy_cq)(cq), 0);
	CHECK_EQ(F(ibv_dereg_mr)(mr), 0);
	CHECK_EQ(F(ibv_dereg_mr)(mr2), 0);
	CHECK_EQ(F(ibv_dealloc_pd)(pd), 0);
	CHECK_EQ(F(ibv_close_device)(ctx), 0);
	F(ibv_free_device_list)(l);
	printf("test_dlvsym: OK\n");
	return 0;
}
