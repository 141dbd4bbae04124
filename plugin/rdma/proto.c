/* Handshake blob validation (pure). See proto.h. */
#include "proto.h"

#include <string.h>

const char *gdr_rdma_hs_check(const struct gdr_rdma_hs *hs, int expected_role) {
  if (hs->magic != GDR_RDMA_HS_MAGIC) {
    if (hs->magic == __builtin_bswap32(GDR_RDMA_HS_MAGIC)) return "peer has the other byte order";
    return "bad magic (not a libnccl-net-gdr RDMA peer)";
  }
  if (hs->version != GDR_RDMA_HS_VERSION) return "protocol version mismatch";
  if (hs->size != sizeof(*hs)) return "handshake size mismatch";
  if (hs->role != expected_role) return "unexpected role";
  if (hs->link_layer != 1 && hs->link_layer != 2) return "unknown link layer";
  if (hs->mtu < 1 || hs->mtu > 5) return "MTU out of range";
  if (hs->nqps < 1 || hs->nqps > GDR_RDMA_MAX_QPS) return "QP count out of range";
  if (hs->split > 1) return "split flag out of range";
  if (hs->port < 1) return "port out of range";
  for (int i = 0; i < hs->nqps; i++) {
    if (hs->qpn[i] == 0 || hs->qpn[i] > 0xffffffu) return "QP number out of range";
    if (hs->psn[i] > 0xffffffu) return "PSN out of range";
  }
  if (hs->raddr == 0 || hs->rkey == 0) return "missing FIFO/sizes address or rkey";
  if (hs->link_layer == 1 && !hs->is_global && (hs->lid == 0 || hs->lid >= 0xc000)) return "IB LID not unicast";
  if (memchr(hs->devname, '\0', sizeof(hs->devname)) == NULL) return "device name not terminated";
  return NULL;
}
