/* The GIN message path's wire format (plugin/gin/gin_int.h, rdma_os.c's QP address and signal record), restated
 * independently of the plugin's headers for the test programs that play a GIN peer by hand (it_gin_hostile.c,
 * it_gin_many.c): a peer sees the wire, not the plugin's structs. The sizes are pinned below. */
#ifndef GDRNET_IT_GIN_WIRE_H
#define GDRNET_IT_GIN_WIRE_H

#include <stdint.h>

enum {
  OP_REG = 1,
  OP_PUT,
  OP_GET,
  OP_GET_REPLY,
  OP_FLUSH,
  OP_FLUSH_ACK,
  OP_QP,
  OP_QP_READY,
  OP_ABORT,
  OP_MOVE,
  OP_BYE
};
#define F_SIGNAL 0x1u
#define F_INLINE 0x2u
#define F_DATA 0x4u
#define F_RECOVER 0x8u
#define WIRE_MAGIC 0x47524447u
#define MR_NONE 0xffffffffu
#define CAP_BYE 0x1u
#define REC_MAGIC 0x53524447u

struct hdr {
  uint32_t magic;
  uint16_t op, flags;
  uint32_t mr, sig_mr;
  uint64_t off, size, sig_off, sig_val, cookie, aux;
  uint32_t aux_mr, rkey;
};
_Static_assert(sizeof(struct hdr) == 72, "the GIN header is 72 bytes");

/* the introduction each rank sends at connect; caps: CAP_BYE */
struct ident {
  uint32_t magic, rank, nranks, caps;
};

/* rdma_os.c's QP address (GIN_OP_QP's inline payload) */
struct qpinfo {
  uint32_t qpn, psn;
  uint16_t lid;
  uint8_t mtu, link_layer;
  uint32_t inbox_rkey;
  uint8_t gid[16];
  uint64_t inbox_va;
  uint64_t credit_va;
  uint32_t credit_rkey;
  uint32_t ring;
};
_Static_assert(sizeof(struct qpinfo) == 56, "the QP address is 56 bytes");

/* rdma_os.c's signal record, written into the target's inbox */
struct sig_rec {
  uint32_t mr, magic;
  uint64_t off, val, seq;
};

#endif /* GDRNET_IT_GIN_WIRE_H */
