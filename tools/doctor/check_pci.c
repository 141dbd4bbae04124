/* check_pci.c - GPUs on the PCI bus; for every GPU x RDMA NIC: distance, ACS on the bridges
 * between them; relaxed ordering on each NIC. Config space is read from <dev>/config. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "doctor.h"

int dr_append(char **s, const char *fmt, ...) {
  char *piece = NULL, *joined = NULL;
  va_list ap;
  va_start(ap, fmt);
  int r = vasprintf(&piece, fmt, ap);
  va_end(ap);
  if (r < 0) return -1;
  if (*s == NULL) {
    *s = piece;
    return 0;
  }
  r = asprintf(&joined, "%s, %s", *s, piece);
  free(piece);
  if (r < 0) return -1;
  free(*s);
  *s = joined;
  return 0;
}

void dr_driver_of(const char *dir, char *out, size_t len) {
  char link[8192], target[4096];
  out[0] = '\0';
  if (snprintf(link, sizeof link, "%s/driver", dir) >= (int)sizeof link) return;
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return;
  target[n] = '\0';
  const char *b = strrchr(target, '/');
  snprintf(out, len, "%s", b ? b + 1 : target);
}

static int read_numa(const char *dir) {
  char p[8192];
  long v;
  if (snprintf(p, sizeof p, "%s/numa_node", dir) >= (int)sizeof p) return -1;
  if (dr_read_long(p, &v, 10) < 0) return -1;
  return (int)v;
}

void dr_scan_pci(struct dr_ctx *c) {
  char base[4096];
  char **names = NULL;
  if (dr_path(c, base, sizeof base, "/sys/bus/pci/devices") < 0) return;
  ssize_t n = dr_list_dir(base, &names);
  for (ssize_t i = 0; i < n; i++) {
    char dir[8192], p[8300];
    long vendor = -1, cls = -1;
    if (snprintf(dir, sizeof dir, "%s/%s", base, names[i]) >= (int)sizeof dir) continue;
    c->npci++;
    snprintf(p, sizeof p, "%s/vendor", dir);
    if (dr_read_long(p, &vendor, 16) < 0) continue;
    snprintf(p, sizeof p, "%s/class", dir);
    if (dr_read_long(p, &cls, 16) < 0) continue;
    char drv[128];
    dr_driver_of(dir, drv, sizeof drv);
    if (vendor == 0x10de && ((cls >> 8) == 0x0300 || (cls >> 8) == 0x0302)) {
      struct dr_gpu *ng = realloc(c->gpus, (c->ngpus + 1) * sizeof *ng);
      if (ng == NULL) {
        c->rep->oom = true;
        break;
      }
      c->gpus = ng;
      struct dr_gpu *g = &c->gpus[c->ngpus++];
      memset(g, 0, sizeof *g);
      snprintf(g->bdf, sizeof g->bdf, "%.15s", names[i]);
      snprintf(p, sizeof p, "%s/device", dir);
      char *did = dr_read_text(p, 64);
      snprintf(g->device_id, sizeof g->device_id, "%s", did ? did : "?");
      free(did);
      if (dr_realpath_in_root(c, dir, g->pcidir, sizeof g->pcidir) == 0)
        g->have_path = dr_pcipath_parse(dr_unroot(c, g->pcidir), &g->path) == 0;
      g->numa = read_numa(dir);
    } else if ((cls >> 16) == 0x02) {
      c->npci_nics++;
      if (dr_append(&c->pci_nics, "%s (vendor 0x%04lx, class 0x%06lx%s%s)", names[i], vendor, cls,
                    drv[0] ? ", driver " : ", no driver", drv) < 0)
        c->rep->oom = true;
    }
  }
  dr_free_list(names, n > 0 ? (size_t)n : 0);

  names = NULL;
  if (dr_path(c, base, sizeof base, "/sys/class/net") < 0) return;
  n = dr_list_dir(base, &names);
  for (ssize_t i = 0; i < n; i++) {
    if (strcmp(names[i], "lo") == 0) continue;
    char dir[8192], drv[128];
    snprintf(dir, sizeof dir, "%s/%s/device", base, names[i]);
    dr_driver_of(dir, drv, sizeof drv);
    if (dr_append(&c->net_ifaces, "%s%s%s%s", names[i], drv[0] ? " (" : " (virtual)", drv, drv[0] ? ")" : "") < 0)
      c->rep->oom = true;
  }
  dr_free_list(names, n > 0 ? (size_t)n : 0);
}

void dr_check_gpus(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  char base[4096];
  if (dr_path(c, base, sizeof base, "/sys/bus/pci/devices") < 0) base[0] = '\0';
  if (c->ngpus == 0) {
    struct dr_finding *f =
        dr_add(r, "gpus", DR_FAIL, "no NVIDIA GPU on the PCI bus (vendor 0x10de, class 0x0300/0x0302)");
    dr_evidence(r, f, "%s: %zu PCI function%s, none an NVIDIA GPU", dr_unroot(c, base), c->npci,
                c->npci == 1 ? "" : "s");
    dr_fix(r, f, "on bare metal: lspci -d 10de: should list the GPUs (seated, powered, enabled in BIOS?)");
    dr_fix(r, f,
           "in a container: request the GPUs (docker run --gpus all; Kubernetes: resources.limits "
           "nvidia.com/gpu: N with the NVIDIA device plugin)");
    return;
  }
  struct dr_finding *f =
      dr_add(r, "gpus", DR_OK, "%zu NVIDIA GPU%s on the PCI bus", c->ngpus, c->ngpus == 1 ? "" : "s");
  for (size_t i = 0; i < c->ngpus; i++) {
    const struct dr_gpu *g = &c->gpus[i];
    dr_evidence(r, f, "%s device %s, NUMA node %d, %s", g->bdf, g->device_id, g->numa,
                g->have_path ? dr_unroot(c, g->pcidir) : "(PCI path unresolved)");
  }
}

/* The directory of bridge `bdf` on the path of the device whose realpath is `dir`. */
static int bridge_dir(const char *dir, const char *bdf, char *out, size_t len) {
  char needle[32];
  snprintf(needle, sizeof needle, "/%s/", bdf);
  const char *p = strstr(dir, needle);
  if (p == NULL) return -1;
  size_t l = (size_t)(p - dir) + 1 + strlen(bdf);
  if (l >= len) return -1;
  memcpy(out, dir, l);
  out[l] = '\0';
  return 0;
}

