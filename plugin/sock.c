#include "sock.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"

/* ------------------------------------------------------------------------------------------------- misc -- */

uint64_t gdr_time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

ncclResult_t gdr_random_bytes(void *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = getrandom((char *)buf + off, len - off, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      GDR_WARN("getrandom failed: %s", strerror(errno));
      return ncclSystemError;
    }
    off += (size_t)n;
  }
  return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------------ addresses -- */

socklen_t gdr_sockaddr_len(const union gdr_sockaddr *a) {
  if (a->sa.sa_family == AF_INET) return sizeof(struct sockaddr_in);
  if (a->sa.sa_family == AF_INET6) return sizeof(struct sockaddr_in6);
  return 0;
}

int gdr_sockaddr_port(const union gdr_sockaddr *a) {
  if (a->sa.sa_family == AF_INET) return ntohs(a->sin.sin_port);
  if (a->sa.sa_family == AF_INET6) return ntohs(a->sin6.sin6_port);
  return -1;
}

const char *gdr_sockaddr_str(const union gdr_sockaddr *a, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "";
  if (a->sa.sa_family == AF_INET && inet_ntop(AF_INET, &a->sin.sin_addr, host, sizeof(host)) != NULL) {
    snprintf(buf, len, "%s:%d", host, ntohs(a->sin.sin_port));
  } else if (a->sa.sa_family == AF_INET6 && inet_ntop(AF_INET6, &a->sin6.sin6_addr, host, sizeof(host)) != NULL) {
    if (a->sin6.sin6_scope_id != 0) {
      snprintf(buf, len, "[%s%%%u]:%d", host, a->sin6.sin6_scope_id, ntohs(a->sin6.sin6_port));
    } else {
      snprintf(buf, len, "[%s]:%d", host, ntohs(a->sin6.sin6_port));
    }
  } else {
    snprintf(buf, len, "<unknown address family %d>", a->sa.sa_family);
  }
  return buf;
}

static void wire_from_sockaddr(struct gdr_wire_addr *w, const union gdr_sockaddr *a) {
  memset(w, 0, sizeof(*w));
  w->family = a->sa.sa_family;
  if (a->sa.sa_family == AF_INET) {
    w->port = a->sin.sin_port;
    memcpy(w->addr, &a->sin.sin_addr, 4);
  } else if (a->sa.sa_family == AF_INET6) {
    w->port = a->sin6.sin6_port;
    w->scope_id = a->sin6.sin6_scope_id;
    memcpy(w->addr, &a->sin6.sin6_addr, 16);
  }
}

static int sockaddr_from_wire(union gdr_sockaddr *a, const struct gdr_wire_addr *w) {
  memset(a, 0, sizeof(*a));
  if (w->family == AF_INET) {
    a->sin.sin_family = AF_INET;
    a->sin.sin_port = w->port;
    memcpy(&a->sin.sin_addr, w->addr, 4);
    return 0;
  }
  if (w->family == AF_INET6) {
    a->sin6.sin6_family = AF_INET6;
    a->sin6.sin6_port = w->port;
    a->sin6.sin6_scope_id = w->scope_id;
    memcpy(&a->sin6.sin6_addr, w->addr, 16);
    return 0;
  }
  return -1;
}

/* ---------------------------------------------------------------------------------------------- interfaces -- */

/* Address preference within one interface: lower is better; -1 = unusable for this family setting. */
static int addr_rank(const struct sockaddr *sa, int family) {
  if (sa->sa_family == AF_INET) {
    if (family == GDR_SOCKET_FAMILY_INET6) return -1;
    return 0;
  }
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (family == GDR_SOCKET_FAMILY_INET) return -1;
    if (IN6_IS_ADDR_LOOPBACK(a6) && family != GDR_SOCKET_FAMILY_INET6) return 3;
    if (IN6_IS_ADDR_LINKLOCAL(a6)) return 2;
    return 1;
  }
  return -1;
}

static int find_with_filter(struct ifaddrs *list, const struct gdr_filter *f, int family, struct gdr_if *out, int max) {
  int n = 0;
  int rank[GDR_MAX_IFS];
  for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    int r, k;
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP)) continue;
    r = addr_rank(ifa->ifa_addr, family);
    if (r < 0 || !gdr_filter_match(f, ifa->ifa_name, -1)) continue;
    for (k = 0; k < n; k++)
      if (strcmp(out[k].name, ifa->ifa_name) == 0) break;
    if (k == n) {
      if (n == max || n == GDR_MAX_IFS) continue;
      n++;
      memset(&out[k], 0, sizeof(out[k]));
      snprintf(out[k].name, sizeof(out[k].name), "%s", ifa->ifa_name);
      out[k].index = (int)if_nametoindex(ifa->ifa_name);
    } else if (r >= rank[k]) {
      continue;
    }
    rank[k] = r;
    memset(&out[k].addr, 0, sizeof(out[k].addr));
    if (ifa->ifa_addr->sa_family == AF_INET) {
      memcpy(&out[k].addr.sin, ifa->ifa_addr, sizeof(struct sockaddr_in));
      out[k].addr.sin.sin_port = 0;
    } else {
      memcpy(&out[k].addr.sin6, ifa->ifa_addr, sizeof(struct sockaddr_in6));
      out[k].addr.sin6.sin6_port = 0;
      if (IN6_IS_ADDR_LINKLOCAL(&out[k].addr.sin6.sin6_addr) && out[k].addr.sin6.sin6_scope_id == 0)
        out[k].addr.sin6.sin6_scope_id = (uint32_t)out[k].index;
    }
  }
  return n;
}

