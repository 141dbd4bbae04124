/* check_hca.c - the RDMA ports the plugin itself would open, found the way it finds them: its own verbs loader
 * (plugin/rdma/ibvwrap.c: GDRNET_IBVERBS_LIB, else libibverbs.so.1, symbols at rdma-core's version nodes), every
 * device's ports queried, the ACTIVE ones kept when GDRNET_HCA / NCCL_IB_HCA selects them (plugin/filter.c).
 *
 * sysfs (check_rdma.c) shows the kernel's devices; what the plugin opens is what libibverbs lists, which is also an
 * emulator's or a provider's without sysfs. When the library was probed, this list is the one the outcome line and
 * the "hca" finding go by: a filter that selects none of these ports is a FAIL even where sysfs shows nothing (or
 * something else). Not probed (--no-verbs, --sysfs-root), the sysfs selection stands. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"

#ifdef DR_WITH_VERBS
#include "rdma/ibvwrap.h"

/* The "hca" finding, writable (dr_find gives a const one); NULL if none. */
static struct dr_finding *find_rw(struct dr_report *r, const char *id) {
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->f[i].id, id) == 0) return &r->f[i];
  return NULL;
}

static const char *hca_knob(const char **which) {
  const char *v = getenv("GDRNET_HCA");
  *which = "GDRNET_HCA";
  if (v && *v) return v;
  v = getenv("NCCL_IB_HCA");
  *which = "NCCL_IB_HCA";
  if (v && *v) return v;
  *which = NULL;
  return NULL;
}

void dr_check_hca_verbs(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  char why[512] = "";
  char *all = NULL, *sel = NULL;
  struct ibv_device **list = NULL;
  int n = 0;
  if (!c->probe_verbs || !c->verbs_loaded) return; /* not probed, or rdma-core's finding says why it cannot load */
  const char *which = NULL;
  const char *spec = hca_knob(&which);
  struct gdr_filter filt;
  if (gdr_filter_parse(spec, &filt, why, sizeof why) != ncclSuccess) return; /* "hca" already says malformed */
  if (gdr_ibv_load(why, sizeof why) != 0) {
    struct dr_finding *f =
        dr_add(r, "hca/verbs", DR_INFO, "the plugin's verbs loader refuses %s: it would use no RDMA device",
               gdr_ibv_lib_name());
    dr_evidence(r, f, "%s", why);
    free(c->rdma_ports);
    c->rdma_ports = NULL;
    return;
  }
  list = gdr_ibv.get_device_list(&n);
  for (int i = 0; list != NULL && i < n; i++) {
    const char *name = gdr_ibv.get_device_name(list[i]);
    struct ibv_context *ctx = gdr_ibv.open_device(list[i]);
    struct ibv_device_attr da;
    if (ctx == NULL || gdr_ibv.query_device(ctx, &da) != 0) {
      if (dr_append(&all, "%s (cannot open: %s)", name ? name : "?", strerror(errno)) < 0) r->oom = true;
      if (ctx) gdr_ibv.close_device(ctx);
      continue;
    }
    for (int p = 1; p <= da.phys_port_cnt; p++) {
      struct ibv_port_attr pa;
      if (gdr_ibv_query_port(ctx, (uint8_t)p, &pa, NULL) != 0) continue;
      int active = pa.state == IBV_PORT_ACTIVE;
      if (dr_append(&all, "%s:%d (%s)", name, p, active ? "ACTIVE" : "down") < 0) r->oom = true;
      if (active && gdr_filter_match(&filt, name, p) && dr_append(&sel, "%s:%d", name, p) < 0) r->oom = true;
    }
    gdr_ibv.close_device(ctx);
  }
  if (list != NULL) gdr_ibv.free_device_list(list);

  /* what the plugin opens replaces what sysfs suggested */
  free(c->rdma_ports);
  c->rdma_ports = sel;
  if (which == NULL) {
    free(all);
    return;
  }
  struct dr_finding *h = find_rw(r, "hca");
  if (sel == NULL && (all != NULL || h == NULL || h->status != DR_FAIL)) {
    char *title = NULL;
    if (asprintf(&title, "%s=%s selects none of the ACTIVE ports the plugin opens: it falls back to TCP", which, spec) <
        0) {
      r->oom = true;
      free(all);
      return;
    }
    if (h == NULL) {
      h = dr_add(r, "hca", DR_FAIL, "%s", title);
      free(title);
    } else {
      free(h->title);
      h->title = title;
      h->status = DR_FAIL;
    }
    dr_fix(r, h, "name one of the ports %s lists (%s), or unset %s", gdr_ibv_lib_name(), all ? all : "none", which);
  } else if (h == NULL) {
    h = dr_add(r, "hca", DR_OK, "%s=%s selects %s", which, spec, sel);
  }
  dr_evidence(r, h, "the ports the plugin's verbs library (%s) lists: %s", gdr_ibv_lib_name(), all ? all : "none");
  free(all);
}

#else

/* A TCP-only build (GDRNET_WITH_RDMA=OFF): the plugin opens no RDMA device, whatever sysfs shows. */
void dr_check_hca_verbs(struct dr_ctx *c) {
  free(c->rdma_ports);
  c->rdma_ports = NULL;
}

#endif
