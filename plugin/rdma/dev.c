/* RDMA transport: devices, properties, GPUDirect RDMA probes, relaxed ordering, registration. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cuda.h"
#include "fb_tcp.h"
#include "gid.h"
#include "rdma.h"

struct gdr_rdma_state gdr_rdma;

/* ------------------------------------------------------------------------------------- port speed -- */

/* Mbps per lane of ibv_port_attr.active_speed, or of active_speed_ex (XDR: 256) where the library has it. */
static int lane_mbps(int active_speed) {
  switch (active_speed) {
  case 1: return 2500;     /* SDR */
  case 2: return 5000;     /* DDR */
  case 4: return 10000;    /* QDR */
  case 8: return 10000;    /* FDR10 (10.3125 Gb/s, 64/66) */
  case 16: return 14000;   /* FDR */
  case 32: return 25000;   /* EDR */
  case 64: return 50000;   /* HDR */
  case 128: return 100000; /* NDR */
  case 256: return 200000; /* XDR */
  default: return 10000;
  }
}

static int width_lanes(int active_width) {
  switch (active_width) {
  case 1: return 1;
  case 2: return 4;
  case 4: return 8;
  case 8: return 12;
  case 16: return 2;
  default: return 1;
  }
}

/* ------------------------------------------------------------------------------------------ sysfs -- */

static int read_small_file(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, len - 1);
  int e = errno;
  close(fd);
  if (n < 0) {
    errno = e;
    return -1;
  }
  buf[n] = '\0';
  return (int)n;
}

/* GID type from <ibdev_path>/ports/<port>/gid_attrs/types/<index>; UNKNOWN when hidden (containers
 * mount a partial sysfs, and the kernel answers EINVAL for unpopulated entries). */
static int gid_type_of(const char *ibdev_path, int port, int index) {
  char path[PATH_MAX], buf[64];
  snprintf(path, sizeof(path), "%s/ports/%d/gid_attrs/types/%d", ibdev_path, port, index);
  if (read_small_file(path, buf, sizeof(buf)) <= 0) return GDR_GID_TYPE_UNKNOWN;
  return gdr_gid_type_parse(buf);
}

/* -------------------------------------------------------------------------------------------- GIDs -- */

/* The GID index for the port as it is now (GDRNET_GID_INDEX, else the selection rules), and that GID. */
static int select_gid(struct gdr_rdma_dev *d, const char *ibdev_path, const struct ibv_port_attr *pa, int *index,
                      union ibv_gid *gid) {
  int forced = (int)gdr_param_int(GDR_PARAM_GID_INDEX);
  *index = 0;
  if (forced >= 0) {
    *index = forced;
  } else if (d->link_layer == IBV_LINK_LAYER_ETHERNET) {
    int n = pa->gid_tbl_len;
    if (n > 256) n = 256;
    struct gdr_gid_entry *tbl = calloc((size_t)(n > 0 ? n : 1), sizeof(*tbl));
    if (tbl) {
      for (int i = 0; i < n; i++) {
        union ibv_gid g;
        if (gdr_ibv.query_gid(d->ctx, (uint8_t)d->port, i, &g) != 0) continue;
        memcpy(tbl[i].raw, g.raw, 16);
        tbl[i].valid = 1;
        tbl[i].type = gid_type_of(ibdev_path, d->port, i);
      }
      int family = gdr_param_int(GDR_PARAM_IB_ADDR_FAMILY) == GDR_IB_ADDR_FAMILY_INET6 ? GDR_GID_FAMILY_IPV6
                                                                                       : GDR_GID_FAMILY_IPV4;
      int idx = gdr_gid_select(tbl, n, family, (int)gdr_param_int(GDR_PARAM_IB_ROCE_VERSION));
      if (idx < 0) {
        GDR_INFO(NCCL_NET | NCCL_INIT, "%s: no routable RoCE GID (only link-local or empty entries); using GID index 0",
                 d->name);
        idx = 0;
      }
      *index = idx;
      free(tbl);
    }
  }
  memset(gid, 0, sizeof(*gid));
  if (gdr_ibv.query_gid(d->ctx, (uint8_t)d->port, *index, gid) != 0) {
    int e = errno;
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: cannot read GID index %d (%s)", d->name, *index, strerror(e));
    return e ? e : EIO;
  }
  return 0;
}

static void choose_gid(struct gdr_rdma_dev *d, struct ibv_device *ibdev, const struct ibv_port_attr *pa) {
  (void)select_gid(d, ibdev->ibdev_path, pa, &d->gid_index, &d->gid);
}

int gdr_rdma_dev_refresh(struct gdr_rdma_dev *d, int *active, union ibv_gid *gid, int *gid_index, uint16_t *lid,
                         int *mtu) {
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  int rc = gdr_ibv_query_port(d->ctx, (uint8_t)d->port, &pa, NULL);
  if (rc != 0) return rc;
  *active = pa.state == IBV_PORT_ACTIVE;
  pthread_mutex_lock(&d->lock);
  *gid = d->gid;
  *gid_index = d->gid_index;
  *lid = d->lid;
  *mtu = d->active_mtu;
  pthread_mutex_unlock(&d->lock);
  if (!*active) return 0;
  union ibv_gid g;
  int idx = 0;
  if (select_gid(d, d->ibdev_path, &pa, &idx, &g) != 0) return 0; /* keep the known one */
  pthread_mutex_lock(&d->lock);
  if (idx != d->gid_index || memcmp(g.raw, d->gid.raw, 16) != 0)
    GDR_INFO(NCCL_NET, "%s port %d: GID now index %d (was %d)", d->name, d->port, idx, d->gid_index);
  d->gid = g;
  d->gid_index = idx;
  d->lid = pa.lid;
  d->active_mtu = pa.active_mtu;
  *gid = g;
  *gid_index = idx;
  *lid = pa.lid;
  *mtu = pa.active_mtu;
  pthread_mutex_unlock(&d->lock);
  return 0;
}

