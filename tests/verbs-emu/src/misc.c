/* verbs emulator: string helpers, rate tables, sysfs helpers and the verbs it does not emulate
 * (they fail with EOPNOTSUPP the way the real API reports errors, and never crash). */
#include "vemu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

VEMU_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = { "unknown", "InfiniBand channel adapter", "InfiniBand switch",
					 "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP", "unspecified" };
	if (t < IBV_NODE_CA || (int)t >= (int)(sizeof(s) / sizeof(s[0])))
		return "unknown";
	return s[t];
}

VEMU_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const t[] = { "PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE",
					 "PORT_ACTIVE_DEFER" };
	if ((int)s < 0 || (int)s >= (int)(sizeof(t) / sizeof(t[0])))
		return "unknown";
	return t[s];
}

VEMU_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const t[] = {
		"CQ error", "local work queue catastrophic error", "invalid request local work queue error",
		"local access violation work queue error", "communication established", "send queue drained",
		"path migrated", "path migration request error", "local catastrophic error", "port active",
		"port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
		"SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
		"WQ fatal"
	};
	if ((int)e < 0 || (int)e >= (int)(sizeof(t) / sizeof(t[0])))
		return "unknown";
	return t[e];
}

VEMU_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const t[] = {
		"success", "local length error", "local QP operation error", "local EE context operation error",
		"local protection error", "Work Request Flushed Error", "memory management operation error",
		"bad response error", "local access error", "remote invalid request error", "remote access error",
		"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
		"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
		"invalid EE context state", "fatal error", "response timeout error", "general error",
		"TM error", "TM rendezvous error"
	};
	if ((int)s < 0 || (int)s >= (int)(sizeof(t) / sizeof(t[0])))
		return "unknown";
	return t[s];
}

VEMU_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	switch (rate) {
	case IBV_RATE_2_5_GBPS: return 1;
	case IBV_RATE_5_GBPS: return 2;
	case IBV_RATE_10_GBPS: return 4;
	case IBV_RATE_20_GBPS: return 8;
	case IBV_RATE_30_GBPS: return 12;
	case IBV_RATE_40_GBPS: return 16;
	case IBV_RATE_60_GBPS: return 24;
	case IBV_RATE_80_GBPS: return 32;
	case IBV_RATE_120_GBPS: return 48;
	default: return -1;
	}
}

VEMU_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	switch (mult) {
	case 1: return IBV_RATE_2_5_GBPS;
	case 2: return IBV_RATE_5_GBPS;
	case 4: return IBV_RATE_10_GBPS;
	case 8: return IBV_RATE_20_GBPS;
	case 12: return IBV_RATE_30_GBPS;
	case 16: return IBV_RATE_40_GBPS;
	case 24: return IBV_RATE_60_GBPS;
	case 32: return IBV_RATE_80_GBPS;
	case 48: return IBV_RATE_120_GBPS;
	default: return IBV_RATE_MAX;
	}
}

static const struct { enum ibv_rate r; int mbps; } rate_tab[] = {
	{ IBV_RATE_2_5_GBPS, 2500 },   { IBV_RATE_5_GBPS, 5000 },     { IBV_RATE_10_GBPS, 10000 },
	{ IBV_RATE_20_GBPS, 20000 },   { IBV_RATE_30_GBPS, 30000 },   { IBV_RATE_40_GBPS, 40000 },
	{ IBV_RATE_60_GBPS, 60000 },   { IBV_RATE_80_GBPS, 80000 },   { IBV_RATE_120_GBPS, 120000 },
	{ IBV_RATE_14_GBPS, 14062 },   { IBV_RATE_56_GBPS, 56250 },   { IBV_RATE_112_GBPS, 112500 },
	{ IBV_RATE_168_GBPS, 168750 }, { IBV_RATE_25_GBPS, 25781 },   { IBV_RATE_100_GBPS, 103125 },
	{ IBV_RATE_200_GBPS, 206250 }, { IBV_RATE_300_GBPS, 309375 }, { IBV_RATE_28_GBPS, 28125 },
	{ IBV_RATE_50_GBPS, 53125 },   { IBV_RATE_400_GBPS, 425000 }, { IBV_RATE_600_GBPS, 637500 },
};

VEMU_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < sizeof(rate_tab) / sizeof(rate_tab[0]); i++)
		if (rate_tab[i].r == rate)
			return rate_tab[i].mbps;
	return -1;
}

VEMU_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < sizeof(rate_tab) / sizeof(rate_tab[0]); i++)
		if (rate_tab[i].mbps == mbps)
			return rate_tab[i].r;
	return IBV_RATE_MAX;
}

/* sysfs helpers of IBVERBS_1.0: our "sysfs" is the fake tree under VEMU_DIR */
VEMU_EXPORT int ibv_get_sysfs_path(char *buf, size_t size)
{
	pthread_mutex_lock(&g.mu);
	vemu_ensure_init();
	int n = snprintf(buf, size, "%s/sysfs", g.dir);
	pthread_mutex_unlock(&g.mu);
	return (size_t)n < size ? 0 : -1;
}

VEMU_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	if (n >= 0 && (size_t)n < size)
		buf[n] = 0;
	return (int)n;
}

/* ------------------------------------------------------------ not emulated */
#define NOSUP_PTR(decl)                                                                                          \
	VEMU_EXPORT decl                                                                                         \
	{                                                                                                        \
		errno = EOPNOTSUPP;                                                                              \
		return NULL;                                                                                     \
	}
#define NOSUP_INT(decl)                                                                                          \
	VEMU_EXPORT decl                                                                                         \
	{                                                                                                        \
		errno = EOPNOTSUPP;                                                                              \
		return EOPNOTSUPP;                                                                               \
	}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
NOSUP_PTR(struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr))
NOSUP_INT(int ibv_destroy_ah(struct ibv_ah *ah))
NOSUP_PTR(struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
					       uint8_t port_num))
NOSUP_INT(int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
				  struct ibv_grh *grh, struct ibv_ah_attr *ah_attr))
NOSUP_PTR(struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr))
NOSUP_INT(int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask))
NOSUP_INT(int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr))
NOSUP_INT(int ibv_destroy_srq(struct ibv_srq *srq))
NOSUP_INT(int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid))
NOSUP_INT(int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid))
NOSUP_INT(int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr, uint8_t eth_mac[6],
					  uint16_t *vid))
NOSUP_PTR(struct ibv_context *ibv_import_device(int cmd_fd))
NOSUP_PTR(struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle))
NOSUP_PTR(struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle))
NOSUP_PTR(struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle))
NOSUP_PTR(struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp))
VEMU_EXPORT void ibv_unimport_pd(struct ibv_pd *pd) {}
VEMU_EXPORT void ibv_unimport_mr(struct ibv_mr *mr) {}
VEMU_EXPORT void ibv_unimport_dm(struct ibv_dm *dm) {}
VEMU_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	/* in-order placement per QP is what the emulator guarantees */
	return 1; /* IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG */
}
/* old provider registration entry point (IBVERBS_1.1) */
VEMU_EXPORT void ibv_register_driver(const char *name, void *init_func) {}
/* the kernel-ABI copy helpers of IBVERBS_1.0 */
VEMU_EXPORT void ibv_copy_qp_attr_from_kern(void *dst, void *src) {}
VEMU_EXPORT void ibv_copy_path_rec_from_kern(void *dst, void *src) {}
VEMU_EXPORT void ibv_copy_path_rec_to_kern(void *dst, void *src) {}
VEMU_EXPORT void ibv_copy_ah_attr_from_kern(void *dst, void *src) {}
#pragma GCC diagnostic pop
