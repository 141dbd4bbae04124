/* Registration cache: one per device (regIsGlobal = 1), shared by every comm of that device.
 *
 * Entries are page-aligned [base, base+len) ranges with an access mask and a memory kind, each
 * holding one memory registration and a reference count.  A request is served by an existing
 * entry that contains the whole (page-aligned) range, has the same kind and at least the access
 * asked for; otherwise a new registration is made (entries may overlap).  An entry released with a
 * lost device (gdr_regcache_release_all) never serves a request again: its keys belong to the dead
 * context, and a request after the device came back registers anew.  The last put
 * deregisters.  All operations are serialised by the cache's mutex (registrations included, so
 * two threads asking for the same range never register it twice).
 *
 * The cache knows nothing of verbs: registration and deregistration are callbacks, which is also
 * how the unit tests drive it. */
#ifndef GDRNET_RDMA_REGCACHE_H
#define GDRNET_RDMA_REGCACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gdr_reg_kind {
  GDR_REG_HOST = 0,
  GDR_REG_CUDA = 1,   /* device memory registered through nvidia-peermem (plain reg_mr) */
  GDR_REG_DMABUF = 2, /* device memory registered through a DMA-BUF fd */
};

struct gdr_reg_req {
  uintptr_t addr;
  size_t len;
  int access;    /* IBV_ACCESS_* bits (opaque to the cache: compared as a superset) */
  int kind;      /* enum gdr_reg_kind */
  int dmabuf_fd; /* GDR_REG_DMABUF only */
  uint64_t dmabuf_offset;
};

struct gdr_reg_entry {
  struct gdr_reg_entry *next;
  struct gdr_regcache *cache;
  uintptr_t base; /* page-aligned (DMA-BUF: as given, the fd covers exactly the range) */
  size_t len;
  int access;
  int kind;
  int refs;
  void *mr; /* what the reg callback returned (struct ibv_mr *) */
  uint32_t lkey, rkey;
};

/* reg: register [base, base+len) for `req` (base/len already aligned); return the registration or
 * NULL with *err set (an errno).  dereg: undo it, return 0 or an errno. */
struct gdr_regcache_ops {
  void *(*reg)(void *ctx, uintptr_t base, size_t len, const struct gdr_reg_req *req, uint32_t *lkey, uint32_t *rkey,
               int *err);
  int (*dereg)(void *ctx, void *mr);
};

struct gdr_regcache {
  pthread_mutex_t lock;
  struct gdr_reg_entry *head;
  struct gdr_regcache_ops ops;
  void *ctx;
  size_t page;
  int nentries; /* live entries (for tests and logs) */
  int released; /* the device was lost: the NIC registrations are gone, the entries stay for NCCL's deregMr */
  uint64_t hits, misses;
};

/* page: 0 = the system page size. */
void gdr_regcache_init(struct gdr_regcache *c, const struct gdr_regcache_ops *ops, void *ctx, size_t page);
/* The device is lost: every entry's NIC registration is released now (nothing may keep GPU memory pinned for a
 * dead NIC), the entries stay until NCCL deregisters them. Returns how many were released. */
int gdr_regcache_release_all(struct gdr_regcache *c);
/* Deregisters whatever is left (leaked by the user) and returns how many entries that was. */
int gdr_regcache_fini(struct gdr_regcache *c);

/* Returns 0 and a referenced entry (never a released one), or an errno from the reg callback (EINVAL on bad
 * args). */
int gdr_regcache_get(struct gdr_regcache *c, const struct gdr_reg_req *req, struct gdr_reg_entry **out);
/* Drops one reference; the last one deregisters. Returns 0 or the dereg callback's errno. */
int gdr_regcache_put(struct gdr_reg_entry *e);

/* Page-aligned cover of [addr, addr+len): *base <= addr, *base + *alen >= addr + len. */
void gdr_regcache_align(uintptr_t addr, size_t len, size_t page, uintptr_t *base, size_t *alen);

#ifdef __cplusplus
}
#endif

#endif
