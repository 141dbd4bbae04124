/* Every exported table, v6 .. v12, one after the other in one process (dlopen, init, checks, [finalize,] dlclose):
 *   - the table has its version's members (NULL getDeviceMr/irecvConsumed: a host plugin), name "GDR";
 *   - init through the table's own signature succeeds and the plugin's INFO line names the table NCCL called;
 *   - every device's properties in the table's layout agree with v8's on the shared fields; v9+: vProps is
 *     {1, {dev}}, maxP2pBytes = maxCollBytes = the transport's true limit (1 TiB, NCCL's largest, on both), forceFlush 0
 *     (1 on GPUDirect devices with GDRNET_FORCE_FLUSH=1); v11+: maxMultiRequestSize 1; v12: railId = planeId = -1;
 *   - v9+ makeVDevice: refuses 0 devices, more than the version's maximum (4; v12: 8), a device twice, a device
 *     that does not exist; one device gives that device; two devices (when there are two) give a new index that
 *     devices() counts, with name "a+b", speed the sum, the first's PCI path, vProps {2, {0, 1}}, and the same
 *     index when asked again;
 *   - v11+: two contexts at once, setNetAttr accepted (NULL too) and said once, finalize of each, a second
 *     finalize of the same context refused. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdrnet/net.h"
#include "it.h"

static int g_ndev;
static ncclNetProperties_v8_t g_p8[IT_MAX_DEVS];
static const char *g_transport;

static void *open_table(int v, void **dl) {
  char sym[32];
  snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
  *dl = dlopen(it_plugin_path(), RTLD_NOW | RTLD_LOCAL);
  IT_CHECK(*dl != NULL, "dlopen(%s): %s", it_plugin_path(), dlerror());
  void *t = dlsym(*dl, sym);
  IT_CHECK(t != NULL, "%s is not exported", sym);
  const ncclNet_v6_t *t6 = t;
  IT_CHECK(t6->name != NULL && strcmp(t6->name, "GDR") == 0, "%s.name is \"%s\"", sym, t6->name ? t6->name : "");
  return t;
}

static void expect_info(int v) {
  char *log = gn_log_captured();
  char want[64];
  snprintf(want, sizeof want, "NCCL called ncclNetPlugin_v%d", v);
  IT_CHECK(strstr(log, want) != NULL, "init through v%d: no \"%s\" line in the plugin's log", v, want);
  free(log);
}

static void common_fields(int v, int d, const char *name, const char *pci, uint64_t guid, int ptr, int speed, int port,
                          int maxComms, int maxRecvs) {
  const ncclNetProperties_v8_t *e = &g_p8[d];
  IT_CHECK(name != NULL && strcmp(name, e->name) == 0, "v%d dev %d: name %s, v8 says %s", v, d, name ? name : "-",
           e->name);
  IT_CHECK((pci == NULL) == (e->pciPath == NULL) && (pci == NULL || strcmp(pci, e->pciPath) == 0),
           "v%d dev %d: pciPath differs from v8's", v, d);
  IT_CHECK(guid == e->guid && ptr == e->ptrSupport && speed == e->speed && port == e->port && maxComms == e->maxComms &&
               maxRecvs == e->maxRecvs,
           "v%d dev %d: guid/ptrSupport/speed/port/maxComms/maxRecvs differ from v8's", v, d);
}

/* v9+ fields of one physical device, whichever layout (V is the properties type) */
#define CHECK_V9(V, p, d)                                                                                              \
  do {                                                                                                                 \
    size_t lim = (size_t)1 << 40;                                                                                      \
    int gdr = ((p).ptrSupport & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) != 0;                                               \
    int ff = gdr && it_env_double("GDRNET_FORCE_FLUSH", 0) == 1;                                                       \
    IT_CHECK((p).vProps.ndevs == 1 && (p).vProps.devs[0] == (d), "v%d dev %d: vProps {%d, %d}", V, d,                  \
             (p).vProps.ndevs, (p).vProps.devs[0]);                                                                    \
    IT_CHECK((p).maxP2pBytes == lim && (p).maxCollBytes == lim,                                                        \
             "v%d dev %d: maxP2pBytes %zu maxCollBytes %zu, the "                                                      \
             "%s transport's limit is %zu",                                                                            \
             V, d, (p).maxP2pBytes, (p).maxCollBytes, g_transport, lim);                                               \
    IT_CHECK((p).forceFlush == ff, "v%d dev %d: forceFlush %d, expected %d", V, d, (p).forceFlush, ff);                \
    IT_CHECK((p).regIsGlobal == g_p8[d].regIsGlobal && (p).netDeviceType == g_p8[d].netDeviceType,                     \
             "v%d dev %d: regIsGlobal/netDeviceType differ from v8's", V, d);                                          \
  } while (0)

