/* pcicfg.h - PCI config space and PCIe topology, as pure functions over bytes and paths. */
#ifndef GDRNET_DOCTOR_PCICFG_H
#define GDRNET_DOCTOR_PCICFG_H

#include <stddef.h>
#include <stdint.h>

enum dr_cfg_res {
  DR_CFG_FOUND = 0,
  DR_CFG_ABSENT,    /* the capability list was read completely and has no such entry */
  DR_CFG_SHORT,     /* the bytes needed were not readable (unprivileged reads stop at 64 or 256 bytes) */
  DR_CFG_MALFORMED, /* a loop, a pointer out of range, an all-ones header */
};

#define DR_PCI_CAP_ID_EXP 0x10    /* PCI Express capability (standard list) */
#define DR_PCI_ECAP_ID_ACS 0x000d /* Access Control Services (extended list) */

/* ACS Control register bits (PCIe base spec 7.7.8.3) */
#define DR_ACS_SV 0x0001 /* Source Validation */
#define DR_ACS_TB 0x0002 /* Translation Blocking */
#define DR_ACS_RR 0x0004 /* P2P Request Redirect */
#define DR_ACS_CR 0x0008 /* P2P Completion Redirect */
#define DR_ACS_UF 0x0010 /* Upstream Forwarding */
#define DR_ACS_EC 0x0020 /* P2P Egress Control */
#define DR_ACS_DT 0x0040 /* Direct Translated P2P */
/* bits that send peer-to-peer traffic up through the root complex */
#define DR_ACS_P2P_BLOCKING (DR_ACS_SV | DR_ACS_RR | DR_ACS_CR | DR_ACS_UF | DR_ACS_EC)

#define DR_DEVCTL_RELAXED_ORDERING 0x0010 /* PCIe Device Control bit 4 */

/* Walk the standard capability list (header 0x34) for cap id; *off gets its offset. */
enum dr_cfg_res dr_pci_find_cap(const uint8_t *cfg, size_t len, uint8_t id, size_t *off);
/* Walk the extended capability list from 0x100 for ecap id; *off gets its offset. */
enum dr_cfg_res dr_pci_find_ecap(const uint8_t *cfg, size_t len, uint16_t id, size_t *off);
/* ACS Control register (ACS cap + 6). */
enum dr_cfg_res dr_pci_acs_ctrl(const uint8_t *cfg, size_t len, uint16_t *ctrl, size_t *capoff);
/* PCIe Device Control register (PCIe cap + 8). */
enum dr_cfg_res dr_pci_devctl(const uint8_t *cfg, size_t len, uint16_t *devctl, size_t *capoff);
/* "SV RR CR UF" style list of the set ACS control bits; "none" when zero. */
void dr_acs_bits_str(uint16_t ctrl, char *buf, size_t len);

/* ---- topology ---- */

#define DR_PCI_MAX_DEPTH 24

/* A PCI device's place in the tree, from the realpath of its sysfs directory:
 * /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0
 * host = "pci0000:00" (the host bridge / root complex); comp = the BDFs from the root port down to
 * the device itself (comp[n-1]). */
struct dr_pcipath {
  char host[32];
  char comp[DR_PCI_MAX_DEPTH][16];
  size_t n;
};

/* Parse a path (anything before "/sys/devices/" is ignored). Trailing non-PCI components
 * (e.g. "/infiniband/mlx5_0") are ignored. Returns 0, or -1 when it is not a PCI device path. */
int dr_pcipath_parse(const char *path, struct dr_pcipath *out);

enum dr_dist { DR_DIST_PIX, DR_DIST_PXB, DR_DIST_PHB, DR_DIST_NODE, DR_DIST_SYS };
const char *dr_dist_name(enum dr_dist d);
const char *dr_dist_meaning(enum dr_dist d);

/* Classify like nvidia-smi topo -m: PIX (one PCIe switch between them), PXB (several switches/bridges,
 * not the host bridge), PHB (through the host bridge of one root complex), NODE (different root
 * complexes of one NUMA node; unknown NUMA (-1) counts as the same node), SYS (across NUMA nodes).
 * *meet (may be NULL) gets the number of leading components both paths share. */
enum dr_dist dr_pci_distance(const struct dr_pcipath *a, const struct dr_pcipath *b, int numa_a, int numa_b,
                             size_t *meet);

/* 1 if s looks like "0000:03:00.0". */
int dr_is_bdf(const char *s);

#endif