/* ----------------------------------------------------------------------------- a lost device back -- */

#define REVIVE_EVERY_NS 1000000000ull                         /* a lost device is looked for at most once a second */
static pthread_mutex_t revive_mu = PTHREAD_MUTEX_INITIALIZER; /* one revival at a time (connect and accept may
                                                                  run on different threads) */

/* A device lost with DEVICE_FATAL (async.c) is back when a newly opened context of it finds its port ACTIVE (a
 * driver reload, a reset NIC). The device then takes the new context and a new PD, and connections made from then
 * on use RDMA again; those that moved to TCP stay there (a lost device pins them). The old context and PD are kept
 * until fini: a connection that moved may still hold objects of them. Called by connect and accept on a lost
 * device. Returns 0 when the device is usable again. */
int gdr_rdma_dev_revive(struct gdr_rdma_dev *d) {
  struct ibv_device **list = NULL;
  struct ibv_context *ctx = NULL;
  struct ibv_pd *pd = NULL;
  struct ibv_port_attr pa;
  int n = 0, rc = -1;
  pthread_mutex_lock(&revive_mu);
  pthread_mutex_lock(&d->lock);
  int fatal = d->fatal;
  uint64_t now = gdr_time_ns();
  int due = now >= d->revive_ns && d->nretired < (int)(sizeof(d->retired_ctx) / sizeof(d->retired_ctx[0]));
  if (fatal && due) d->revive_ns = now + REVIVE_EVERY_NS;
  pthread_mutex_unlock(&d->lock);
  if (!fatal) {
    rc = 0;
    goto out;
  }
  if (!due) goto out;
  list = gdr_ibv.get_device_list(&n);
  for (int i = 0; list && i < n && ctx == NULL; i++)
    if (strcmp(gdr_ibv.get_device_name(list[i]), d->ibname) == 0) ctx = gdr_ibv.open_device(list[i]);
  if (ctx == NULL) goto out;
  memset(&pa, 0, sizeof(pa));
  if (gdr_ibv_query_port(ctx, (uint8_t)d->port, &pa, NULL) != 0 || pa.state != IBV_PORT_ACTIVE) goto out;
  if ((pd = gdr_ibv.alloc_pd(ctx)) == NULL) goto out;
  pthread_mutex_lock(&d->lock);
  d->retired_ctx[d->nretired] = d->ctx;
  d->retired_pd[d->nretired] = d->pd;
  d->nretired++;
  pthread_mutex_unlock(&d->lock);
  if (gdr_rdma_async_swap_ctx(d, ctx, pd) != ncclSuccess)
    GDR_WARN("%s: back, but its async events are not watched (see above)", d->name);
  ctx = NULL; /* the device's now */
  pd = NULL;
  int active = 0, mtu = 0, gid_index = 0;
  union ibv_gid gid;
  uint16_t lid = 0;
  (void)gdr_rdma_dev_refresh(d, &active, &gid, &gid_index, &lid, &mtu);
  pthread_mutex_lock(&d->lock);
  d->fatal = 0;
  int ncomms = d->ncomms;
  pthread_mutex_unlock(&d->lock);
  atomic_store_explicit(&d->ctr.lost, 0, memory_order_relaxed);
  atomic_fetch_add_explicit(&d->ctr.revived, 1, memory_order_relaxed);
  GDR_WARN("%s is back after DEVICE_FATAL (a new context; port %d ACTIVE, GID index %d): new connections use RDMA "
           "again; the %d connection(s) that moved to TCP stay there",
           d->name, d->port, gid_index, ncomms);
  rc = 0;
out:
  if (pd) gdr_ibv.dealloc_pd(pd);
  if (ctx) gdr_ibv.close_device(ctx);
  if (list) gdr_ibv.free_device_list(list);
  pthread_mutex_unlock(&revive_mu);
  return rc;
}

int gdr_rdma_comm_fatal(const struct gdr_rdma_comm *c) {
  for (int i = 0; i < c->ndevs; i++)
    if (c->m[i].dev->fatal) return 1;
  return 0;
}

/* ------------------------------------------------------------------------------------------- GDR -- */

