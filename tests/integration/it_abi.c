/* Every ABI function, driven like NCCL between two processes, on every device:
 * name "GDR"; init; devices >= 1; getProperties sanity (name non-empty and unique, speed > 0, HOST in
 * ptrSupport, maxRecvs >= 1, maxComms >= 1, host device type/version 0) and rejection of an out-of-range
 * device; getDeviceMr/irecvConsumed NULL (host plugin); listen fills the handle; connect/accept re-entered;
 * closeListen; regMr HOST (and a CUDA registration refused when CUDA is not advertised); isend/irecv/test
 * in both directions incl. 0 bytes and test(sizes NULL) on a send; iflush on a host receive (NULL request
 * or a request that completes); deregMr; closeSend/closeRecv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it.h"

static void check_props(it_plugin_t *ip) {
  for (int d = 0; d < ip->ndev; d++) {
    const ncclNetProperties_v8_t *p = &ip->props[d];
    char sum[1024];
    gn_props_summary(d, p, sum, sizeof sum);
    it_log("%s", sum);
    IT_CHECK(p->name != NULL && p->name[0] != '\0', "dev %d: empty name", d);
    IT_CHECK(p->speed > 0, "dev %d (%s): speed %d", d, p->name, p->speed);
    IT_CHECK(p->ptrSupport & NCCL_PTR_HOST, "dev %d (%s): ptrSupport 0x%x lacks NCCL_PTR_HOST", d, p->name,
             p->ptrSupport);
    IT_CHECK((p->ptrSupport & ~(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) == 0, "dev %d: ptrSupport 0x%x",
             d, p->ptrSupport);
    IT_CHECK(p->maxRecvs >= 1 && p->maxRecvs <= 64, "dev %d (%s): maxRecvs %d", d, p->name, p->maxRecvs);
    IT_CHECK(p->maxComms >= 1, "dev %d (%s): maxComms %d", d, p->name, p->maxComms);
    IT_CHECK(p->netDeviceType == NCCL_NET_DEVICE_HOST && p->netDeviceVersion == 0,
             "dev %d (%s): netDeviceType %d version %d (a host plugin says HOST, 0)", d, p->name, p->netDeviceType,
             p->netDeviceVersion);
    IT_CHECK(p->latency >= 0, "dev %d: latency %f", d, (double)p->latency);
    for (int e = 0; e < d; e++)
      IT_CHECK(strcmp(ip->props[e].name, p->name) != 0, "devs %d and %d share the name %s", e, d, p->name);
    /* the pointers must stay valid: read them again after another call */
    ncclNetProperties_v8_t again;
    IT_OK(ip->net->getProperties(d, &again));
    IT_CHECK(again.name != NULL && strcmp(again.name, p->name) == 0 && again.speed == p->speed,
             "dev %d: properties changed between two calls", d);
  }
  ncclNetProperties_v8_t bad;
  memset(&bad, 0, sizeof bad);
  IT_CHECK(ip->net->getProperties(ip->ndev, &bad) != ncclSuccess, "getProperties(%d) of %d devices succeeded",
           ip->ndev, ip->ndev);
  IT_CHECK(ip->net->getProperties(-1, &bad) != ncclSuccess, "getProperties(-1) succeeded");
  IT_CHECK(ip->net->getDeviceMr == NULL, "getDeviceMr is set: a host plugin leaves it NULL");
  IT_CHECK(ip->net->irecvConsumed == NULL, "irecvConsumed is set: a host plugin leaves it NULL");
}

