/* check_gdr.c - the two ways a NIC can reach GPU memory:
 *   nvidia-peermem (or the legacy nv_peer_mem): ibv_reg_mr on a cudaMalloc pointer;
 *   DMA-BUF: cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr; needs kernel >= 5.12 with dma-buf,
 *   rdma-core >= 34, the NVIDIA open kernel modules (r515+) and CUDA saying CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED.
 * GPUDirect RDMA works when either does. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "doctor.h"

#define CU_ATTR_GPU_DIRECT_RDMA_SUPPORTED 116
#define CU_ATTR_DMA_BUF_SUPPORTED 124

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_attr_fn)(int *, int, int);
typedef int (*cu_ver_fn)(int *);

static void probe_cuda(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  c->cuda_dmabuf = DR_UNKNOWN;
  if (!c->probe_cuda) {
    dr_add(r, "cuda", DR_INFO, "CUDA driver not probed (%s)",
           c->fabricated ? "--sysfs-root; --probe-libs to force" : "--no-cuda");
    return;
  }
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    struct dr_finding *f = dr_add(r, "cuda", DR_INFO,
                                  "no CUDA driver (libcuda.so.1 not loadable): "
                                  "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED unknown");
    dr_evidence(r, f, "dlopen(\"libcuda.so.1\"): %s", e ? e : "?");
    return;
  }
  c->cuda_loaded = true;
  cu_init_fn cu_init = (cu_init_fn)dlsym(h, "cuInit");
  cu_count_fn cu_count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
  cu_get_fn cu_get = (cu_get_fn)dlsym(h, "cuDeviceGet");
  cu_attr_fn cu_attr = (cu_attr_fn)dlsym(h, "cuDeviceGetAttribute");
  cu_ver_fn cu_ver = (cu_ver_fn)dlsym(h, "cuDriverGetVersion");
  if (!cu_init || !cu_count || !cu_get || !cu_attr) {
    struct dr_finding *f = dr_add(r, "cuda", DR_WARN, "libcuda.so.1 lacks the driver API entry points");
    dr_evidence(r, f, "cuInit/cuDeviceGetCount/cuDeviceGet/cuDeviceGetAttribute not all found");
    return;
  }
  int ver = 0, n = 0, rc = cu_init(0);
  if (cu_ver) cu_ver(&ver);
  if (rc != 0 || cu_count(&n) != 0) {
    struct dr_finding *f = dr_add(r, "cuda", DR_WARN, "CUDA driver present but cuInit failed (error %d)", rc);
    dr_evidence(r, f, "driver API version %d.%d", ver / 1000, ver % 1000 / 10);
    dr_fix(r, f, "nvidia-smi should list the GPUs; in a container use the NVIDIA container toolkit");
    return;
  }
  int yes = 0, gdr_yes = 0;
  struct dr_finding *f =
      dr_add(r, "cuda", DR_OK, "CUDA driver %d.%d, %d device%s", ver / 1000, ver % 1000 / 10, n, n == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    int dev = 0, a = -1, g = -1;
    if (cu_get(&dev, i) != 0) continue;
    if (cu_attr(&a, CU_ATTR_DMA_BUF_SUPPORTED, dev) != 0) a = -1;
    if (cu_attr(&g, CU_ATTR_GPU_DIRECT_RDMA_SUPPORTED, dev) != 0) g = -1;
    yes += a == 1;
    gdr_yes += g == 1;
    dr_evidence(r, f,
                "device %d: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=%d, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED=%d",
                i, a, g);
  }
  c->cuda_dmabuf = n > 0 && yes == n ? DR_YES : n > 0 ? DR_NO : DR_UNKNOWN;
  if (n > 0 && gdr_yes < n) {
    f->status = DR_WARN;
    dr_fix(r, f,
           "a GPU without GPUDirect RDMA support (consumer GPUs, some vGPU/MIG setups) cannot be reached by "
           "the NIC: use a data-center GPU or a vGPU profile that allows P2P");
  }
}

/* "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ..." */
static void driver_version(const char *text, char *out, size_t len) {
  out[0] = '\0';
  for (const char *p = text; p && *p; p++) {
    if ((p == text || p[-1] == ' ') && p[0] >= '1' && p[0] <= '9') {
      const char *e = p;
      while ((*e >= '0' && *e <= '9') || *e == '.') e++;
      if ((*e == ' ' || *e == '\0' || *e == '\n') && strchr(p, '.') && strchr(p, '.') < e && e - p < 24) {
        snprintf(out, len, "%.*s", (int)(e - p), p);
        return;
      }
    }
  }
}