/* NCCL_NET_GDR_LEVEL names for our distances (NCCL merges NUMA-local root complexes into PHB). */
static const char *nccl_level(enum dr_dist d) {
  switch (d) {
  case DR_DIST_PIX: return "PIX";
  case DR_DIST_PXB: return "PXB";
  case DR_DIST_PHB:
  case DR_DIST_NODE: return "PHB";
  default: return "SYS";
  }
}

/* Parse NCCL_NET_GDR_LEVEL into our scale: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS; -1 unset/unknown. */
int dr_gdr_level(const char *v) {
  static const char *names[] = {"LOC", "PIX", "PXB", "PHB", "SYS"};
  if (v == NULL || *v == '\0') return -1;
  for (int i = 0; i < 5; i++)
    if (strcasecmp(v, names[i]) == 0) return i;
  if (strcasecmp(v, "NODE") == 0) return 3;
  if (strcasecmp(v, "PXN") == 0) return 2;
  char *end;
  long x = strtol(v, &end, 10);
  if (end != v && *end == '\0' && x >= 0) return x > 4 ? 4 : (int)x;
  return -1;
}

static int dist_level(enum dr_dist d) {
  switch (d) {
  case DR_DIST_PIX: return 1;
  case DR_DIST_PXB: return 2;
  case DR_DIST_PHB:
  case DR_DIST_NODE: return 3;
  default: return 4;
  }
}

struct acs_scan {
  size_t flagged, unknown, checked;
};