/* "eth0 (IPv4, IPv6), lo (IPv4, IPv6), ifb0 (down)": every interface getifaddrs lists, for a WARN. */
static void describe_ifs(struct ifaddrs *list, char *buf, size_t len) {
  char names[GDR_MAX_IFS][IF_NAMESIZE + 1];
  int fam[GDR_MAX_IFS], up[GDR_MAX_IFS], n = 0;
  size_t off = 0;
  buf[0] = '\0';
  for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    int k;
    for (k = 0; k < n; k++)
      if (strcmp(names[k], ifa->ifa_name) == 0) break;
    if (k == n) {
      if (n == GDR_MAX_IFS) continue;
      snprintf(names[n], sizeof(names[n]), "%s", ifa->ifa_name);
      fam[n] = 0;
      up[n] = 0;
      n++;
    }
    up[k] |= (ifa->ifa_flags & IFF_UP) != 0;
    if (ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == AF_INET) fam[k] |= 1;
    if (ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == AF_INET6) fam[k] |= 2;
  }
  for (int k = 0; k < n && off < len; k++) {
    const char *what = !up[k]        ? "down"
                       : fam[k] == 3 ? "IPv4, IPv6"
                       : fam[k] == 1 ? "IPv4"
                       : fam[k] == 2 ? "IPv6"
                                     : "no IP address";
    int w = snprintf(buf + off, len - off, "%s%s (%s)", k ? ", " : "", names[k], what);
    if (w < 0) break;
    off += (size_t)w;
  }
  if (n == 0) snprintf(buf, len, "none");
}

/* A user's interface filter that selects nothing: said once per process and value (the RDMA and the TCP transport
 * both look for an interface; one WARN is enough). g_if_warned is the last value warned about, under its lock. */
static pthread_mutex_t g_if_warn_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_if_warned[256];

static void warn_no_interface(struct ifaddrs *list, const char *spec, int family) {
  char ifs[768];
  int again;
  pthread_mutex_lock(&g_if_warn_lock);
  again = strcmp(g_if_warned, spec) == 0;
  if (!again) snprintf(g_if_warned, sizeof(g_if_warned), "%s", spec);
  pthread_mutex_unlock(&g_if_warn_lock);
  if (again) return;
  describe_ifs(list, ifs, sizeof(ifs));
  GDR_WARN("%s=\"%s\" selects no usable interface%s; the interfaces here: %s",
           gdr_param_set_name(GDR_PARAM_SOCKET_IFNAME), spec,
           family == GDR_SOCKET_FAMILY_INET    ? " with an IPv4 address (GDRNET_SOCKET_FAMILY=AF_INET)"
           : family == GDR_SOCKET_FAMILY_INET6 ? " with an IPv6 address (GDRNET_SOCKET_FAMILY=AF_INET6)"
                                               : " that is up with an IP address",
           ifs);
}

ncclResult_t gdr_if_find(const char *spec, int family, struct gdr_if *out, int max, int *n) {
  ncclResult_t res = ncclSuccess;
  struct ifaddrs *list = NULL;
  struct gdr_filter f;
  char why[256];

  *n = 0;
  if (getifaddrs(&list) != 0) {
    GDR_WARN("getifaddrs failed: %s", strerror(errno));
    res = ncclSystemError;
    goto out;
  }
  if (spec != NULL && spec[0] != '\0') {
    if (gdr_filter_parse(spec, &f, why, sizeof(why)) != ncclSuccess) {
      GDR_WARN("GDRNET_SOCKET_IFNAME: %s", why);
      res = ncclInvalidUsage;
      goto out;
    }
    *n = find_with_filter(list, &f, family, out, max);
    if (*n == 0) warn_no_interface(list, spec, family);
  } else {
    /* NCCL Socket's default order: IPoIB interfaces, else anything but docker bridges and loopback, else docker,
     * else loopback (single-host runs). */
    static const char *const order[] = {"ib", "^docker,lo", "docker", "lo"};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]) && *n == 0; k++) {
      GDR_CHECK(gdr_filter_parse(order[k], &f, why, sizeof(why)));
      *n = find_with_filter(list, &f, family, out, max);
    }
  }
out:
  if (list != NULL) freeifaddrs(list);
  return res;
}

ncclResult_t gdr_if_find_configured(struct gdr_if *out, int max, int *n) {
  return gdr_if_find(gdr_param_str(GDR_PARAM_SOCKET_IFNAME), (int)gdr_param_int(GDR_PARAM_SOCKET_FAMILY), out, max, n);
}

/* ------------------------------------------------------------------------------------------------- handle -- */

#define GDR_STATE_MAGIC 0x4554415453524447ull /* "GDRSTATE" */

/* The handle reaches this process from the peer (through NCCL's bootstrap): its state[] holds whatever the peer
 * sent. A state pointer in it is used only if this process stored it there and has not cleared it since: the
 * live states are listed here, each with a random tag the handle carries too (a forged handle can neither point
 * the connect at arbitrary memory nor at another connection's state). */
struct gdr_handle_state {
  uint64_t magic;
  void *ptr;
  uint64_t tag;
};
_Static_assert(sizeof(struct gdr_handle_state) <= sizeof(((struct gdr_handle *)0)->state), "state fits");

static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gdr_handle_state *live_states; /* under state_mu: the connects in progress; freed when none is left */
static size_t nlive, caplive;

/* index of s in the live list, or -1; state_mu held */
static long live_find(const struct gdr_handle_state *s) {
  for (size_t i = 0; i < nlive; i++)
    if (live_states[i].ptr == s->ptr && live_states[i].tag == s->tag) return (long)i;
  return -1;
}

void *gdr_handle_state_get(const struct gdr_handle *h) {
  struct gdr_handle_state s;
  void *ptr = NULL;
  memcpy(&s, h->state, sizeof(s));
  if (s.magic != GDR_STATE_MAGIC || s.ptr == NULL) return NULL;
  pthread_mutex_lock(&state_mu);
  if (live_find(&s) >= 0) ptr = s.ptr;
  pthread_mutex_unlock(&state_mu);
  return ptr;
}