/* makeVDevice through table t of version v (max devices per fused NIC: max) */
#define CHECK_VDEV(V, T, VP, PT, max)                                                                                  \
  do {                                                                                                                 \
    VP vp;                                                                                                             \
    int d = -1, n = 0;                                                                                                 \
    memset(&vp, 0, sizeof vp);                                                                                         \
    vp.ndevs = 0;                                                                                                      \
    IT_CHECK((T)->makeVDevice(&d, &vp) != ncclSuccess, "v%d makeVDevice of 0 devices succeeded", V);                   \
    vp.ndevs = (max) + 1;                                                                                              \
    IT_CHECK((T)->makeVDevice(&d, &vp) != ncclSuccess, "v%d makeVDevice of %d devices succeeded", V, (max) + 1);       \
    vp.ndevs = 2;                                                                                                      \
    vp.devs[0] = vp.devs[1] = 0;                                                                                       \
    IT_CHECK((T)->makeVDevice(&d, &vp) != ncclSuccess, "v%d makeVDevice of one device twice succeeded", V);            \
    vp.devs[1] = g_ndev;                                                                                               \
    IT_CHECK((T)->makeVDevice(&d, &vp) != ncclSuccess, "v%d makeVDevice of device %d (of %d) succeeded", V, g_ndev,    \
             g_ndev);                                                                                                  \
    vp.ndevs = 1;                                                                                                      \
    vp.devs[0] = g_ndev - 1;                                                                                           \
    IT_OK((T)->makeVDevice(&d, &vp));                                                                                  \
    IT_CHECK(d == g_ndev - 1, "v%d makeVDevice of device %d alone gave %d", V, g_ndev - 1, d);                         \
    IT_OK((T)->devices(&n));                                                                                           \
    IT_CHECK(n == g_ndev, "v%d: %d devices after a fused device of one, %d before", V, n, g_ndev);                     \
    if (g_ndev >= 2) {                                                                                                 \
      PT fp;                                                                                                           \
      char want[512];                                                                                                  \
      int d2 = -1;                                                                                                     \
      vp.ndevs = 2;                                                                                                    \
      vp.devs[0] = 0;                                                                                                  \
      vp.devs[1] = 1;                                                                                                  \
      IT_OK((T)->makeVDevice(&d, &vp));                                                                                \
      IT_CHECK(d == g_ndev, "v%d: the first fused device got index %d, expected %d", V, d, g_ndev);                    \
      IT_OK((T)->devices(&n));                                                                                         \
      IT_CHECK(n == g_ndev + 1, "v%d: devices() %d after a fused device (%d physical)", V, n, g_ndev);                 \
      IT_OK((T)->makeVDevice(&d2, &vp));                                                                               \
      IT_CHECK(d2 == d, "v%d: the same fused device again got index %d, first %d", V, d2, d);                          \
      IT_OK((T)->getProperties(d, &fp));                                                                               \
      snprintf(want, sizeof want, "%s+%s", g_p8[0].name, g_p8[1].name);                                                \
      IT_CHECK(strcmp(fp.name, want) == 0, "v%d: fused device named %s, expected %s", V, fp.name, want);               \
      IT_CHECK(fp.speed == g_p8[0].speed + g_p8[1].speed, "v%d: fused speed %d, expected %d + %d", V, fp.speed,        \
               g_p8[0].speed, g_p8[1].speed);                                                                          \
      IT_CHECK((fp.pciPath == NULL && g_p8[0].pciPath == NULL) ||                                                      \
                   (fp.pciPath && g_p8[0].pciPath && strcmp(fp.pciPath, g_p8[0].pciPath) == 0),                        \
               "v%d: the fused device's pciPath is not its first device's", V);                                        \
      IT_CHECK(fp.vProps.ndevs == 2 && fp.vProps.devs[0] == 0 && fp.vProps.devs[1] == 1,                               \
               "v%d: fused vProps {%d, %d, %d}", V, fp.vProps.ndevs, fp.vProps.devs[0], fp.vProps.devs[1]);            \
      IT_CHECK(fp.ptrSupport == (g_p8[0].ptrSupport & g_p8[1].ptrSupport) &&                                           \
                   fp.maxRecvs == (g_p8[0].maxRecvs < g_p8[1].maxRecvs ? g_p8[0].maxRecvs : g_p8[1].maxRecvs),         \
               "v%d: fused ptrSupport/maxRecvs are not the intersection", V);                                          \
      it_log("v%d: fused device [%d] %s, %d Mbps", V, d, fp.name, fp.speed);                                           \
    }                                                                                                                  \
  } while (0)

