/* check_rdma.c - RDMA devices from /sys/class/infiniband: ports, link layer, speed, and the RoCE GID
 * the plugin would choose (gid_select.c). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "doctor.h"
#include "gid_select.h"

#define MAX_GIDS 1024

/* "4: ACTIVE" -> "ACTIVE" */
static void after_colon(const char *s, char *out, size_t len) {
  const char *p = s ? strchr(s, ':') : NULL;
  p = p ? p + 1 : s;
  if (p == NULL) {
    snprintf(out, len, "(unreadable)");
    return;
  }
  while (*p == ' ') p++;
  snprintf(out, len, "%s", p);
}

static char *read_in(const char *dir, const char *name) {
  char p[8192];
  if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return NULL;
  return dr_read_text(p, 4096);
}

/* The plugin's knob, else NCCL's alias (honoured when ours is unset). */
static const char *knob(const char *ours, const char *alias, const char **which) {
  const char *v = getenv(ours);
  if (v && *v) {
    *which = ours;
    return v;
  }
  v = getenv(alias);
  if (v && *v) {
    *which = alias;
    return v;
  }
  *which = NULL;
  return NULL;
}

/* GDRNET_GID_INDEX, else NCCL_IB_GID_INDEX: the index, -1 for automatic (unset, "auto" or negative as in
 * NCCL), -2 when unparsable. */
static int gid_override(const char **which, const char **val) {
  const char *v = knob("GDRNET_GID_INDEX", "NCCL_IB_GID_INDEX", which);
  *val = v;
  if (v == NULL || strcasecmp(v, "auto") == 0) return -1;
  char *end;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0' || x > 255) return -2;
  return x < 0 ? -1 : (int)x;
}

