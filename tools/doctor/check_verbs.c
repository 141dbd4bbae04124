/* check_verbs.c - rdma-core: is libibverbs loadable, which version, what it sees.
 * dlopen only (never linked), like the plugin; symbols at rdma-core's version nodes. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"

typedef void **(*get_list_fn)(int *);
typedef void (*free_list_fn)(void **);
typedef const char *(*get_name_fn)(void *);
typedef void *(*open_dev_fn)(void *);
typedef int (*close_dev_fn)(void *);
typedef void *(*alloc_pd_fn)(void *);
typedef int (*dealloc_pd_fn)(void *);
typedef void *(*reg_dmabuf_fn)(void *, uint64_t, size_t, uint64_t, int, int);
typedef int (*dereg_fn)(void *);

static void *vsym(void *h, const char *name, const char *ver) {
  void *p = dlvsym(h, name, ver);
  return p ? p : dlsym(h, name);
}

/* "libibverbs.so.1.14.44.0" -> "44.0" (rdma-core's release); "" if the name carries none. */
static void version_from_name(const char *path, char *out, size_t len) {
  out[0] = '\0';
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  const char *p = strstr(b, ".so.");
  if (p == NULL) return;
  p += 4;
  /* skip soname major and ABI minor */
  for (int skip = 0; skip < 2; skip++) {
    p = strchr(p, '.');
    if (p == NULL) return;
    p++;
  }
  snprintf(out, len, "%s", p);
}