static void check_bridge_acs(struct dr_ctx *c, struct dr_finding *f, const char *bdir, const char *bdf,
                             struct acs_scan *s, char **fixes) {
  struct dr_report *r = c->rep;
  char cfgpath[8300];
  uint8_t cfg[4096];
  snprintf(cfgpath, sizeof cfgpath, "%s/config", bdir);
  ssize_t n = dr_read_bin(cfgpath, cfg, sizeof cfg);
  s->checked++;
  if (n < 0) {
    s->unknown++;
    dr_evidence(r, f, "%s: cannot read %s: %s", bdf, dr_unroot(c, cfgpath), strerror(errno));
    return;
  }
  uint16_t ctrl = 0;
  size_t off = 0;
  enum dr_cfg_res res = dr_pci_acs_ctrl(cfg, (size_t)n, &ctrl, &off);
  switch (res) {
  case DR_CFG_FOUND: {
    char bits[160];
    dr_acs_bits_str(ctrl, bits, sizeof bits);
    if (ctrl & DR_ACS_P2P_BLOCKING) {
      s->flagged++;
      dr_evidence(r, f, "%s: ACS Control 0x%04x at 0x%zx (%s): peer-to-peer requests are redirected or blocked", bdf,
                  ctrl, off + 6, bits);
      if (dr_append(fixes, "setpci -s %s ECAP_ACS+0x6.w=0000", bdf) < 0) r->oom = true;
    } else {
      dr_evidence(r, f, "%s: ACS Control 0x%04x (%s): P2P not redirected", bdf, ctrl, bits);
    }
    break;
  }
  case DR_CFG_ABSENT: dr_evidence(r, f, "%s: no ACS capability: P2P is not redirected", bdf); break;
  case DR_CFG_SHORT:
    s->unknown++;
    dr_evidence(r, f,
                "%s: only %zd bytes of config space readable (the extended space at 0x100+ needs root): "
                "cannot tell",
                bdf, n);
    break;
  default:
    s->unknown++;
    dr_evidence(r, f, "%s: malformed extended capability list in %zd bytes of config space", bdf, n);
  }
}