static void check_gids(struct dr_ctx *c, const struct dr_rdma_dev *d, const char *portdir, int port, bool roce) {
  struct dr_report *r = c->rep;
  char id[160], gdir[8192];
  snprintf(id, sizeof id, "gid/%s/%d", d->name, port);
  char **names = NULL;
  if (snprintf(gdir, sizeof gdir, "%s/gids", portdir) >= (int)sizeof gdir) return;
  ssize_t n = dr_list_dir(gdir, &names);
  if (n < 0) {
    struct dr_finding *f = dr_add(r, id, roce ? DR_FAIL : DR_WARN, "%s port %d: GID table unreadable", d->name, port);
    dr_evidence(r, f, "%s: %s", dr_unroot(c, gdir), strerror(errno));
    dr_fix(r, f, "mount the host's /sys (read-only is enough) into the container, or check the driver");
    return;
  }
  struct dr_gid_entry *tab = calloc(n > 0 ? (size_t)n : 1, sizeof *tab);
  char(*ndevs)[32] = calloc(n > 0 ? (size_t)n : 1, sizeof *ndevs);
  if (tab == NULL || ndevs == NULL) {
    free(tab);
    free(ndevs);
    r->oom = true;
    dr_free_list(names, (size_t)n);
    return;
  }
  size_t nt = 0, types_missing = 0, bad = 0;
  for (ssize_t i = 0; i < n && nt < MAX_GIDS; i++) {
    char *end;
    long idx = strtol(names[i], &end, 10);
    if (end == names[i] || *end != '\0' || idx < 0) continue;
    char *txt = read_in(gdir, names[i]);
    struct dr_gid_entry *e = &tab[nt];
    e->index = (int)idx;
    if (txt == NULL || dr_gid_parse(txt, e->gid) != 0) {
      /* unused RoCE slots fail to read (EINVAL) on some kernels; treat as empty */
      if (txt != NULL) bad++;
      free(txt);
      memset(e->gid, 0, sizeof e->gid);
    } else {
      free(txt);
    }
    char rel[64];
    snprintf(rel, sizeof rel, "gid_attrs/types/%ld", idx);
    char *ty = read_in(portdir, rel);
    if (ty == NULL) {
      e->type = DR_GID_TYPE_UNKNOWN;
      if (dr_gid_classify(e->gid) != DR_GID_ZERO) types_missing++;
    } else {
      e->type = strcasestr(ty, "v2") ? DR_GID_TYPE_V2 : strcasestr(ty, "v1") ? DR_GID_TYPE_V1 : DR_GID_TYPE_UNKNOWN;
      free(ty);
    }
    snprintf(rel, sizeof rel, "gid_attrs/ndevs/%ld", idx);
    char *nd = read_in(portdir, rel);
    e->ndev = nd == NULL ? DR_GID_NDEV_UNKNOWN : nd[0] ? DR_GID_NDEV_PRESENT : DR_GID_NDEV_NONE;
    snprintf(ndevs[nt], sizeof ndevs[nt], "%.31s", nd ? nd : "");
    free(nd);
    nt++;
  }
  dr_free_list(names, (size_t)n);

  if (!roce) {
    /* InfiniBand: GID 0 is the port GID (subnet prefix + GUID); addressing is by LID. */
    char gs[64] = "(none)";
    for (size_t i = 0; i < nt; i++)
      if (tab[i].index == 0) dr_gid_format(tab[i].gid, gs, sizeof gs);
    char *lid = read_in(portdir, "lid");
    long lidv = lid ? strtol(lid, NULL, 0) : -1;
    struct dr_finding *f = dr_add(r, id, lidv == 0 ? DR_WARN : DR_OK, "%s port %d (InfiniBand): LID %s, GID[0] %s",
                                  d->name, port, lid ? lid : "unknown", gs);
    if (lidv == 0) {
      dr_evidence(r, f, "LID 0: no subnet manager has assigned this port an address");
      dr_fix(r, f, "run a subnet manager on the fabric (opensm on one host, or the switch's SM)");
    }
    free(lid);
    free(tab);
    free(ndevs);
    return;
  }

  const char *which, *val, *fwhich, *vwhich;
  int ov = gid_override(&which, &val);
  const char *fam = knob("GDRNET_IB_ADDR_FAMILY", "NCCL_IB_ADDR_FAMILY", &fwhich);
  const char *ver = knob("GDRNET_IB_ROCE_VERSION", "NCCL_IB_ROCE_VERSION_NUM", &vwhich);
  enum dr_gid_family family = fam && strcasecmp(fam, "AF_INET6") == 0 ? DR_GID_FAMILY_IPV6 : DR_GID_FAMILY_IPV4;
  int roce_version = ver && strcmp(ver, "1") == 0 ? 1 : 2;
  char why[256];
  int chosen = dr_gid_select(tab, nt, family, roce_version, why, sizeof why);
  size_t shown = 0, nonzero = 0;
  struct dr_finding *f;
  if (ov >= 0 || ov == -2) {
    const struct dr_gid_entry *e = NULL;
    for (size_t i = 0; i < nt && ov >= 0; i++)
      if (tab[i].index == ov) e = &tab[i];
    enum dr_gid_class cl = e ? dr_gid_classify(e->gid) : DR_GID_ZERO;
    if (ov == -2 || e == NULL || cl == DR_GID_ZERO) {
      f = dr_add(r, id, DR_FAIL, "%s port %d: %s=%s names %s", d->name, port, which, val,
                 ov == -2    ? "no index (not a number)"
                 : e == NULL ? "no GID table entry"
                             : "an empty GID slot");
      dr_fix(r, f, "unset %s to let the plugin choose (it would choose %d: %s), or pick a non-zero entry listed above",
             which, chosen, why);
    } else {
      char gs[64];
      dr_gid_format(e->gid, gs, sizeof gs);
      bool poor = cl == DR_GID_LINK_LOCAL || e->type == DR_GID_TYPE_V1;
      f = dr_add(r, id, poor ? DR_WARN : DR_OK, "%s port %d: GID index %d (%s, %s) forced by %s%s", d->name, port, ov,
                 gs, dr_gid_type_name(e->type), which, chosen != ov ? "" : " (same as the automatic choice)");
      if (chosen != ov) dr_evidence(r, f, "automatic choice would be %d: %s", chosen, why);
      if (poor) {
        dr_evidence(r, f, "%s",
                    cl == DR_GID_LINK_LOCAL ? "a link-local GID is not routable: connections across "
                                              "subnets fail"
                                            : "RoCE v1 is not routable (layer 2 only)");
        dr_fix(r, f, "unset %s (automatic choice: %d) or choose a RoCE v2 IPv4 entry", which, chosen);
      }
    }
  } else if (chosen < 0) {
    f = dr_add(r, id, DR_FAIL, "%s port %d: no usable RoCE GID (%s)", d->name, port, why);
    dr_evidence(r, f,
                "the plugin then falls back to GID index 0, which is not routable: connections fail or stay "
                "within one L2 segment");
    dr_fix(r, f,
           "give the port's network interface an IP address (ip addr add <addr>/<len> dev <netdev>): the RoCE "
           "GID table is filled from the interface's addresses");
  } else {
    const struct dr_gid_entry *e = NULL;
    for (size_t i = 0; i < nt; i++)
      if (tab[i].index == chosen) e = &tab[i];
    char gs[64] = "?";
    if (e) dr_gid_format(e->gid, gs, sizeof gs);
    bool v1 = e && e->type == DR_GID_TYPE_V1;
    f = dr_add(r, id, v1 ? DR_WARN : DR_OK, "%s port %d: the plugin would use GID index %d (%s, %s)", d->name, port,
               chosen, gs, why);
    if (v1 && roce_version == 1) {
      dr_evidence(r, f, "RoCE v1 requested by %s=%s: v1 is not routable (layer 2 only)", vwhich, ver);
      dr_fix(r, f, "unset %s (RoCE v2 is the default) unless every rank shares one L2 segment", vwhich);
    } else if (v1) {
      dr_evidence(r, f, "only RoCE v1 GIDs carry a usable address: v1 is not routable (layer 2 only)");
      dr_fix(r, f,
             "enable RoCE v2 on the NIC (the default on ConnectX-4 and later), or confine the job to one L2 "
             "segment");
    }
  }
  if (f) {
    for (size_t i = 0; i < nt; i++) {
      const struct dr_gid_entry *e = &tab[i];
      enum dr_gid_class cl = dr_gid_classify(e->gid);
      if (cl == DR_GID_ZERO) continue;
      nonzero++;
      if (shown++ >= 16) continue;
      char gs[64];
      dr_gid_format(e->gid, gs, sizeof gs);
      dr_evidence(r, f, "[%d] %s %s%s%s%s%s", e->index, gs, dr_gid_type_name(e->type), ndevs[i][0] ? " " : "", ndevs[i],
                  cl == DR_GID_LINK_LOCAL ? " link-local (skipped)" : "",
                  e->ndev == DR_GID_NDEV_NONE ? " no netdev" : "");
    }
    if (shown > 16) dr_evidence(r, f, "... %zu more non-zero entries", shown - 16);
    dr_evidence(r, f, "%s: %zu entries, %zu non-zero", dr_unroot(c, gdir), nt, nonzero);
    if (types_missing)
      dr_evidence(r, f,
                  "gid_attrs/types unreadable for %zu non-zero entr%s (usual in containers): type unknown, "
                  "still eligible",
                  types_missing, types_missing == 1 ? "y" : "ies");
    if (bad) dr_evidence(r, f, "%zu GID file%s malformed: treated as empty", bad, bad == 1 ? "" : "s");
    if (which && ov == -1) dr_evidence(r, f, "%s=%s: automatic selection", which, val);
    dr_evidence(r, f, "automatic selection prefers %s, RoCE v%d (%s%s%s, %s%s%s)",
                family == DR_GID_FAMILY_IPV6 ? "IPv6" : "IPv4-mapped", roce_version, fwhich ? fwhich : "",
                fwhich ? "=" : "address family default", fam ? fam : "", vwhich ? vwhich : "",
                vwhich ? "=" : "RoCE version default", ver ? ver : "");
  }
  free(tab);
  free(ndevs);
}

