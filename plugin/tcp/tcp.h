/* The TCP transport (gdr_transport_tcp): see tcp.c for the design. Internal helpers exposed for unit tests. */
#ifndef GDRNET_TCP_H
#define GDRNET_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

/* Chunk plan of a large message: nchunks chunks of chunk bytes (the last one shorter), spread over nthreads
 * helper threads. chunk = size / nthreads rounded up to 4 KiB, clamped to [min_chunk, max_chunk]. */
struct gdr_tcp_plan {
  size_t chunk;
  uint32_t nchunks;
};
void gdr_tcp_plan_chunks(size_t size, int nthreads, size_t min_chunk, size_t max_chunk, struct gdr_tcp_plan *plan);
/* offset and length of chunk i of a plan */
static inline size_t gdr_tcp_chunk_off(const struct gdr_tcp_plan *p, uint32_t i) { return (size_t)i * p->chunk; }
static inline size_t gdr_tcp_chunk_len(const struct gdr_tcp_plan *p, size_t size, uint32_t i) {
  size_t off = (size_t)i * p->chunk;
  return off >= size ? 0 : (size - off < p->chunk ? size - off : p->chunk);
}

/* Resolved stream/thread counts for this host (GDRNET_TCP_NSOCKS/NTHREADS, NCCL aliases, core count). */
void gdr_tcp_resolve_streams(int *nsocks, int *nthreads);

#endif /* GDRNET_TCP_H */