void dr_check_verbs_lib(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  c->verbs_devices = -1;
  c->verbs_dmabuf = DR_UNKNOWN;
  if (!c->probe_verbs) {
    dr_add(r, "rdma-core", DR_INFO, "not probed (%s)",
           c->fabricated ? "--sysfs-root: the live host's libraries are not examined; add --probe-libs to load them "
                           "anyway"
                         : "--no-verbs");
    return;
  }
  const char *env = getenv("GDRNET_IBVERBS_LIB");
  const char *name = (env && *env) ? env : "libibverbs.so.1";
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *err = dlerror();
    struct dr_finding *f = dr_add(r, "rdma-core", DR_FAIL, "rdma-core not usable: cannot load %s", name);
    dr_evidence(r, f, "dlopen(\"%s\"): %s", name, err ? err : "unknown error");
    if (env && *env) dr_evidence(r, f, "GDRNET_IBVERBS_LIB=%s", env);
    dr_fix(r, f,
           "install rdma-core's verbs library and providers: apt-get install libibverbs1 ibverbs-providers "
           "(Debian/Ubuntu) or dnf install rdma-core libibverbs (RHEL); in a container image install them too");
    if (env && *env) dr_fix(r, f, "or unset GDRNET_IBVERBS_LIB / point it at an existing libibverbs.so.1");
    return;
  }
  c->verbs_loaded = true;
  get_list_fn get_list = (get_list_fn)vsym(h, "ibv_get_device_list", "IBVERBS_1.1");
  free_list_fn free_list = (free_list_fn)vsym(h, "ibv_free_device_list", "IBVERBS_1.1");
  get_name_fn get_name = (get_name_fn)vsym(h, "ibv_get_device_name", "IBVERBS_1.1");
  bool versioned = dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1") != NULL;

  char file[PATH_MAX] = "", ver[64] = "";
  Dl_info info;
  if (get_list && dladdr((void *)get_list, &info) && info.dli_fname) {
    char *rp = realpath(info.dli_fname, NULL);
    snprintf(file, sizeof file, "%s", rp ? rp : info.dli_fname);
    free(rp);
    version_from_name(file, ver, sizeof ver);
  }
  if (get_list == NULL || free_list == NULL || get_name == NULL) {
    struct dr_finding *f =
        dr_add(r, "rdma-core", DR_FAIL, "%s loaded but it lacks ibv_get_device_list/ibv_get_device_name", name);
    dr_evidence(r, f, "file: %s", file[0] ? file : "(unknown)");
    dr_fix(r, f, "install a real rdma-core libibverbs.so.1 (rdma-core >= 34 for DMA-BUF)");
    dlclose(h);
    return;
  }
  int n = 0;
  errno = 0;
  void **list = get_list(&n);
  int err = errno;
  struct dr_finding *f =
      dr_add(r, "rdma-core", DR_OK, "rdma-core %s (%s loaded)", ver[0] ? ver : "version unknown", name);
  dr_evidence(r, f, "dlopen(\"%s\") -> %s", name, file[0] ? file : "(path unknown)");
  if (env && *env) dr_evidence(r, f, "GDRNET_IBVERBS_LIB=%s", env);
  if (!ver[0]) dr_evidence(r, f, "the file name carries no rdma-core release (libibverbs.so.1.<abi>.<release>)");
  if (!versioned) dr_evidence(r, f, "no IBVERBS_1.1 symbol versions: resolved unversioned symbols");
  if (list == NULL) {
    dr_evidence(r, f, "ibv_get_device_list() failed: %s%s", strerror(err ? err : EIO),
                err == ENOSYS ? " (the kernel has no RDMA support loaded: no ib_uverbs / CONFIG_INFINIBAND)" : "");
    c->verbs_devices = 0;
  } else {
    c->verbs_devices = n;
    char names[1024] = "";
    size_t used = 0;
    for (int i = 0; i < n && list[i]; i++) {
      const char *dn = get_name(list[i]);
      int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", dn ? dn : "?");
      if (w < 0 || (size_t)w >= sizeof names - used) break;
      used += (size_t)w;
    }
    dr_evidence(r, f, "ibv_get_device_list(): %d device%s%s%s", n, n == 1 ? "" : "s", n ? ": " : "", names);
    if (n == 0 && err)
      dr_evidence(r, f, "errno %d (%s)%s", err, strerror(err),
                  err == ENOSYS ? ": the kernel has no RDMA support (CONFIG_INFINIBAND)" : "");

    /* The DMA-BUF probe NCCL uses: ibv_reg_dmabuf_mr(fd=-1) fails with EBADF when the kernel and provider
     * support DMA-BUF MRs, with EOPNOTSUPP/EPROTONOSUPPORT when they do not. */
    if (n > 0) {
      open_dev_fn open_dev = (open_dev_fn)vsym(h, "ibv_open_device", "IBVERBS_1.1");
      close_dev_fn close_dev = (close_dev_fn)vsym(h, "ibv_close_device", "IBVERBS_1.1");
      alloc_pd_fn alloc_pd = (alloc_pd_fn)vsym(h, "ibv_alloc_pd", "IBVERBS_1.1");
      dealloc_pd_fn dealloc_pd = (dealloc_pd_fn)vsym(h, "ibv_dealloc_pd", "IBVERBS_1.1");
      reg_dmabuf_fn reg_dmabuf = (reg_dmabuf_fn)vsym(h, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
      dereg_fn dereg = (dereg_fn)vsym(h, "ibv_dereg_mr", "IBVERBS_1.1");
      if (reg_dmabuf == NULL) {
        c->verbs_dmabuf = DR_NO;
        dr_evidence(r, f, "ibv_reg_dmabuf_mr missing (rdma-core < 34): no DMA-BUF registration");
      } else if (open_dev && close_dev && alloc_pd && dealloc_pd) {
        void *ctx = open_dev(list[0]);
        void *pd = ctx ? alloc_pd(ctx) : NULL;
        if (pd) {
          errno = 0;
          void *mr = reg_dmabuf(pd, 0, 0, 0, -1, 0);
          int e = errno;
          if (mr && dereg) dereg(mr);
          c->verbs_dmabuf = (e == EOPNOTSUPP || e == EPROTONOSUPPORT) ? DR_NO : DR_YES;
          dr_evidence(r, f, "ibv_reg_dmabuf_mr(fd=-1) on %s: %s -> DMA-BUF MRs %ssupported", get_name(list[0]),
                      strerror(e), c->verbs_dmabuf == DR_YES ? "" : "not ");
          dealloc_pd(pd);
        } else {
          dr_evidence(r, f, "could not open %s to probe DMA-BUF: %s", get_name(list[0]), strerror(errno));
        }
        if (ctx) close_dev(ctx);
      }
    }
    free_list(list);
  }
  /* keep the library loaded: providers may have registered atexit handlers */
}