ncclResult_t gdr_handle_state_set(struct gdr_handle *h, void *state) {
  ncclResult_t res = ncclSuccess;
  struct gdr_handle_state s, old;
  long i;

  memset(&s, 0, sizeof(s));
  if (state != NULL) {
    GDR_CHECK(gdr_random_bytes(&s.tag, sizeof(s.tag)));
    s.magic = GDR_STATE_MAGIC;
    s.ptr = state;
  }
  memcpy(&old, h->state, sizeof(old));
  pthread_mutex_lock(&state_mu);
  if (old.magic == GDR_STATE_MAGIC && (i = live_find(&old)) >= 0) live_states[i] = live_states[--nlive];
  if (state != NULL && nlive == caplive) {
    size_t cap = caplive ? 2 * caplive : 64;
    struct gdr_handle_state *n = realloc(live_states, cap * sizeof(*n));
    if (n == NULL) {
      GDR_WARN("connect: out of memory for %zu connections in progress", nlive + 1);
      res = ncclSystemError;
    } else {
      live_states = n;
      caplive = cap;
    }
  }
  if (res == ncclSuccess && state != NULL) live_states[nlive++] = s;
  if (nlive == 0) { /* no connect in progress: nothing kept (an unload loses no memory) */
    free(live_states);
    live_states = NULL;
    caplive = 0;
  }
  pthread_mutex_unlock(&state_mu);
  if (res == ncclSuccess) memcpy(h->state, &s, sizeof(s));
out:
  return res;
}

ncclResult_t gdr_handle_check(const struct gdr_handle *h, union gdr_sockaddr *peer) {
  if (h->magic != GDR_HANDLE_MAGIC) {
    GDR_WARN("connect: the handle is not from libnccl-net-gdr (magic 0x%08x, expected 0x%08x); are both ranks "
             "using the same plugin?",
             h->magic, GDR_HANDLE_MAGIC);
    return ncclInvalidUsage;
  }
  if (h->version != GDR_HANDLE_VERSION) {
    GDR_WARN("connect: handle version %u, this plugin speaks %u; use the same plugin version on every rank", h->version,
             GDR_HANDLE_VERSION);
    return ncclInvalidUsage;
  }
  if (sockaddr_from_wire(peer, &h->addr) != 0) {
    GDR_WARN("connect: the handle carries address family %u, not IPv4/IPv6", h->addr.family);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* ---------------------------------------------------------------------------------------- mixed pairs -- */

uint32_t gdr_caps_local(uint8_t transport, int rdma_tcp) {
  int forced = gdr_param_int(GDR_PARAM_TRANSPORT) != GDR_TRANSPORT_AUTO;
  if (transport == GDR_TP_TCP) return GDR_CAP_TCP | (forced ? GDR_CAP_FORCED : 0);
  return GDR_CAP_RDMA | (forced ? GDR_CAP_FORCED : rdma_tcp ? GDR_CAP_TCP : 0);
}

const char *gdr_caps_str(uint32_t caps, char *buf, size_t len) {
  int forced = (caps & GDR_CAP_FORCED) != 0, rdma = (caps & GDR_CAP_RDMA) != 0, tcp = (caps & GDR_CAP_TCP) != 0;
  snprintf(buf, len, "GDRNET_TRANSPORT=%s (%s)",
           !forced ? "auto"
           : rdma  ? "rdma"
                   : "tcp",
           rdma && tcp ? "RDMA, TCP"
           : rdma      ? (forced ? "RDMA only" : "RDMA only: no TCP transport")
           : tcp       ? (forced ? "TCP only" : "TCP only: no usable RDMA device")
                       : "neither RDMA nor TCP");
  return buf;
}

const char *gdr_mixed_str(uint32_t mine, uint32_t theirs, char *buf, size_t len) {
  char a[80], b[80];
  snprintf(buf, len, "mixed pair: this rank %s, the peer %s", gdr_caps_str(mine, a, sizeof(a)),
           gdr_caps_str(theirs, b, sizeof(b)));
  return buf;
}

/* What to change when two settings cannot meet. */
static const char *mismatch_advice(uint32_t a, uint32_t b) {
  if ((a | b) & GDR_CAP_FORCED) return "set GDRNET_TRANSPORT=auto where it is forced";
  return "the RDMA rank needs its TCP transport (GDRNET_FALLBACK=1, an IP interface)";
}

void gdr_handle_door_set(struct gdr_handle *h, const struct gdr_handle *tcp) {
  struct gdr_handle_door d;
  memset(&d, 0, sizeof(d));
  d.nonce = tcp->nonce;
  d.port = tcp->addr.port;
  memcpy(h->spare, &d, sizeof(d));
  gdr_handle_rank_set(h, gdr_handle_rank(tcp)); /* the same process: either handle's */
  h->nstreams = tcp->nstreams;
  h->nthreads = tcp->nthreads;
  memcpy(h->tp_data, tcp->tp_data, sizeof(h->tp_data));
  h->caps |= GDR_CAP_TCP;
}

int gdr_handle_door_get(const struct gdr_handle *h, struct gdr_handle *tcp) {
  struct gdr_handle_door d;
  memcpy(&d, h->spare, sizeof(d));
  if (h->transport != GDR_TP_RDMA || !(h->caps & GDR_CAP_TCP) || d.port == 0) return -1;
  *tcp = *h;
  tcp->transport = GDR_TP_TCP;
  tcp->nonce = d.nonce;
  tcp->addr.port = d.port;
  memset(tcp->spare, 0, sizeof(tcp->spare));
  gdr_handle_rank_set(tcp, gdr_handle_rank(h)); /* the same listener process */
  return 0;
}

/* ------------------------------------------------------------------------------------------- peer ranks -- */

int gdr_launcher_rank(void) {
  static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
  for (int i = 0; vars[i] != NULL; i++) {
    const char *v = getenv(vars[i]);
    char *end = NULL;
    if (v == NULL || v[0] == 0) continue;
    errno = 0;
    long r = strtol(v, &end, 10);
    if (errno == 0 && end != v && *end == 0 && r >= 0 && r < (1l << 24) - 1) return (int)r;
  }
  return -1;
}

void gdr_handle_rank_set(struct gdr_handle *h, int rank) {
  struct gdr_handle_door d;
  memcpy(&d, h->spare, sizeof(d));
  d.rank1 = rank >= 0 && rank < (1 << 24) - 1 ? (uint32_t)rank + 1 : 0;
  memcpy(h->spare, &d, sizeof(d));
}

int gdr_handle_rank(const struct gdr_handle *h) {
  struct gdr_handle_door d;
  memcpy(&d, h->spare, sizeof(d));
  return d.rank1 > 0 && d.rank1 < (1u << 24) ? (int)d.rank1 - 1 : -1;
}

#define PEER_RANKS 1024 /* the last addresses noted (a ring): a process's peers, and then some */
static pthread_mutex_t g_peer_rank_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char addr[GDR_ADDR_STRLEN];
  int rank;
} g_peer_rank[PEER_RANKS];
static unsigned g_peer_rank_next;

void gdr_peer_rank_note(const union gdr_sockaddr *peer, int rank) {
  char a[GDR_ADDR_STRLEN];
  unsigned i;
  if (rank < 0) return;
  gdr_sockaddr_str(peer, a, sizeof(a));
  pthread_mutex_lock(&g_peer_rank_mu);
  for (i = 0; i < PEER_RANKS && strcmp(g_peer_rank[i].addr, a) != 0; i++) continue;
  if (i == PEER_RANKS) i = g_peer_rank_next++ % PEER_RANKS; /* new, or a port reused: the latest wins */
  memcpy(g_peer_rank[i].addr, a, sizeof(a));
  g_peer_rank[i].rank = rank;
  pthread_mutex_unlock(&g_peer_rank_mu);
}

int gdr_peer_rank_of(const char *addr) {
  int rank = -1;
  if (addr == NULL || addr[0] == 0) return -1;
  pthread_mutex_lock(&g_peer_rank_mu);
  for (unsigned i = 0; i < PEER_RANKS && rank < 0; i++)
    if (strcmp(g_peer_rank[i].addr, addr) == 0) rank = g_peer_rank[i].rank;
  pthread_mutex_unlock(&g_peer_rank_mu);
  return rank;
}

/* -------------------------------------------------------------------------------------------------- hello -- */

int gdr_hello_verify(const struct gdr_hello *h, uint64_t nonce, uint8_t transport, char *why, size_t whylen) {
  if (h->magic != GDR_HELLO_MAGIC) {
    snprintf(why, whylen, "not a libnccl-net-gdr peer (magic 0x%08x)", h->magic);
    return -1;
  }
  if (h->version != GDR_HANDLE_VERSION) {
    snprintf(why, whylen, "protocol version %u, expected %u", h->version, GDR_HANDLE_VERSION);
    return -1;
  }
  if (h->nonce != nonce) {
    snprintf(why, whylen, "wrong nonce (a stray or stale peer: it did not get this listen's handle)");
    return -1;
  }
  if (h->transport != transport) {
    snprintf(why, whylen, "transport %u, this listener serves %u", h->transport, transport);
    return -1;
  }
  if (h->kind != GDR_STREAM_CTRL && h->kind != GDR_STREAM_DATA) {
    snprintf(why, whylen, "unknown stream kind %u", h->kind);
    return -1;
  }
  if (h->stream > h->nstreams) {
    snprintf(why, whylen, "stream %u of %u", h->stream, h->nstreams);
    return -1;
  }
  return 0;
}

/* -------------------------------------------------------------------------------------------------- I/O -- */

static ncclResult_t io_error(int err) {
  switch (err) {
  case ECONNRESET:
  case EPIPE:
  case ETIMEDOUT:
  case EHOSTUNREACH:
  case ENETUNREACH:
  case ENETDOWN:
  case ECONNABORTED:
  case ECONNREFUSED: return ncclRemoteError;
  default: return ncclSystemError;
  }
}

ncclResult_t gdr_sock_send_nb(int fd, const void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = send(fd, (const char *)buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
      return io_error(errno);
    }
    *off += (size_t)n;
  }
  return ncclSuccess;
}

