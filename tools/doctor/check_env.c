/* check_env.c - environment variables that keep NCCL away from this plugin or from GPUDirect RDMA, and the plugin's
 * own knobs checked with the plugin's table and parser (plugin/params.def, param.c): a value init rejects is a
 * FAIL, an unknown GDRNET_ name a WARN with the closest knob, a bad NCCL alias value (which the plugin ignores) a
 * WARN. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "doctor.h"
#include "log.h"
#include "param.h"

extern char **environ;

static bool truthy(const char *v) {
  return v && (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0);
}
static bool falsy(const char *v) {
  return v && (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0);
}

/* The plugin's logger during the doctor's use of its parser: the doctor reports findings itself, so the plugin's own
 * WARN/INFO lines are dropped. */
static void quiet_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
                         ...) {
  (void)level;
  (void)flags;
  (void)file;
  (void)line;
  (void)fmt;
}

/* A device/interface filter knob the plugin's parser (filter.c) rejects: a FAIL saying what follows; returns 1 if
 * so, else 0. */
static size_t bad_filter(struct dr_report *r, const char *name, const char *val, const char *consequence,
                         const char *syntax) {
  struct gdr_filter flt;
  char why[256], id[160];
  if (gdr_filter_parse(val, &flt, why, sizeof why) == ncclSuccess) return 0;
  snprintf(id, sizeof id, "knob/%s", name);
  struct dr_finding *f = dr_add(r, id, DR_FAIL, "%s=\"%s\" is malformed: %s", name, val, consequence);
  dr_evidence(r, f, "%s", why);
  dr_fix(r, f, "syntax: %s", syntax);
  return 1;
}

