/* The reference model of NCCL IB's matching rule (docs/design.md "Contract: matching"), per connection:
 *
 *   - receives are posted in order: slot 0, 1, ...; a grouped receive is one slot of n <= 8 buffers whose tags may
 *     repeat;
 *   - the current slot is the oldest slot not yet filled; an isend with tag t fills the first buffer of the
 *     current slot that has tag t and is still free;
 *   - an isend that matches nothing in the current slot is refused ("try again": a NULL request), never an error;
 *   - a send larger than the buffer it fills is an error; each buffer reports its own size (the sent size).
 *
 * Consequence: placement is deterministic (the k-th isend with tag t lands in the k-th buffer with tag t, counting
 * in slot order); a transport may differ from the model only in timing (accept an isend earlier or later).
 * The tester (contract.c) runs a schedule through the model to know where every byte must land, then checks the
 * plugin against it. */
#ifndef GDRNET_CONTRACT_MODEL_H
#define GDRNET_CONTRACT_MODEL_H

#define CM_MAXN 8

typedef struct {
  int n;               /* buffers */
  int tag[CM_MAXN];    /* the receive's tags */
  int cap[CM_MAXN];    /* the receive's sizes */
  int filled[CM_MAXN]; /* 1 once an isend filled it */
  int size[CM_MAXN];   /* the size that isend sent: what test() must report */
  int nfilled;
} cm_slot_t;

typedef struct {
  cm_slot_t *slot;
  int nslots, alloc;
  int cur;   /* the current slot: the oldest not yet filled (== nslots when every posted slot is filled) */
  int wrong; /* self-test only: a deliberately wrong rule (the LAST free buffer with the tag) */
} cm_model_t;

enum cm_result { CM_NULL = 0, CM_PLACED = 1, CM_ERROR = -1 };

void cm_init(cm_model_t *m);
void cm_free(cm_model_t *m);
/* irecv: appends a slot; returns its index, -1 when out of memory or n outside 1..CM_MAXN. */
int cm_post(cm_model_t *m, int n, const int *tags, const int *caps);
/* isend(tag, size): CM_PLACED with slot and buf set, CM_NULL (try again) or CM_ERROR (larger than the buffer it
 * would fill; slot and buf name that buffer). */
int cm_isend(cm_model_t *m, int tag, int size, int *slot, int *buf);
/* 1 when every buffer of the slot is filled: its receive may complete, test() reporting size[]. */
int cm_slot_full(const cm_model_t *m, int slot);

#endif