static void v8_baseline(void) {
  void *dl;
  const ncclNet_v8_t *t = open_table(8, &dl);
  IT_CHECK(t->getDeviceMr == NULL && t->irecvConsumed == NULL, "v8: getDeviceMr/irecvConsumed set");
  gn_log_capture(1);
  IT_OK(t->init(gn_logger));
  expect_info(8);
  IT_OK(t->devices(&g_ndev));
  IT_CHECK(g_ndev >= 1 && g_ndev <= IT_MAX_DEVS, "devices() gave %d", g_ndev);
  for (int d = 0; d < g_ndev; d++) {
    IT_OK(t->getProperties(d, &g_p8[d]));
    /* the strings live until fini: keep copies for the other versions' comparisons */
    g_p8[d].name = strdup(g_p8[d].name);
    g_p8[d].pciPath = g_p8[d].pciPath ? strdup(g_p8[d].pciPath) : NULL;
  }
  IT_CHECK(dlclose(dl) == 0, "dlclose");
}

static void check_v6(void) {
  void *dl;
  const ncclNet_v6_t *t = open_table(6, &dl);
  gn_log_capture(1);
  IT_OK(t->init(gn_logger));
  expect_info(6);
  for (int d = 0; d < g_ndev; d++) {
    ncclNetProperties_v6_t p;
    IT_OK(t->getProperties(d, &p));
    common_fields(6, d, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.maxComms, p.maxRecvs);
  }
  IT_CHECK(dlclose(dl) == 0, "dlclose");
}

static void check_v7(void) {
  void *dl;
  const ncclNet_v7_t *t = open_table(7, &dl);
  IT_CHECK(t->getDeviceMr == NULL && t->irecvConsumed == NULL, "v7: getDeviceMr/irecvConsumed set");
  gn_log_capture(1);
  IT_OK(t->init(gn_logger));
  expect_info(7);
  for (int d = 0; d < g_ndev; d++) {
    ncclNetProperties_v7_t p;
    IT_OK(t->getProperties(d, &p));
    common_fields(7, d, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.maxComms, p.maxRecvs);
    IT_CHECK(p.netDeviceType == NCCL_NET_DEVICE_HOST && p.netDeviceVersion == 0, "v7 dev %d: device type", d);
  }
  IT_CHECK(dlclose(dl) == 0, "dlclose");
}

static ncclResult_t prof(void **eh, int type, void *ph, int64_t id, void *ext) {
  (void)eh, (void)type, (void)ph, (void)id, (void)ext;
  return ncclSuccess;
}

static void check_v9(void) {
  void *dl;
  const ncclNet_v9_t *t = open_table(9, &dl);
  IT_CHECK(t->makeVDevice != NULL && t->getDeviceMr == NULL && t->irecvConsumed == NULL, "v9 members");
  gn_log_capture(1);
  IT_OK(t->init(gn_logger));
  expect_info(9);
  for (int d = 0; d < g_ndev; d++) {
    ncclNetProperties_v9_t p;
    IT_OK(t->getProperties(d, &p));
    common_fields(9, d, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.maxComms, p.maxRecvs);
    CHECK_V9(9, p, d);
  }
  CHECK_VDEV(9, t, ncclNetVDeviceProps_v9_t, ncclNetProperties_v9_t, NCCL_NET_MAX_DEVS_PER_NIC_V9);
  IT_CHECK(dlclose(dl) == 0, "dlclose");
}

static void check_v10(void) {
  void *dl;
  const ncclNet_v10_t *t = open_table(10, &dl);
  IT_CHECK(t->makeVDevice != NULL && t->getDeviceMr == NULL && t->irecvConsumed == NULL, "v10 members");
  gn_log_capture(1);
  IT_OK(t->init(gn_logger, prof));
  expect_info(10);
  for (int d = 0; d < g_ndev; d++) {
    ncclNetProperties_v10_t p;
    IT_OK(t->getProperties(d, &p));
    common_fields(10, d, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.maxComms, p.maxRecvs);
    CHECK_V9(10, p, d);
  }
  CHECK_VDEV(10, t, ncclNetVDeviceProps_v10_t, ncclNetProperties_v10_t, NCCL_NET_MAX_DEVS_PER_NIC_V9);
  IT_CHECK(dlclose(dl) == 0, "dlclose");
}

