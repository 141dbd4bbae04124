/* GPUDirect flush (RDMA transport on the verbs emulator). With VEMU_GDR_LAZY=1 the emulator makes RDMA
 * writes into "device" memory visible only at the next RDMA READ on that device -- the read that the
 * plugin's iflush must issue. Without CUDA the emulator takes a DMA-BUF registration's iova as a host
 * address (its CPU hook for device memory), so the receiver registers a host buffer with regMrDmaBuf
 * (type NCCL_PTR_CUDA, as NCCL does for cudaMalloc memory; the fd is closed right after, as NCCL does).
 * After each receive completes the receiver calls iflush as NCCL does for GDR receives (a NULL request:
 * nothing to wait for) and then every byte must be there. Needs GDRNET_GDR=1 and a plugin that
 * advertises NCCL_PTR_DMABUF; otherwise the test is skipped (exit 77). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it.h"

#define SKIP 77
#define LEN (4u << 20)
#define MSGS 40

static int size_of(int i) {
  static const int pool[] = {1, 100, 4096, 65536, 1 << 20, (4 << 20) - 5, 12345};
  return pool[i % (int)(sizeof pool / sizeof pool[0])];
}

static int side(int fd, int receiver) {
  it_plugin_t ip;
  it_load(&ip);
  int ps = ip.props[0].ptrSupport;
  int ok = (ps & NCCL_PTR_DMABUF) && ip.net->regMrDmaBuf != NULL;
  int peer_ok = 0;
  IT_CHECK(gn_boot_send(fd, &ok, sizeof ok) == 0 && gn_boot_recv(fd, &peer_ok, sizeof peer_ok, 60) == 0, "bootstrap");
  if (!ok || !peer_ok) {
    if (receiver)
      it_log("SKIP: ptrSupport is %s%s (needs DMABUF: set GDRNET_GDR=1 on the emulator)", gn_ptr_support_str(ps),
             ip.net->regMrDmaBuf ? "" : ", regMrDmaBuf NULL");
    it_unload(&ip);
    return SKIP;
  }
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 60);
  void *comm = NULL;
  if (receiver) {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    memset(h, 0, sizeof h);
    void *lc = NULL;
    IT_OK(ip.net->listen(0, h, &lc));
    IT_CHECK(gn_boot_send(fd, h, sizeof h) == 0, "bootstrap");
    IT_GN(&ctx, gn_accept(&ctx, lc, &comm));
    IT_OK(ip.net->closeListen(lc));
  } else {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    IT_CHECK(gn_boot_recv(fd, h, sizeof h, 60) == 0, "bootstrap");
    IT_GN(&ctx, gn_connect(&ctx, 0, h, &comm));
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
  if (receiver)
    it_log("%d of %d messages were not yet visible before iflush (the emulator's lazy mode at work); iflush gave "
           "%d requests",
           unflushed, MSGS, nreq);
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  IT_OK(ip.net->deregMr(comm, mh));
  if (receiver) IT_OK(ip.net->closeRecv(comm));
  else IT_OK(ip.net->closeSend(comm));
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
  IT_CHECK(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == SKIP), "sender failed");
  if (rc == SKIP) return SKIP;
  it_log("PASS");
  return 0;
}
