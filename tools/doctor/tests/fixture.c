/* fixture.c - see fixture.h */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fx_init(struct fx *f) {
  const char *t = getenv("TMPDIR");
  int n = snprintf(f->root, sizeof f->root, "%s/gdrnet-doctor-fx-XXXXXX", t && *t ? t : "/tmp");
  if (n < 0 || (size_t)n >= sizeof f->root) return -1;
  return mkdtemp(f->root) ? 0 : -1;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP) return rmdir(p) == 0 ? 0 : -1;
  return unlink(p) == 0 ? 0 : -1;
}

void fx_cleanup(struct fx *f) {
  if (f->root[0]) nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  f->root[0] = '\0';
}

static int full(struct fx *f, const char *rel, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%s", f->root, rel[0] == '/' ? rel + 1 : rel);
  return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

static int mkdir_p(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int r = mkdir(path, 0755);
    *p = '/';
    if (r != 0 && errno != EEXIST) return -1;
  }
  if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

static int mkparent(const char *path) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", path);
  char *s = strrchr(tmp, '/');
  if (s == NULL || s == tmp) return 0;
  *s = '\0';
  return mkdir_p(tmp);
}

int fx_mkdir(struct fx *f, const char *rel) {
  char p[1024];
  if (full(f, rel, p, sizeof p) < 0) return -1;
  return mkdir_p(p);
}

int fx_write_bin(struct fx *f, const char *rel, const void *data, size_t len) {
  char p[1024];
  if (full(f, rel, p, sizeof p) < 0 || mkparent(p) < 0) return -1;
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  const char *b = data;
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, b + done, len - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      close(fd);
      return -1;
    }
    done += (size_t)w;
  }
  return close(fd);
}

int fx_write(struct fx *f, const char *rel, const char *fmt, ...) {
  char *s = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0) return -1;
  int r = fx_write_bin(f, rel, s, (size_t)n);
  free(s);
  return r;
}

int fx_symlink(struct fx *f, const char *rel_link, const char *target) {
  char p[1024];
  if (full(f, rel_link, p, sizeof p) < 0 || mkparent(p) < 0) return -1;
  unlink(p);
  return symlink(target, p);
}

int fx_chmod(struct fx *f, const char *rel, unsigned mode) {
  char p[1024];
  if (full(f, rel, p, sizeof p) < 0) return -1;
  return chmod(p, mode);
}

int fx_unlink(struct fx *f, const char *rel) {
  char p[1024];
  if (full(f, rel, p, sizeof p) < 0) return -1;
  return unlink(p);
}

static void w16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void w32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void fx_cfg(uint8_t cfg[4096], uint16_t vendor, bool bridge, int devctl, int acs) {
  memset(cfg, 0, 4096);
  w16(cfg + 0x00, vendor);
  w16(cfg + 0x02, 0x1234);
  w16(cfg + 0x06, 0x0010); /* capabilities list */
  cfg[0x0e] = bridge ? 0x01 : 0x00;
  cfg[0x34] = 0x40;
  cfg[0x40] = 0x01; /* power management */
  cfg[0x41] = devctl >= 0 ? 0x60 : 0x00;
  if (devctl >= 0) {
    cfg[0x60] = 0x10; /* PCI Express */
    cfg[0x61] = 0x00;
    w16(cfg + 0x68, (uint16_t)devctl);
  }
  /* AER at 0x100, then ACS at 0x148 */
  w32(cfg + 0x100, 0x0001u | (1u << 16) | ((acs >= 0 ? 0x148u : 0u) << 20));
  if (acs >= 0) {
    w32(cfg + 0x148, 0x000du | (1u << 16));
    w16(cfg + 0x14c, 0x005f); /* capabilities */
    w16(cfg + 0x14e, (uint16_t)acs);
  }
}

int fx_pci(struct fx *f, const char *path, uint16_t vendor, uint32_t cls, int numa, const uint8_t *cfg, size_t cfglen) {
  char rel[512], link[512], target[512];
  const char *bdf = strrchr(path, '/');
  bdf = bdf ? bdf + 1 : path;
  snprintf(rel, sizeof rel, "sys/devices/%s", path);
  if (fx_mkdir(f, rel) < 0) return -1;
  char p[600];
  snprintf(p, sizeof p, "%s/vendor", rel);
  if (fx_write(f, p, "0x%04x\n", vendor) < 0) return -1;
  snprintf(p, sizeof p, "%s/device", rel);
  if (fx_write(f, p, "0x2335\n") < 0) return -1;
  snprintf(p, sizeof p, "%s/class", rel);
  if (fx_write(f, p, "0x%06x\n", cls) < 0) return -1;
  snprintf(p, sizeof p, "%s/numa_node", rel);
  if (fx_write(f, p, "%d\n", numa) < 0) return -1;
  if (cfg) {
    snprintf(p, sizeof p, "%s/config", rel);
    if (fx_write_bin(f, p, cfg, cfglen) < 0) return -1;
  }
  snprintf(link, sizeof link, "sys/bus/pci/devices/%s", bdf);
  snprintf(target, sizeof target, "../../../devices/%s", path);
  return fx_symlink(f, link, target);
}

int fx_bridge(struct fx *f, const char *path, int numa, int acs) {
  static uint8_t cfg[4096];
  fx_cfg(cfg, 0x10b5, true, 0x0000, acs);
  return fx_pci(f, path, 0x10b5, 0x060400, numa, cfg, sizeof cfg);
}

