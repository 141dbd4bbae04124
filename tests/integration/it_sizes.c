/* Sizes 0 B .. 64 MiB in both directions with every byte checked; receives larger than the send
 * (test() must report the sent size, nothing past it written); unaligned sub-ranges. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

#define BUF (64u << 20) + 8192

static const int k_sizes[] = {0,      1,      2,       3,       7,        8,        9,         127,      128,
                              129,    1000,   4095,    4096,    4097,     65535,    65536,     65537,    131072,
                              1 << 20, (1 << 20) + 1, (4 << 20) + 3, 16 << 20, (32 << 20) - 1, 64 << 20};
#define NSIZES (int)(sizeof k_sizes / sizeof k_sizes[0])

static size_t offset_for(int i, int size) {
  /* small messages also at odd offsets of the registered buffer */
  if (size <= (1 << 20) && (i % 3) != 0) return (size_t)(i % 3 == 1 ? 1 : 4096 + 13);
  return 0;
}

static int cap_for(int i, int size) {
  if (i % 2 == 0) return size;                             /* exact */
  long c = (long)size * 2 + 4096;                          /* larger than the send */
  if (c > (long)(64u << 20)) c = 64u << 20;
  return (int)c;
}

static void sender(gn_ctx_t *ctx, it_conn_t *c, uint64_t salt) {
  for (int i = 0; i < NSIZES; i++) {
    it_step("sending %d bytes", k_sizes[i]);
    it_send_pattern(ctx, c, offset_for(i, k_sizes[i]), k_sizes[i], (uint64_t)i, salt);
  }
}

static void receiver(gn_ctx_t *ctx, it_conn_t *c, uint64_t salt) {
  for (int i = 0; i < NSIZES; i++) {
    it_step("receiving %d bytes into %d", k_sizes[i], cap_for(i, k_sizes[i]));
    it_recv_pattern(ctx, c, offset_for(i, k_sizes[i]), cap_for(i, k_sizes[i]), k_sizes[i], (uint64_t)i, salt);
  }
}

/* A bigger receive than the send, many times over a range of sizes: sizes reported exactly. */
static void small_into_large(gn_ctx_t *ctx, it_conn_t *c, int sending, uint64_t salt) {
  const int cap = 256 * 1024;
  for (int i = 0; i < 64; i++) {
    int size = (i * 4099) % cap;
    it_step("%d bytes into a %d-byte receive", size, cap);
    if (sending) it_send_pattern(ctx, c, 0, size, 1000 + (uint64_t)i, salt);
    else it_recv_pattern(ctx, c, 0, cap, size, 1000 + (uint64_t)i, salt);
  }
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_load(&ip);
  it_conn_t c;
  it_conn_open(&ip, 0, fd, BUF, &c);
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, it_env_double("GNIT_PHASE_S", 120));
  /* parent -> child, then child -> parent */
  if (parent) sender(&ctx, &c, 1);
  else receiver(&ctx, &c, 1);
  if (parent) receiver(&ctx, &c, 2);
  else sender(&ctx, &c, 2);
  small_into_large(&ctx, &c, parent, 3);
  small_into_large(&ctx, &c, !parent, 4);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("sizes", 200, side, 60); }