static int peermem_loaded(void) {
  static const char *files[] = {"/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version",
                                "/sys/module/nv_peer_mem/version"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
    if (access(files[i], F_OK) == 0) return 1;
  return 0;
}

/* DMA-BUF, NIC side: registering fd -1 fails with EBADF when the kernel and driver support DMA-BUF MRs (the fd was
 * looked at), with EOPNOTSUPP/EPROTONOSUPPORT when they do not. 1 when they do; else why. */
static int nic_dmabuf_ok(struct gdr_rdma_dev *d, char *why, size_t len) {
  if (gdr_ibv.reg_dmabuf_mr == NULL) {
    snprintf(why, len, "%s has no ibv_reg_dmabuf_mr (rdma-core < 34)", gdr_ibv_lib_name());
    return 0;
  }
  errno = 0;
  struct ibv_mr *mr = gdr_ibv.reg_dmabuf_mr(d->pd, 0, 0, 0, -1, 0);
  int e = errno;
  if (mr != NULL) {
    gdr_ibv.dereg_mr(mr); /* cannot happen with fd -1; be safe */
    return 1;
  }
  if (e == EBADF) return 1;
  snprintf(why, len, "the NIC driver/kernel refuse DMA-BUF MRs (probe: %s)", strerror(e));
  return 0;
}

/* DMA-BUF, GPU side: the driver says CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED. 1 when it does; else why. */
static int cuda_dmabuf_ok(char *why, size_t len) {
  char w[128] = "";
  int s = 0;
  if (gdr_cuda_load(w, sizeof(w)) != ncclSuccess) {
    snprintf(why, len, "no CUDA driver (%s)", w);
    return 0;
  }
  if (gdr_cuda_dmabuf_supported(0, &s) != ncclSuccess || !s) {
    snprintf(why, len, "the GPU/driver lacks DMA-BUF support (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=0)");
    return 0;
  }
  return 1;
}

static void probe_gdr(struct gdr_rdma_dev *d) {
  int mode = (int)gdr_param_int(GDR_PARAM_GDR);     /* -1 auto, 0, 1 */
  int dmode = (int)gdr_param_int(GDR_PARAM_DMABUF); /* -1 auto, 0, 1 */
  char nic_why[128] = "", cuda_why[160] = "";
  d->ptr_support = NCCL_PTR_HOST;
  if (mode == 0) {
    snprintf(d->gdr_desc, sizeof(d->gdr_desc), "GDR off: GDRNET_GDR=0 (host memory only)");
    return;
  }
  int peermem = peermem_loaded();
  int nic_dmabuf = nic_dmabuf_ok(d, nic_why, sizeof(nic_why));
  int cuda_dmabuf = nic_dmabuf && mode != 1 && cuda_dmabuf_ok(cuda_why, sizeof(cuda_why));
  int dmabuf = nic_dmabuf && (mode == 1 || cuda_dmabuf) && dmode != 0;
  if (dmode == 1 && !dmabuf)
    GDR_WARN("%s: GDRNET_DMABUF=1 but DMA-BUF registration cannot work here: %s%s%s", d->name, nic_why,
             nic_why[0] && cuda_why[0] ? "; " : "", cuda_why);
  int cuda = mode == 1 || peermem;
  if (cuda) d->ptr_support |= NCCL_PTR_CUDA;
  if (dmabuf) d->ptr_support |= NCCL_PTR_DMABUF;

  if (cuda || dmabuf) {
    snprintf(d->gdr_desc, sizeof(d->gdr_desc), "GDR on:%s%s%s",
             cuda ? (mode == 1 ? " GDRNET_GDR=1" : " nvidia-peermem") : "", cuda && dmabuf ? "," : "",
             dmabuf ? " DMA-BUF" : "");
    return;
  }
  /* off: say every reason */
  snprintf(d->gdr_desc, sizeof(d->gdr_desc),
           "GDR off: nvidia-peermem not loaded (modprobe nvidia-peermem) and DMA-BUF unusable (%s%s%s)",
           dmode == 0 ? "GDRNET_DMABUF=0" : nic_why, (dmode != 0 && nic_why[0] && cuda_why[0]) ? "; " : "",
           dmode == 0 ? "" : cuda_why);
}

/* ----------------------------------------------------------------------------- relaxed ordering -- */

static void probe_relaxed(struct gdr_rdma_dev *d, int *warned) {
  int mode = (int)gdr_param_int(GDR_PARAM_RELAXED_ORDERING); /* 0, 1, 2 = auto */
  d->relaxed = 0;
  if (mode == 0) return;
  if (gdr_ibv.reg_mr_iova2 == NULL) {
    if (mode == 1 && !*warned) {
      GDR_WARN("GDRNET_RELAXED_ORDERING=1 but %s has no ibv_reg_mr_iova2 (rdma-core < 29): relaxed ordering off",
               gdr_ibv_lib_name());
      *warned = 1;
    }
    return;
  }
  /* probe: a small registration with the flag */
  long page = sysconf(_SC_PAGESIZE);
  void *buf = NULL;
  if (posix_memalign(&buf, (size_t)(page > 0 ? page : 4096), 4096) != 0) return;
  struct ibv_mr *mr = gdr_ibv.reg_mr_iova2(d->pd, buf, 4096, (uint64_t)(uintptr_t)buf,
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  if (mr) {
    gdr_ibv.dereg_mr(mr);
    d->relaxed = 1;
  } else if (mode == 1) {
    GDR_WARN("%s: relaxed-ordering registration refused (%s): relaxed ordering off", d->name, strerror(errno));
  }
  free(buf);
}

/* --------------------------------------------------------------------------------- registration -- */

const char *gdr_rdma_reg_hint(int err) {
  switch (err) {
  case ENOMEM:
  case EAGAIN:
    return " (locked-memory limit too low? raise `ulimit -l` to unlimited; in containers grant IPC_LOCK and memlock)";
  case EFAULT: return " (address not mapped, or device memory without nvidia-peermem/DMA-BUF)";
  case EPERM:
  case EACCES: return " (permission: check /dev/infiniband access and memlock/IPC_LOCK)";
  default: return "";
  }
}

static void *reg_cb(void *ctx, uintptr_t base, size_t len, const struct gdr_reg_req *req, uint32_t *lkey,
                    uint32_t *rkey, int *err) {
  struct gdr_rdma_dev *d = ctx;
  struct ibv_mr *mr;
  errno = 0;
  if (req->kind == GDR_REG_DMABUF)
    mr = gdr_ibv.reg_dmabuf_mr(d->pd, req->dmabuf_offset, len, (uint64_t)base, req->dmabuf_fd, req->access);
  else if ((req->access & IBV_ACCESS_RELAXED_ORDERING) && gdr_ibv.reg_mr_iova2)
    mr = gdr_ibv.reg_mr_iova2(d->pd, (void *)base, len, (uint64_t)base, (unsigned)req->access);
  else
    mr = gdr_ibv.reg_mr(d->pd, (void *)base, len, req->access & ~IBV_ACCESS_RELAXED_ORDERING);
  if (mr == NULL) {
    *err = errno ? errno : EIO;
    return NULL;
  }
  *lkey = mr->lkey;
  *rkey = mr->rkey;
  return mr;
}

static int dereg_cb(void *ctx, void *mr) {
  (void)ctx;
  return gdr_ibv.dereg_mr(mr);
}

static const struct gdr_regcache_ops reg_ops = {reg_cb, dereg_cb};

struct ibv_mr *gdr_rdma_reg_internal(struct gdr_rdma_dev *d, void *buf, size_t len, int access) {
  struct ibv_mr *mr = gdr_ibv.reg_mr(d->pd, buf, len, access);
  if (mr == NULL) {
    int e = errno;
    GDR_WARN("%s: ibv_reg_mr(%zu bytes) failed: %s%s", d->name, len, strerror(e), gdr_rdma_reg_hint(e));
    errno = e;
  }
  return mr;
}

/* Drops the registrations of a handle (the cache deregisters an entry with its last reference) and frees it. */
static int mh_free(struct gdr_rdma_mh *h) {
  int err = 0;
  for (int i = 0; i < h->n; i++) {
    int rc = h->e[i] ? gdr_regcache_put(h->e[i]) : 0;
    if (rc && !err) err = rc;
  }
  h->magic = 0;
  free(h);
  return err;
}

static ncclResult_t reg_common(struct gdr_rdma_comm *c, void *data, size_t size, int type, int kind, int fd,
                               uint64_t offset, void **mhandle) {
  ncclResult_t res = ncclSuccess;
  struct gdr_rdma_mh *h = NULL;
  *mhandle = NULL;
  if (c == NULL) return ncclInternalError;
  h = calloc(1, sizeof(*h));
  if (h == NULL) return ncclSystemError;
  h->magic = GDR_RDMA_MH_MAGIC;
  h->base = (uintptr_t)data;
  h->len = size;
  h->kind = kind;
  if (c->tcp_only || gdr_rdma_comm_fatal(c)) {
    /* the connection runs over TCP (its RDMA part failed, or a device is lost): no NIC registration, only what
     * the TCP path needs to know of the buffer (fallback.c reads base, len and kind) */
    *mhandle = h;
    return ncclSuccess;
  }
  if (kind == GDR_REG_DMABUF && gdr_ibv.reg_dmabuf_mr == NULL) {
    GDR_WARN("%s: DMA-BUF registration asked but %s has no ibv_reg_dmabuf_mr", c->dev->name, gdr_ibv_lib_name());
    res = ncclInvalidUsage;
    goto out;
  }
  /* on every device of the connection: QP i uses the keys of its device i % ndevs */
  for (int i = 0; i < c->ndevs; i++) {
    struct gdr_rdma_dev *d = c->m[i].dev;
    if (type == NCCL_PTR_CUDA && !(d->ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF))) {
      GDR_WARN("%s: registration of CUDA memory %p (%zu bytes) but GPUDirect RDMA is off on this device (%s)", d->name,
               data, size, d->gdr_desc);
      res = ncclInvalidUsage;
      goto out;
    }
    /* least privilege: the peer writes only into receive buffers; the flush reads only device receive
     * buffers (GDR); a send buffer is only read locally by the NIC */
    int access = 0;
    if (c->kind == GDR_RCOMM_RECV) {
      access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
      if (kind != GDR_REG_HOST && c->gdr_flush) access |= IBV_ACCESS_REMOTE_READ;
    }
    if (d->relaxed) access |= IBV_ACCESS_RELAXED_ORDERING;
    struct gdr_reg_req req = {(uintptr_t)data, size, access, kind, fd, offset};
    struct gdr_reg_entry *e = NULL;
    int err = gdr_regcache_get(&d->cache, &req, &e);
    if (err) {
      GDR_WARN("%s: %s registration of %p (%zu bytes, %s memory) failed: %s%s", d->name,
               kind == GDR_REG_DMABUF ? "DMA-BUF" : "memory", data, size, type == NCCL_PTR_CUDA ? "CUDA" : "host",
               strerror(err), gdr_rdma_reg_hint(err));
      res = ncclSystemError;
      goto out;
    }
    GDR_TRACE(NCCL_NET | NCCL_REG, "%s: reg %p+%zu kind %d access 0x%x -> lkey 0x%x rkey 0x%x", d->name, data, size,
              kind, access, e->lkey, e->rkey);
    h->e[i] = e;
    h->lkey[i] = e->lkey;
    h->rkey[i] = e->rkey;
    h->n = i + 1;
  }
  *mhandle = h;
  h = NULL;
out:
  if (h) (void)mh_free(h);
  return res;
}

ncclResult_t gdr_rdma_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  return reg_common(comm, data, size, type, type == NCCL_PTR_CUDA ? GDR_REG_CUDA : GDR_REG_HOST, -1, 0, mhandle);
}

