/* verbs emulator: devices, fake sysfs, contexts, PD/MR/CQ/QP objects and the verbs that users call.
 * The wire and the "NIC" live in agent.c. */
#include "vemu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <endian.h>

struct vglobal g = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.ev_acked_cond = PTHREAD_COND_INITIALIZER,
	.memlock = PTHREAD_RWLOCK_INITIALIZER,
	.trace_mu = PTHREAD_MUTEX_INITIALIZER,
	.listen_fd = -1,
	.doorbell = -1,
};

uint64_t vemu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ small helpers */
static int mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0700) && errno != EEXIST)
				return -1;
			*p = '/';
		}
	}
	if (mkdir(tmp, 0700) && errno != EEXIST)
		return -1;
	return 0;
}

/* write a file atomically (several processes of a run build the same tree) */
static int put_file(const char *dir, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int put_file(const char *dir, const char *name, const char *fmt, ...)
{
	char path[PATH_MAX], tmp[PATH_MAX + 32], buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	char *slash = strrchr(path, '/');
	*slash = 0;
	if (mkdir_p(path))
		return -1;
	*slash = '/';
	snprintf(tmp, sizeof(tmp), "%s.tmp.%016llx", path, (unsigned long long)g.run_id);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	if (write(fd, buf, (size_t)n) != n) {
		close(fd);
		unlink(tmp);
		return -1;
	}
	close(fd);
	return rename(tmp, path);
}

static int put_link(const char *target, const char *path)
{
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%016llx", path, (unsigned long long)g.run_id);
	unlink(tmp);
	if (symlink(target, tmp))
		return -1;
	return rename(tmp, path);
}

static void guid_str(uint64_t guid, char *buf, size_t n)
{
	snprintf(buf, n, "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff, (unsigned)(guid >> 32) & 0xffff,
		 (unsigned)(guid >> 16) & 0xffff, (unsigned)guid & 0xffff);
}

static void gid_str(const union ibv_gid *gid, char *buf, size_t n)
{
	const uint8_t *r = gid->raw;
	snprintf(buf, n, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", r[0], r[1], r[2],
		 r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
}

/* ------------------------------------------------------------ devices and the fake sysfs */
static uint64_t hash64(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static int build_sysfs(struct vdev *d)
{
	char base[PATH_MAX], p[PATH_MAX], pci[PATH_MAX], s[128];
	snprintf(base, sizeof(base), "%s/sysfs/class/infiniband/%s", g.dir, d->dev.name);
	if (mkdir_p(base))
		return -1;
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s", base);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s/sysfs/class/infiniband_verbs/%s", g.dir,
		 d->dev.dev_name);
	if (mkdir_p(d->dev.dev_path))
		return -1;
	put_file(d->dev.dev_path, "ibdev", "%s\n", d->dev.name);
	put_file(d->dev.dev_path, "abi_version", "1\n");
	guid_str(d->guid, s, sizeof(s));
	put_file(base, "node_guid", "%s\n", s);
	put_file(base, "sys_image_guid", "%s\n", s);
	put_file(base, "node_type", "1: CA\n");
	put_file(base, "fw_ver", "20.99.%04d\n", d->index);
	put_file(base, "hca_type", "VEMU\n");
	put_file(base, "hw_rev", "0\n");
	put_file(base, "board_id", "VEMU_%04d\n", d->index);
	put_file(base, "node_desc", "vemu %s\n", d->dev.name);
	/* PCI device */
	if (g.pci_path[0]) {
		snprintf(pci, sizeof(pci), "%s", g.pci_path);
	} else {
		snprintf(pci, sizeof(pci), "%s/sysfs/devices/pci0000:00/0000:%02x:00.0", g.dir, 0x10 + d->index);
		if (mkdir_p(pci))
			return -1;
		put_file(pci, "vendor", "0x15b3\n");
		put_file(pci, "device", "0x101b\n");
		put_file(pci, "subsystem_vendor", "0x15b3\n");
		put_file(pci, "subsystem_device", "0x0007\n");
		put_file(pci, "class", "0x020700\n");
		put_file(pci, "numa_node", "-1\n");
		put_file(pci, "local_cpulist", "0-%ld\n", sysconf(_SC_NPROCESSORS_CONF) - 1);
		put_file(pci, "max_link_speed", "16.0 GT/s PCIe\n");
		put_file(pci, "max_link_width", "16\n");
		put_file(pci, "current_link_speed", "16.0 GT/s PCIe\n");
		put_file(pci, "current_link_width", "16\n");
	}
	snprintf(p, sizeof(p), "%s/device", base);
	if (put_link(pci, p))
		return -1;
	/* port 1 */
	snprintf(p, sizeof(p), "%s/ports/1", base);
	put_file(p, "state", "4: ACTIVE\n");
	put_file(p, "phys_state", "5: LinkUp\n");
	put_file(p, "link_layer", "%s\n", d->is_ib ? "InfiniBand" : "Ethernet");
	put_file(p, "rate", "200 Gb/sec (4X HDR)\n");
	put_file(p, "lid", "0x%x\n", d->lid);
	put_file(p, "sm_lid", "0x%x\n", d->is_ib ? 1 : 0);
	put_file(p, "lid_mask_count", "0\n");
	put_file(p, "cap_mask", "0x%08x\n", d->is_ib ? 0x2651e848u : 0x04010000u);
	put_file(p, "pkeys/0", "0xffff\n");
	for (int i = 0; i < d->ngid; i++) {
		char n[64];
		gid_str(&d->gid[i], s, sizeof(s));
		snprintf(n, sizeof(n), "gids/%d", i);
		put_file(p, n, "%s\n", s);
		snprintf(n, sizeof(n), "gid_attrs/types/%d", i);
		put_file(p, n, "%s\n", d->gid_type[i] == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1");
		snprintf(n, sizeof(n), "gid_attrs/ndevs/%d", i);
		if (d->is_ib)
			put_file(p, n, "\n");
		else
			put_file(p, n, "lo\n");
	}
	return 0;
}

static void make_gids(struct vdev *d)
{
	memset(d->gid, 0, sizeof(d->gid));
	uint64_t eui = htobe64(d->guid);
	if (d->is_ib) {
		d->gid[0].global.subnet_prefix = htobe64(0xfe80000000000000ull);
		d->gid[0].global.interface_id = eui;
		d->gid_type[0] = IBV_GID_TYPE_IB;
		d->ngid = 1;
		return;
	}
	for (int v = 0; v < 2; v++) {
		/* 0,1: link-local fe80::EUI ; 2,3: ::ffff:127.0.<n>.1 ; 4,5: fd00::<n>:1 (ULA) */
		d->gid[0 + v].global.subnet_prefix = htobe64(0xfe80000000000000ull);
		d->gid[0 + v].global.interface_id = eui;
		d->gid[2 + v].raw[10] = 0xff;
		d->gid[2 + v].raw[11] = 0xff;
		d->gid[2 + v].raw[12] = 127;
		d->gid[2 + v].raw[13] = 0;
		d->gid[2 + v].raw[14] = (uint8_t)(d->index + 1);
		d->gid[2 + v].raw[15] = 1;
		d->gid[4 + v].raw[0] = 0xfd;
		d->gid[4 + v].raw[13] = (uint8_t)(d->index + 1);
		d->gid[4 + v].raw[15] = 1;
		d->gid_type[0 + v] = d->gid_type[2 + v] = d->gid_type[4 + v] =
			v ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
	}
	d->ngid = 6;
}

static int parse_devices(const char *spec)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", spec && *spec ? spec : "vemu0:roce");
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (!*tok)
			continue;
		char *colon = strchr(tok, ':');
		int is_ib;
		if (!colon) {
			is_ib = 0;
		} else {
			*colon = 0;
			if (!strcmp(colon + 1, "ib"))
				is_ib = 1;
			else if (!strcmp(colon + 1, "roce"))
				is_ib = 0;
			else {
				fprintf(stderr, "vemu: VEMU_DEVICES: bad link type '%s' for '%s' (want ib or roce)\n",
					colon + 1, tok);
				return -1;
			}
		}
		if (g.ndev == VEMU_MAX_DEVS || strlen(tok) >= IBV_SYSFS_NAME_MAX || strchr(tok, '/')) {
			fprintf(stderr, "vemu: VEMU_DEVICES: bad or too many devices at '%s'\n", tok);
			return -1;
		}
		struct vdev *d = calloc(1, sizeof(*d));
		if (!d)
			return -1;
		d->index = g.ndev;
		d->is_ib = is_ib;
		snprintf(d->dev.name, sizeof(d->dev.name), "%s", tok);
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", d->index);
		d->dev.node_type = IBV_NODE_CA;
		d->dev.transport_type = IBV_TRANSPORT_IB;
		d->guid = 0x0002c90300000000ull | (hash64(tok) & 0xffffffull) << 8 | (uint64_t)d->index;
		d->lid = (uint16_t)(d->index + 1);
		vemu_set_port_state(d, IBV_PORT_ACTIVE);
		make_gids(d);
		g.devs[g.ndev] = d;
		g.devlist[g.ndev] = &d->dev;
		g.ndev++;
	}
	return 0;
}

static void defq_reset(void);

static void reset_in_child(void)
{
	/* the child of a fork has no agent thread: start over (the parent's objects are unusable there) */
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	memset(&g, 0, sizeof(g));
	g.mu = m;
	g.trace_mu = m;
	g.listen_fd = -1;
	g.doorbell = -1;
	defq_reset();
	vemu_agent_fork_child();
}

int vemu_ensure_init(void)
{
	/* g.mu held */
	if (g.inited)
		return g.init_err ? -1 : 0;
	g.inited = 1;
	/* a random id, not the pid: processes of several PID namespaces (containers) may share VEMU_DIR */
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = 0;
	g.run_id = (rnd ^ vemu_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32) | 1;
	static int atfork_done;
	if (!atfork_done) {
		atfork_done = 1;
		pthread_atfork(NULL, NULL, reset_in_child);
	}
	const char *dir = getenv("VEMU_DIR");
	if (dir && *dir)
		snprintf(g.dir, sizeof(g.dir), "%s", dir);
	else
		snprintf(g.dir, sizeof(g.dir), "/tmp/vemu-%u", (unsigned)getuid());
	const char *ts = getenv("VEMU_TIME_SCALE");
	g.time_scale = 1.0;
	if (ts && *ts) {
		char *end;
		double v = strtod(ts, &end);
		if (*end || v <= 0) {
			fprintf(stderr, "vemu: VEMU_TIME_SCALE='%s' is not a positive number\n", ts);
			goto fail;
		}
		g.time_scale = v;
	}
	const char *mm = getenv("VEMU_MAX_MSG_SZ");
	g.max_msg_sz = VEMU_DEFAULT_MAX_MSG;
	if (mm && *mm) {
		char *end;
		unsigned long long v = strtoull(mm, &end, 0);
		if (*end || v < 1 || v > 0x80000000ull) {
			fprintf(stderr, "vemu: VEMU_MAX_MSG_SZ='%s' is not a byte count in 1..2^31\n", mm);
			goto fail;
		}
		g.max_msg_sz = v;
	}
	const char *mc = getenv("VEMU_MAX_CQE");
	g.max_cqe = VEMU_MAX_CQE;
	if (mc && *mc) {
		char *end;
		unsigned long long v = strtoull(mc, &end, 0);
		if (*end || v < 1 || v > VEMU_MAX_CQE) {
			fprintf(stderr, "vemu: VEMU_MAX_CQE='%s' is not a CQ size in 1..%d\n", mc, VEMU_MAX_CQE);
			goto fail;
		}
		g.max_cqe = (int)v;
	}
	const char *aw = getenv("VEMU_ACK_WAIT_S");
	g.ack_wait_s = 20;
	if (aw && *aw) {
		char *end;
		long v = strtol(aw, &end, 10);
		if (*end || v < 1 || v > 86400) {
			fprintf(stderr, "vemu: VEMU_ACK_WAIT_S='%s' is not a number of seconds in 1..86400\n", aw);
			goto fail;
		}
		g.ack_wait_s = v;
	}
	const char *ac = getenv("VEMU_ATOMIC_CAP");
	if (ac && *ac) {
		if (strcmp(ac, "hca") && strcmp(ac, "none")) {
			fprintf(stderr, "vemu: VEMU_ATOMIC_CAP='%s' is not hca or none\n", ac);
			goto fail;
		}
		g.no_atomics = !strcmp(ac, "none");
	}
	const char *lazy = getenv("VEMU_GDR_LAZY");
	g.gdr_lazy = lazy && !strcmp(lazy, "1");
	const char *pci = getenv("VEMU_PCI_PATH");
	if (pci && *pci)
		snprintf(g.pci_path, sizeof(g.pci_path), "%s", pci);
	if (vemu_faults_parse(getenv("VEMU_FAULTS")))
		goto fail;
	if (parse_devices(getenv("VEMU_DEVICES")))
		goto fail;
	if (mkdir_p(g.dir)) {
		fprintf(stderr, "vemu: cannot create VEMU_DIR %s: %s\n", g.dir, strerror(errno));
		goto fail;
	}
	for (int i = 0; i < g.ndev; i++) {
		if (build_sysfs(g.devs[i])) {
			fprintf(stderr, "vemu: cannot build fake sysfs under %s: %s\n", g.dir, strerror(errno));
			goto fail;
		}
	}
	const char *tr = getenv("VEMU_TRACE");
	if (tr && *tr) {
		g.trace = fopen(tr, "a");
		if (!g.trace) {
			fprintf(stderr, "vemu: cannot open VEMU_TRACE %s: %s\n", tr, strerror(errno));
			goto fail;
		}
		setvbuf(g.trace, NULL, _IOLBF, 0);
	}
	g.key_counter = (uint32_t)(getpid() & 0xff) << 24 ^ (uint32_t)vemu_now_ns() << 8;
	return 0;
fail:
	g.init_err = 1;
	errno = EINVAL;
	return -1;
}

void vemu_ring(void)
{
	if (!__atomic_exchange_n(&g.doorbell_rung, 1, __ATOMIC_ACQ_REL)) {
		uint64_t one = 1;
		ssize_t r = write(g.doorbell, &one, sizeof(one));
		(void)r;
	}
}

/* ------------------------------------------------------------ strings */
const char *vemu_wr_opname(int op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE: return "WRITE";
	case IBV_WR_RDMA_WRITE_WITH_IMM: return "WRITE_IMM";
	case IBV_WR_SEND: return "SEND";
	case IBV_WR_SEND_WITH_IMM: return "SEND_IMM";
	case IBV_WR_RDMA_READ: return "READ";
	case IBV_WR_ATOMIC_CMP_AND_SWP: return "CMP_SWAP";
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return "FETCH_ADD";
	default: return "OTHER";
	}
}