ncclResult_t gdr_sock_recv_nb(int fd, void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = recv(fd, (char *)buf + *off, len - *off, MSG_DONTWAIT);
    if (n == 0) {
      errno = 0;
      return ncclRemoteError;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
      return io_error(errno);
    }
    *off += (size_t)n;
  }
  return ncclSuccess;
}

ncclResult_t gdr_sock_send_all(int fd, const void *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(fd, (const char *)buf + off, len - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, 100);
        continue;
      }
      return io_error(errno);
    }
    off += (size_t)n;
  }
  return ncclSuccess;
}

ncclResult_t gdr_sock_recv_all(int fd, void *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = recv(fd, (char *)buf + off, len - off, MSG_WAITALL);
    if (n == 0) {
      errno = 0;
      return ncclRemoteError;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, 100);
        continue;
      }
      return io_error(errno);
    }
    off += (size_t)n;
  }
  return ncclSuccess;
}

ncclResult_t gdr_sock_blob_send(int fd, struct gdr_blob_io *io, uint32_t type, const void *data, uint32_t len,
                                int *done) {
  ncclResult_t res = ncclSuccess;
  size_t hoff;
  *done = 0;
  if (len > GDR_BLOB_MAX) {
    GDR_WARN("internal: blob of %u bytes exceeds %u", len, GDR_BLOB_MAX);
    return ncclInternalError;
  }
  io->hdr[0] = type;
  io->hdr[1] = len;
  if (io->off < sizeof(io->hdr)) {
    hoff = io->off;
    res = gdr_sock_send_nb(fd, io->hdr, sizeof(io->hdr), &hoff);
    io->off = hoff;
    if (res != ncclSuccess || io->off < sizeof(io->hdr)) return res;
  }
  hoff = io->off - sizeof(io->hdr);
  res = gdr_sock_send_nb(fd, data, len, &hoff);
  io->off = hoff + sizeof(io->hdr);
  if (res == ncclSuccess && hoff == len) *done = 1;
  return res;
}

ncclResult_t gdr_sock_blob_recv(int fd, struct gdr_blob_io *io, uint32_t expect_type, void *data, uint32_t cap,
                                uint32_t *len, int *done) {
  ncclResult_t res = ncclSuccess;
  size_t hoff;
  *done = 0;
  if (io->off < sizeof(io->hdr)) {
    hoff = io->off;
    res = gdr_sock_recv_nb(fd, io->hdr, sizeof(io->hdr), &hoff);
    io->off = hoff;
    if (res != ncclSuccess || io->off < sizeof(io->hdr)) return res;
    if (io->hdr[0] != expect_type || io->hdr[1] > cap) {
      GDR_WARN("control stream: got a message of type %u and %u bytes, expected type %u of at most %u bytes",
               io->hdr[0], io->hdr[1], expect_type, cap);
      return ncclRemoteError;
    }
  }
  hoff = io->off - sizeof(io->hdr);
  res = gdr_sock_recv_nb(fd, data, io->hdr[1], &hoff);
  io->off = hoff + sizeof(io->hdr);
  if (res == ncclSuccess && hoff == io->hdr[1]) {
    *len = io->hdr[1];
    *done = 1;
  }
  return res;
}

