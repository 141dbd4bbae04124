/* TCP transport: placeholder until the data path lands (next commit). */
#include <stdio.h>

#include "tcp.h"

void gdr_tcp_plan_chunks(size_t size, int nthreads, size_t min_chunk, size_t max_chunk, struct gdr_tcp_plan *plan) {
  size_t c = nthreads > 0 ? (size + (size_t)nthreads - 1) / (size_t)nthreads : size;
  c = (c + 4095) & ~(size_t)4095;
  if (c < min_chunk) c = min_chunk;
  if (c > max_chunk) c = max_chunk;
  if (c == 0) c = 1;
  plan->chunk = c;
  plan->nchunks = (uint32_t)((size + c - 1) / c);
}

void gdr_tcp_resolve_streams(int *nsocks, int *nthreads) {
  *nsocks = 2;
  *nthreads = 2;
}

static ncclResult_t tcp_init(int *ndev, char *why, size_t whylen) {
  *ndev = 0;
  snprintf(why, whylen, "TCP transport not implemented yet");
  return ncclSystemError;
}

const struct gdr_transport gdr_transport_tcp = {
    .name = "tcp",
    .id = GDR_TP_TCP,
    .init = tcp_init,
};
