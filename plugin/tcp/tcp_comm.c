/* TCP transport: what every layer of tcp/ shares about a comm and does not own: its failure (set once, by whichever
 * thread sees it first; read on every call) and the wire protocol's version data in handles and HELLOs. Calls nothing
 * else of the transport. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tcp.h"

void gdr_tcp_comm_fail(struct tcp_comm *c, ncclResult_t res, const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&c->fail_mu);
  if (!atomic_load(&c->failed)) {
    c->fail_res = res;
    va_start(ap, fmt);
    vsnprintf(c->fail_why, sizeof(c->fail_why), fmt, ap);
    va_end(ap);
    atomic_store(&c->failed, 1);
  }
  pthread_mutex_unlock(&c->fail_mu);
}

void gdr_tcp_proto_local(struct tcp_proto *p) {
  memset(p, 0, sizeof(*p));
  p->magic = TCP_PROTO_MAGIC;
  p->version = TCP_PROTO_VERSION;
  p->min_peer = TCP_PROTO_MIN;
  p->features = TCP_FEAT_EAGER | TCP_FEAT_GROUPS | TCP_FEAT_FUSED;
}

int gdr_tcp_proto_ndevs(const void *tp_data) {
  struct tcp_proto p;
  memcpy(&p, tp_data, sizeof(p));
  if (p.magic != TCP_PROTO_MAGIC || !(p.features & TCP_FEAT_FUSED) || p.ndevs < 1) return 1;
  return p.ndevs;
}

int gdr_tcp_proto_peer(const void *tp_data, unsigned *version, uint32_t *features, char *why, size_t whylen) {
  struct tcp_proto p;
  static const struct tcp_proto zero;
  memcpy(&p, tp_data, sizeof(p));
  *version = 1;
  *features = 0;
  if (memcmp(&p, &zero, sizeof(p)) == 0) return 0; /* a version-1 plugin: CTS protocol only */
  if (p.magic != TCP_PROTO_MAGIC || p.version < 2) {
    snprintf(why, whylen, "unknown TCP protocol data (magic 0x%08x, version %u)", p.magic, p.version);
    return -1;
  }
  if (p.min_peer > TCP_PROTO_VERSION) {
    snprintf(why, whylen, "its TCP protocol version %u needs a peer of version %u or newer; this plugin speaks %u",
             p.version, p.min_peer, TCP_PROTO_VERSION);
    return -1;
  }
  if (p.version < TCP_PROTO_MATCH) { /* versions 2 and 3 number messages by arrival: not NCCL's rule */
    snprintf(why, whylen,
             "it speaks TCP protocol version %u, this plugin version %u (which matches messages to receives by tag "
             "and ordinal)",
             p.version, TCP_PROTO_VERSION);
    return -1;
  }
  *version = p.version;
  *features = p.features;
  return 0;
}