/* --------------------------------------------------------------------------------------------- options -- */

ncclResult_t gdr_sock_set_nonblocking(int fd, int nonblocking) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return ncclSystemError;
  fl = nonblocking ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, fl) < 0) return ncclSystemError;
  return ncclSuccess;
}

ncclResult_t gdr_sock_tune(int fd, int nodelay, size_t bufsize, int timeout_ms) {
  ncclResult_t res = ncclSuccess;
  int one = 1;
  if (nodelay) GDR_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "setsockopt(TCP_NODELAY)");
  if (bufsize > 0) {
    int b = bufsize > (size_t)(1 << 30) ? (1 << 30) : (int)bufsize;
    GDR_SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b)), "setsockopt(SO_SNDBUF)");
    GDR_SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b)), "setsockopt(SO_RCVBUF)");
  }
  if (timeout_ms > 0) {
    int secs = timeout_ms / 1000 > 0 ? timeout_ms / 1000 : 1;
    int idle = secs / 2 > 0 ? secs / 2 : 1;
    int intvl = secs / 10 > 0 ? secs / 10 : 1;
    int cnt = (secs - idle) / intvl > 0 ? (secs - idle) / intvl : 1;
    unsigned int ut = (unsigned int)timeout_ms;
    GDR_SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), "setsockopt(SO_KEEPALIVE)");
    GDR_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)), "setsockopt(TCP_KEEPIDLE)");
    GDR_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)), "setsockopt(TCP_KEEPINTVL)");
    GDR_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)), "setsockopt(TCP_KEEPCNT)");
    GDR_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut)), "setsockopt(TCP_USER_TIMEOUT)");
  }
out:
  return res;
}

/* ------------------------------------------------------------------------------------------------ listen -- */

ncclResult_t gdr_listener_open(struct gdr_listener *l, const union gdr_sockaddr *local, uint8_t transport,
                               uint32_t caps) {
  ncclResult_t res = ncclSuccess;
  char addr[GDR_ADDR_STRLEN];
  socklen_t alen;
  int one = 1;

  memset(l, 0, sizeof(*l));
  l->fd = -1;
  for (int i = 0; i < GDR_LISTEN_PENDING; i++) l->pend[i].fd = -1;
  l->transport = transport;
  l->caps = caps;
  GDR_CHECK(gdr_random_bytes(&l->nonce, sizeof(l->nonce)));
  l->addr = *local;
  if (l->addr.sa.sa_family == AF_INET) {
    l->addr.sin.sin_port = 0;
  } else if (l->addr.sa.sa_family == AF_INET6) {
    l->addr.sin6.sin6_port = 0;
  } else {
    GDR_WARN("listen: address family %d is not IPv4/IPv6", l->addr.sa.sa_family);
    res = ncclInternalError;
    goto out;
  }
  l->fd = socket(l->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  GDR_SYSCHECK(l->fd, "socket");
  GDR_SYSCHECK(setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), "setsockopt(SO_REUSEADDR)");
  if (bind(l->fd, &l->addr.sa, gdr_sockaddr_len(&l->addr)) != 0) {
    GDR_WARN("listen: bind to %s failed: %s", gdr_sockaddr_str(&l->addr, addr, sizeof(addr)), strerror(errno));
    res = ncclSystemError;
    goto out;
  }
  GDR_SYSCHECK(listen(l->fd, 256), "listen");
  alen = sizeof(l->addr);
  GDR_SYSCHECK(getsockname(l->fd, &l->addr.sa, &alen), "getsockname");
out:
  if (res != ncclSuccess && l->fd >= 0) {
    close(l->fd);
    l->fd = -1;
  }
  return res;
}

void gdr_listener_handle(const struct gdr_listener *l, uint32_t dev, struct gdr_handle *h) {
  memset(h, 0, sizeof(*h));
  h->magic = GDR_HANDLE_MAGIC;
  h->version = GDR_HANDLE_VERSION;
  h->transport = l->transport;
  h->caps = (uint8_t)l->caps;
  h->nonce = l->nonce;
  wire_from_sockaddr(&h->addr, &l->addr);
  h->dev = dev;
  gdr_handle_rank_set(h, gdr_launcher_rank());
}

/* A peer gets this long to say hello: GDR_HELLO_TIMEOUT_MS, or less if the connect timeout is shorter. */
static uint64_t hello_timeout_ms(void) {
  int64_t ct = gdr_connect_timeout_ms();
  return (uint64_t)(ct < GDR_HELLO_TIMEOUT_MS ? ct : GDR_HELLO_TIMEOUT_MS);
}

static void pending_drop(struct gdr_pending_conn *p) {
  if (p->fd >= 0) close(p->fd);
  memset(p, 0, sizeof(*p));
  p->fd = -1;
}

static void pending_reject(struct gdr_listener *l, struct gdr_pending_conn *p, const char *why) {
  char a[GDR_ADDR_STRLEN], me[GDR_ADDR_STRLEN];
  GDR_WARN("listener %s: rejected connection from %s: %s", gdr_sockaddr_str(&l->addr, me, sizeof(me)),
           gdr_sockaddr_str(&p->peer, a, sizeof(a)), why);
  pending_drop(p);
}

/* The peer got this listen's handle (its nonce) but speaks another transport: the pair cannot meet. It is told so
 * (GDR_ACK_MISMATCH, best effort: 16 bytes into a fresh socket) and this listener's accept fails at once. */