void vemu_access_str(unsigned a, char *buf, size_t n)
{
	static const struct { unsigned bit; const char *name; } t[] = {
		{ IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE" },   { IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE" },
		{ IBV_ACCESS_REMOTE_READ, "REMOTE_READ" },   { IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC" },
		{ IBV_ACCESS_MW_BIND, "MW_BIND" },           { IBV_ACCESS_ZERO_BASED, "ZERO_BASED" },
		{ IBV_ACCESS_ON_DEMAND, "ON_DEMAND" },       { IBV_ACCESS_HUGETLB, "HUGETLB" },
		{ IBV_ACCESS_RELAXED_ORDERING, "RELAXED_ORDERING" },
	};
	size_t o = 0;
	buf[0] = 0;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (a & t[i].bit)
			o += (size_t)snprintf(buf + o, n > o ? n - o : 0, "%s%s", o ? "|" : "", t[i].name);
	if (!o)
		snprintf(buf, n, "0");
}

/* ------------------------------------------------------------ device list */
VEMU_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	pthread_mutex_lock(&g.mu);
	if (vemu_ensure_init()) {
		pthread_mutex_unlock(&g.mu);
		if (num)
			*num = 0;
		errno = EINVAL;
		return NULL;
	}
	struct ibv_device **l = calloc((size_t)g.ndev + 1, sizeof(*l));
	if (l)
		memcpy(l, g.devlist, sizeof(*l) * (size_t)g.ndev);
	if (num)
		*num = l ? g.ndev : 0;
	pthread_mutex_unlock(&g.mu);
	if (!l)
		errno = ENOMEM;
	return l;
}

VEMU_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

VEMU_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

VEMU_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return device ? ((struct vdev *)device)->index : -1;
}

VEMU_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(((struct vdev *)device)->guid);
}

/* ------------------------------------------------------------ queries */
static void fill_port(struct vdev *d, struct ibv_port_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->state = vemu_port_state(d);
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = d->ngid;
	a->port_cap_flags = d->is_ib ? 0x2651e848u : 0x04010000u;
	a->max_msg_sz = (uint32_t)g.max_msg_sz;
	a->pkey_tbl_len = 1;
	a->lid = d->is_ib ? d->lid : 0;
	a->sm_lid = d->is_ib ? 1 : 0;
	a->lmc = 0;
	a->max_vl_num = 4;
	a->subnet_timeout = 18;
	a->active_width = 2;   /* 4x */
	a->active_speed = 64;  /* HDR: 4x HDR = 200 Gb/s */
	a->phys_state = vemu_port_state(d) == IBV_PORT_ACTIVE ? 5 : 3;
	a->link_layer = d->is_ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
	a->flags = 0;
	a->port_cap_flags2 = 0;
}