static void check_ctx_table(int v) {
  void *dl, *a = NULL, *b = NULL;
  const ncclNet_v11_t *t = open_table(v, &dl); /* v12's table is v11's; only the properties differ */
  ncclNetCommConfig_v11_t ca = {104}, cb = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  IT_CHECK(t->makeVDevice != NULL && t->finalize != NULL && t->setNetAttr != NULL && t->getDeviceMr == NULL &&
               t->irecvConsumed == NULL,
           "v%d members", v);
  gn_log_capture(1);
  IT_OK(t->init(&a, 0xa, &ca, gn_logger, prof));
  IT_OK(t->init(&b, 0xb, &cb, gn_logger, NULL));
  IT_CHECK(a != NULL && b != NULL && a != b, "v%d: init gave contexts %p and %p", v, a, b);
  expect_info(v);
  {
    char *log = gn_log_captured();
    IT_CHECK(strstr(log, "communicator 0xa") && strstr(log, "trafficClass 104") && strstr(log, "communicator 0xb"),
             "v%d: the init lines do not name both communicators and the traffic class", v);
    free(log);
  }
  for (int d = 0; d < g_ndev; d++) {
    if (v == 11) {
      ncclNetProperties_v11_t p;
      IT_OK(t->getProperties(d, &p));
      common_fields(v, d, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.maxComms, p.maxRecvs);
      CHECK_V9(v, p, d);
      IT_CHECK(p.maxMultiRequestSize == 1, "v11 dev %d: maxMultiRequestSize %d", d, p.maxMultiRequestSize);
    } else {
      ncclNetProperties_v12_t p;
      const ncclNet_v12_t *t12 = (const ncclNet_v12_t *)t;
      IT_OK(t12->getProperties(d, &p));
      common_fields(v, d, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.maxComms, p.maxRecvs);
      CHECK_V9(v, p, d);
      IT_CHECK(p.maxMultiRequestSize == 1, "v12 dev %d: maxMultiRequestSize %d", d, p.maxMultiRequestSize);
      IT_CHECK(p.railId == -1 && p.planeId == -1, "v12 dev %d: railId %d planeId %d (unknown is -1)", d, p.railId,
               p.planeId);
    }
  }
  if (v == 11)
    CHECK_VDEV(11, t, ncclNetVDeviceProps_v11_t, ncclNetProperties_v11_t, NCCL_NET_MAX_DEVS_PER_NIC_V9);
  else {
    const ncclNet_v12_t *t12 = (const ncclNet_v12_t *)t;
    CHECK_VDEV(12, t12, ncclNetVDeviceProps_v12_t, ncclNetProperties_v12_t, NCCL_NET_MAX_DEVS_PER_NIC_V12);
  }
  /* setNetAttr: NULL, then hints twice: accepted, said once */
  {
    ncclNetAttr_v11_t at;
    memset(&at, 0xff, sizeof at);
    at.recvCommAttr.maxFlowsPerPeer = 2;
    gn_log_capture(1);
    IT_OK(t->setNetAttr(a, NULL));
    IT_OK(t->setNetAttr(a, &at));
    IT_OK(t->setNetAttr(a, &at));
    char *log = gn_log_captured();
    int n = 0;
    for (const char *s = log; (s = strstr(s, "setNetAttr (communicator 0xa)")) != NULL; s++) n++;
    IT_CHECK(n == 1, "v%d: setNetAttr said %d times, expected once", v, n);
    free(log);
    IT_CHECK(t->setNetAttr((void *)&at, &at) != ncclSuccess, "v%d: setNetAttr of a foreign context succeeded", v);
  }
  IT_OK(t->finalize(a));
  IT_OK(t->finalize(b));
  IT_CHECK(t->finalize(b) != ncclSuccess, "v%d: a second finalize of the same context succeeded", v);
  IT_CHECK(dlclose(dl) == 0, "dlclose");
}

int main(void) {
  it_init("tables", 100);
  g_transport = getenv("GDRNET_TRANSPORT") ? getenv("GDRNET_TRANSPORT") : "tcp";
  v8_baseline();
  check_v6();
  check_v7();
  check_v9();
  check_v10();
  check_ctx_table(11);
  check_ctx_table(12);
  for (int d = 0; d < g_ndev; d++) {
    free(g_p8[d].name);
    free(g_p8[d].pciPath);
  }
  it_log("PASS");
  return 0;
}
