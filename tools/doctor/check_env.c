/* check_env.c - environment variables that keep NCCL away from this plugin or from GPUDirect RDMA. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "doctor.h"

extern char **environ;

static bool truthy(const char *v) { return v && (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0); }
static bool falsy(const char *v) { return v && (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0); }

void dr_check_env(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  struct dr_finding *f;
  size_t before = r->n;
  const char *v;

  if ((v = getenv("NCCL_NET")) && *v) {
    if (strcasecmp(v, "GDR") == 0) {
      dr_add(r, "env/NCCL_NET", DR_OK, "NCCL_NET=%s selects this plugin", v);
    } else {
      f = dr_add(r, "env/NCCL_NET", DR_FAIL, "NCCL_NET=%s: NCCL will use that network, not this plugin", v);
      dr_fix(r, f, "export NCCL_NET=GDR (or unset NCCL_NET)");
    }
  }
  v = getenv("NCCL_NET_PLUGIN");
  if (v == NULL || *v == '\0') {
    f = dr_add(r, "env/NCCL_NET_PLUGIN", DR_INFO, "NCCL_NET_PLUGIN unset: NCCL loads libnccl-net.so, which is this "
                                                 "plugin only if its default link is installed");
    dr_fix(r, f, "export NCCL_NET_PLUGIN=gdr (finds libnccl-net-gdr.so on the library path) or a full path");
  } else if (strcasestr(v, "gdr") == NULL) {
    f = dr_add(r, "env/NCCL_NET_PLUGIN", DR_FAIL, "NCCL_NET_PLUGIN=%s does not name this plugin", v);
    dr_fix(r, f, "export NCCL_NET_PLUGIN=gdr");
  } else {
    dr_add(r, "env/NCCL_NET_PLUGIN", DR_OK, "NCCL_NET_PLUGIN=%s", v);
  }
  if (truthy(getenv("NCCL_IB_DISABLE"))) {
    f = dr_add(r, "env/NCCL_IB_DISABLE", DR_WARN, "NCCL_IB_DISABLE=%s: NCCL's own IB transport is off; if this "
                                                 "plugin fails to load, NCCL silently uses sockets", getenv("NCCL_IB_DISABLE"));
    dr_fix(r, f, "unset NCCL_IB_DISABLE unless you mean to forbid RDMA; select the plugin with NCCL_NET=GDR instead");
  }
  if ((v = getenv("NCCL_NET_GDR_LEVEL")) && *v) {
    int lvl = dr_gdr_level(v);
    if (lvl == 0) {
      f = dr_add(r, "env/NCCL_NET_GDR_LEVEL", DR_FAIL, "NCCL_NET_GDR_LEVEL=%s disables GPUDirect RDMA for every GPU", v);
      dr_fix(r, f, "unset NCCL_NET_GDR_LEVEL (default PXB) or set it to the GPU-NIC distance shown by the topo findings");
    } else if (lvl < 0) {
      f = dr_add(r, "env/NCCL_NET_GDR_LEVEL", DR_WARN, "NCCL_NET_GDR_LEVEL=%s is not a level NCCL knows", v);
      dr_fix(r, f, "use one of LOC, PIX, PXB, PHB, SYS (or unset it)");
    } else {
      dr_add(r, "env/NCCL_NET_GDR_LEVEL", lvl == 1 ? DR_INFO : DR_OK, "NCCL_NET_GDR_LEVEL=%s: GDR allowed up to %s%s",
             v, (const char *[]){"LOC", "PIX", "PXB", "PHB", "SYS"}[lvl],
             lvl == 1 ? " (stricter than the default PXB)" : "");
    }
  }
  if (falsy(getenv("NCCL_NET_GDR_READ"))) {
    f = dr_add(r, "env/NCCL_NET_GDR_READ", DR_WARN, "NCCL_NET_GDR_READ=0: sends are staged through host memory "
                                                   "(GPUDirect RDMA only on the receive side)");
    dr_fix(r, f, "unset NCCL_NET_GDR_READ");
  }
  /* GDRNET_DMABUF, or NCCL's NCCL_DMABUF_ENABLE when ours is unset (the plugin's alias) */
  const char *dbk = "GDRNET_DMABUF";
  if ((v = getenv(dbk)) == NULL || *v == '\0') v = getenv(dbk = "NCCL_DMABUF_ENABLE");
  if (falsy(v)) {
    f = dr_add(r, "env/DMABUF", c->peermem == DR_YES ? DR_INFO : DR_WARN,
               "%s=%s: GPU memory is never registered through DMA-BUF%s", dbk, v,
               c->peermem == DR_YES ? " (nvidia-peermem covers it)" : ", and nvidia-peermem is not loaded");
    if (c->peermem != DR_YES) dr_fix(r, f, "unset %s", dbk);
  }
  const char *p2p = getenv("NCCL_P2P_DISABLE"), *shm = getenv("NCCL_SHM_DISABLE");
  if (truthy(p2p) || truthy(shm)) {
    f = dr_add(r, "env/NCCL_P2P_SHM", DR_INFO, "NCCL_P2P_DISABLE=%s NCCL_SHM_DISABLE=%s: GPUs of one host also talk "
                                              "through the network plugin (a test setup; slow in production)",
               p2p ? p2p : "-", shm ? shm : "-");
  }

  /* GDRNET_* knobs */
  if ((v = getenv("GDRNET_TRANSPORT")) && strcasecmp(v, "tcp") == 0) {
    f = dr_add(r, "env/GDRNET_TRANSPORT", DR_FAIL, "GDRNET_TRANSPORT=tcp forces TCP: no RDMA, no GPUDirect");
    dr_fix(r, f, "unset GDRNET_TRANSPORT (auto) or set it to rdma");
  }
  if ((v = getenv("GDRNET_GDR")) && falsy(v)) {
    f = dr_add(r, "env/GDRNET_GDR", DR_FAIL, "GDRNET_GDR=0 turns GPUDirect RDMA off in the plugin");
    dr_fix(r, f, "unset GDRNET_GDR (auto)");
  } else if (truthy(v)) {
    f = dr_add(r, "env/GDRNET_GDR", DR_WARN, "GDRNET_GDR=1: the plugin assumes GPUDirect RDMA without probing "
                                            "(meant for tests); registrations fail if the checks above do");
    dr_fix(r, f, "unset GDRNET_GDR (auto probes nvidia-peermem and DMA-BUF)");
  }
  f = NULL;
  size_t nknobs = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "GDRNET_", 7) != 0 && strncmp(*e, "NCCL_IB_", 8) != 0) continue;
    if (f == NULL) f = dr_add(r, "env/knobs", DR_INFO, "plugin knobs set");
    dr_evidence(r, f, "%s", *e);
    nknobs++;
  }
  if (f) {
    free(f->title);
    if (asprintf(&f->title, "%zu GDRNET_*/NCCL_IB_* variable%s set (NCCL_IB_* apply when the GDRNET_* twin is unset)",
                 nknobs, nknobs == 1 ? "" : "s") < 0) {
      f->title = NULL;
      r->oom = true;
    }
  }
  if (r->n == before) dr_add(r, "env", DR_OK, "no NCCL/GDRNET variable works against GPUDirect RDMA");
}