ncclResult_t gdr_rdma_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                    void **mhandle) {
  struct gdr_rdma_comm *c = comm;
  for (int i = 0; c && i < c->ndevs; i++)
    if (!(c->m[i].dev->ptr_support & NCCL_PTR_DMABUF)) {
      GDR_WARN("%s: DMA-BUF registration but DMA-BUF is not supported here (%s)", c->m[i].dev->name,
               c->m[i].dev->gdr_desc);
      return ncclInvalidUsage;
    }
  (void)type;
  return reg_common(c, data, size, NCCL_PTR_CUDA, GDR_REG_DMABUF, fd, offset, mhandle);
}

ncclResult_t gdr_rdma_dereg_mr(void *comm, void *mhandle) {
  struct gdr_rdma_mh *h = mhandle;
  (void)comm;
  if (h == NULL) return ncclSuccess;
  if (h->magic != GDR_RDMA_MH_MAGIC) {
    GDR_WARN("deregMr: %p is not a memory handle of the RDMA transport", mhandle);
    return ncclInternalError;
  }
  int rc = mh_free(h);
  if (rc) {
    GDR_WARN("ibv_dereg_mr failed: %s", strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------ init -- */

static void close_dev(struct gdr_rdma_dev *d) {
  if (d->ncomms) GDR_INFO(NCCL_NET, "%s: %d connection(s) still open at fini", d->name, d->ncomms);
  gdr_stats_unregister(&d->ctr);
  gdr_rdma_async_stop(d); /* never close the context under the thread that reads its events */
  int leaked = gdr_regcache_fini(&d->cache);
  if (leaked) GDR_INFO(NCCL_NET, "%s: %d registrations were still live at fini", d->name, leaked);
  if (d->pd) gdr_ibv.dealloc_pd(d->pd);
  if (d->ctx) gdr_ibv.close_device(d->ctx);
  for (int i = 0; i < d->nretired; i++) { /* the lives before a DEVICE_FATAL (gdr_rdma_dev_revive) */
    if (d->retired_pd[i]) gdr_ibv.dealloc_pd(d->retired_pd[i]);
    if (d->retired_ctx[i]) gdr_ibv.close_device(d->retired_ctx[i]);
  }
  free(d->pci_path);
  pthread_mutex_destroy(&d->lock);
  memset(d, 0, sizeof(*d));
}

/* Opens one (device, port) entry; 0 if kept. */
static int open_port(struct ibv_device *ibdev, const struct ibv_device_attr *da, int port,
                     const struct ibv_port_attr *pa, uint32_t speed_ex, struct gdr_rdma_dev *d, int *ro_warned) {
  const char *ibname = gdr_ibv.get_device_name(ibdev);
  memset(d, 0, sizeof(*d));
  if (da->max_qp_wr < GDR_RDMA_QP_SEND_WR || da->max_cqe < GDR_RDMA_MIN_CQE) {
    GDR_WARN("%s port %d: the device allows %d work requests per QP and %d completions per CQ; a connection needs "
             "%d and %d (32 messages in flight, 8 buffers each): device skipped",
             ibname, port, da->max_qp_wr, da->max_cqe, GDR_RDMA_QP_SEND_WR, GDR_RDMA_MIN_CQE);
    return -1;
  }
  snprintf(d->ibname, sizeof(d->ibname), "%s", ibname);
  if (da->phys_port_cnt > 1)
    snprintf(d->name, sizeof(d->name), "%s:%d", ibname, port);
  else
    snprintf(d->name, sizeof(d->name), "%s", ibname);
  d->ctx = gdr_ibv.open_device(ibdev);
  if (d->ctx == NULL) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: ibv_open_device failed: %s", d->name, strerror(errno));
    return -1;
  }
  d->pd = gdr_ibv.alloc_pd(d->ctx);
  if (d->pd == NULL) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: ibv_alloc_pd failed: %s", d->name, strerror(errno));
    gdr_ibv.close_device(d->ctx);
    d->ctx = NULL;
    return -1;
  }
  pthread_mutex_init(&d->lock, NULL);
  d->stop_fd = -1;
  d->port = port;
  d->link_layer = pa->link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  d->active_mtu = pa->active_mtu;
  d->lid = pa->lid;
  d->grh_required = (pa->flags & IBV_QPF_GRH_REQUIRED) != 0;
  d->guid = da->sys_image_guid;
  d->speed = lane_mbps(speed_ex ? (int)speed_ex : pa->active_speed) * width_lanes(pa->active_width);
  d->max_qp = da->max_qp;
  d->max_qp_wr = da->max_qp_wr;
  d->max_msg = pa->max_msg_sz ? pa->max_msg_sz : 1ull << 30; /* (0: the provider does not say; 1 GiB as ConnectX) */
  if (d->max_msg < GDR_RDMA_MIN_MAX_MSG) {
    GDR_WARN("%s port %d: max_msg_sz %llu bytes, below the %llu a connection needs: device skipped", ibname, port,
             (unsigned long long)d->max_msg, (unsigned long long)GDR_RDMA_MIN_MAX_MSG);
    gdr_ibv.dealloc_pd(d->pd);
    gdr_ibv.close_device(d->ctx);
    pthread_mutex_destroy(&d->lock);
    memset(d, 0, sizeof(*d));
    return -1;
  }
  snprintf(d->ibdev_path, sizeof(d->ibdev_path), "%s", ibdev->ibdev_path);
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/device", ibdev->ibdev_path);
  d->pci_path = realpath(path, NULL); /* NULL: NCCL then places the NIC on the CPU */
  if (d->pci_path == NULL)
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: no PCI path (%s: %s): NCCL will treat the NIC as far from the GPUs", d->name,
             path, strerror(errno));
  choose_gid(d, ibdev, pa);
  probe_gdr(d);
  probe_relaxed(d, ro_warned);
  gdr_regcache_init(&d->cache, &reg_ops, d, 0);
  return 0;
}