static void check_port(struct dr_ctx *c, struct dr_rdma_dev *d, struct dr_rdma_port *pt, const char *devdir) {
  struct dr_report *r = c->rep;
  char portdir[8192], id[160];
  if (snprintf(portdir, sizeof portdir, "%s/ports/%d", devdir, pt->num) >= (int)sizeof portdir) return;
  char *state = read_in(portdir, "state"), *phys = read_in(portdir, "phys_state");
  char *ll = read_in(portdir, "link_layer"), *rate = read_in(portdir, "rate");
  after_colon(state, pt->state, sizeof pt->state);
  after_colon(phys, pt->phys_state, sizeof pt->phys_state);
  snprintf(pt->link_layer, sizeof pt->link_layer, "%s", ll ? ll : "(unreadable)");
  snprintf(pt->rate, sizeof pt->rate, "%s", rate ? rate : "rate unknown");
  pt->active = strcasecmp(pt->state, "ACTIVE") == 0;
  bool roce = ll && strcasecmp(ll, "Ethernet") == 0;
  snprintf(id, sizeof id, "port/%s/%d", d->name, pt->num);
  struct dr_finding *f = dr_add(r, id, pt->active ? DR_OK : DR_WARN, "%s port %d: %s, %s, %s%s, %s", d->name, pt->num,
                                pt->state, pt->phys_state, pt->link_layer, roce ? " (RoCE)" : "", pt->rate);
  dr_evidence(r, f, "%s/{state,phys_state,link_layer,rate}", dr_unroot(c, portdir));
  if (!pt->active) {
    if (strcasecmp(pt->state, "INIT") == 0 || strcasecmp(pt->state, "ARMED") == 0)
      dr_fix(r, f, "the link is up but not configured: %s",
             roce ? "check the netdev (ip link set <netdev> up)" : "start a subnet manager (opensm) on the fabric");
    else
      dr_fix(r, f, "bring the link up: check the cable and the switch port (ibstat %s %d / ip link)%s", d->name,
             pt->num, roce ? "; ip link set <netdev> up" : "");
  }
  free(state);
  free(phys);
  free(ll);
  free(rate);
  check_gids(c, d, portdir, pt->num, roce);
}