static void kernel_release(struct dr_ctx *c, char *out, size_t len) {
  char *s = dr_read_rel(c, "/proc/sys/kernel/osrelease");
  if (s) {
    snprintf(out, len, "%s", s);
    free(s);
    return;
  }
  struct utsname u;
  if (!c->fabricated && uname(&u) == 0)
    snprintf(out, len, "%s", u.release);
  else
    out[0] = '\0';
}

/* CONFIG_DMA_SHARED_BUFFER: /sys/kernel/dmabuf, else /boot/config-<release>, else /proc/kallsyms. */
static enum dr_tri kernel_dmabuf(struct dr_ctx *c, const char *rel, char *how, size_t hl) {
  char p[4096];
  if (dr_path(c, p, sizeof p, "/sys/kernel/dmabuf") == 0 && dr_exists(p)) {
    snprintf(how, hl, "/sys/kernel/dmabuf exists");
    return DR_YES;
  }
  if (rel[0] && dr_path(c, p, sizeof p, "/boot/config-%s", rel) == 0) {
    char *cfg = dr_read_text(p, 1 << 20);
    if (cfg) {
      enum dr_tri t = strstr(cfg, "\nCONFIG_DMA_SHARED_BUFFER=y")          ? DR_YES
                      : strstr(cfg, "CONFIG_DMA_SHARED_BUFFER is not set") ? DR_NO
                                                                           : DR_UNKNOWN;
      free(cfg);
      if (t != DR_UNKNOWN) {
        snprintf(how, hl, "/boot/config-%s: CONFIG_DMA_SHARED_BUFFER %s", rel, t == DR_YES ? "=y" : "is not set");
        return t;
      }
    }
  }
  if (dr_path(c, p, sizeof p, "/proc/kallsyms") == 0) {
    FILE *fp = fopen(p, "re");
    if (fp) {
      char line[512];
      bool found = false;
      while (!found && fgets(line, sizeof line, fp)) {
        char *s = strstr(line, " dma_buf_export");
        found = s && (s[15] == '\n' || s[15] == '\t' || s[15] == '\0');
      }
      fclose(fp);
      if (found) {
        snprintf(how, hl, "/proc/kallsyms has dma_buf_export");
        return DR_YES;
      }
    }
  }
  bool gz = dr_path(c, p, sizeof p, "/proc/config.gz") == 0 && dr_exists(p);
  snprintf(how, hl, "no /sys/kernel/dmabuf, no readable /boot/config-%s, no dma_buf_export in /proc/kallsyms%s",
           rel[0] ? rel : "?", gz ? " (/proc/config.gz exists: zcat /proc/config.gz | grep DMA_SHARED_BUFFER)" : "");
  return DR_UNKNOWN;
}

static bool kernel_at_least(const char *rel, int maj, int min) {
  int a = 0, b = 0;
  if (sscanf(rel, "%d.%d", &a, &b) != 2) return false;
  return a > maj || (a == maj && b >= min);
}