static int vemu_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct vdev *d = to_vctx(c)->dev;
	if (port != 1)
		return EINVAL;
	struct ibv_port_attr a;
	fill_port(d, &a);
	if (__atomic_load_n(&to_vctx(c)->dead, __ATOMIC_ACQUIRE)) { /* a dead context's port stays down, even once the device is back */
		a.state = IBV_PORT_DOWN;
		a.phys_state = 3;
	}
	if (len > sizeof(a)) {
		memset((char *)attr + sizeof(a), 0, len - sizeof(a));
		len = sizeof(a);
	}
	memcpy(attr, &a, len);
	return 0;
}

#undef ibv_query_port
/* the exported compat entry point: writes only the prefix of struct ibv_port_attr that existed before
 * port_cap_flags2 (what rdma-core's struct _compat_ibv_port_attr covers) */
VEMU_EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return vemu_query_port_ex(c, port, (struct ibv_port_attr *)attr,
				  offsetof(struct ibv_port_attr, port_cap_flags2));
}

static void fill_dev_attr(struct vdev *d, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "20.99.%04d", d->index);
	a->node_guid = htobe64(d->guid);
	a->sys_image_guid = htobe64(d->guid);
	a->max_mr_size = ~0ull;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = 0x02c9;
	a->vendor_part_id = 4123;
	a->hw_ver = 0;
	a->max_qp = 1 << 17;
	a->max_qp_wr = VEMU_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
			      IBV_DEVICE_CHANGE_PHY_PORT;
	a->max_sge = VEMU_MAX_SGE;
	a->max_sge_rd = VEMU_MAX_SGE;
	a->max_cq = 1 << 16;
	a->max_cqe = g.max_cqe;
	a->max_mr = 1 << 20;
	a->max_pd = 1 << 16;
	a->max_qp_rd_atom = 16;
	a->max_res_rd_atom = 1 << 20;
	a->max_qp_init_rd_atom = 16;
	/* atomic against each other, on every QP of the device (agent.c: atomic_exec); VEMU_ATOMIC_CAP=none: none */
	a->atomic_cap = g.no_atomics ? IBV_ATOMIC_NONE : IBV_ATOMIC_HCA;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = 1;
}

VEMU_EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *attr)
{
	fill_dev_attr(to_vctx(c)->dev, attr);
	return 0;
}

static int vemu_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
				struct ibv_device_attr_ex *attr, size_t sz)
{
	(void)in;
	if (sz < sizeof(attr->orig_attr))
		return EINVAL;
	memset(attr, 0, sz);
	fill_dev_attr(to_vctx(c)->dev, &attr->orig_attr);
	return 0;
}

VEMU_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	struct vdev *d = to_vctx(c)->dev;
	if (port != 1 || index < 0 || index >= d->ngid) {
		errno = EINVAL;
		return -1;
	}
	*gid = d->gid[index];
	return 0;
}

VEMU_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
				  uint32_t flags, size_t sz)
{
	struct vdev *d = to_vctx(c)->dev;
	if (flags || port != 1 || sz < sizeof(*e))
		return EINVAL;
	if (index >= (uint32_t)d->ngid)
		return ENODATA;
	memset(e, 0, sz);
	e->gid = d->gid[index];
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = (uint32_t)d->gid_type[index];
	e->ndev_ifindex = d->is_ib ? 0 : 1; /* lo */
	return 0;
}

VEMU_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries, size_t max,
					 uint32_t flags, size_t sz)
{
	struct vdev *d = to_vctx(c)->dev;
	if (flags || sz < sizeof(*entries))
		return -EINVAL;
	if (max < (size_t)d->ngid)
		return -EINVAL;
	for (int i = 0; i < d->ngid; i++) {
		struct ibv_gid_entry *e = (struct ibv_gid_entry *)((char *)entries + sz * (size_t)i);
		_ibv_query_gid_ex(c, 1, (uint32_t)i, e, 0, sz);
	}
	return d->ngid;
}

/* IBVERBS_PRIVATE_34 (ibv_devinfo uses it): 0 = IB/RoCE v1, 1 = RoCE v2 */
VEMU_EXPORT int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, int *type)
{
	struct vdev *d = to_vctx(c)->dev;
	if (port != 1 || index >= (unsigned)d->ngid) {
		errno = EINVAL;
		return -1;
	}
	*type = d->gid_type[index] == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
	return 0;
}

VEMU_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	(void)c;
	if (port != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

VEMU_EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	(void)c;
	if (port == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff)
		return 0;
	return -EINVAL;
}

/* ------------------------------------------------------------ contexts and events */
static int vemu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int vemu_req_notify_cq(struct ibv_cq *cq, int solicited);
static int vemu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int vemu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int vemu_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)srq;
	*bad = wr;
	return EOPNOTSUPP;
}
static struct ibv_mw *vemu_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type t)
{
	(void)pd;
	(void)t;
	errno = EOPNOTSUPP;
	return NULL;
}
static int vemu_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	(void)qp;
	(void)mw;
	(void)b;
	return EOPNOTSUPP;
}
static int vemu_dealloc_mw(struct ibv_mw *mw)
{
	(void)mw;
	return EOPNOTSUPP;
}

VEMU_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	pthread_mutex_lock(&g.mu);
	int bad = vemu_ensure_init();
	int found = 0;
	for (int i = 0; i < g.ndev && !bad; i++)
		found |= &g.devs[i]->dev == device;
	if (bad || !found) {
		pthread_mutex_unlock(&g.mu);
		errno = bad ? EINVAL : ENODEV;
		return NULL;
	}
	if (vemu_agent_start()) {
		int e = errno;
		pthread_mutex_unlock(&g.mu);
		errno = e ? e : EIO;
		return NULL;
	}
	struct vctx *v = calloc(1, sizeof(*v));
	int p[2];
	if (!v || pipe2(p, O_CLOEXEC)) {
		free(v);
		pthread_mutex_unlock(&g.mu);
		errno = ENOMEM;
		return NULL;
	}
	v->dev = (struct vdev *)device;
	v->dead = __atomic_load_n(&v->dev->fatal, __ATOMIC_ACQUIRE); /* opened on a dead device: dead too */
	v->async_wr = p[1];
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	struct ibv_context *c = &v->vc.context;
	c->device = device;
	c->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	c->async_fd = p[0];
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->ops.poll_cq = vemu_poll_cq;
	c->ops.req_notify_cq = vemu_req_notify_cq;
	c->ops.post_send = vemu_post_send;
	c->ops.post_recv = vemu_post_recv;
	c->ops.post_srq_recv = vemu_post_srq_recv;
	c->ops.alloc_mw = vemu_alloc_mw;
	c->ops.bind_mw = vemu_bind_mw;
	c->ops.dealloc_mw = vemu_dealloc_mw;
	v->vc.sz = sizeof(struct verbs_context);
	v->vc.query_port = vemu_query_port_ex;
	v->vc.query_device_ex = vemu_query_device_ex;
	v->next = g.ctxs;
	g.ctxs = v;
	pthread_mutex_unlock(&g.mu);
	return c;
}

VEMU_EXPORT int ibv_close_device(struct ibv_context *c)
{
	struct vctx *v = to_vctx(c);
	pthread_mutex_lock(&g.mu);
	for (struct vctx **pp = &g.ctxs; *pp; pp = &(*pp)->next)
		if (*pp == v) {
			*pp = v->next;
			break;
		}
	v->next = g.closed_ctxs; /* kept (and reachable): see below */
	g.closed_ctxs = v;
	/* EOF first so a thread blocked in ibv_get_async_event returns */
	close(v->async_wr);
	v->async_wr = -1;
	pthread_mutex_unlock(&g.mu);
	close(c->async_fd);
	if (c->cmd_fd >= 0)
		close(c->cmd_fd);
	/* the context's memory stays: QPs, CQs and MRs that the application did not destroy still point to it
	 * (rdma-core would leak them too) */
	return 0;
}

/* Async events follow the kernel's rules (ib_uverbs): an event for a QP or CQ that is destroyed before it was read
 * is dropped, never delivered (the memory may hold a new QP by then, which would take the old one's fault); and
 * ibv_destroy_qp/ibv_destroy_cq wait until every event read for the object has been acked. A record names its
 * object by address and by serial; ibv_get_async_event delivers it only while that object is alive. */
