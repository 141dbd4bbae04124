/* doctor.c - run every check in order. */
#include <stdlib.h>

#include "doctor.h"

void dr_run_all(struct dr_ctx *c) {
  c->verbs_devices = -1;
  c->verbs_dmabuf = DR_UNKNOWN;
  c->cuda_dmabuf = DR_UNKNOWN;
  c->peermem = DR_UNKNOWN;
  c->dmabuf = DR_UNKNOWN;
  dr_scan_pci(c);
  dr_check_verbs_lib(c);
  dr_check_rdma_devices(c);
  dr_check_hca_verbs(c);
  dr_check_limits(c);
  dr_check_gpus(c);
  dr_check_gdr(c);
  dr_check_iommu(c);
  dr_check_topology(c);
  dr_check_env(c);
}

void dr_ctx_free(struct dr_ctx *c) {
  for (size_t i = 0; i < c->ndevs; i++) free(c->devs[i].ports);
  free(c->devs);
  free(c->gpus);
  free(c->pci_nics);
  free(c->net_ifaces);
  free(c->rdma_ports);
  free(c->tcp_ifs);
  c->rdma_ports = c->tcp_ifs = NULL;
  c->devs = NULL;
  c->gpus = NULL;
  c->pci_nics = c->net_ifaces = NULL;
  c->ndevs = c->ngpus = 0;
}
