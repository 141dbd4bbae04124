/* pcicfg.c - see pcicfg.h */
#include "pcicfg.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

enum dr_cfg_res dr_pci_find_cap(const uint8_t *cfg, size_t len, uint8_t id, size_t *off) {
  if (cfg == NULL || len < 0x40) return DR_CFG_SHORT;
  if (rd16(cfg) == 0xffff) return DR_CFG_MALFORMED;
  if (!(rd16(cfg + 0x06) & 0x0010)) return DR_CFG_ABSENT; /* Status: Capabilities List */
  size_t p = cfg[0x34] & 0xfc;
  for (int guard = 0; guard < 48 && p != 0; guard++) {
    if (p < 0x40 || p > 0xfc) return DR_CFG_MALFORMED;
    if (p + 2 > len) return DR_CFG_SHORT;
    if (cfg[p] == id) {
      if (off) *off = p;
      return DR_CFG_FOUND;
    }
    p = cfg[p + 1] & 0xfc;
  }
  return p == 0 ? DR_CFG_ABSENT : DR_CFG_MALFORMED;
}

enum dr_cfg_res dr_pci_find_ecap(const uint8_t *cfg, size_t len, uint16_t id, size_t *off) {
  size_t p = 0x100;
  if (cfg == NULL) return DR_CFG_SHORT;
  for (int guard = 0; guard < 480; guard++) {
    if (p + 4 > len) return DR_CFG_SHORT;
    uint32_t h = rd32(cfg + p);
    if (h == 0xffffffffu) return DR_CFG_MALFORMED;
    if (h == 0) return DR_CFG_ABSENT; /* no extended capabilities */
    if ((h & 0xffff) == id) {
      if (off) *off = p;
      return DR_CFG_FOUND;
    }
    size_t next = (h >> 20) & 0xffc;
    if (next == 0) return DR_CFG_ABSENT;
    if (next < 0x100) return DR_CFG_MALFORMED;
    p = next;
  }
  return DR_CFG_MALFORMED;
}

enum dr_cfg_res dr_pci_acs_ctrl(const uint8_t *cfg, size_t len, uint16_t *ctrl, size_t *capoff) {
  size_t off = 0;
  enum dr_cfg_res r = dr_pci_find_ecap(cfg, len, DR_PCI_ECAP_ID_ACS, &off);
  if (r != DR_CFG_FOUND) return r;
  if (off + 8 > len) return DR_CFG_SHORT;
  if (ctrl) *ctrl = rd16(cfg + off + 6);
  if (capoff) *capoff = off;
  return DR_CFG_FOUND;
}

enum dr_cfg_res dr_pci_devctl(const uint8_t *cfg, size_t len, uint16_t *devctl, size_t *capoff) {
  size_t off = 0;
  enum dr_cfg_res r = dr_pci_find_cap(cfg, len, DR_PCI_CAP_ID_EXP, &off);
  if (r != DR_CFG_FOUND) return r;
  if (off + 10 > len) return DR_CFG_SHORT;
  if (devctl) *devctl = rd16(cfg + off + 8);
  if (capoff) *capoff = off;
  return DR_CFG_FOUND;
}

void dr_acs_bits_str(uint16_t ctrl, char *buf, size_t len) {
  static const struct {
    uint16_t bit;
    const char *name;
  } names[] = {{DR_ACS_SV, "SrcValid"},   {DR_ACS_TB, "TransBlk"},    {DR_ACS_RR, "ReqRedir"},
               {DR_ACS_CR, "CmpltRedir"}, {DR_ACS_UF, "UpstreamFwd"}, {DR_ACS_EC, "EgressCtrl"},
               {DR_ACS_DT, "DirectTrans"}};
  size_t used = 0;
  if (buf == NULL || len == 0) return;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!(ctrl & names[i].bit)) continue;
    int r = snprintf(buf + used, len - used, "%s%s+", used ? " " : "", names[i].name);
    if (r < 0 || (size_t)r >= len - used) return;
    used += (size_t)r;
  }
  if (used == 0) snprintf(buf, len, "none");
}

