/* A fused device (makeVDevice, ncclNetPlugin_v12 unless GDRNET_TEST_ABI says 9..11) over the first two physical
 * devices, with traffic in both directions, every byte checked:
 *   - TCP (two IP interfaces, e.g. GDRNET_SOCKET_IFNAME=^docker for lo and eth0): the connection's data streams are
 *     striped over both interfaces -- this process's TCP sockets with each interface's address received at least
 *     a quarter of the payload each (TCP_INFO bytes_received);
 *   - RDMA (VEMU_DEVICES=vemu0:roce,vemu1:roce): the connection's QPs spread over both devices (QP i on device i mod
 *     2) and every message is striped over them: in the emulator's trace (VEMU_TRACE) both processes' QPs sit on
 *     both devices and each device's QPs posted at least a quarter of the payload's WRITE bytes.
 * Fewer than two devices: skipped (exit 77), naming why. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gdrnet/net.h"
#include "it.h"

#define MSGS 24
#define SIZE (4u << 20)

static int g_tcp;

/* the first IPv4/IPv6 address of interface name (as gdr_if_find picks: IPv4 first) */
static int if_addr(const char *name, struct sockaddr_storage *out) {
  struct ifaddrs *ifs = NULL;
  int found = 0;
  IT_CHECK(getifaddrs(&ifs) == 0, "getifaddrs");
  for (int fam = 0; fam < 2 && !found; fam++)
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
      if (!i->ifa_addr || strcmp(i->ifa_name, name) != 0) continue;
      if (i->ifa_addr->sa_family != (fam == 0 ? AF_INET : AF_INET6)) continue;
      memset(out, 0, sizeof *out);
      memcpy(out, i->ifa_addr, fam == 0 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
      found = 1;
    }
  freeifaddrs(ifs);
  return found;
}

static int same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

struct rx_at {
  const struct sockaddr_storage *ip;
  unsigned long long bytes;
};

static int rx_bytes_at(int fd, void *arg) {
  struct rx_at *x = arg;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  struct tcp_info ti;
  socklen_t tl = sizeof ti;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 || !same_ip(&ss, x->ip)) return 0;
  memset(&ti, 0, sizeof ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0) return 0;
  x->bytes += ti.tcpi_bytes_received;
  return 1;
}