static void check_pair(struct dr_ctx *c, const struct dr_rdma_dev *d, const struct dr_gpu *g) {
  struct dr_report *r = c->rep;
  char id[256];
  size_t meet = 0;
  enum dr_dist dist = dr_pci_distance(&g->path, &d->path, g->numa, d->numa, &meet);
  int lvl = dr_gdr_level(getenv("NCCL_NET_GDR_LEVEL"));
  int allowed = lvl >= 0 ? lvl : 2; /* NCCL's default: PXB */
  bool far = dist_level(dist) > allowed;

  snprintf(id, sizeof id, "topo/%s/%s", d->name, g->bdf);
  struct dr_finding *f =
      dr_add(r, id, far ? DR_WARN : DR_OK, "GPU %s <-> %s: %s (%s)%s", g->bdf, d->name, dr_dist_name(dist),
             dr_dist_meaning(dist), far ? ": NCCL will not use GPUDirect RDMA for this pair" : "");
  dr_evidence(r, f, "GPU: %s (NUMA %d)", dr_unroot(c, g->pcidir), g->numa);
  dr_evidence(r, f, "NIC: %s (NUMA %d)", dr_unroot(c, d->pcidir), d->numa);
  dr_evidence(r, f, "NCCL_NET_GDR_LEVEL %s%s: GDR allowed up to %s; this pair is %s in NCCL's terms",
              lvl >= 0 ? "=" : "unset", lvl >= 0 ? getenv("NCCL_NET_GDR_LEVEL") : " (default PXB)",
              (const char *[]){"LOC", "PIX", "PXB", "PHB", "SYS"}[allowed], nccl_level(dist));
  if (far) {
    dr_fix(r, f,
           "put a NIC under the same PCIe switch as the GPU (NCCL pairs each GPU with its closest NIC; pin it "
           "with GDRNET_HCA / NCCL_IB_HCA)");
    dr_fix(r, f,
           "or accept the distance: NCCL_NET_GDR_LEVEL=%s (GDR through the CPU can be slower than staging "
           "through host memory: measure with gdrnet-perf)",
           nccl_level(dist));
  }

  /* ACS on the bridges between them */
  snprintf(id, sizeof id, "acs/%s/%s", d->name, g->bdf);
  struct dr_finding *a = dr_add(r, id, DR_OK, "ACS on the bridges between GPU %s and %s", g->bdf, d->name);
  if (a == NULL) return;
  struct acs_scan s = {0, 0, 0};
  char *fixes = NULL;
  size_t gstart = meet > 0 ? meet - 1 : 0;
  for (size_t i = gstart; i + 1 < g->path.n; i++) {
    char bdir[4096];
    if (bridge_dir(g->pcidir, g->path.comp[i], bdir, sizeof bdir) == 0)
      check_bridge_acs(c, a, bdir, g->path.comp[i], &s, &fixes);
  }
  for (size_t i = meet; i + 1 < d->path.n; i++) {
    char bdir[4096];
    if (bridge_dir(d->pcidir, d->path.comp[i], bdir, sizeof bdir) == 0)
      check_bridge_acs(c, a, bdir, d->path.comp[i], &s, &fixes);
  }
  if (s.checked == 0) {
    dr_evidence(r, a, "no PCIe bridge between them");
  }
  if (s.flagged) {
    bool close = dist == DR_DIST_PIX || dist == DR_DIST_PXB;
    a->status = close ? DR_FAIL : DR_WARN;
    free(a->title);
    if (asprintf(&a->title, "ACS redirects peer-to-peer traffic on %zu bridge%s between GPU %s and %s: %s", s.flagged,
                 s.flagged == 1 ? "" : "s", g->bdf, d->name,
                 close ? "NIC<->GPU DMA detours through the root complex (hangs or a fraction of the bandwidth)"
                       : "P2P must cross the root complex anyway; it may refuse or slow it") < 0) {
      a->title = NULL;
      r->oom = true;
    }
    dr_fix(r, a, "as root, until the next reboot: %s", fixes ? fixes : "");
    dr_fix(r, a,
           "permanently: disable ACS in the BIOS (often \"PCIe ACS Control\" / \"ACS Enable\") or run the "
           "setpci lines from a boot-time unit; keep ACS on where devices are passed through to VMs");
  } else if (s.unknown) {
    a->status = DR_WARN;
    free(a->title);
    if (asprintf(&a->title, "ACS between GPU %s and %s: cannot tell for %zu bridge%s", g->bdf, d->name, s.unknown,
                 s.unknown == 1 ? "" : "s") < 0) {
      a->title = NULL;
      r->oom = true;
    }
    dr_fix(r, a,
           "run gdrnet-doctor as root (config space beyond 64/256 bytes is readable only by root), or: "
           "sudo lspci -vvv | grep -i acsctl");
  }
  free(fixes);
}

static void check_relaxed_ordering(struct dr_ctx *c, const struct dr_rdma_dev *d) {
  struct dr_report *r = c->rep;
  char id[160], cfgpath[4200];
  uint8_t cfg[4096];
  snprintf(id, sizeof id, "relaxed-ordering/%s", d->name);
  snprintf(cfgpath, sizeof cfgpath, "%s/config", d->pcidir);
  const char *bdf = d->path.n ? d->path.comp[d->path.n - 1] : "?";
  ssize_t n = dr_read_bin(cfgpath, cfg, sizeof cfg);
  uint16_t devctl = 0;
  size_t off = 0;
  enum dr_cfg_res res = n < 0 ? DR_CFG_SHORT : dr_pci_devctl(cfg, (size_t)n, &devctl, &off);
  if (n < 0 || res == DR_CFG_SHORT) {
    struct dr_finding *f = dr_add(r, id, DR_INFO, "%s (%s): relaxed ordering: cannot tell", d->name, bdf);
    if (n < 0)
      dr_evidence(r, f, "cannot read %s: %s", dr_unroot(c, cfgpath), strerror(errno));
    else
      dr_evidence(r, f, "%s: only %zd bytes readable, the PCI Express capability lies beyond (run as root)",
                  dr_unroot(c, cfgpath), n);
    return;
  }
  if (res != DR_CFG_FOUND) {
    struct dr_finding *f =
        dr_add(r, id, DR_INFO, "%s (%s): no PCI Express capability found: relaxed ordering unknown", d->name, bdf);
    dr_evidence(r, f, "%s: %zd bytes, capability list %s", dr_unroot(c, cfgpath), n,
                res == DR_CFG_ABSENT ? "has no PCIe capability (0x10)" : "is malformed");
    return;
  }
  bool on = devctl & DR_DEVCTL_RELAXED_ORDERING;
  struct dr_finding *f = dr_add(r, id, on ? DR_OK : DR_WARN, "%s (%s): PCIe relaxed ordering %s", d->name, bdf,
                                on ? "enabled" : "disabled");
  dr_evidence(r, f, "%s: PCIe capability at 0x%zx, Device Control 0x%04x (Enable Relaxed Ordering bit 4 = %d)",
              dr_unroot(c, cfgpath), off, devctl, on ? 1 : 0);
  if (!on) {
    dr_evidence(r, f,
                "the plugin's relaxed-ordering registrations (GDRNET_RELAXED_ORDERING) cannot take effect; "
                "GPU<->NIC throughput suffers on hosts that reorder (AMD EPYC, Grace, many VMs)");
    dr_fix(r, f,
           "as root, until reboot: setpci -s %s CAP_EXP+0x8.w=%04x (sets bit 4; or enable Relaxed Ordering "
           "in the BIOS / hypervisor)",
           bdf, (unsigned)(devctl | DR_DEVCTL_RELAXED_ORDERING));
  }
}