/* The TCP transport a connection falls back to (GDRNET_FALLBACK=1): its device on the handshake's interface. */
static void init_fallback(void) {
  char w[256] = "";
  gdr_rdma.tcp_ok = 0;
  gdr_rdma.tcp_dev = 0;
  if (!gdr_fallback_allowed()) return;
  if (gdr_fb_tcp_init(&gdr_rdma.if_addr, &gdr_rdma.tcp_dev, w, sizeof(w)) != 0) {
    GDR_WARN("GDRNET_FALLBACK=1 but the TCP transport cannot work here (%s): an RDMA connection that cannot be "
             "recovered fails instead of moving to TCP",
             w[0] ? w : "no usable IP interface");
    return;
  }
  gdr_rdma.tcp_ok = 1;
  GDR_INFO(NCCL_NET | NCCL_INIT, "fallback: an RDMA connection that cannot be recovered moves to TCP device %d (%s)",
           gdr_rdma.tcp_dev, w);
}

/* For GDRNET_HCA's WARNs: lists "name:port (ACTIVE|down)" and marks the include entries that name this port. */
static void note_port(const struct gdr_filter *f, const char *name, int port, int active, char *ports, size_t len,
                      size_t *off, int *entry_hit) {
  if (*off < len) {
    int w =
        snprintf(ports + *off, len - *off, "%s%s:%d (%s)", *off ? ", " : "", name, port, active ? "ACTIVE" : "down");
    if (w > 0) *off += (size_t)w;
  }
  if (f->exclude) return;
  for (int k = 0; k < f->n; k++) {
    struct gdr_filter one = *f;
    one.n = 1;
    one.e[0] = f->e[k];
    if (gdr_filter_match(&one, name, port)) entry_hit[k] = 1;
  }
}