static void no_device(struct dr_ctx *c, const char *base, ssize_t n) {
  struct dr_report *r = c->rep;
  struct dr_finding *f = dr_add(r, "rdma-devices", DR_FAIL,
                                "no RDMA device (kernel shows no /sys/class/infiniband entries); found: %zu NVIDIA "
                                "GPU%s, %zu network PCI function%s, network interfaces: %s",
                                c->ngpus, c->ngpus == 1 ? "" : "s", c->npci_nics, c->npci_nics == 1 ? "" : "s",
                                c->net_ifaces ? c->net_ifaces : "none besides lo");
  dr_evidence(r, f, "%s: %s", dr_unroot(c, base), n < 0 ? strerror(errno) : "empty");
  for (size_t i = 0; i < c->ngpus; i++) dr_evidence(r, f, "GPU %s (device %s)", c->gpus[i].bdf, c->gpus[i].device_id);
  dr_evidence(r, f, "network PCI functions: %s", c->pci_nics ? c->pci_nics : "none");
  dr_evidence(r, f, "network interfaces (/sys/class/net): %s", c->net_ifaces ? c->net_ifaces : "none besides lo");
  const char *lib = getenv("GDRNET_IBVERBS_LIB");
  if (c->verbs_devices > 0) {
    /* e.g. the verbs emulator through GDRNET_IBVERBS_LIB: the plugin does use RDMA, over what libibverbs lists */
    dr_evidence(r, f,
                "%s lists %d device%s nevertheless (an emulator or a provider without sysfs): the plugin uses "
                "RDMA through %s; GPUDirect RDMA needs a kernel RDMA device",
                lib && *lib ? lib : "libibverbs", c->verbs_devices, c->verbs_devices == 1 ? "" : "s",
                c->verbs_devices == 1 ? "it" : "them");
    if (lib && *lib) dr_evidence(r, f, "GDRNET_IBVERBS_LIB=%s (the library the plugin loads)", lib);
  }
  dr_fix(r, f,
         "load the NIC's RDMA driver: modprobe mlx5_ib (NVIDIA/Mellanox ConnectX), irdma (Intel E810), "
         "bnxt_re (Broadcom), efa (AWS); then `rdma link` / `ibv_devinfo` should list it");
  dr_fix(r, f,
         "in a container: pass the device in (Kubernetes: the RDMA shared device plugin's resource "
         "rdma/rdma_shared_device_a: 1, as packaging/k8s requests it, or an SR-IOV VF; Docker: "
         "--device=/dev/infiniband --cap-add=IPC_LOCK) and keep /sys/class/infiniband visible");
  if (c->verbs_devices <= 0)
    dr_fix(r, f,
           "no RDMA NIC on this host: GPUDirect RDMA is impossible; the plugin falls back to TCP "
           "(GDRNET_TRANSPORT=auto)");
}