/* Every GDRNET_* and NCCL alias the plugin reads, parsed as the plugin's init parses them. */
static void check_knobs(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  struct dr_finding *f, *list = NULL;
  size_t nknobs = 0, bad = 0;
  char why[384], acc[256], id[160];

  for (char **e = environ; e && *e; e++) {
    char name[128];
    size_t n = strcspn(*e, "=");
    const char *val = (*e)[n] == '=' ? *e + n + 1 : "";
    if (n >= sizeof name) continue;
    memcpy(name, *e, n);
    name[n] = '\0';
    int ours = strncmp(name, "GDRNET_", 7) == 0;
    enum gdr_param_id pid = GDR_PARAM_COUNT;
    if (!ours) { /* an NCCL alias of one of our knobs? */
      for (int i = 0; i < GDR_PARAM_COUNT; i++) {
        const struct gdr_param_info *pi = gdr_param_info((enum gdr_param_id)i);
        if (pi->alias && strcmp(pi->alias, name) == 0) pid = (enum gdr_param_id)i;
      }
      if (pid == GDR_PARAM_COUNT && strncmp(name, "NCCL_IB_", 8) != 0) continue;
    } else {
      if (gdr_param_reserved(name)) continue;
      pid = gdr_param_lookup(name);
    }
    if (list == NULL) list = dr_add(r, "env/knobs", DR_INFO, "plugin knobs set");
    dr_evidence(r, list, "%s", *e);
    nknobs++;
    if (ours && pid == GDR_PARAM_COUNT) {
      const char *s = gdr_param_suggest(name);
      snprintf(id, sizeof id, "knob/%s", name);
      f = dr_add(r, id, DR_WARN, "%s is not a knob of this plugin: it is ignored%s%s%s", name,
                 s ? " (did you mean " : "", s ? s : "", s ? "?)" : "");
      if (s)
        dr_fix(r, f, "rename it to %s (the knobs: %s)", s, gdr_param_config_doc());
      else
        dr_fix(r, f, "unset it; the knobs: %s", gdr_param_config_doc());
      bad++;
      continue;
    }
    if (pid == GDR_PARAM_COUNT || *val == '\0') continue; /* an NCCL_IB_* the plugin does not read; empty = unset */
    const struct gdr_param_info *pi = gdr_param_info(pid);
    int64_t v;
    if (gdr_param_parse(pi, val, &v, why, sizeof why) != ncclSuccess) {
      gdr_param_accepted(pi, acc, sizeof acc);
      snprintf(id, sizeof id, "knob/%s", name);
      if (ours) {
        f = dr_add(r, id, DR_FAIL,
                   "%s=\"%s\" is invalid: the plugin's init fails (NCCL then falls back to its own IB/Socket "
                   "transport, or with NCCL_NET=GDR fails: \"Failed to initialize any NET plugin\")",
                   name, val);
      } else {
        const char *set = getenv(pi->name);
        f = dr_add(r, id, DR_WARN, "%s=\"%s\" is invalid for this plugin: %s", name, val,
                   set && *set ? "ignored (its GDRNET_ twin is set anyway)" : "ignored, the default is used");
      }
      dr_evidence(r, f, "%s", why);
      dr_fix(r, f, "set %s to %s, or unset it", name, acc);
      bad++;
      continue;
    }
    /* a malformed HCA filter leaves the plugin without RDMA device (the "hca" finding says so where sysfs lists
     * devices); a malformed interface filter makes init fail */
    if (pid == GDR_PARAM_HCA && c->ndevs == 0)
      bad += bad_filter(r, name, val, "the plugin uses no RDMA device",
                        "[^][=]name[:port][,...] (prefix match unless \"=\", \"^\" excludes), e.g. mlx5_0:1,mlx5_1");
    if (pid == GDR_PARAM_SOCKET_IFNAME)
      bad += bad_filter(r, name, val, "the plugin's init fails",
                        "[^][=]name[,name...] (prefix match unless \"=\", \"^\" excludes), e.g. eth0 or ^docker,lo");
  }
  /* NCCL_IB_DISABLE=1 (or GDRNET_IB_DISABLE=1), resolved exactly as the plugin resolves it */
  gdr_log_init(quiet_logger);
  gdr_params_reset();
  (void)gdr_params_load(); /* a bad value was reported above; the others resolve as in the plugin */
  if (gdr_param_int(GDR_PARAM_IB_DISABLE)) {
    int alias = gdr_param_source(GDR_PARAM_IB_DISABLE) == GDR_PSRC_ALIAS;
    const char *k = alias ? "NCCL_IB_DISABLE" : "GDRNET_IB_DISABLE";
    /* NCCL never reads GDRNET_*: only NCCL_IB_DISABLE turns NCCL's own IB transport off as well */
    if (alias)
      f = dr_add(r, "env/NCCL_IB_DISABLE", DR_FAIL,
                 "NCCL_IB_DISABLE=1: no RDMA at all, neither NCCL's IB transport nor this plugin's (it uses TCP)");
    else
      f = dr_add(r, "env/GDRNET_IB_DISABLE", DR_FAIL,
                 "GDRNET_IB_DISABLE=1: this plugin uses no RDMA device (it runs over TCP)");
    if (alias) dr_evidence(r, f, "the plugin honours NCCL_IB_DISABLE when GDRNET_IB_DISABLE is unset");
    dr_fix(r, f, "unset %s unless you mean to forbid RDMA; select the plugin with NCCL_NET=GDR", k);
  }
  /* the plugin's own interface selection, with the values just resolved: a value that selects nothing is not
   * "valid" either */
  if (dr_check_socket_ifname(c)) bad++;
  gdr_log_init(quiet_logger);
  gdr_params_reset();
  gdr_log_init(NULL);

  if (list) {
    free(list->title);
    if (asprintf(&list->title,
                 "%zu GDRNET_*/NCCL_IB_* variable%s set (NCCL_IB_* apply when the GDRNET_* twin is "
                 "unset)%s",
                 nknobs, nknobs == 1 ? "" : "s", bad ? "" : ": every value valid for the plugin") < 0) {
      list->title = NULL;
      r->oom = true;
    }
  }
}

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
  dr_check_nccl_plugin(c); /* env/NCCL_NET_PLUGIN: the libraries NCCL will dlopen, tried */
  if ((v = getenv("NCCL_NET_GDR_LEVEL")) && *v) {
    int lvl = dr_gdr_level(v);
    if (lvl == 0) {
      f = dr_add(r, "env/NCCL_NET_GDR_LEVEL", DR_FAIL, "NCCL_NET_GDR_LEVEL=%s disables GPUDirect RDMA for every GPU",
                 v);
      dr_fix(r, f,
             "unset NCCL_NET_GDR_LEVEL (default PXB) or set it to the GPU-NIC distance shown by the topo findings");
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
    f = dr_add(r, "env/NCCL_NET_GDR_READ", DR_WARN,
               "NCCL_NET_GDR_READ=0: sends are staged through host memory "
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
    f = dr_add(r, "env/NCCL_P2P_SHM", DR_INFO,
               "NCCL_P2P_DISABLE=%s NCCL_SHM_DISABLE=%s: GPUs of one host also talk "
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
    f = dr_add(r, "env/GDRNET_GDR", DR_WARN,
               "GDRNET_GDR=1: the plugin assumes GPUDirect RDMA without probing "
               "(meant for tests); registrations fail if the checks above do");
    dr_fix(r, f, "unset GDRNET_GDR (auto probes nvidia-peermem and DMA-BUF)");
  }
  check_knobs(c);
  if (r->n == before) dr_add(r, "env", DR_OK, "no NCCL/GDRNET variable works against GPUDirect RDMA");
}