/* GDRNET_HCA / NCCL_IB_HCA that selects nothing, or names a device that does not exist: the user must act. */
static void warn_hca(const struct gdr_filter *f, const char *spec, const char *ports, const int *entry_hit, int ndevs,
                     int filtered) {
  const char *knob = gdr_param_set_name(GDR_PARAM_HCA);
  if (ndevs == 0 && filtered > 0) {
    GDR_WARN("%s=\"%s\" selects none of the active RDMA ports; the ports here: %s. The RDMA transport has no device "
             "(GDRNET_TRANSPORT=auto uses TCP)",
             knob, spec, ports[0] ? ports : "none");
    return;
  }
  for (int k = 0; k < f->n && !f->exclude; k++) {
    if (entry_hit[k]) continue;
    /* (an entry's name keeps its ":port", as the user wrote it) */
    GDR_WARN("%s=\"%s\": \"%s\" names no RDMA port here (the ports: %s)", knob, spec, f->e[k].name,
             ports[0] ? ports : "none");
  }
}

/* The library, the knobs and the handshake's interface. 0, or -1 with why (the transport has no device). */
static int init_setup(char *why, size_t whylen) {
  char w[512];
  if (gdr_param_int(GDR_PARAM_IB_DISABLE)) {
    snprintf(why, whylen, "%s=1 turns the RDMA transport off", gdr_param_set_name(GDR_PARAM_IB_DISABLE));
    return -1;
  }
  if (gdr_ibv_load(w, sizeof(w)) != 0) {
    snprintf(why, whylen, "%s", w);
    return -1;
  }
  gdr_rdma.nqps = (int)gdr_param_int(GDR_PARAM_QPS_PER_CONN);
  if (gdr_rdma.nqps < 1) gdr_rdma.nqps = 1;
  if (gdr_rdma.nqps > GDR_RDMA_MAX_QPS) gdr_rdma.nqps = GDR_RDMA_MAX_QPS;
  gdr_rdma.split = gdr_param_int(GDR_PARAM_SPLIT_DATA) ? 1 : 0;

  /* the address our listeners bind (handshake and control channel) */
  struct gdr_if ifs[1];
  int nif = 0;
  if (gdr_if_find_configured(ifs, 1, &nif) != ncclSuccess || nif == 0) {
    snprintf(why, whylen, "no usable IP interface for the RDMA handshake (GDRNET_SOCKET_IFNAME=\"%s\")",
             gdr_param_str(GDR_PARAM_SOCKET_IFNAME));
    return -1;
  }
  gdr_rdma.if_addr = ifs[0].addr;
  snprintf(gdr_rdma.if_name, sizeof(gdr_rdma.if_name), "%s", ifs[0].name);
  return 0;
}

