/* GPUDirect flush (RDMA transport on the verbs emulator). With VEMU_GDR_LAZY=1 the emulator makes RDMA
 * writes into "device" memory visible only at the next RDMA READ on that device -- the read that the
 * plugin's iflush must issue. Without CUDA the emulator takes a DMA-BUF registration's iova as a host
 * address (its CPU hook for device memory), so the receiver registers a host buffer with regMrDmaBuf
 * (type NCCL_PTR_CUDA, as NCCL does for cudaMalloc memory; the fd is closed right after, as NCCL does).
 * After each receive completes the receiver calls iflush as NCCL does for GDR receives (a NULL request:
 * nothing to wait for) and then every byte must be there.
 *
 * Run with GDRNET_GDR=1: the plugin must then advertise NCCL_PTR_DMABUF and regMrDmaBuf (GPUDirect assumed
 * present); if it does not, GDR detection is broken and the test fails (it never skips). The count of messages
 * not yet visible before their iflush is asserted too: with VEMU_GDR_LAZY=1 every message (the test proves
 * the flush is what makes the data visible, otherwise it proves nothing), without it none. With GNIT_FUSE=2 the
 * connection runs on a fused device of two: its writes arrive through both NICs, and a READ orders only its own
 * NIC's, so iflush must read on each (a flush on one leaves the other's half stale). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it.h"

#define LEN (4u << 20)
#define MSGS 40

static int size_of(int i) {
  static const int pool[] = {1, 100, 4096, 65536, 1 << 20, (4 << 20) - 5, 12345};
  return pool[i % (int)(sizeof pool / sizeof pool[0])];
}

static int side(int fd, int receiver) {
  it_plugin_t ip;
  it_load(&ip);
  const char *gdr = getenv("GDRNET_GDR");
  IT_CHECK(gdr != NULL && strcmp(gdr, "1") == 0, "run with GDRNET_GDR=1 (GPUDirect assumed present), not %s",
           gdr ? gdr : "unset");
  const char *lazy_env = getenv("VEMU_GDR_LAZY");
  int lazy = lazy_env != NULL && strcmp(lazy_env, "1") == 0;
  int ps = ip.props[0].ptrSupport;
  IT_CHECK((ps & NCCL_PTR_DMABUF) && ip.net->regMrDmaBuf != NULL,
           "GDRNET_GDR=1 but the plugin advertises ptrSupport %s%s: GPUDirect detection is broken (DMABUF expected)",
           gn_ptr_support_str(ps), ip.net->regMrDmaBuf ? "" : ", regMrDmaBuf NULL");
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 60);
  void *comm = NULL;
  if (receiver) {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    memset(h, 0, sizeof h);
    void *lc = NULL;
    IT_OK(ip.net->listen(ip.dev, h, &lc)); /* 0, or a fused device (GNIT_FUSE) */
    IT_CHECK(gn_boot_send(fd, h, sizeof h) == 0, "bootstrap");
    IT_GN(&ctx, gn_accept(&ctx, lc, &comm));
    IT_OK(ip.net->closeListen(lc));
  } else {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    IT_CHECK(gn_boot_recv(fd, h, sizeof h, 60) == 0, "bootstrap");
    IT_GN(&ctx, gn_connect(&ctx, ip.dev, h, &comm));
  }
  unsigned char *buf = NULL;
  IT_CHECK(posix_memalign((void **)&buf, 1 << 21, LEN) == 0, "oom");
  memset(buf, IT_CANARY, LEN);
  void *mh = NULL;
  if (receiver) {
    int dfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    IT_CHECK(dfd >= 0, "open /dev/null");
    IT_OK(ip.net->regMrDmaBuf(comm, buf, LEN, NCCL_PTR_CUDA, 0, dfd, &mh));
    close(dfd);
  } else {
    IT_OK(ip.net->regMr(comm, buf, LEN, NCCL_PTR_HOST, &mh));
  }
  int unflushed = 0, nreq = 0;
  for (int i = 0; i < MSGS; i++) {
    int sz = size_of(i);
    uint64_t seed = gn_pattern_seed((uint64_t)sz, (uint64_t)i, 3);
    if (!receiver) {
      gn_pattern_fill(buf, (size_t)sz, seed);
      IT_GN(&ctx, gn_send_sync(&ctx, comm, buf, sz, 0, mh));
      continue;
    }
    memset(buf, IT_CANARY, (size_t)sz);
    int got = -1;
    it_step("message %d (%d bytes)", i, sz);
    IT_GN(&ctx, gn_recv_sync(&ctx, comm, buf, (int)LEN, 0, mh, &got));
    IT_CHECK(got == sz, "test() reported %d bytes, %d sent", got, sz);
    if (gn_pattern_check(buf, (size_t)sz, seed) != (size_t)sz) unflushed++;
    void *data[1] = {buf}, *mhs[1] = {mh}, *req = NULL;
    int sizes[1] = {got};
    IT_OK(ip.net->iflush(comm, 1, data, sizes, mhs, &req));
    if (req != NULL) {
      nreq++;
      IT_GN(&ctx, gn_wait(&ctx, req, NULL));
    }
    size_t bad = gn_pattern_check(buf, (size_t)sz, seed);
    IT_CHECK(bad == (size_t)sz, "message %d (%d bytes): byte %zu wrong after iflush%s: 0x%02x, expected 0x%02x", i, sz,
             bad, req ? " completed" : " returned a NULL request", buf[bad], gn_pattern_byte(seed, bad));
  }
  if (receiver) {
    it_log("%d of %d messages were not yet visible before iflush (VEMU_GDR_LAZY=%d); iflush gave %d requests",
           unflushed, MSGS, lazy, nreq);
    /* lazy: every write into "device" memory waits for the flush's READ, so the flush is what made each message
     * visible; eager: a completed receive has its bytes */
    IT_CHECK(unflushed == (lazy ? MSGS : 0), "%d of %d messages were not visible before iflush; expected %d (%s)",
             unflushed, MSGS, lazy ? MSGS : 0,
             lazy ? "VEMU_GDR_LAZY=1 had no effect: the test would not notice a missing flush"
                  : "a completed receive must have its data without VEMU_GDR_LAZY");
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  IT_OK(ip.net->deregMr(comm, mh));
  if (receiver)
    IT_OK(ip.net->closeRecv(comm));
  else
    IT_OK(ip.net->closeSend(comm));
  free(buf);
  it_unload(&ip);
  return 0;
}

static int child(int fd, void *arg) {
  (void)arg;
  return side(fd, 0);
}

int main(void) {
  it_init("flush", 100);
  it_child_t c;
  it_fork(&c, child, NULL);
  int rc = side(c.fd, 1);
  int st = it_reap(&c, 60);
  IT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sender failed");
  IT_CHECK(rc == 0, "receiver failed");
  it_log("PASS");
  return 0;
}