struct async_rec {
	int type;
	int port;
	void *elem;
	uint64_t serial;
};

static int ev_names_qp(int type)
{
	switch (type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: return 1;
	default: return 0;
	}
}

void vemu_async_event(struct vctx *ctx, enum ibv_event_type type, void *elem, int port)
{
	struct async_rec r = { .type = type, .port = port, .elem = elem };
	if (!ctx || ctx->async_wr < 0)
		return; /* closed */
	if (type == IBV_EVENT_CQ_ERR)
		r.serial = ((struct vcq *)elem)->serial; /* (set at creation, never changed) */
	else if (ev_names_qp(type))
		r.serial = ((struct vqp *)elem)->serial;
	ssize_t n = write(ctx->async_wr, &r, sizeof(r));
	(void)n;
	VTRACE("async ctx=%s event=%s\n", ctx->dev->dev.name, ibv_event_type_str(type));
}

/* g.mu held: the read-events counter of the QP or CQ the record names, while it is alive; NULL for a destroyed one */
static uint32_t *ev_read_counter(const struct async_rec *r)
{
	if (r->type == IBV_EVENT_CQ_ERR) {
		for (struct vcq *q = g.cqs; q; q = q->cnext)
			if (&q->cq == r->elem && q->serial == r->serial)
				return &q->ev_read;
	} else if (ev_names_qp(r->type)) {
		for (struct vqp *q = g.qps; q; q = q->anext)
			if (&q->qp == r->elem && q->serial == r->serial)
				return &q->ev_read;
	}
	return NULL;
}

VEMU_EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	struct async_rec r;
	for (;;) {
		ssize_t n;
		do
			n = read(c->async_fd, &r, sizeof(r));
		while (n < 0 && errno == EINTR);
		if (n != (ssize_t)sizeof(r)) {
			if (n >= 0)
				errno = EIO;
			return -1;
		}
		if (r.type != IBV_EVENT_CQ_ERR && !ev_names_qp(r.type))
			break;
		pthread_mutex_lock(&g.mu);
		uint32_t *read_ctr = ev_read_counter(&r);
		if (read_ctr)
			(*read_ctr)++;
		pthread_mutex_unlock(&g.mu);
		if (read_ctr)
			break;
		VTRACE("async event=%s dropped: its %s was destroyed before it was read\n",
		       ibv_event_type_str((enum ibv_event_type)r.type), r.type == IBV_EVENT_CQ_ERR ? "CQ" : "QP");
	}
	memset(ev, 0, sizeof(*ev));
	ev->event_type = (enum ibv_event_type)r.type;
	switch (r.type) {
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		ev->element.port_num = r.port;
		break;
	case IBV_EVENT_CQ_ERR:
		ev->element.cq = r.elem;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default:
		ev->element.qp = r.elem;
		break;
	}
	return 0;
}

VEMU_EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	uint32_t *acked = NULL;
	/* the object is alive: its destroy waits for this ack */
	if (ev->event_type == IBV_EVENT_CQ_ERR)
		acked = &((struct vcq *)ev->element.cq)->ev_acked;
	else if (ev_names_qp(ev->event_type))
		acked = &((struct vqp *)ev->element.qp)->ev_acked;
	if (!acked)
		return; /* port and device events: nothing waits for them */
	pthread_mutex_lock(&g.mu);
	(*acked)++;
	pthread_cond_broadcast(&g.ev_acked_cond);
	pthread_mutex_unlock(&g.mu);
}

/* g.mu held: waits until every async event read for the object was acked, as ibv_destroy_qp/cq do. Real verbs wait
 * forever: an application whose destroy runs while the thread that would ack is blocked (on a lock the destroyer
 * holds) deadlocks on a real NIC. The emulator says so and aborts after VEMU_ACK_WAIT_S (default 20) seconds. */
static void wait_acked(const uint32_t *read_ctr, const uint32_t *acked, const char *what, uint32_t num)
{
	if (*read_ctr == *acked)
		return;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += g.ack_wait_s;
	while (*read_ctr != *acked)
		if (pthread_cond_timedwait(&g.ev_acked_cond, &g.mu, &until) == ETIMEDOUT && *read_ctr != *acked) {
			fprintf(stderr,
				"vemu: ibv_destroy_%s(%s 0x%x): %u async event(s) read for it were never acked "
				"(ibv_ack_async_event); real verbs blocks here forever: aborting\n",
				what, what[0] == 'q' ? "QP" : "CQ", num, *read_ctr - *acked);
			abort();
		}
}

/* ------------------------------------------------------------ PD */
VEMU_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	int e = vemu_fault_call("alloc_pd");
	if (e) {
		errno = e;
		return NULL;
	}
	struct vpd *p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->pd.context = c;
	static uint32_t h;
	p->pd.handle = __atomic_add_fetch(&h, 1, __ATOMIC_RELAXED);
	return &p->pd;
}

VEMU_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	pthread_mutex_lock(&g.mu);
	int busy = 0;
	for (int i = 0; i < 4096 && !busy; i++)
		for (struct vmr *m = g.mr_hash[i]; m; m = m->hnext)
			if (m->mr.pd == pd)
				busy = 1;
	for (struct vqp *q = g.qps; q && !busy; q = q->anext)
		if (q->qp.pd == pd)
			busy = 1;
	pthread_mutex_unlock(&g.mu);
	if (busy)
		return EBUSY;
	free(pd);
	return 0;
}

/* ------------------------------------------------------------ MR */
struct vmr *vemu_mr_find(uint32_t key)
{
	for (struct vmr *m = g.mr_hash[key & 4095]; m; m = m->hnext)
		if (m->mr.lkey == key)
			return m;
	return NULL;
}

static struct ibv_mr *reg_common(struct ibv_pd *pd, uint64_t base, size_t len, uint64_t iova, int access,
				 int dmabuf, const char *call)
{
	int e = __atomic_load_n(&to_vctx(pd->context)->dead, __ATOMIC_ACQUIRE) ? EIO : vemu_fault_call(call);
	if (e) {
		errno = e;
		return NULL;
	}
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	/* the IB spec: remote write/atomic need local write */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	unsigned known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_HUGETLB |
			 IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_MW_BIND;
	if ((unsigned)access & ~known & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE) {
		errno = EINVAL;
		return NULL;
	}
	if (!dmabuf && len && !base) {
		errno = EFAULT;
		return NULL;
	}
	struct vmr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	void *cuctx = NULL;
	int cuda = vemu_cuda_available() && vemu_cuda_is_dev_ptr(base, &cuctx);
	if (cuda)
		vemu_cuda_prepare(cuctx); /* its copy stream and pinned bounce buffer, before any traffic */
	m->base = base;
	m->len = len;
	m->iova = iova;
	m->access = access;
	m->cuda = cuda;
	m->cuctx = cuctx;
	m->is_dev = cuda || dmabuf;
	m->dev = to_vctx(pd->context)->dev;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = dmabuf ? (void *)(uintptr_t)iova : (void *)(uintptr_t)base;
	m->mr.length = len;
	pthread_mutex_lock(&g.mu);
	uint32_t key;
	do {
		g.key_counter += 0x100 + 0x3b;
		key = g.key_counter;
	} while (!key || vemu_mr_find(key));
	m->mr.lkey = m->mr.rkey = key;
	m->mr.handle = key;
	m->hnext = g.mr_hash[key & 4095];
	g.mr_hash[key & 4095] = m;
	pthread_mutex_unlock(&g.mu);
	char acc[160];
	vemu_access_str((unsigned)access, acc, sizeof(acc));
	VTRACE("mr reg call=%s key=0x%x addr=0x%llx len=%zu iova=0x%llx access=%s mem=%s\n", call, key,
	       (unsigned long long)base, len, (unsigned long long)iova, acc, m->is_dev ? "device" : "host");
	return &m->mr;
}

VEMU_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					    unsigned int access)
{
	return reg_common(pd, (uint64_t)(uintptr_t)addr, length, iova, (int)access, 0, "reg_mr");
}

#undef ibv_reg_mr
VEMU_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_common(pd, (uint64_t)(uintptr_t)addr, length, (uint64_t)(uintptr_t)addr, access, 0, "reg_mr");
}

#undef ibv_reg_mr_iova
VEMU_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return reg_common(pd, (uint64_t)(uintptr_t)addr, length, iova, access, 0, "reg_mr");
}