/* What the scan of the devices saw, for the GDRNET_HCA WARNs and the reason when no port is kept. */
struct scan {
  struct gdr_filter filter; /* GDRNET_HCA / NCCL_IB_HCA */
  const char *spec;
  int ro_warned, seen_ports, inactive, filtered;
  char ports[512]; /* every port seen */
  size_t ports_len;
  int entry_hit[GDR_FILTER_MAX]; /* include filters: did entry k name any port that exists? */
};

/* The INFO lines of a kept port. */
static void log_dev(const struct gdr_rdma_dev *d) {
  char gidstr[64];
  gdr_gid_format(d->gid.raw, gidstr, sizeof(gidstr));
  GDR_INFO(NCCL_NET | NCCL_INIT, "[%d] %s: %s, port %d, %d Mbps, MTU %d, PCI %s%s", gdr_rdma.ndevs, d->name,
           d->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", d->port, d->speed, 128 << d->active_mtu,
           d->pci_path ? d->pci_path : "(none)", d->relaxed ? ", relaxed ordering" : "");
  GDR_INFO(NCCL_NET | NCCL_INIT, "%s: %s", d->name, d->gdr_desc);
  if (d->link_layer == IBV_LINK_LAYER_ETHERNET)
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: RoCE GID index %d = %s%s", d->name, d->gid_index, gidstr,
             gdr_param_int(GDR_PARAM_GID_INDEX) >= 0 ? " (GDRNET_GID_INDEX)" : " (auto)");
  else
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: IB LID %u, GID index %d = %s", d->name, d->lid, d->gid_index, gidstr);
}

/* Port p of a device: kept (the next entry of gdr_rdma.devs) when it is active, of a known link layer and selected
 * by GDRNET_HCA; else skipped with an INFO line. */
static void scan_port(struct scan *sc, struct ibv_device *ibdev, struct ibv_context *qctx,
                      const struct ibv_device_attr *da, int p) {
  const char *ibname = gdr_ibv.get_device_name(ibdev);
  struct ibv_port_attr pa;
  uint32_t speed_ex = 0;
  sc->seen_ports++;
  if (gdr_ibv_query_port(qctx, (uint8_t)p, &pa, &speed_ex) != 0) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s:%d: ibv_query_port failed, skipped", ibname, p);
    return;
  }
  note_port(&sc->filter, ibname, p, pa.state == IBV_PORT_ACTIVE, sc->ports, sizeof(sc->ports), &sc->ports_len,
            sc->entry_hit);
  if (pa.state != IBV_PORT_ACTIVE) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s:%d: port not active (state %d), skipped", ibname, p, pa.state);
    sc->inactive++;
    return;
  }
  if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND && pa.link_layer != IBV_LINK_LAYER_ETHERNET &&
      pa.link_layer != IBV_LINK_LAYER_UNSPECIFIED) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s:%d: unknown link layer %d, skipped", ibname, p, pa.link_layer);
    return;
  }
  if (!gdr_filter_match(&sc->filter, ibname, p)) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s:%d: excluded by GDRNET_HCA/NCCL_IB_HCA=\"%s\"", ibname, p, sc->spec);
    sc->filtered++;
    return;
  }
  struct gdr_rdma_dev *d = &gdr_rdma.devs[gdr_rdma.ndevs];
  if (open_port(ibdev, da, p, &pa, speed_ex, d, &sc->ro_warned) != 0) return;
  log_dev(d);
  (void)gdr_stats_register("rdma", d->name, d->port, &d->ctr); /* full table: left out of GDRNET_STATS_FILE */
  gdr_rdma.ndevs++;
}

/* Every port of one verbs device. */
static void scan_device(struct scan *sc, struct ibv_device *ibdev) {
  const char *ibname = gdr_ibv.get_device_name(ibdev);
  struct ibv_device_attr da;
  struct ibv_context *qctx = gdr_ibv.open_device(ibdev);
  if (qctx == NULL) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: cannot open (%s), skipped", ibname, strerror(errno));
    return;
  }
  if (gdr_ibv.query_device(qctx, &da) != 0) {
    GDR_INFO(NCCL_NET | NCCL_INIT, "%s: ibv_query_device failed (%s), skipped", ibname, strerror(errno));
    gdr_ibv.close_device(qctx);
    return;
  }
  for (int p = 1; p <= da.phys_port_cnt && gdr_rdma.ndevs < GDR_RDMA_MAX_DEVS; p++) scan_port(sc, ibdev, qctx, &da, p);
  gdr_ibv.close_device(qctx);
}