static ncclResult_t listener_mismatch(struct gdr_listener *l, struct gdr_pending_conn *p) {
  char a[GDR_ADDR_STRLEN], mine[80], theirs[80];
  size_t off = 0;
  GDR_WARN("accept: peer %s cannot meet this rank: here %s, there %s; %s", gdr_sockaddr_str(&p->peer, a, sizeof(a)),
           gdr_caps_str(l->caps, mine, sizeof(mine)), gdr_caps_str(p->hello.caps, theirs, sizeof(theirs)),
           mismatch_advice(l->caps, p->hello.caps));
  memset(&p->ack, 0, sizeof(p->ack));
  p->ack.magic = GDR_ACK_MAGIC;
  p->ack.version = GDR_HANDLE_VERSION;
  p->ack.status = GDR_ACK_MISMATCH;
  p->ack.caps = l->caps;
  (void)gdr_sock_send_nb(p->fd, &p->ack, sizeof(p->ack), &off);
  pending_drop(p); /* the peer sent its hello and waits: nothing unread here, so the close sends FIN after the ack */
  return ncclInvalidUsage;
}

/* A free slot for the next connection of the backlog, or -1: every slot holds a peer that is saying hello. When
 * full, a real peer says hello at once: a peer silent for a while is evicted if someone else waits, else the rest
 * wait in the kernel's backlog until the pending ones are done. */
static int listener_slot(struct gdr_listener *l, uint64_t now) {
  int slot = -1, oldest = -1;
  struct pollfd pfd = {l->fd, POLLIN, 0};
  for (int i = 0; i < GDR_LISTEN_PENDING && slot < 0; i++) {
    if (l->pend[i].fd < 0)
      slot = i;
    else if (oldest < 0 || l->pend[i].accepted_ns < l->pend[oldest].accepted_ns)
      oldest = i;
  }
  if (slot >= 0) return slot;
  if (now - l->pend[oldest].accepted_ns < (uint64_t)GDR_LISTEN_EVICT_MS * 1000000ull) return -1;
  if (poll(&pfd, 1, 0) != 1) return -1; /* nobody else is waiting */
  pending_reject(l, &l->pend[oldest], "evicted: too many connections waiting to say hello");
  return oldest;
}

/* Takes the connections waiting in the backlog, as long as there is room to hear their hello. */
static ncclResult_t listener_accept_backlog(struct gdr_listener *l, uint64_t now) {
  ncclResult_t res = ncclSuccess;
  for (;;) {
    union gdr_sockaddr peer;
    socklen_t plen = sizeof(peer);
    int fd, slot = listener_slot(l, now);
    if (slot < 0) break;
    memset(&peer, 0, sizeof(peer));
    fd = accept4(l->fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        GDR_WARN("listener: accept failed: %s (will retry)", strerror(errno));
        break;
      }
      GDR_WARN("listener: accept failed: %s", strerror(errno));
      res = ncclSystemError;
      break;
    }
    memset(&l->pend[slot], 0, sizeof(l->pend[slot]));
    l->pend[slot].fd = fd;
    l->pend[slot].peer = peer;
    l->pend[slot].accepted_ns = now;
    l->pend[slot].deadline_ns = now + hello_timeout_ms() * 1000000ull;
  }
  return res;
}

/* Where a pending connection stands after a step: nothing more now (still waiting, or rejected and dropped), its
 * hello verified (the ack is to be sent), the peer speaks another transport, or acked (it is handed out). */
enum { PEND_WAIT, PEND_ACK, PEND_MISMATCH, PEND_DONE };

/* Reads the hello; once whole and verified, the ack is set up. */
static int pending_hello(struct gdr_listener *l, struct gdr_pending_conn *p, uint64_t now) {
  char why[256];
  const struct gdr_hello *h = &p->hello;
  if (gdr_sock_recv_nb(p->fd, &p->hello, sizeof(p->hello), &p->off) != ncclSuccess) {
    snprintf(why, sizeof(why), "%s after %zu of %zu hello bytes", errno ? strerror(errno) : "closed", p->off,
             sizeof(p->hello));
    pending_reject(l, p, why);
    return PEND_WAIT;
  }
  if (p->off < sizeof(p->hello)) {
    if (now > p->deadline_ns) {
      snprintf(why, sizeof(why), "no hello within %llu ms (%zu of %zu bytes)", (unsigned long long)hello_timeout_ms(),
               p->off, sizeof(p->hello));
      pending_reject(l, p, why);
    }
    return PEND_WAIT;
  }
  if (h->magic == GDR_HELLO_MAGIC && h->version == GDR_HANDLE_VERSION && h->nonce == l->nonce &&
      h->transport != l->transport && (h->transport == GDR_TP_TCP || h->transport == GDR_TP_RDMA))
    return PEND_MISMATCH;
  if (gdr_hello_verify(&p->hello, l->nonce, l->transport, why, sizeof(why)) != 0) {
    pending_reject(l, p, why);
    return PEND_WAIT;
  }
  gdr_peer_rank_note(&p->peer, (int)(p->hello.caps >> GDR_HELLO_RANK_SHIFT) - 1);
  p->acking = 1;
  p->off = 0;
  p->ack.magic = GDR_ACK_MAGIC;
  p->ack.version = GDR_HANDLE_VERSION;
  p->ack.status = 0;
  p->ack.caps = l->caps;
  return PEND_ACK;
}

/* One step of a pending connection: its hello, then its ack. */
static int pending_step(struct gdr_listener *l, struct gdr_pending_conn *p, uint64_t now) {
  char why[256];
  if (!p->acking) {
    int st = pending_hello(l, p, now);
    if (st != PEND_ACK) return st;
  }
  if (gdr_sock_send_nb(p->fd, &p->ack, sizeof(p->ack), &p->off) != ncclSuccess) {
    snprintf(why, sizeof(why), "sending the ack failed: %s", errno ? strerror(errno) : "closed");
    pending_reject(l, p, why);
    return PEND_WAIT;
  }
  if (p->off < sizeof(p->ack)) {
    if (now > p->deadline_ns) pending_reject(l, p, "ack not taken in time");
    return PEND_WAIT;
  }
  return PEND_DONE;
}