int fx_ibdev(struct fx *f, const char *name, const char *pcipath) {
  char rel[512], link[512], target[512];
  snprintf(rel, sizeof rel, "sys/devices/%s/infiniband/%s", pcipath, name);
  if (fx_mkdir(f, rel) < 0) return -1;
  char p[600];
  snprintf(p, sizeof p, "%s/device", rel);
  if (fx_symlink(f, p, "../..") < 0) return -1;
  snprintf(link, sizeof link, "sys/class/infiniband/%s", name);
  snprintf(target, sizeof target, "../../devices/%s/infiniband/%s", pcipath, name);
  return fx_symlink(f, link, target);
}

int fx_port(struct fx *f, const char *ibname, int port, const char *state, const char *phys, const char *ll,
            const char *rate) {
  char p[512];
  snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/state", ibname, port);
  if (fx_write(f, p, "%s\n", state) < 0) return -1;
  snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/phys_state", ibname, port);
  if (fx_write(f, p, "%s\n", phys) < 0) return -1;
  snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/link_layer", ibname, port);
  if (fx_write(f, p, "%s\n", ll) < 0) return -1;
  snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/rate", ibname, port);
  if (fx_write(f, p, "%s\n", rate) < 0) return -1;
  snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/lid", ibname, port);
  if (fx_write(f, p, "0x0\n") < 0) return -1;
  snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/gids", ibname, port);
  return fx_mkdir(f, p);
}

int fx_gid(struct fx *f, const char *ibname, int port, int idx, const char *gid, const char *type, const char *ndev) {
  char p[512];
  snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/gids/%d", ibname, port, idx);
  if (fx_write(f, p, "%s\n", gid) < 0) return -1;
  if (type) {
    snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", ibname, port, idx);
    if (fx_write(f, p, "%s\n", type) < 0) return -1;
  }
  if (ndev) {
    snprintf(p, sizeof p, "sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", ibname, port, idx);
    if (fx_write(f, p, "%s\n", ndev) < 0) return -1;
  }
  return 0;
}

int fx_status(struct fx *f, unsigned uid, unsigned gid, unsigned long long capeff) {
  return fx_write(f, "proc/self/status",
                  "Name:\tgdrnet-doctor\nUid:\t%u\t%u\t%u\t%u\nGid:\t%u\t%u\t%u\t%u\nGroups:\t%u \n"
                  "CapInh:\t0000000000000000\nCapPrm:\t%016llx\nCapEff:\t%016llx\n",
                  uid, uid, uid, uid, gid, gid, gid, gid, gid, capeff, capeff);
}

int fx_memlock(struct fx *f, const char *soft, const char *hard) {
  return fx_write(f, "proc/self/limits",
                  "Limit                     Soft Limit           Hard Limit           Units     \n"
                  "Max open files            1024                 1048576              files     \n"
                  "Max locked memory         %-20s %-20s bytes     \n"
                  "Max address space         unlimited            unlimited            bytes     \n",
                  soft, hard);
}

#define GPU_PATH "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"
#define NIC_PATH "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"

int fx_healthy_host(struct fx *f) {
  static uint8_t cfg[4096];
  int r = 0;
  r |= fx_bridge(f, "pci0000:00/0000:00:01.0", 0, 0x0000);
  r |= fx_bridge(f, "pci0000:00/0000:00:01.0/0000:01:00.0", 0, -1);
  r |= fx_bridge(f, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", 0, 0x0000);
  r |= fx_bridge(f, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", 0, 0x0000);
  fx_cfg(cfg, 0x10de, false, 0x2810, -1);
  r |= fx_pci(f, GPU_PATH, 0x10de, 0x030200, 0, cfg, sizeof cfg);
  fx_cfg(cfg, 0x15b3, false, 0x2810 | 0x0010, -1);
  r |= fx_pci(f, NIC_PATH, 0x15b3, 0x020000, 0, cfg, sizeof cfg);
  r |= fx_ibdev(f, "mlx5_0", NIC_PATH);
  r |= fx_port(f, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "Ethernet", "200 Gb/sec (2X HDR)");
  r |= fx_gid(f, "mlx5_0", 1, 0, "fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "IB/RoCE v1", "eth2");
  r |= fx_gid(f, "mlx5_0", 1, 1, "fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "RoCE v2", "eth2");
  r |= fx_gid(f, "mlx5_0", 1, 2, "0000:0000:0000:0000:0000:ffff:0a00:0005", "IB/RoCE v1", "eth2");
  r |= fx_gid(f, "mlx5_0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2", "eth2");
  r |= fx_gid(f, "mlx5_0", 1, 4, "0000:0000:0000:0000:0000:0000:0000:0000", NULL, NULL);
  r |= fx_mkdir(f, "sys/class/net");
  r |= fx_write_bin(f, "dev/infiniband/uverbs0", "", 0);
  r |= fx_chmod(f, "dev/infiniband/uverbs0", 0666);
  r |= fx_write_bin(f, "dev/infiniband/rdma_cm", "", 0);
  r |= fx_status(f, 4242, 4242, 0x4000ULL); /* CAP_IPC_LOCK only */
  r |= fx_memlock(f, "unlimited", "unlimited");
  r |= fx_write(f, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n");
  r |= fx_write(f, "proc/sys/kernel/osrelease", "6.8.0-49-generic\n");
  r |= fx_write(f, "proc/driver/nvidia/version",
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
                "(dvs-builder@U16-I3-B03-4-3)\n"
                "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n");
  r |= fx_write(f, "sys/module/nvidia/version", "580.95.05\n");
  r |= fx_write(f, "sys/module/nvidia_peermem/version", "580.95.05\n");
  r |= fx_mkdir(f, "sys/kernel/dmabuf/buffers");
  r |= fx_mkdir(f, "sys/class/iommu");
  return r ? -1 : 0;
}
