/* Target tcp_proto: the TCP transport's protocol-version/feature negotiation, gdr_tcp_proto_peer(), on the 32
 * transport-specific bytes a peer puts in its handle (listener) or its HELLO (connector). Both tcp_conn.c call
 * sites pass exactly these bytes; the handle and hello targets reach it through connect/accept too. Invariants:
 * an accepted peer has a version in [1, 65535] and, if it is not a version-1 peer (zeros), the magic and a version
 * >= 2 whose minimum peer version this plugin meets; a rejected one says why. */
#include "fz.h"

#include <stdio.h>

#include "tcp/tcp.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_quiet_log();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fz_in in = {data, size};
  uint8_t tp[32];
  struct tcp_proto p;
  static const struct tcp_proto zero;
  unsigned version = 12345;
  uint32_t features = 0xdeadbeef;
  char why[160] = "";
  int rc;

  fz_bytes(&in, tp, sizeof(tp));
  memcpy(&p, tp, sizeof(p));
  rc = gdr_tcp_proto_peer(tp, &version, &features, why, sizeof(why));
  if (rc == 0) {
    if (memcmp(&p, &zero, sizeof(p)) == 0) {
      if (version != 1 || features != 0) fz_fail("a version-1 peer got version %u features 0x%x", version, features);
    } else if (p.magic != TCP_PROTO_MAGIC || version != p.version || version < 2 || p.min_peer > TCP_PROTO_VERSION ||
               features != p.features) {
      fz_fail("accepted peer data magic 0x%x version %u min %u as version %u features 0x%x", p.magic, p.version,
              p.min_peer, version, features);
    }
  } else if (rc != -1 || why[0] == '\0' || memchr(why, '\0', sizeof(why)) == NULL) {
    fz_fail("rejected peer data with rc %d and no reason", rc);
  }
  return 0;
}