ncclResult_t gdr_listener_poll(struct gdr_listener *l, struct gdr_stream *out, int *got) {
  ncclResult_t res = ncclSuccess;
  uint64_t now = gdr_time_ns();

  *got = 0;
  GDR_CHECK(listener_accept_backlog(l, now));
  /* progress each pending connection; hand out at most one */
  for (int i = 0; i < GDR_LISTEN_PENDING; i++) {
    struct gdr_pending_conn *p = &l->pend[i];
    int st;
    if (p->fd < 0) continue;
    st = pending_step(l, p, now);
    if (st == PEND_MISMATCH) {
      res = listener_mismatch(l, p);
      goto out;
    }
    if (st != PEND_DONE) continue;
    out->fd = p->fd;
    out->peer = p->peer;
    out->hello = p->hello;
    p->fd = -1;
    pending_drop(p);
    *got = 1;
    break;
  }
out:
  return res;
}

void gdr_listener_close(struct gdr_listener *l) {
  for (int i = 0; i < GDR_LISTEN_PENDING; i++) {
    if (l->pend[i].fd >= 0) pending_drop(&l->pend[i]);
  }
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
}

/* ----------------------------------------------------------------------------------------------- connect -- */

enum { CONN_START = 0, CONN_CONNECTING, CONN_HELLO, CONN_ACK, CONN_DONE, CONN_FAILED };

/* A link-local IPv6 peer: the handle's scope id is the listener's interface index, which names nothing (or another
 * interface) on this host. Use the interface this process's own listeners would use (GDRNET_SOCKET_IFNAME and
 * GDRNET_SOCKET_FAMILY, as gdr_if_find chooses): the first one whose address is link-local. None: left as it is. */
static void link_local_scope(union gdr_sockaddr *peer) {
  struct gdr_if ifs[GDR_MAX_IFS];
  int n = 0;
  if (peer->sa.sa_family != AF_INET6 || !IN6_IS_ADDR_LINKLOCAL(&peer->sin6.sin6_addr)) return;
  if (gdr_if_find_configured(ifs, GDR_MAX_IFS, &n) != ncclSuccess) return;
  for (int i = 0; i < n; i++)
    if (ifs[i].addr.sa.sa_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&ifs[i].addr.sin6.sin6_addr)) {
      peer->sin6.sin6_scope_id = (uint32_t)ifs[i].index;
      return;
    }
}

ncclResult_t gdr_connector_start(struct gdr_connector *c, const struct gdr_handle *h, uint8_t kind, uint16_t stream,
                                 uint16_t nstreams, uint64_t conn_id, uint32_t caps, const void *tp_data) {
  ncclResult_t res = ncclSuccess;
  memset(c, 0, sizeof(*c));
  c->fd = -1;
  c->stage = CONN_START;
  GDR_CHECK(gdr_handle_check(h, &c->peer));
  link_local_scope(&c->peer);
  c->start_ns = gdr_time_ns();
  c->deadline_ns = c->start_ns + gdr_connect_timeout_ns();
  c->retry_ns = c->start_ns;
  c->hello.magic = GDR_HELLO_MAGIC;
  c->hello.version = GDR_HANDLE_VERSION;
  c->hello.transport = h->transport;
  c->hello.kind = kind;
  c->hello.nonce = h->nonce;
  c->hello.conn_id = conn_id;
  c->hello.stream = stream;
  c->hello.nstreams = nstreams;
  c->hello.caps = caps & GDR_HELLO_CAPS_MASK;
  if (gdr_launcher_rank() >= 0) c->hello.caps |= (uint32_t)(gdr_launcher_rank() + 1) << GDR_HELLO_RANK_SHIFT;
  if (tp_data != NULL) memcpy(c->hello.tp_data, tp_data, sizeof(c->hello.tp_data));
  if (kind == GDR_STREAM_CTRL) gdr_peer_rank_note(&c->peer, gdr_handle_rank(h));
out:
  return res;
}

/* The connect WARNs' hint: a peer that advertised a loopback address (its interface selection found only lo) cannot
 * be reached from another host, which is why a connect to it times out there. */
static const char *peer_hint(const union gdr_sockaddr *peer) {
  int lo = (peer->sa.sa_family == AF_INET && (ntohl(peer->sin.sin_addr.s_addr) >> 24) == 127) ||
           (peer->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&peer->sin6.sin6_addr));
  return lo ? "the peer advertised a loopback address (its GDRNET_SOCKET_IFNAME selects lo?): other hosts cannot "
              "reach it"
            : "is the peer alive and reachable?";
}

static int retryable_connect_error(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH || err == EAGAIN ||
         err == ECONNRESET;
}

/* Schedules another attempt after a failed TCP connect; error if the deadline passed. */
static ncclResult_t connector_retry(struct gdr_connector *c, int err, uint64_t now) {
  char a[GDR_ADDR_STRLEN];
  uint64_t backoff_ms;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->attempts++;
  c->last_err = err;
  if (!retryable_connect_error(err) || now >= c->deadline_ns) {
    GDR_WARN("connect to %s failed after %d attempt(s) in %llu ms: %s; %s", gdr_sockaddr_str(&c->peer, a, sizeof(a)),
             c->attempts, (unsigned long long)((now - c->start_ns) / 1000000ull), strerror(err), peer_hint(&c->peer));
    c->stage = CONN_FAILED;
    return ncclRemoteError;
  }
  backoff_ms = 1ull << (c->attempts < 9 ? c->attempts : 9); /* 2 ms .. 512 ms */
  c->retry_ns = now + backoff_ms * 1000000ull;
  c->stage = CONN_START;
  return ncclSuccess;
}