static int side(int fd, int parent) {
  it_plugin_t ip;
  char sym[32];
  int v = it_abi(), vd = -1, n = 0;
  IT_CHECK(v >= 9, "GDRNET_TEST_ABI=%d: makeVDevice is v9+", v);
  it_load(&ip);
  if (ip.ndev < 2) {
    it_log("SKIP: %d %s device(s); a fused device needs two (TCP: two IP interfaces, GDRNET_SOCKET_IFNAME)", ip.ndev,
           g_tcp ? "TCP" : "RDMA");
    it_unload(&ip);
    return 77;
  }
  snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
  const void *t = dlsym(ip.p.dl, sym);
  IT_CHECK(t != NULL, "%s", sym);
  ncclNetVDeviceProps_v12_t vp; /* v9..v11's {ndevs; devs[4]} is its prefix */
  memset(&vp, 0, sizeof vp);
  vp.ndevs = 2;
  vp.devs[0] = 0;
  vp.devs[1] = 1;
  gn_log_capture(1);
  IT_OK(v == 12 ? ((const ncclNet_v12_t *)t)->makeVDevice(&vd, &vp)
                : ((const ncclNet_v9_t *)t)->makeVDevice(&vd, (ncclNetVDeviceProps_v9_t *)&vp));
  IT_OK(ip.net->devices(&n));
  IT_CHECK(vd == ip.ndev && n == ip.ndev + 1, "fused device index %d, %d devices (%d physical)", vd, n, ip.ndev);
  it_log("fused device [%d] over %s and %s", vd, ip.props[0].name, ip.props[1].name);

  it_conn_t c;
  it_conn_open(&ip, vd, fd, SIZE, &c);
  gn_ctx_t ctx;
  gn_ctx_init(&ctx, ip.net, 120);
  for (int i = 0; i < MSGS; i++) {
    int size = (int)SIZE - i * 4093;
    it_step("message %d (%d bytes)", i, size);
    if (parent) {
      it_send_pattern(&ctx, &c, 0, size, (uint64_t)i, 1);
      it_recv_pattern(&ctx, &c, 0, size, size, (uint64_t)i, 2);
    } else {
      it_recv_pattern(&ctx, &c, 0, size, size, (uint64_t)i, 1);
      it_send_pattern(&ctx, &c, 0, size, (uint64_t)i, 2);
    }
  }
  if (g_tcp) {
    unsigned long long payload = 0;
    struct sockaddr_storage a0, a1;
    for (int i = 0; i < MSGS; i++) payload += SIZE - (unsigned)i * 4093;
    IT_CHECK(if_addr(ip.props[0].name, &a0) && if_addr(ip.props[1].name, &a1), "addresses of %s and %s",
             ip.props[0].name, ip.props[1].name);
    struct rx_at x0 = {&a0, 0}, x1 = {&a1, 0};
    int n0 = it_count_sockets(rx_bytes_at, &x0), n1 = it_count_sockets(rx_bytes_at, &x1);
    it_log("received %llu payload bytes: %llu on %d socket(s) of %s, %llu on %d of %s", payload, x0.bytes, n0,
           ip.props[0].name, x1.bytes, n1, ip.props[1].name);
    IT_CHECK(x0.bytes >= payload / 4 && x1.bytes >= payload / 4,
             "the fused device's traffic is not striped over both interfaces (%llu and %llu of %llu bytes)", x0.bytes,
             x1.bytes, payload);
  } else {
    /* no device of the fused one left out (the core says so when a transport stripes over fewer) */
    char *log = gn_log_captured();
    IT_CHECK(strstr(log, "stripes a connection over at most") == NULL, "the fused device's connections run on fewer "
                                                                       "devices than it has");
    free(log);
  }
  IT_CHECK(gn_boot_barrier(fd, 60) == 0, "barrier");
  it_conn_close(&c);
  char name0[64], name1[64]; /* the plugin's strings go with it */
  snprintf(name0, sizeof name0, "%s", ip.props[0].name);
  snprintf(name1, sizeof name1, "%s", ip.props[1].name);
  it_unload(&ip);
  if (!g_tcp && parent && getenv("VEMU_TRACE")) {
    /* both processes (the child has unloaded the plugin: the barrier above), both directions: the QPs of each
     * device and the WRITE bytes they posted (QP numbers are unique in a run: a QP's device is on its create line) */
    FILE *f = fopen(getenv("VEMU_TRACE"), "r");
    char line[1024], d0[96], d1[96];
    static unsigned qpn[4096];
    static int qdev[4096];
    int nq = 0, q0 = 0, q1 = 0;
    unsigned long long b0 = 0, b1 = 0, payload = 0;
    IT_CHECK(f != NULL, "VEMU_TRACE");
    snprintf(d0, sizeof d0, " dev=%s ", name0);
    snprintf(d1, sizeof d1, " dev=%s ", name1);
    for (int i = 0; i < MSGS; i++) payload += 2ull * (SIZE - (unsigned)i * 4093);
    while (fgets(line, sizeof line, f)) {
      const char *q = strstr(line, " qp=0x"), *len = strstr(line, " len=");
      if (q == NULL) continue;
      unsigned num = (unsigned)strtoul(q + 6, NULL, 16);
      if (strstr(line, " qp create ")) {
        int dv = strstr(line, d0) ? 0 : strstr(line, d1) ? 1 : -1;
        q0 += dv == 0;
        q1 += dv == 1;
        if (nq < 4096) {
          qpn[nq] = num;
          qdev[nq++] = dv;
        }
      } else if (strstr(line, " post ") && strstr(line, " op=WRITE") && len) {
        unsigned long long n = strtoull(len + 5, NULL, 10);
        for (int k = nq - 1; k >= 0; k--) /* the latest QP of that number */
          if (qpn[k] == num) {
            if (qdev[k] == 0) b0 += n;
            if (qdev[k] == 1) b1 += n;
            break;
          }
      }
    }
    fclose(f);
    it_log("QPs created: %d on %s, %d on %s; WRITE bytes posted: %llu on %s, %llu on %s (payload %llu)", q0, name0, q1,
           name1, b0, name0, b1, name1, payload);
    IT_CHECK(q0 >= 4 && q1 >= 4, "QPs: %d on %s, %d on %s (expected the connections' QPs on both)", q0, name0, q1,
             name1);
    IT_CHECK(b0 >= payload / 4 && b1 >= payload / 4 && b0 + b1 >= payload,
             "the fused device's traffic is not striped over both devices (%llu and %llu of %llu bytes)", b0, b1,
             payload);
  }
  return 0;
}

static int child(int fd, void *arg) {
  (void)arg;
  return side(fd, 0);
}

int main(void) {
  const char *tr = getenv("VEMU_TRACE");
  it_child_t ch;
  g_tcp = strcmp(getenv("GDRNET_TRANSPORT") ? getenv("GDRNET_TRANSPORT") : "tcp", "tcp") == 0;
  if (tr != NULL && *tr != '\0') (void)unlink(tr); /* this run's QPs only */
  it_init("vdev", 120);
  it_fork(&ch, child, NULL);
  int rc = side(ch.fd, 1);
  int st = it_reap(&ch, 60);
  /* both sides see the same devices: a skip is a skip on both */
  IT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == rc,
           "the child ended with status %d, the parent with %d (its FAIL "
           "line above says why)",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, rc);
  if (rc == 77) return 77;
  it_log("PASS");
  return 0;
}