/* DMA-BUF: the MR covers the device VA given as iova (NCCL passes the buffer's VA with offset 0).
 * fd = -1 is the capability probe: EBADF means "supported". Without CUDA the iova is taken as a host
 * address (the CPU test hook for "device memory", see README). */
VEMU_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
					     int fd, int access)
{
	if (fd < 0 || fcntl(fd, F_GETFD) < 0) {
		errno = EBADF;
		return NULL;
	}
	int e = __atomic_load_n(&to_vctx(pd->context)->dead, __ATOMIC_ACQUIRE) ? EIO : vemu_fault_call("reg_dmabuf_mr"); /* not the fd = -1 probe */
	if (e) {
		errno = e;
		return NULL;
	}
	(void)offset;
	if (!iova && length) {
		errno = EINVAL;
		return NULL;
	}
	return reg_common(pd, iova, length, iova, access, 1, "reg_dmabuf_mr_ok");
}

VEMU_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct vmr *m = (struct vmr *)mr;
	pthread_mutex_lock(&g.mu);
	/* GDR_LAZY: what the NIC acknowledged into device memory is there (only its visibility to a later read is
	 * lazy); a deregistration, after a device loss too, cannot take it back, so the parked writes land first */
	if (m->is_dev && m->dev)
		vemu_lazy_drain_locked(m->dev);
	for (struct vmr **pp = &g.mr_hash[mr->lkey & 4095]; *pp; pp = &(*pp)->hnext)
		if (*pp == m) {
			*pp = m->hnext;
			break;
		}
	__atomic_store_n(&m->dead, 1, __ATOMIC_RELEASE);
	m->dnext = g.dead_mrs;
	g.dead_mrs = m;
	pthread_mutex_unlock(&g.mu);
	/* wait for the agent's (or a direct sender's) access to this memory that began before the mark */
	pthread_rwlock_wrlock(&g.memlock);
	pthread_rwlock_unlock(&g.memlock);
	VTRACE("mr dereg key=0x%x\n", mr->lkey);
	return 0;
}

VEMU_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr;
	(void)flags;
	(void)pd;
	(void)addr;
	(void)length;
	(void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

/* ------------------------------------------------------------ completion channels and CQs */
VEMU_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct vchan *ch = calloc(1, sizeof(*ch));
	int p[2];
	if (!ch || pipe2(p, O_CLOEXEC)) {
		free(ch);
		errno = ENOMEM;
		return NULL;
	}
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	ch->ch.context = c;
	ch->ch.fd = p[0];
	ch->ch.refcnt = 0;
	ch->wfd = p[1];
	return &ch->ch;
}

VEMU_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct vchan *ch = (struct vchan *)channel;
	if (__atomic_load_n(&channel->refcnt, __ATOMIC_ACQUIRE))
		return EBUSY;
	close(ch->wfd);
	close(ch->ch.fd);
	free(ch);
	return 0;
}

VEMU_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
					 struct ibv_comp_channel *channel, int comp_vector)
{
	int e = __atomic_load_n(&to_vctx(c)->dead, __ATOMIC_ACQUIRE) ? EIO : vemu_fault_call("create_cq");
	if (e) {
		errno = e;
		return NULL;
	}
	if (cqe < 1 || cqe > g.max_cqe || comp_vector < 0 || comp_vector >= c->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	struct vcq *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->cap = (uint32_t)cqe;
	q->ring = calloc(q->cap, sizeof(struct ibv_wc));
	q->meta = calloc(q->cap, sizeof(struct cqmeta));
	if (!q->ring || !q->meta) {
		free(q->ring);
		free(q->meta);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&q->lock, NULL);
	q->ctx = to_vctx(c);
	q->cq.context = c;
	q->cq.channel = channel;
	q->cq.cq_context = cq_context;
	q->cq.cqe = cqe;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_lock(&g.mu);
	q->serial = ++g.obj_serial;
	q->cnext = g.cqs;
	g.cqs = q;
	pthread_mutex_unlock(&g.mu);
	return &q->cq;
}

static void cq_forget_deferred(struct vcq *q);

VEMU_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct vcq *q = (struct vcq *)cq;
	pthread_mutex_lock(&g.mu);
	for (struct vqp *p = g.qps; p; p = p->anext)
		if (p->scq == q || p->rcq == q) {
			pthread_mutex_unlock(&g.mu);
			return EBUSY;
		}
	wait_acked(&q->ev_read, &q->ev_acked, "cq", 0);
	for (struct vcq **pp = &g.cqs; *pp; pp = &(*pp)->cnext)
		if (*pp == q) {
			*pp = q->cnext;
			break;
		}
	cq_forget_deferred(q);
	pthread_mutex_unlock(&g.mu);
	if (cq->channel)
		__atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_ACQ_REL);
	for (uint32_t i = 0; i < q->count; i++) {
		struct cqmeta m = q->meta[(q->head + i) % q->cap];
		vemu_sq_unref(m.sq);
	}
	pthread_mutex_destroy(&q->lock);
	free(q->ring);
	free(q->meta);
	free(q);
	return 0;
}

VEMU_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq;
	(void)cqe;
	return EOPNOTSUPP;
}

/* Completions produced by the agent thread are queued (under g.mu) and pushed at the end of its loop
 * iteration, after the responses it produced were written: an ACK is on the wire before the target
 * sees its completion, as with a NIC (a target that exits right after its completion loses nothing). */
struct vsq *vemu_sq_new(void)
{
	struct vsq *sq = calloc(1, sizeof(*sq));
	if (!sq)
		abort();
	sq->refs = 1;
	return sq;
}