int dr_is_bdf(const char *s) {
  /* dddd:bb:dd.f */
  static const char pat[] = "hhhh:hh:hh.h";
  size_t n = strlen(s);
  if (n != sizeof pat - 1) return 0;
  for (size_t i = 0; i < n; i++) {
    if (pat[i] == 'h') {
      if (!isxdigit((unsigned char)s[i])) return 0;
    } else if (s[i] != pat[i]) {
      return 0;
    }
  }
  return 1;
}

int dr_pcipath_parse(const char *path, struct dr_pcipath *out) {
  if (path == NULL || out == NULL) return -1;
  memset(out, 0, sizeof *out);
  const char *p = strstr(path, "/sys/devices/");
  if (p == NULL) return -1;
  p += strlen("/sys/devices/");
  int first = 1;
  while (*p) {
    const char *slash = strchr(p, '/');
    size_t l = slash ? (size_t)(slash - p) : strlen(p);
    char comp[64];
    if (l == 0) {
      p++;
      continue;
    }
    if (l >= sizeof comp) break;
    memcpy(comp, p, l);
    comp[l] = '\0';
    if (first) {
      if (strncmp(comp, "pci", 3) != 0 || l >= sizeof out->host) return -1;
      memcpy(out->host, comp, l + 1);
      first = 0;
    } else {
      if (!dr_is_bdf(comp)) break;
      if (out->n >= DR_PCI_MAX_DEPTH) return -1;
      memcpy(out->comp[out->n++], comp, l + 1);
    }
    p += l;
  }
  return (out->host[0] && out->n > 0) ? 0 : -1;
}

const char *dr_dist_name(enum dr_dist d) {
  switch (d) {
  case DR_DIST_PIX: return "PIX";
  case DR_DIST_PXB: return "PXB";
  case DR_DIST_PHB: return "PHB";
  case DR_DIST_NODE: return "NODE";
  default: return "SYS";
  }
}

const char *dr_dist_meaning(enum dr_dist d) {
  switch (d) {
  case DR_DIST_PIX: return "one PCIe switch between them";
  case DR_DIST_PXB: return "several PCIe bridges/switches, not the host bridge";
  case DR_DIST_PHB: return "through the PCIe host bridge (CPU root complex)";
  case DR_DIST_NODE: return "across root complexes within one NUMA node";
  default: return "across NUMA nodes (the CPU interconnect)";
  }
}

enum dr_dist dr_pci_distance(const struct dr_pcipath *a, const struct dr_pcipath *b, int numa_a, int numa_b,
                             size_t *meet) {
  size_t c = 0;
  if (meet) *meet = 0;
  if (strcmp(a->host, b->host) != 0) {
    if (numa_a >= 0 && numa_b >= 0 && numa_a != numa_b) return DR_DIST_SYS;
    return DR_DIST_NODE;
  }
  while (c < a->n && c < b->n && strcmp(a->comp[c], b->comp[c]) == 0) c++;
  if (meet) *meet = c;
  if (c == 0) return DR_DIST_PHB;
  /* They meet at bridge comp[c-1]: a switch's upstream port (or a root port). The ports right below it
   * belong to the same switch; any bridge further down on either side is another switch. */
  size_t extra_a = a->n > c + 1 ? a->n - c - 1 : 0;
  size_t extra_b = b->n > c + 1 ? b->n - c - 1 : 0;
  /* the component at index c on each side is the switch's downstream port (or the device itself) */
  if (extra_a > 0) extra_a--;
  if (extra_b > 0) extra_b--;
  /* a->comp[n-1] is the endpoint: a path [.., up, down, dev] has c+2 components past the meeting point */
  return (extra_a == 0 && extra_b == 0) ? DR_DIST_PIX : DR_DIST_PXB;
}
