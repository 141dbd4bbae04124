/* fixture.h - build fabricated /sys, /proc, /dev trees for gdrnet-doctor tests. */
#ifndef GDRNET_DOCTOR_FIXTURE_H
#define GDRNET_DOCTOR_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fx {
  char root[512];
};

int fx_init(struct fx *f);     /* mkdtemp under $TMPDIR or /tmp */
void fx_cleanup(struct fx *f); /* rm -rf */
int fx_mkdir(struct fx *f, const char *rel);
int fx_write(struct fx *f, const char *rel, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int fx_write_bin(struct fx *f, const char *rel, const void *data, size_t len);
int fx_symlink(struct fx *f, const char *rel_link, const char *target);
int fx_chmod(struct fx *f, const char *rel, unsigned mode);
int fx_unlink(struct fx *f, const char *rel);

/* Config space image: standard header, a PM cap at 0x40, a PCIe cap at 0x60 (Device Control at 0x68 =
 * devctl) unless devctl < 0, extended caps from 0x100: AER, then ACS (control = acs) unless acs < 0. */
void fx_cfg(uint8_t cfg[4096], uint16_t vendor, bool bridge, int devctl, int acs);

/* A PCI function at sys/devices/<path> (e.g. "pci0000:00/0000:00:01.0/0000:03:00.0"), linked from
 * sys/bus/pci/devices/<bdf>. cfglen bytes of cfg become its config file (cfg NULL: none). */
int fx_pci(struct fx *f, const char *path, uint16_t vendor, uint32_t cls, int numa, const uint8_t *cfg, size_t cfglen);
/* A bridge with a config space carrying acs (-1: no ACS capability). */
int fx_bridge(struct fx *f, const char *path, int numa, int acs);
/* RDMA device <name> on the PCI function at path (which must exist), visible in sys/class/infiniband. */
int fx_ibdev(struct fx *f, const char *name, const char *pcipath);
int fx_port(struct fx *f, const char *ibname, int port, const char *state, const char *phys, const char *ll,
            const char *rate);
/* GID entry; type/ndev NULL leaves the gid_attrs file out (as in some containers). */
int fx_gid(struct fx *f, const char *ibname, int port, int idx, const char *gid, const char *type, const char *ndev);

/* A complete, healthy host: GPU 0000:03:00.0 and ConnectX mlx5_0 (0000:04:00.0) under one PCIe switch
 * (PIX), RoCE port ACTIVE with an IPv4 RoCE v2 GID at index 3, memlock unlimited, CAP_IPC_LOCK, uverbs0
 * rw, nvidia open driver 580 + nvidia-peermem + dma-buf kernel, IOMMU off, relaxed ordering on,
 * ACS clear. Tests then break one thing at a time. */
int fx_healthy_host(struct fx *f);

/* proc/self/status with these ids and CapEff */
int fx_status(struct fx *f, unsigned uid, unsigned gid, unsigned long long capeff);
int fx_memlock(struct fx *f, const char *soft, const char *hard);

#endif