/* One device's exchange. Parent salt 1 -> child, child salt 2 -> parent. */
static void exchange(it_plugin_t *ip, int dev, int fd, int parent) {
  it_conn_t c;
  it_conn_open(ip, dev, fd, 1 << 20, &c);
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip->net, 60);
  const int sizes[] = {0, 1, 100, 4096, 65536 + 3, 1 << 20};
  const int n = (int)(sizeof sizes / sizeof sizes[0]);
  uint64_t my = parent ? 1 : 2, peer = parent ? 2 : 1;
  for (int round = 0; round < 2; round++) {
    /* round 0: parent sends first; round 1: child sends first (each side alternates send/recv) */
    for (int i = 0; i < n; i++) {
      int send_first = (round == 0) == parent;
      it_step("dev %d round %d message %d (%d bytes)", dev, round, i, sizes[i]);
      if (send_first) {
        it_send_pattern(&ctx, &c, 0, sizes[i], (uint64_t)i, my + 10 * (uint64_t)dev);
        it_recv_pattern(&ctx, &c, 0, sizes[i], sizes[i], (uint64_t)i, peer + 10 * (uint64_t)dev);
      } else {
        it_recv_pattern(&ctx, &c, 0, sizes[i], sizes[i], (uint64_t)i, peer + 10 * (uint64_t)dev);
        it_send_pattern(&ctx, &c, 0, sizes[i], (uint64_t)i, my + 10 * (uint64_t)dev);
      }
    }
  }
  /* iflush on a host receive: nothing to wait for, or a request that completes. */
  it_step("iflush");
  {
    void *data[1] = {c.rbuf}, *mh[1] = {c.rmh};
    int sz[1] = {4096};
    void *req = NULL;
    IT_OK(ip->net->iflush(c.r, 1, data, sz, mh, &req));
    if (req != NULL) IT_GN(&ctx, gn_wait(&ctx, req, NULL));
  }
  /* A second registration of a sub-range, used for one message, then deregistered. */
  it_step("sub-range registration");
  {
    void *mh2 = NULL, *mh3 = NULL;
    IT_OK(ip->net->regMr(c.s, c.sbuf + 4096, 8192, NCCL_PTR_HOST, &mh2));
    IT_OK(ip->net->regMr(c.r, c.rbuf + 4096, 8192, NCCL_PTR_HOST, &mh3));
    IT_CHECK(mh2 != NULL && mh3 != NULL, "regMr gave a NULL mhandle");
    uint64_t s = parent ? 5 : 6, r = parent ? 6 : 5;
    if (parent) {
      gn_pattern_fill(c.sbuf + 4096, 8192, gn_pattern_seed(8192, 0, s));
      IT_GN(&ctx, gn_send_sync(&ctx, c.s, c.sbuf + 4096, 8192, 0, mh2));
    }
    memset(c.rbuf + 4096, IT_CANARY, 8192);
    int got = -1;
    IT_GN(&ctx, gn_recv_sync(&ctx, c.r, c.rbuf + 4096, 8192, 0, mh3, &got));
    it_verify(c.rbuf + 4096, 8192, got, 8192, 0, r, "sub-range receive");
    if (!parent) {
      gn_pattern_fill(c.sbuf + 4096, 8192, gn_pattern_seed(8192, 0, s));
      IT_GN(&ctx, gn_send_sync(&ctx, c.s, c.sbuf + 4096, 8192, 0, mh2));
    }
    IT_OK(ip->net->deregMr(c.s, mh2));
    IT_OK(ip->net->deregMr(c.r, mh3));
  }
  /* CUDA registration of host memory must be refused when CUDA is not advertised. */
  if (!(ip->props[dev].ptrSupport & NCCL_PTR_CUDA)) {
    it_step("regMr(NCCL_PTR_CUDA) on a device without CUDA support");
    void *mh = NULL;
    gn_log_capture(1);
    ncclResult_t r = ip->net->regMr(c.s, c.sbuf, 4096, NCCL_PTR_CUDA, &mh);
    char *log = gn_log_captured();
    IT_CHECK(r != ncclSuccess, "regMr(NCCL_PTR_CUDA) succeeded on %s whose ptrSupport is %s", ip->props[dev].name,
             gn_ptr_support_str(ip->props[dev].ptrSupport));
    IT_CHECK(strstr(log, "WARN") != NULL, "regMr(NCCL_PTR_CUDA) was refused without a WARN line");
    free(log);
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  it_load(&ip);
  /* the emulator runs announce their device count (VEMU_DEVICES): every one must show up */
  int expect = (int)it_env_double("GNIT_EXPECT_NDEV", 0);
  IT_CHECK(expect == 0 || ip.ndev == expect, "devices() gave %d, expected %d (GNIT_EXPECT_NDEV)", ip.ndev, expect);
  check_props(&ip);
  /* listen: the handle is filled, the listen comm is closed without ever accepting */
  {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    memset(h, 0, sizeof h);
    void *lc = NULL;
    IT_OK(ip.net->listen(0, h, &lc));
    IT_CHECK(lc != NULL, "listen gave a NULL listenComm");
    int nz = 0;
    for (size_t i = 0; i < sizeof h; i++) nz |= h[i];
    IT_CHECK(nz != 0, "listen left the 128-byte handle all zeros");
    IT_OK(ip.net->closeListen(lc));
  }
  for (int d = 0; d < ip.ndev; d++) exchange(&ip, d, fd, parent);
  it_unload(&ip);
  return 0;
}

int main(void) { return it_two_sides("abi", 100, side, 30); }