void vemu_sq_unref(struct vsq *sq)
{
	if (sq && __atomic_sub_fetch(&sq->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(sq);
}

static void sq_release(struct vsq *sq, int slots)
{
	if (!sq)
		return;
	__atomic_sub_fetch(&sq->used, slots, __ATOMIC_ACQ_REL);
	vemu_sq_unref(sq);
}

struct deferred {
	struct vcq *cq;
	struct ibv_wc wc;
	struct cqmeta meta;
	uint64_t not_before; /* late_cqe: not pushed before this time, nor anything of its CQ behind it */
};
/* no __thread: LeakSanitizer's tracer trips over the dynamic TLS of a dlopened library */
static pthread_t agent_tid;
static int agent_tid_set;

int vemu_in_agent(void)
{
	return __atomic_load_n(&agent_tid_set, __ATOMIC_ACQUIRE) && pthread_equal(pthread_self(), agent_tid);
}
static struct deferred *defq;
static size_t defq_n, defq_cap;

void vemu_set_agent_thread(void)
{
	agent_tid = pthread_self();
	__atomic_store_n(&agent_tid_set, 1, __ATOMIC_RELEASE);
}

static void cq_push_now(struct vcq *q, const struct ibv_wc *wc, struct cqmeta meta);

/* sq/slots: the send-queue slots this completion frees when it is polled (a reference on sq is taken) */
void vemu_cq_push(struct vcq *q, const struct ibv_wc *wc, struct vsq *sq, int slots)
{
	struct cqmeta meta = { sq, slots };
	if (sq)
		__atomic_add_fetch(&sq->refs, 1, __ATOMIC_ACQ_REL);
	/* g.mu is held by every caller. An application thread pushes directly unless the agent has completions
	 * queued (they come first: completions of one QP stay in order). */
	if (!vemu_in_agent() && !defq_n) {
		cq_push_now(q, wc, meta);
		return;
	}
	if (defq_n == defq_cap) {
		size_t cap = defq_cap ? defq_cap * 2 : 256;
		struct deferred *n = realloc(defq, cap * sizeof(*n));
		if (!n) {
			cq_push_now(q, wc, meta);
			return;
		}
		defq = n;
		defq_cap = cap;
	}
	defq[defq_n].cq = q;
	defq[defq_n].wc = *wc;
	defq[defq_n].meta = meta;
	defq[defq_n].not_before = 0;
	defq_n++;
	if (!vemu_in_agent())
		vemu_ring(); /* behind a lagging completion: the agent pushes it when its turn comes */
}

void vemu_cq_push_late(struct vcq *q, const struct ibv_wc *wc, uint64_t not_before_ns)
{
	size_t n0 = defq_n;
	vemu_cq_push(q, wc, NULL, 0);
	if (defq_n == n0 + 1) /* queued (not pushed: the realloc failed) */
		defq[n0].not_before = not_before_ns;
}

uint64_t vemu_deferred_deadline(void)
{
	uint64_t t = 0;
	for (size_t i = 0; i < defq_n; i++)
		if (defq[i].not_before && (!t || defq[i].not_before < t))
			t = defq[i].not_before;
	return t;
}

void vemu_flush_deferred(void)
{
	pthread_mutex_lock(&g.mu);
	/* in order; a lagging completion keeps its place and holds back what follows it on its CQ */
	struct vcq *blocked[16];
	int nblocked = 0, overflow = 0; /* more blocked CQs than the list holds: everything after waits */
	size_t k = 0;
	uint64_t now = vemu_now_ns();
	for (size_t i = 0; i < defq_n; i++) {
		int held = overflow;
		for (int b = 0; b < nblocked; b++)
			held |= blocked[b] == defq[i].cq;
		if (!held && defq[i].not_before > now) {
			held = 1;
			if (nblocked < (int)(sizeof(blocked) / sizeof(blocked[0])))
				blocked[nblocked++] = defq[i].cq;
			else
				overflow = 1;
		}
		if (held)
			defq[k++] = defq[i];
		else
			cq_push_now(defq[i].cq, &defq[i].wc, defq[i].meta);
	}
	defq_n = k;
	pthread_mutex_unlock(&g.mu);
}

static void defq_reset(void)
{
	defq_n = 0;
	agent_tid_set = 0;
}

static void cq_forget_deferred(struct vcq *q)
{
	/* g.mu held */
	size_t k = 0;
	for (size_t i = 0; i < defq_n; i++)
		if (defq[i].cq != q)
			defq[k++] = defq[i];
		else
			sq_release(defq[i].meta.sq, defq[i].meta.slots);
	defq_n = k;
}

static void cq_push_now(struct vcq *q, const struct ibv_wc *wc, struct cqmeta meta)
{
	int notify = 0, overrun = 0, lost = 0;
	pthread_mutex_lock(&q->lock);
	if (q->count == q->cap) {
		overrun = !q->overrun;
		q->overrun = 1;
		lost = 1;
	} else {
		uint32_t at = (q->head + q->count) % q->cap;
		q->ring[at] = *wc;
		q->meta[at] = meta;
		q->count++;
		if (q->armed && q->cq.channel) {
			q->armed = 0;
			notify = 1;
		}
	}
	pthread_mutex_unlock(&q->lock);
	if (lost)
		sq_release(meta.sq, meta.slots); /* a lost completion frees its slots (the QP would be in error anyway) */
	VTRACE("cqe qp=0x%x wr_id=0x%llx status=%s opcode=%d byte_len=%u%s\n", wc->qp_num,
	       (unsigned long long)wc->wr_id, ibv_wc_status_str(wc->status), (int)wc->opcode, wc->byte_len,
	       overrun ? " OVERRUN" : "");
	if (overrun)
		vemu_async_event(q->ctx, IBV_EVENT_CQ_ERR, &q->cq, 0);
	if (notify) {
		struct ibv_cq *p = &q->cq;
		ssize_t n = write(((struct vchan *)q->cq.channel)->wfd, &p, sizeof(p));
		(void)n;
	}
}

static int vemu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct vcq *q = (struct vcq *)cq;
	if (n < 0)
		return -1;
	pthread_mutex_lock(&q->lock);
	int k = 0;
	while (k < n && q->count) {
		wc[k++] = q->ring[q->head];
		struct cqmeta m = q->meta[q->head];
		if (m.sq)
			sq_release(m.sq, m.slots); /* polling frees the send-queue slots */
		q->head = (q->head + 1) % q->cap;
		q->count--;
	}
	pthread_mutex_unlock(&q->lock);
	return k;
}

static int vemu_req_notify_cq(struct ibv_cq *cq, int solicited)
{
	(void)solicited;
	struct vcq *q = (struct vcq *)cq;
	if (!cq->channel)
		return EINVAL;
	pthread_mutex_lock(&q->lock);
	q->armed = 1;
	pthread_mutex_unlock(&q->lock);
	return 0;
}

VEMU_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct ibv_cq *p;
	ssize_t n;
	do
		n = read(channel->fd, &p, sizeof(p));
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(p))
		return -1;
	*cq = p;
	*cq_context = p->cq_context;
	return 0;
}

VEMU_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ------------------------------------------------------------ QPs */
struct vqp *vemu_qp_find(uint32_t qpn)
{
	for (struct vqp *q = g.qp_hash[qpn & 4095]; q; q = q->hnext)
		if (q->qp.qp_num == qpn)
			return q;
	return NULL;
}

/* QPNs are unique across the processes of a run: blocks of VEMU_QPN_BLOCK numbers are taken from a
 * counter file under flock, and VEMU_DIR/qpn/<block> names the owner's emulator id. g.mu held. */
static int alloc_qpn(uint32_t *out)
{
	if (g.qpn_next == g.qpn_end) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/qpn.counter", g.dir);
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return -1;
		if (flock(fd, LOCK_EX)) {
			close(fd);
			return -1;
		}
		char buf[32] = { 0 };
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		unsigned long blk = n > 0 ? strtoul(buf, NULL, 10) : 0;
		blk++;
		if (blk >= (1u << 24) / VEMU_QPN_BLOCK)
			blk = 1;
		int len = snprintf(buf, sizeof(buf), "%lu\n", blk);
		if (ftruncate(fd, 0) || pwrite(fd, buf, (size_t)len, 0) != len) {
			close(fd);
			return -1;
		}
		flock(fd, LOCK_UN);
		close(fd);
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s/qpn", g.dir);
		mkdir_p(dir);
		char name[32];
		snprintf(name, sizeof(name), "%lu", blk);
		if (put_file(dir, name, "%016llx\n", (unsigned long long)g.run_id))
			return -1;
		g.qpn_next = (uint32_t)blk * VEMU_QPN_BLOCK;
		g.qpn_end = g.qpn_next + VEMU_QPN_BLOCK;
	}
	*out = g.qpn_next++;
	return 0;
}

VEMU_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	int e = __atomic_load_n(&to_vctx(pd->context)->dead, __ATOMIC_ACQUIRE) ? EIO : vemu_fault_call("create_qp");
	if (e) {
		errno = e;
		return NULL;
	}
	if (!pd || !attr || !attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->qp_type != IBV_QPT_RC || attr->srq) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_qp_cap *cap = &attr->cap;
	if (cap->max_send_wr > VEMU_MAX_QP_WR || cap->max_recv_wr > VEMU_MAX_QP_WR ||
	    cap->max_send_sge > VEMU_MAX_SGE || cap->max_recv_sge > VEMU_MAX_SGE ||
	    cap->max_inline_data > VEMU_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	struct vqp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->ctx = to_vctx(pd->context);
	q->scq = (struct vcq *)attr->send_cq;
	q->rcq = (struct vcq *)attr->recv_cq;
	q->cap = *cap;
	if (q->cap.max_send_sge == 0)
		q->cap.max_send_sge = 1;
	if (q->cap.max_recv_sge == 0)
		q->cap.max_recv_sge = 1;
	q->sq_sig_all = attr->sq_sig_all;
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = NULL;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = IBV_QPT_RC;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	q->mtu = IBV_MTU_1024;
	pthread_mutex_lock(&g.mu);
	uint32_t qpn;
	if (alloc_qpn(&qpn)) {
		pthread_mutex_unlock(&g.mu);
		free(q);
		errno = EIO;
		return NULL;
	}
	q->qp.qp_num = qpn;
	q->qp.handle = qpn;
	q->sq = vemu_sq_new();
	q->hnext = g.qp_hash[qpn & 4095];
	g.qp_hash[qpn & 4095] = q;
	q->anext = g.qps;
	g.qps = q;
	q->serial = ++g.obj_serial;
	pthread_mutex_unlock(&g.mu);
	VTRACE("qp create qp=0x%x dev=%s max_send_wr=%u max_recv_wr=%u max_inline=%u sq_sig_all=%d\n", qpn,
	       q->ctx->dev->dev.name, cap->max_send_wr, cap->max_recv_wr, cap->max_inline_data, attr->sq_sig_all);
	return &q->qp;
}

static void free_wr(struct vwr *w)
{
	free(w->rsegs);
	free(w);
}

static void drop_queues(struct vqp *q)
{
	/* g.mu held: forget every WR without completions (RESET, destroy) */
	for (struct vwr *w = q->sq_head, *n; w; w = n) {
		n = w->next;
		free_wr(w);
	}
	for (struct vwr *w = q->if_head, *n; w; w = n) {
		n = w->next;
		free_wr(w);
	}
	for (struct vrwr *r = q->rq_head, *n; r; r = n) {
		n = r->next;
		free(r);
	}
	vemu_held_drop(q);
	q->sq_head = q->sq_tail = q->if_head = q->if_tail = NULL;
	q->rq_head = q->rq_tail = NULL;
	q->rq_count = 0;
	/* completions still in a CQ keep the old slot counter alive; the QP starts over with a new one */
	vemu_sq_unref(q->sq);
	q->sq = q->destroyed ? NULL : vemu_sq_new();
	q->sq_unsig = 0;
}