void dr_check_topology(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  size_t npci = 0;
  for (size_t i = 0; i < c->ndevs; i++) {
    const struct dr_rdma_dev *d = &c->devs[i];
    if (!d->is_pci) {
      char id[160];
      snprintf(id, sizeof id, "topo/%s", d->name);
      struct dr_finding *f = dr_add(r, id, DR_INFO,
                                    "%s is not a PCI device (software RDMA such as rxe/siw, or an "
                                    "emulator): no GPUDirect path to a GPU",
                                    d->name);
      dr_evidence(r, f, "device link: %s", d->pcidir[0] ? dr_unroot(c, d->pcidir) : "(none)");
      continue;
    }
    if (!d->selected) continue; /* excluded by GDRNET_HCA / NCCL_IB_HCA */
    npci++;
    check_relaxed_ordering(c, d);
  }
  if (npci == 0) return;
  /* NCCL pairs each GPU with its closest NIC(s): judge those pairs; list the farther ones as context. */
  for (size_t j = 0; j < c->ngpus; j++) {
    const struct dr_gpu *g = &c->gpus[j];
    if (!g->have_path) continue;
    int best = 99;
    for (size_t i = 0; i < c->ndevs; i++) {
      const struct dr_rdma_dev *d = &c->devs[i];
      if (!d->is_pci || !d->selected) continue;
      int dist = (int)dr_pci_distance(&g->path, &d->path, g->numa, d->numa, NULL);
      if (dist < best) best = dist;
    }
    char *farther = NULL;
    for (size_t i = 0; i < c->ndevs; i++) {
      const struct dr_rdma_dev *d = &c->devs[i];
      if (!d->is_pci || !d->selected) continue;
      enum dr_dist dist = dr_pci_distance(&g->path, &d->path, g->numa, d->numa, NULL);
      if ((int)dist != best && dr_append(&farther, "%s %s", d->name, dr_dist_name(dist)) < 0) r->oom = true;
    }
    size_t before = r->n;
    for (size_t i = 0; i < c->ndevs; i++) {
      const struct dr_rdma_dev *d = &c->devs[i];
      if (d->is_pci && d->selected && (int)dr_pci_distance(&g->path, &d->path, g->numa, d->numa, NULL) == best)
        check_pair(c, d, g);
    }
    if (farther && r->n > before) {
      /* attach to this GPU's first topo finding */
      for (size_t k = before; k < r->n; k++) {
        if (strncmp(r->f[k].id, "topo/", 5) == 0) {
          dr_evidence(r, &r->f[k], "farther NICs (NCCL will not pair them with this GPU): %s", farther);
          break;
        }
      }
    }
    free(farther);
  }
}