/* The devices NCCL will see, in one line. */
static void summary(char *why, size_t whylen) {
  int off = snprintf(why, whylen, "%d RDMA device(s):", gdr_rdma.ndevs);
  for (int i = 0; i < gdr_rdma.ndevs && off > 0 && (size_t)off < whylen; i++)
    off += snprintf(why + off, whylen - (size_t)off, "%s %s (%s, %s)", i ? "," : "", gdr_rdma.devs[i].name,
                    gdr_rdma.devs[i].link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
                    (gdr_rdma.devs[i].ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) ? "GDR" : "no GDR");
}

ncclResult_t gdr_rdma_init(int *ndev, char *why, size_t whylen) {
  struct scan sc;
  char fwhy[256] = "";
  int nib = 0;
  *ndev = 0;
  if (why && whylen) why[0] = '\0';
  if (gdr_rdma.ndevs > 0) { /* already initialised (re-init without fini) */
    *ndev = gdr_rdma.ndevs;
    return ncclSuccess;
  }
  memset(&gdr_rdma, 0, sizeof(gdr_rdma));
  if (init_setup(why, whylen) != 0) return ncclSuccess;

  /* GDRNET_HCA / NCCL_IB_HCA: the core's filter speaks NCCL's syntax (^ exclude, = exact, dev:port) */
  memset(&sc, 0, sizeof(sc));
  sc.spec = gdr_param_str(GDR_PARAM_HCA);
  if (gdr_filter_parse(sc.spec, &sc.filter, fwhy, sizeof(fwhy)) != ncclSuccess) {
    GDR_WARN("GDRNET_HCA/NCCL_IB_HCA: %s; no RDMA device is used", fwhy);
    snprintf(why, whylen, "GDRNET_HCA/NCCL_IB_HCA is malformed: %s", fwhy);
    return ncclSuccess;
  }

  struct ibv_device **list = gdr_ibv.get_device_list(&nib);
  if (list == NULL || nib == 0) {
    int e = errno;
    snprintf(why, whylen, "no RDMA device found by %s%s%s", gdr_ibv_lib_name(), list ? "" : ": ",
             list ? ""
                  : (e == ENOSYS ? "the kernel has no RDMA support (ib_uverbs not loaded, or no RDMA NIC driver)"
                                 : strerror(e)));
    if (list) gdr_ibv.free_device_list(list);
    return ncclSuccess;
  }
  for (int i = 0; i < nib && gdr_rdma.ndevs < GDR_RDMA_MAX_DEVS; i++) scan_device(&sc, list[i]);
  gdr_ibv.free_device_list(list);
  if (sc.spec[0] != '\0') warn_hca(&sc.filter, sc.spec, sc.ports, sc.entry_hit, gdr_rdma.ndevs, sc.filtered);
  if (gdr_rdma.ndevs == 0) {
    snprintf(why, whylen, "no usable RDMA port: %d device(s), %d port(s), %d not active, %d excluded by GDRNET_HCA",
             nib, sc.seen_ports, sc.inactive, sc.filtered);
    return ncclSuccess;
  }
  *ndev = gdr_rdma.ndevs;
  init_fallback();
  summary(why, whylen);
  return ncclSuccess;
}

ncclResult_t gdr_rdma_get_properties(int dev, struct gdr_props *props) {
  if (dev < 0 || dev >= gdr_rdma.ndevs) return ncclInvalidArgument;
  struct gdr_rdma_dev *d = &gdr_rdma.devs[dev];
  memset(props, 0, sizeof(*props));
  props->name = d->name;
  props->pci_path = d->pci_path;
  props->guid = d->guid;
  props->ptr_support = d->ptr_support;
  props->reg_is_global = 1;
  props->force_flush = 0;
  props->speed = d->speed;
  props->port = d->port;
  props->latency = 0;
  int per_conn = gdr_rdma.nqps + 1;
  props->max_comms = d->max_qp / per_conn > 0 ? d->max_qp / per_conn : 1;
  props->max_recvs = GDR_RDMA_MAX_RECVS;
  props->net_device_type = NCCL_NET_DEVICE_HOST;
  props->net_device_version = 0;
  /* 64-bit sizes on the wire, WRs cut to the ports' max_msg_sz, the send queues filled as completions free them:
   * NCCL's own largest network message (docs/abi.md, v9 sizes) */
  props->max_p2p_bytes = GDR_RDMA_MAX_MSG;
  props->max_coll_bytes = GDR_RDMA_MAX_MSG;
  return ncclSuccess;
}

void gdr_rdma_quiesce(void) {
  /* async threads stop with the last comm (async.c); nothing else runs on its own */
  for (int i = 0; i < gdr_rdma.ndevs; i++) {
    struct gdr_rdma_dev *d = &gdr_rdma.devs[i];
    pthread_mutex_lock(&d->lock);
    int n = d->ncomms;
    pthread_mutex_unlock(&d->lock);
    if (n) GDR_INFO(NCCL_NET, "%s: quiesce with %d comm(s) still open", d->name, n);
  }
}

void gdr_rdma_fini(void) {
  for (int i = 0; i < gdr_rdma.ndevs; i++) close_dev(&gdr_rdma.devs[i]);
  gdr_rdma.ndevs = 0;
  if (gdr_rdma.tcp_ok) gdr_fb_tcp_fini();
  gdr_rdma.tcp_ok = 0;
}