VEMU_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct vqp *q = (struct vqp *)qp;
	pthread_mutex_lock(&g.mu);
	wait_acked(&q->ev_read, &q->ev_acked, "qp", qp->qp_num);
	for (struct vqp **pp = &g.qp_hash[qp->qp_num & 4095]; *pp; pp = &(*pp)->hnext)
		if (*pp == q) {
			*pp = q->hnext;
			break;
		}
	for (struct vqp **pp = &g.qps; *pp; pp = &(*pp)->anext)
		if (*pp == q) {
			*pp = q->anext;
			break;
		}
	for (struct vqp **pp = &g.dirty_head; *pp; pp = &(*pp)->dnext)
		if (*pp == q) {
			*pp = q->dnext;
			break;
		}
	q->destroyed = 1;
	drop_queues(q);
	vemu_lazy_drain_locked(q->ctx->dev);
	__atomic_add_fetch(&g.qp_gone_gen, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&g.mu);
	/* a payload being placed for this QP is not placed any further once this returns (placement_recheck) */
	pthread_rwlock_wrlock(&g.memlock);
	pthread_rwlock_unlock(&g.memlock);
	VTRACE("qp destroy qp=0x%x\n", qp->qp_num);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(q);
	return 0;
}

static int wc_opcode(int wr_op)
{
	switch (wr_op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
	default: return IBV_WC_SEND;
	}
}

/* complete the send WR w (at the head of its list) and free it; g.mu held */
void vemu_complete_send(struct vqp *q, struct vwr *w, int status)
{
	if (w->signaled || status != IBV_WC_SUCCESS) {
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = w->wr_id;
		wc.status = (enum ibv_wc_status)status;
		wc.opcode = (enum ibv_wc_opcode)wc_opcode(w->opcode);
		wc.byte_len = status == IBV_WC_SUCCESS ? (uint32_t)w->len : 0;
		wc.qp_num = q->qp.qp_num;
		/* polling it frees its slot and those of the unsignaled WRs completed before it */
		vemu_cq_push(q->scq, &wc, q->sq, q->sq_unsig + 1);
		q->sq_unsig = 0;
	} else {
		q->sq_unsig++;
	}
	free_wr(w);
}

static void flush_recv(struct vqp *q, struct vrwr *r)
{
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = r->wr_id;
	wc.status = IBV_WC_WR_FLUSH_ERR;
	wc.opcode = IBV_WC_RECV;
	wc.qp_num = q->qp.qp_num;
	vemu_cq_push(q->rcq, &wc, NULL, 0);
	free(r);
}

void vemu_qp_to_err(struct vqp *q)
{
	/* g.mu held */
	if (q->qp.state != IBV_QPS_ERR)
		VTRACE("qp state qp=0x%x %d->ERR\n", q->qp.qp_num, (int)q->qp.state);
	q->qp.state = IBV_QPS_ERR;
	struct vwr *w;
	while ((w = q->if_head)) {
		q->if_head = w->next;
		vemu_complete_send(q, w, IBV_WC_WR_FLUSH_ERR);
	}
	q->if_tail = NULL;
	while ((w = q->sq_head)) {
		q->sq_head = w->next;
		vemu_complete_send(q, w, IBV_WC_WR_FLUSH_ERR);
	}
	q->sq_tail = NULL;
	struct vrwr *r;
	while ((r = q->rq_head)) {
		q->rq_head = r->next;
		q->rq_count--;
		flush_recv(q, r);
	}
	q->rq_tail = NULL;
	vemu_held_drop(q);
}

/* attribute masks per transition (RC), as the kernel's ib_modify_qp_is_ok() table */
static int trans_ok(int cur, int next, int mask)
{
	int req = 0, opt = 0;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
		if (cur < IBV_QPS_RESET || cur > IBV_QPS_ERR)
			return 0;
	} else if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
		req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) {
		opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
		req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
		      IBV_QP_MIN_RNR_TIMER;
		opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
	} else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
		req = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		opt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
		      IBV_QP_PATH_MIG_STATE;
	} else if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) {
		opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
		      IBV_QP_MIN_RNR_TIMER;
	} else {
		return 0;
	}
	if ((mask & req) != req)
		return 0;
	if (mask & ~(req | opt | IBV_QP_STATE))
		return 0;
	return 1;
}

VEMU_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct vqp *q = (struct vqp *)qp;
	/* on a dead device only the way to ERR/RESET still works (what a driver lets a user do to clean up) */
	int cleanup = (mask & IBV_QP_STATE) && (attr->qp_state == IBV_QPS_ERR || attr->qp_state == IBV_QPS_RESET);
	int e = __atomic_load_n(&q->ctx->dead, __ATOMIC_ACQUIRE) && !cleanup ? EIO : vemu_fault_call("modify_qp");
	if (e)
		return e;
	pthread_mutex_lock(&g.mu);
	int cur = q->qp.state;
	if ((mask & IBV_QP_CUR_STATE) && (int)attr->cur_qp_state != cur)
		goto inval;
	int next = (mask & IBV_QP_STATE) ? (int)attr->qp_state : cur;
	if (!trans_ok(cur, next, mask))
		goto inval;
	struct vdev *d = q->ctx->dev;
	if ((mask & IBV_QP_PORT) && attr->port_num != 1)
		goto inval;
	if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0)
		goto inval;
	if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
		goto inval;
	if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31)
		goto inval;
	if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
		goto inval;
	if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
		goto inval;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		goto inval;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16)
		goto inval;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16)
		goto inval;
	if ((mask & IBV_QP_DEST_QPN) && (attr->dest_qp_num == 0 || attr->dest_qp_num >= (1u << 24)))
		goto inval;
	if (mask & IBV_QP_AV) {
		if (!d->is_ib && !attr->ah_attr.is_global)
			goto inval; /* RoCE needs a GRH */
		if (attr->ah_attr.is_global && attr->ah_attr.grh.sgid_index >= d->ngid)
			goto inval;
		if (d->is_ib && !attr->ah_attr.is_global && attr->ah_attr.dlid == 0)
			goto inval;
	}
	if (mask & IBV_QP_PORT)
		q->port = attr->port_num;
	if (mask & IBV_QP_ACCESS_FLAGS)
		q->access = attr->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		q->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_AV)
		q->ah = attr->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		q->mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN) {
		q->dest_qpn = attr->dest_qp_num;
		q->peer_id = 0;
		q->conn = NULL;
	}
	if (mask & IBV_QP_RQ_PSN)
		q->rq_psn = attr->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		q->sq_psn = attr->sq_psn;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		q->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		q->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		q->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT)
		q->timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		q->retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		q->rnr_retry = attr->rnr_retry;
	if (next != cur)
		VTRACE("qp state qp=0x%x %d->%d dest=0x%x timeout=%u retry_cnt=%u rnr_retry=%u min_rnr_timer=%u "
		       "access=0x%x sl=%u global=%d tc=%u\n",
		       qp->qp_num, cur, next, q->dest_qpn, q->timeout, q->retry_cnt, q->rnr_retry, q->min_rnr_timer,
		       q->access, q->ah.sl, q->ah.is_global, q->ah.is_global ? q->ah.grh.traffic_class : 0);
	int fatal = 0;
	if (next == IBV_QPS_RESET) {
		drop_queues(q);
		q->qp.state = IBV_QPS_RESET;
		q->next_seq = 0;
		q->retries = 0;
		q->unsent = 0;
		q->peer_id = 0;
		q->conn = NULL;
	} else if (next == IBV_QPS_ERR) {
		vemu_qp_to_err(q);
	} else {
		q->qp.state = (enum ibv_qp_state)next;
		if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT)
			q->rx_psn = q->rq_psn & VEMU_PSN_MASK;
		if (next == IBV_QPS_RTS && cur == IBV_QPS_RTR) {
			q->next_seq = q->sq_psn & VEMU_PSN_MASK;
			q->retries = 0;
			q->last_progress = vemu_now_ns();
			fatal = vemu_fault_qp_fatal();
		}
	}
	if (fatal) {
		VTRACE("fault qp_fatal qp=0x%x\n", qp->qp_num);
		vemu_qp_to_err(q);
		vemu_async_event(q->ctx, IBV_EVENT_QP_FATAL, &q->qp, 0);
	}
	pthread_mutex_unlock(&g.mu);
	return 0;
