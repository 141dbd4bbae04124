/* check_iommu.c - IOMMU off / passthrough (fine) or translating DMA (slower GDR, P2P implications). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"

/* value of key=... in the kernel command line ("" if absent) */
static void cmdline_val(const char *cmd, const char *key, char *out, size_t len) {
  out[0] = '\0';
  size_t kl = strlen(key);
  for (const char *p = cmd; p && *p;) {
    while (*p == ' ') p++;
    const char *e = strchr(p, ' ');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') snprintf(out, len, "%.*s", (int)(l - kl - 1), p + kl + 1);
    if (l == 2 && strncmp(p, "--", 2) == 0) break; /* the rest belongs to init */
    p = e;
  }
}

static void group_type(struct dr_ctx *c, const char *pcidir, const char *name, struct dr_finding *f, int *ident,
                       int *dma, int *other) {
  char p[4200];
  snprintf(p, sizeof p, "%s/iommu_group/type", pcidir);
  char *t = dr_read_text(p, 64);
  if (t == NULL) return;
  dr_evidence(c->rep, f, "%s iommu_group/type: %s", name, t);
  if (strcmp(t, "identity") == 0)
    (*ident)++;
  else if (strncmp(t, "DMA", 3) == 0)
    (*dma)++;
  else
    (*other)++;
  free(t);
}

void dr_check_iommu(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  char dir[4096];
  char **names = NULL;
  ssize_t n = -1;
  if (dr_path(c, dir, sizeof dir, "/sys/class/iommu") == 0) n = dr_list_dir(dir, &names);
  char *cmd = dr_read_rel(c, "/proc/cmdline");
  char intel[32], amd[32], iommu[32], arm_pt[32];
  cmdline_val(cmd, "intel_iommu", intel, sizeof intel);
  cmdline_val(cmd, "amd_iommu", amd, sizeof amd);
  cmdline_val(cmd, "iommu", iommu, sizeof iommu);
  cmdline_val(cmd, "iommu.passthrough", arm_pt, sizeof arm_pt);
  bool pt_cmd = strcmp(iommu, "pt") == 0 || strcmp(arm_pt, "1") == 0 || strcmp(arm_pt, "y") == 0;
  bool off_cmd = strcmp(iommu, "off") == 0 || strncmp(intel, "off", 3) == 0 || strcmp(amd, "off") == 0;

  struct dr_finding *f = dr_add(r, "iommu", DR_OK, "IOMMU");
  if (f == NULL) {
    free(cmd);
    dr_free_list(names, n > 0 ? (size_t)n : 0);
    return;
  }
  char list[512] = "";
  size_t used = 0;
  for (ssize_t i = 0; i < n; i++) {
    int w = snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "", names[i]);
    if (w < 0 || (size_t)w >= sizeof list - used) break;
    used += (size_t)w;
  }
  dr_evidence(r, f, "/sys/class/iommu: %s", n < 0 ? strerror(errno) : n == 0 ? "empty" : list);
  dr_evidence(r, f, "/proc/cmdline: intel_iommu=%s amd_iommu=%s iommu=%s iommu.passthrough=%s%s",
              intel[0] ? intel : "-", amd[0] ? amd : "-", iommu[0] ? iommu : "-", arm_pt[0] ? arm_pt : "-",
              cmd ? "" : " (unreadable)");
  int ident = 0, dma = 0, other = 0;
  for (size_t i = 0; i < c->ngpus; i++)
    if (c->gpus[i].have_path) group_type(c, c->gpus[i].pcidir, c->gpus[i].bdf, f, &ident, &dma, &other);
  for (size_t i = 0; i < c->ndevs; i++)
    if (c->devs[i].is_pci) group_type(c, c->devs[i].pcidir, c->devs[i].name, f, &ident, &dma, &other);

  const char *mode;
  enum dr_status st = DR_OK;
  if (dma > 0) {
    mode = "translated: GPU and NIC DMA goes through IOMMU page tables (iommu_group type DMA)";
    st = DR_WARN;
  } else if (ident > 0) {
    mode = "passthrough (identity-mapped groups)";
  } else if (n <= 0 || off_cmd) {
    mode = "off: no IOMMU translates device DMA";
  } else if (pt_cmd) {
    mode = "passthrough (iommu=pt on the kernel command line)";
  } else {
    mode = "enabled and, without iommu=pt, most likely translating DMA";
    st = DR_WARN;
  }
  free(f->title);
  if (asprintf(&f->title, "IOMMU %s", mode) < 0) {
    f->title = NULL;
    r->oom = true;
  }
  f->status = st;
  if (st == DR_WARN) {
    dr_evidence(r, f,
                "translation costs IOTLB misses on every GPU<->NIC transfer, and with ACS it routes "
                "peer-to-peer traffic through the root complex");
    dr_fix(r, f,
           "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, update-grub, "
           "reboot); keep intel_iommu=on / amd_iommu=on if VFIO or SR-IOV needs the IOMMU");
  }
  free(cmd);
  dr_free_list(names, n > 0 ? (size_t)n : 0);
}