void dr_check_rdma_devices(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  char base[4096];
  char **names = NULL;
  if (dr_path(c, base, sizeof base, "/sys/class/infiniband") < 0) return;
  ssize_t n = dr_list_dir(base, &names);
  if (n <= 0) {
    no_device(c, base, n);
    dr_free_list(names, n > 0 ? (size_t)n : 0);
    return;
  }
  c->devs = calloc((size_t)n, sizeof *c->devs);
  if (c->devs == NULL) {
    r->oom = true;
    dr_free_list(names, (size_t)n);
    return;
  }
  const char *hwhich = NULL;
  const char *hspec = knob("GDRNET_HCA", "NCCL_IB_HCA", &hwhich);
  struct gdr_filter filt;
  char hwhy[256] = "";
  bool hbad = gdr_filter_parse(hspec, &filt, hwhy, sizeof hwhy) != ncclSuccess;
  if (hbad) memset(&filt, 0, sizeof filt);
  struct dr_finding *sum = dr_add(r, "rdma-devices", DR_OK, "%zd RDMA device%s", n, n == 1 ? "" : "s");
  size_t active = 0, nports_total = 0, active_sel = 0;
  char *sel_list = NULL;
  for (ssize_t i = 0; i < n; i++) {
    struct dr_rdma_dev *d = &c->devs[c->ndevs++];
    char devdir[8192], link[8300], drv[128];
    snprintf(d->name, sizeof d->name, "%.63s", names[i]);
    snprintf(devdir, sizeof devdir, "%s/%s", base, names[i]);
    snprintf(link, sizeof link, "%s/device", devdir);
    d->numa = -1;
    if (dr_realpath_in_root(c, link, d->pcidir, sizeof d->pcidir) == 0) {
      d->is_pci = dr_pcipath_parse(dr_unroot(c, d->pcidir), &d->path) == 0;
      char np[4200];
      long v;
      snprintf(np, sizeof np, "%s/numa_node", d->pcidir);
      if (dr_read_long(np, &v, 10) == 0) d->numa = (int)v;
    }
    dr_driver_of(link, drv, sizeof drv);
    char **ports = NULL;
    char pdir[8300];
    snprintf(pdir, sizeof pdir, "%s/ports", devdir);
    ssize_t np = dr_list_dir(pdir, &ports);
    dr_evidence(r, sum, "%s: %s%s%s, %zd port%s", d->name, d->is_pci ? d->path.comp[d->path.n - 1] : "not PCI",
                drv[0] ? ", driver " : "", drv, np > 0 ? np : 0, np == 1 ? "" : "s");
    if (np > 0) {
      d->ports = calloc((size_t)np, sizeof *d->ports);
      if (d->ports == NULL) r->oom = true;
    }
    for (ssize_t k = 0; k < np && d->ports; k++) {
      char *end;
      long num = strtol(ports[k], &end, 10);
      if (end == ports[k] || *end) continue;
      struct dr_rdma_port *pt = &d->ports[d->nports++];
      pt->num = (int)num;
      pt->selected = !hbad && gdr_filter_match(&filt, d->name, pt->num);
      d->selected |= pt->selected;
      check_port(c, d, pt, devdir);
      nports_total++;
      active += pt->active;
      if (pt->active && pt->selected) {
        active_sel++;
        if (dr_append(&sel_list, "%s:%d", d->name, pt->num) < 0) r->oom = true;
      }
    }
    if (np <= 0) {
      char id[160];
      snprintf(id, sizeof id, "port/%s", d->name);
      struct dr_finding *f = dr_add(r, id, DR_WARN, "%s: no ports listed", d->name);
      dr_evidence(r, f, "%s: %s", dr_unroot(c, pdir), np < 0 ? strerror(errno) : "empty");
    }
    dr_free_list(ports, np > 0 ? (size_t)np : 0);
  }
  dr_free_list(names, (size_t)n);
  if (sum && active == 0) {
    sum->status = DR_FAIL;
    free(sum->title);
    if (asprintf(&sum->title, "%zd RDMA device%s but no ACTIVE port among %zu", n, n == 1 ? "" : "s", nports_total) <
        0) {
      sum->title = NULL;
      r->oom = true;
    }
    dr_fix(r, sum, "bring a port up (see the port findings); `ibstat` / `rdma link` show the state");
  }
  if (hwhich) {
    struct dr_finding *f;
    if (hbad) {
      f = dr_add(r, "hca", DR_FAIL, "%s=%s is malformed: the plugin uses no RDMA device", hwhich, hspec);
      dr_evidence(r, f, "%s", hwhy);
      dr_fix(r, f, "syntax: [^][=]name[:port][,...] (prefix match unless \"=\", \"^\" excludes), e.g. mlx5_0:1,mlx5_1");
    } else if (active_sel == 0 && active > 0) {
      f = dr_add(r, "hca", DR_FAIL, "%s=%s selects none of the ACTIVE ports: the plugin falls back to TCP", hwhich,
                 hspec);
      dr_fix(r, f, "name an ACTIVE port (see the port findings), or unset %s", hwhich);
    } else {
      f = dr_add(r, "hca", active_sel ? DR_OK : DR_INFO, "%s=%s selects %s", hwhich, hspec,
                 sel_list ? sel_list : "no ACTIVE port");
    }
    if (strcmp(hwhich, "NCCL_IB_HCA") == 0) dr_evidence(r, f, "GDRNET_HCA unset: the plugin honours NCCL_IB_HCA");
  }
  c->rdma_ports = sel_list; /* the outcome line's; freed with the context */
}