inval:
	pthread_mutex_unlock(&g.mu);
	return EINVAL;
}

VEMU_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask;
	struct vqp *q = (struct vqp *)qp;
	pthread_mutex_lock(&g.mu);
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = q->qp.state;
	attr->cur_qp_state = q->qp.state;
	attr->path_mtu = (enum ibv_mtu)q->mtu;
	attr->rq_psn = q->rq_psn;
	attr->sq_psn = q->sq_psn;
	attr->dest_qp_num = q->dest_qpn;
	attr->qp_access_flags = q->access;
	attr->cap = q->cap;
	attr->ah_attr = q->ah;
	attr->pkey_index = q->pkey_index;
	attr->max_rd_atomic = q->max_rd_atomic;
	attr->max_dest_rd_atomic = q->max_dest_rd_atomic;
	attr->min_rnr_timer = q->min_rnr_timer;
	attr->port_num = (uint8_t)q->port;
	attr->timeout = q->timeout;
	attr->retry_cnt = q->retry_cnt;
	attr->rnr_retry = q->rnr_retry;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->cap = q->cap;
		init->qp_type = IBV_QPT_RC;
		init->sq_sig_all = q->sq_sig_all;
	}
	pthread_mutex_unlock(&g.mu);
	return 0;
}

static void mark_dirty(struct vqp *q)
{
	if (!q->dirty) {
		q->dirty = 1;
		q->dnext = g.dirty_head;
		g.dirty_head = q;
	}
}

static int vemu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct vqp *q = (struct vqp *)qp;
	int err = 0;
	pthread_mutex_lock(&g.mu);
	int rung = 0;
	for (; wr; wr = wr->next) {
		int st = q->qp.state;
		if (st != IBV_QPS_RTS && st != IBV_QPS_ERR && st != IBV_QPS_SQD) {
			err = EINVAL;
			break;
		}
		switch (wr->opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_SEND:
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_READ:
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD: break;
		default: err = EINVAL; break;
		}
		if (err)
			break;
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge) {
			err = EINVAL;
			break;
		}
		if (vemu_is_atomic(wr->opcode) && g.no_atomics) { /* a device reporting atomic_cap NONE */
			err = EOPNOTSUPP;
			break;
		}
		/* an atomic's result goes to one 8-byte local sge; no inline (as rxe checks at post time; the remote
		 * address's alignment is the responder's to check: REM_INV_REQ_ERR) */
		if (vemu_is_atomic(wr->opcode) &&
		    (wr->num_sge != 1 || wr->sg_list[0].length != 8 || (wr->send_flags & IBV_SEND_INLINE))) {
			err = EINVAL;
			break;
		}
		if ((uint32_t)__atomic_load_n(&q->sq->used, __ATOMIC_ACQUIRE) >= q->cap.max_send_wr) {
			err = ENOMEM;
			break;
		}
		uint64_t len = 0;
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		int inl = (wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ;
		if ((wr->send_flags & IBV_SEND_INLINE) && wr->opcode == IBV_WR_RDMA_READ) {
			err = EINVAL;
			break;
		}
		if (inl && len > q->cap.max_inline_data) {
			err = EINVAL;
			break;
		}
		size_t extra = inl ? (size_t)len : sizeof(struct ibv_sge) * (size_t)wr->num_sge;
		struct vwr *w = calloc(1, sizeof(*w) + extra);
		if (!w) {
			err = ENOMEM;
			break;
		}
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		w->imm = wr->imm_data;
		if (vemu_is_atomic(wr->opcode)) {
			w->raddr = wr->wr.atomic.remote_addr;
			w->rkey = wr->wr.atomic.rkey;
			w->cmp_add = wr->wr.atomic.compare_add;
			w->swap = wr->wr.atomic.swap;
		} else {
			w->raddr = wr->wr.rdma.remote_addr;
			w->rkey = wr->wr.rdma.rkey;
		}
		w->len = len;
		w->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
		if (inl) {
			w->inl = (char *)(w + 1);
			uint64_t o = 0;
			for (int i = 0; i < wr->num_sge; i++) {
				if (wr->sg_list[i].length)
					memcpy(w->inl + o, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
				o += wr->sg_list[i].length;
			}
		} else {
			w->sge = (struct ibv_sge *)(w + 1);
			w->nsge = wr->num_sge;
			if (wr->num_sge)
				memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
		}
		if (len > g.max_msg_sz) {
			/* as an HCA: the post succeeds, the WR completes with a local length error (its QP to ERR) */
			VTRACE("fault max_msg_sz qp=0x%x op=%s wr_id=0x%llx len=%llu max_msg_sz=%llu\n", qp->qp_num,
			       vemu_wr_opname(w->opcode), (unsigned long long)w->wr_id, (unsigned long long)len,
			       (unsigned long long)g.max_msg_sz);
			w->status = IBV_WC_LOC_LEN_ERR;
		}
		{
			/* wc fault rules count the work requests as they are posted */
			int st = vemu_fault_wc(w->opcode);
			if (st && q->qp.state == IBV_QPS_RTS) {
				VTRACE("fault wc qp=0x%x op=%s wr_id=0x%llx status=%s\n", qp->qp_num,
				       vemu_wr_opname(w->opcode), (unsigned long long)w->wr_id, ibv_wc_status_str(st));
				w->status = st;
			}
		}
		w->seq = q->next_seq;
		q->next_seq = (q->next_seq + 1) & VEMU_PSN_MASK;
		if (!q->sq_head && !q->if_head)
			q->last_progress = vemu_now_ns();
		if (q->sq_tail)
			q->sq_tail->next = w;
		else
			q->sq_head = w;
		q->sq_tail = w;
		__atomic_add_fetch(&q->sq->used, 1, __ATOMIC_ACQ_REL);
		if (g.trace) {
			char acc[32];
			snprintf(acc, sizeof(acc), "%s%s", w->signaled ? "SIGNALED" : "UNSIGNALED",
				 inl ? "|INLINE" : "");
			char atom[80] = "";
			if (vemu_is_atomic(w->opcode))
				snprintf(atom, sizeof(atom), " compare_add=0x%llx swap=0x%llx",
					 (unsigned long long)w->cmp_add, (unsigned long long)w->swap);
			vemu_trace("post qp=0x%x op=%s wr_id=0x%llx len=%llu sge=%d flags=%s rkey=0x%x raddr=0x%llx%s\n",
				   qp->qp_num, vemu_wr_opname(w->opcode), (unsigned long long)w->wr_id,
				   (unsigned long long)len, wr->num_sge, acc, w->rkey, (unsigned long long)w->raddr, atom);
		}
		rung = 1;
	}
	if (rung && vemu_try_direct(q))
		rung = 0;
	if (rung)
		mark_dirty(q);
	pthread_mutex_unlock(&g.mu);
	if (rung)
		vemu_ring();
	if (err)
		*bad = wr;
	return err;
}

static int vemu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct vqp *q = (struct vqp *)qp;
	int err = 0;
	pthread_mutex_lock(&g.mu);
	for (; wr; wr = wr->next) {
		if (q->qp.state == IBV_QPS_RESET) {
			err = EINVAL;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_recv_sge) {
			err = EINVAL;
			break;
		}
		if ((uint32_t)q->rq_count >= q->cap.max_recv_wr) {
			err = ENOMEM;
			break;
		}
		struct vrwr *r = malloc(sizeof(*r) + sizeof(struct ibv_sge) * (size_t)wr->num_sge);
		if (!r) {
			err = ENOMEM;
			break;
		}
		r->next = NULL;
		r->wr_id = wr->wr_id;
		r->nsge = wr->num_sge;
		if (wr->num_sge) /* NCCL posts receives with sg_list = NULL, num_sge = 0 */
			memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
		VTRACE("post qp=0x%x op=RECV wr_id=0x%llx sge=%d\n", qp->qp_num, (unsigned long long)r->wr_id,
		       r->nsge);
		if (q->qp.state == IBV_QPS_ERR) {
			flush_recv(q, r);
			continue;
		}
		if (q->rq_tail)
			q->rq_tail->next = r;
		else
			q->rq_head = r;
		q->rq_tail = r;
		q->rq_count++;
	}
	pthread_mutex_unlock(&g.mu);
	if (err)
		*bad = wr;
	return err;
}

/* ------------------------------------------------------------ ECE and other optional verbs */
VEMU_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

VEMU_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

VEMU_EXPORT int ibv_fork_init(void)
{
	return 0;
}

VEMU_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

VEMU_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

VEMU_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