void dr_check_gdr(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  char p[4096];

  /* NVIDIA kernel driver */
  char ver[32] = "";
  bool open_mod = false, loaded = false;
  char *modver = dr_read_rel(c, "/sys/module/nvidia/version");
  char *procver = dr_read_rel(c, "/proc/driver/nvidia/version");
  loaded = modver != NULL || procver != NULL || (dr_path(c, p, sizeof p, "/sys/module/nvidia") == 0 && dr_exists(p));
  if (modver) snprintf(ver, sizeof ver, "%s", modver);
  if (procver) {
    if (!ver[0]) driver_version(procver, ver, sizeof ver);
    open_mod = strstr(procver, "Open Kernel Module") != NULL;
  }
  int major = ver[0] ? atoi(ver) : 0;
  struct dr_finding *f;
  if (!loaded) {
    f = dr_add(r, "nvidia-driver", c->ngpus ? DR_FAIL : DR_INFO, "NVIDIA kernel driver not loaded%s",
               c->ngpus ? "" : " (no NVIDIA GPU either)");
    dr_evidence(r, f, "no /sys/module/nvidia, no /proc/driver/nvidia/version");
    if (c->ngpus) dr_fix(r, f, "install and load the NVIDIA driver (modprobe nvidia); nvidia-smi must work");
  } else {
    f = dr_add(r, "nvidia-driver", DR_OK, "NVIDIA driver %s (%s kernel modules)", ver[0] ? ver : "version unknown",
               procver ? (open_mod ? "open" : "proprietary") : "flavour unknown");
    if (modver) dr_evidence(r, f, "/sys/module/nvidia/version: %s", modver);
    if (procver) {
      char first[256];
      snprintf(first, sizeof first, "%s", procver);
      char *nl = strchr(first, '\n');
      if (nl) *nl = '\0';
      dr_evidence(r, f, "/proc/driver/nvidia/version: %s", first);
    }
  }
  bool flavour_known = procver != NULL;
  free(modver);
  free(procver);

  /* nvidia-peermem */
  char how[512] = "";
  const char *pm_src = NULL;
  char *pmver = NULL;
  /* the files the plugin (and NCCL) test for */
  if ((pmver = dr_read_rel(c, "/sys/module/nvidia_peermem/version")) != NULL) {
    pm_src = "/sys/module/nvidia_peermem/version";
  } else if ((pmver = dr_read_rel(c, "/sys/kernel/mm/memory_peers/nv_mem/version")) != NULL) {
    pm_src = "/sys/kernel/mm/memory_peers/nv_mem/version (legacy nv_peer_mem)";
  } else if ((pmver = dr_read_rel(c, "/sys/module/nv_peer_mem/version")) != NULL) {
    pm_src = "/sys/module/nv_peer_mem/version (legacy)";
  }
  bool pm_dir_only = pm_src == NULL && dr_path(c, p, sizeof p, "/sys/module/nvidia_peermem") == 0 && dr_exists(p);
  c->peermem = pm_src ? DR_YES : DR_NO;

  /* DMA-BUF */
  char rel[128];
  kernel_release(c, rel, sizeof rel);
  enum dr_tri kdb = kernel_dmabuf(c, rel, how, sizeof how);
  probe_cuda(c);
  enum dr_tri kver = rel[0] ? (kernel_at_least(rel, 5, 12) ? DR_YES : DR_NO) : DR_UNKNOWN;

  /* driver side of DMA-BUF: open kernel modules, r515 or newer */
  enum dr_tri drv;
  const char *drv_why;
  if (!loaded) {
    drv = DR_NO;
    drv_why = "NVIDIA driver not loaded";
  } else if (major > 0 && major < 515) {
    drv = DR_NO;
    drv_why = "driver older than r515";
  } else if (flavour_known && !open_mod) {
    drv = DR_NO;
    drv_why = "proprietary kernel modules (DMA-BUF export of GPU memory needs the open modules)";
  } else if (flavour_known && major >= 515) {
    drv = DR_YES;
    drv_why = "open kernel modules, r515+";
  } else {
    drv = DR_UNKNOWN;
    drv_why = "module flavour or version unknown";
  }
  enum dr_tri parts[] = {kdb, kver, drv, c->cuda_dmabuf, c->verbs_dmabuf};
  bool any_no = false;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) any_no |= parts[i] == DR_NO;
  c->dmabuf = any_no ? DR_NO : ((c->cuda_dmabuf == DR_YES || drv == DR_YES) && kver == DR_YES) ? DR_YES : DR_UNKNOWN;
  static const char *tri[] = {"no", "yes", "unknown"};

  /* report peermem */
  if (pm_src) {
    f = dr_add(r, "peermem", DR_OK, "nvidia-peermem loaded%s%s: ibv_reg_mr works on GPU memory",
               pmver ? " version " : "", pmver ? pmver : "");
    dr_evidence(r, f, "%s", pm_src);
  } else {
    f = dr_add(r, "peermem", c->dmabuf == DR_YES || !loaded ? DR_INFO : DR_WARN, "nvidia-peermem not loaded%s",
               c->dmabuf == DR_YES ? " (not needed: the DMA-BUF path is available)"
               : !loaded           ? " (nor the NVIDIA driver it belongs to)"
                                   : "");
    dr_evidence(r, f,
                "no /sys/module/nvidia_peermem/version, /sys/kernel/mm/memory_peers/nv_mem/version or "
                "/sys/module/nv_peer_mem/version (the files the plugin and NCCL test)");
    if (pm_dir_only)
      dr_evidence(r, f, "/sys/module/nvidia_peermem exists but has no version file: the plugin will not detect it");
    if (c->dmabuf != DR_YES)
      dr_fix(r, f,
             "modprobe nvidia-peermem (ships with the NVIDIA driver; it must be built against the running "
             "ib_core: after installing MLNX_OFED/DOCA-OFED, reinstall the driver); persist it in "
             "/etc/modules-load.d/; GPU Operator: driver.rdma.enabled=true");
  }
  free(pmver);

  /* report DMA-BUF */
  f = dr_add(r, "dmabuf",
             c->dmabuf == DR_YES  ? DR_OK
             : c->dmabuf == DR_NO ? (pm_src || !loaded ? DR_INFO : DR_WARN)
                                  : DR_INFO,
             "DMA-BUF path for GPU memory: %s",
             c->dmabuf == DR_YES  ? "usable"
             : c->dmabuf == DR_NO ? "not usable"
                                  : "cannot confirm");
  dr_evidence(r, f, "kernel dma-buf (CONFIG_DMA_SHARED_BUFFER): %s (%s)", tri[kdb], how);
  dr_evidence(r, f, "kernel >= 5.12 (RDMA DMA-BUF MRs): %s (release %s)", tri[kver], rel[0] ? rel : "unknown");
  dr_evidence(r, f, "NVIDIA driver: %s (%s)", tri[drv], drv_why);
  dr_evidence(r, f, "CUDA CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: %s%s", tri[c->cuda_dmabuf],
              c->cuda_loaded ? "" : " (CUDA driver not probed or absent)");
  dr_evidence(r, f, "verbs ibv_reg_dmabuf_mr probe: %s%s", tri[c->verbs_dmabuf],
              c->verbs_devices > 0 ? "" : " (needs rdma-core and an RDMA device)");
  if (c->dmabuf == DR_NO && !pm_src) {
    if (drv == DR_NO && loaded)
      dr_fix(r, f,
             "install the NVIDIA open kernel modules, r515 or newer (e.g. nvidia-driver-<ver>-open; "
             "GPU Operator: driver.useOpenKernelModules=true)");
    if (kver == DR_NO) dr_fix(r, f, "run a kernel >= 5.12 (DMA-BUF memory regions in ib_uverbs)");
    if (kdb == DR_NO) dr_fix(r, f, "build the kernel with CONFIG_DMA_SHARED_BUFFER=y");
    if (c->verbs_dmabuf == DR_NO)
      dr_fix(r, f,
             "rdma-core >= 34 and a provider/driver that supports DMA-BUF MRs "
             "(mlx5 does)");
    if (!loaded) dr_fix(r, f, "load the NVIDIA driver first");
  }

  /* verdict on the GPU memory path */
  if (pm_src || c->dmabuf == DR_YES) {
    f = dr_add(r, "gdr", DR_OK, "GPU memory can be registered with an RDMA NIC via %s%s%s",
               pm_src ? "nvidia-peermem" : "", pm_src && c->dmabuf == DR_YES ? " and " : "",
               c->dmabuf == DR_YES ? "DMA-BUF" : "");
  } else if (c->dmabuf == DR_UNKNOWN) {
    f = dr_add(r, "gdr", DR_WARN,
               "cannot confirm a path from the NIC to GPU memory: no nvidia-peermem, DMA-BUF unconfirmed");
    dr_fix(r, f,
           "load nvidia-peermem, or run the doctor where libcuda.so.1 and the RDMA device are visible to "
           "confirm DMA-BUF");
  } else {
    f = dr_add(r, "gdr", DR_FAIL,
               "no path from the NIC to GPU memory: nvidia-peermem not loaded and DMA-BUF not "
               "usable (NCCL logs \"GPU Direct RDMA Disabled\")");
    dr_fix(r, f, "either load nvidia-peermem or meet the DMA-BUF requirements (see the peermem and dmabuf findings)");
  }
  dr_evidence(r, f, "GPUDirect RDMA needs either: nvidia-peermem (%s) or DMA-BUF (%s)",
              pm_src ? "loaded" : "not loaded", tri[c->dmabuf]);
}