ncclResult_t gdr_connector_poll(struct gdr_connector *c, int *done) {
  ncclResult_t res = ncclSuccess;
  uint64_t now = gdr_time_ns();
  char a[GDR_ADDR_STRLEN];

  *done = 0;
  if (c->stage == CONN_FAILED) return ncclRemoteError;
  if (c->stage == CONN_DONE) {
    *done = 1;
    return ncclSuccess;
  }
  if (now > c->deadline_ns) {
    if (c->stage <= CONN_CONNECTING) {
      GDR_WARN("connect to %s failed: no connection within %lld ms (%d attempt(s), last error: %s); %s",
               gdr_sockaddr_str(&c->peer, a, sizeof(a)), (long long)gdr_connect_timeout_ms(), c->attempts,
               c->last_err ? strerror(c->last_err) : "still in progress", peer_hint(&c->peer));
    } else {
      GDR_WARN("connect to %s: connected, but no answer to our hello within %lld ms; is the peer's plugin stuck, or "
               "is something else listening there?",
               gdr_sockaddr_str(&c->peer, a, sizeof(a)), (long long)gdr_connect_timeout_ms());
    }
    res = ncclRemoteError;
    goto out;
  }
  if (c->stage == CONN_START) {
    if (now < c->retry_ns) return ncclSuccess;
    c->fd = socket(c->peer.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    GDR_SYSCHECK(c->fd, "socket");
    if (connect(c->fd, &c->peer.sa, gdr_sockaddr_len(&c->peer)) == 0) {
      c->stage = CONN_HELLO;
    } else if (errno == EINPROGRESS || errno == EINTR) {
      c->stage = CONN_CONNECTING;
      return ncclSuccess;
    } else {
      return connector_retry(c, errno, now);
    }
  }
  if (c->stage == CONN_CONNECTING) {
    struct pollfd p = {c->fd, POLLOUT, 0};
    int err = 0;
    socklen_t elen = sizeof(err);
    int n = poll(&p, 1, 0);
    if (n < 0 && errno != EINTR) GDR_SYSCHECK(n, "poll");
    if (n <= 0) return ncclSuccess;
    GDR_SYSCHECK(getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen), "getsockopt(SO_ERROR)");
    if (err != 0) return connector_retry(c, err, now);
    c->stage = CONN_HELLO;
    c->off = 0;
  }
  if (c->stage == CONN_HELLO) {
    res = gdr_sock_send_nb(c->fd, &c->hello, sizeof(c->hello), &c->off);
    if (res != ncclSuccess) {
      GDR_WARN("connect to %s: sending hello failed: %s", gdr_sockaddr_str(&c->peer, a, sizeof(a)),
               errno ? strerror(errno) : "connection closed");
      goto out;
    }
    if (c->off < sizeof(c->hello)) return ncclSuccess;
    c->stage = CONN_ACK;
    c->off = 0;
  }
  if (c->stage == CONN_ACK) {
    res = gdr_sock_recv_nb(c->fd, &c->ack, sizeof(c->ack), &c->off);
    if (res != ncclSuccess) {
      GDR_WARN("connect to %s: the listener closed the connection instead of accepting it (%s); it rejected our "
               "hello (stale handle? different plugin version?) -- see the peer's log",
               gdr_sockaddr_str(&c->peer, a, sizeof(a)), errno ? strerror(errno) : "EOF");
      goto out;
    }
    if (c->off < sizeof(c->ack)) return ncclSuccess;
    if (c->ack.magic == GDR_ACK_MAGIC && c->ack.status == GDR_ACK_MISMATCH) {
      char mine[80], theirs[80];
      GDR_WARN("connect: peer %s cannot meet this rank: here %s, there %s; %s",
               gdr_sockaddr_str(&c->peer, a, sizeof(a)), gdr_caps_str(c->hello.caps, mine, sizeof(mine)),
               gdr_caps_str(c->ack.caps, theirs, sizeof(theirs)), mismatch_advice(c->hello.caps, c->ack.caps));
      res = ncclInvalidUsage;
      goto out;
    }
    if (c->ack.magic != GDR_ACK_MAGIC || c->ack.status != 0) {
      GDR_WARN("connect to %s: bad acknowledgement (magic 0x%08x status %u)", gdr_sockaddr_str(&c->peer, a, sizeof(a)),
               c->ack.magic, c->ack.status);
      res = ncclRemoteError;
      goto out;
    }
    c->stage = CONN_DONE;
    *done = 1;
  }
out:
  if (res != ncclSuccess) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->stage = CONN_FAILED;
  }
  return res;
}

void gdr_connector_abort(struct gdr_connector *c) {
  if (c->stage != CONN_DONE && c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->stage = CONN_FAILED;
}

#define GDR_REFUSE_MS 1000 /* a refusal waits this long at most for the listener's answer */

ncclResult_t gdr_connect_refuse(struct gdr_handle *h, uint8_t transport, uint32_t caps) {
  ncclResult_t res = ncclSuccess;
  struct gdr_connector *c = gdr_handle_state_get(h);
  int done = 0;
  if (c == NULL) {
    struct gdr_handle x = *h;
    uint64_t conn_id = 0;
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
      GDR_WARN("connect: out of memory");
      return ncclSystemError;
    }
    x.transport = transport;
    res = gdr_random_bytes(&conn_id, sizeof(conn_id));
    if (res == ncclSuccess) res = gdr_connector_start(c, &x, GDR_STREAM_CTRL, 0, 0, conn_id, caps, NULL);
    if (res == ncclSuccess && c->deadline_ns > c->start_ns + GDR_REFUSE_MS * 1000000ull)
      c->deadline_ns = c->start_ns + GDR_REFUSE_MS * 1000000ull;
    if (res == ncclSuccess) res = gdr_handle_state_set(h, c);
    if (res != ncclSuccess) {
      gdr_connector_abort(c);
      free(c);
      return res;
    }
  }
  res = gdr_connector_poll(c, &done);
  if (res == ncclSuccess && !done) return ncclSuccess;
  if (!(c->ack.magic == GDR_ACK_MAGIC && c->ack.status == GDR_ACK_MISMATCH)) {
    /* the listener did not say it (an older plugin, or gone): this side knows enough to say it */
    char a[GDR_ADDR_STRLEN], mine[80], theirs[80];
    GDR_WARN("connect: peer %s cannot meet this rank: here %s, there %s; %s", gdr_sockaddr_str(&c->peer, a, sizeof(a)),
             gdr_caps_str(caps, mine, sizeof(mine)), gdr_caps_str(h->caps, theirs, sizeof(theirs)),
             mismatch_advice(caps, h->caps));
  }
  if (done && c->fd >= 0) close(c->fd);
  gdr_connector_abort(c);
  free(c);
  gdr_handle_state_set(h, NULL);
  return ncclInvalidUsage;
}
