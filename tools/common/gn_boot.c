/* The two-process bootstrap: a byte stream carrying the 128-byte handle and small control words. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gn.h"

static int remaining_ms(uint64_t deadline) {
  uint64_t now = gn_now_ns();
  if (now >= deadline) return 0;
  uint64_t ms = (deadline - now + 999999) / 1000000;
  return ms > 1000000 ? 1000000 : (int)ms;
}

int gn_boot_socketpair(int sv[2]) { return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv); }

/* A listening socket on a (IPv6: dual-stack, IPv4 clients too), or -1. */
static int listen_on(const struct addrinfo *a) {
  int one = 1, zero = 0;
  int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
  if (fd < 0) return -1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (a->ai_family == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) return fd;
  close(fd);
  return -1;
}

int gn_boot_tcp_listen(const char *bind_host, int port, int *bound_port) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(bind_host, ps, &hints, &res);
  if (rc != 0) {
    errno = EINVAL;
    return -1;
  }
  int fd = -1;
  /* IPv6 first: its dual-stack wildcard takes IPv4 clients too, while getaddrinfo lists 0.0.0.0 first (which left a
   * --server unreachable from a host without IPv4) */
  for (int pass = 0; pass < 2 && fd < 0; pass++)
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next)
      if ((a->ai_family == AF_INET6) == (pass == 0)) fd = listen_on(a);
  freeaddrinfo(res);
  if (fd < 0) return -1;
  if (bound_port != NULL) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
      close(fd);
      return -1;
    }
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  }
  return fd;
}

int gn_boot_tcp_accept(int lfd, double timeout_s) {
  uint64_t dl = gn_deadline_ns(timeout_s);
  for (;;) {
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int r = poll(&p, 1, remaining_ms(dl));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)) continue;
    if (fd >= 0) {
      int one = 1;
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
  }
}

int gn_boot_tcp_connect(const char *host, int port, double timeout_s, char *err, size_t errlen) {
  uint64_t dl = gn_deadline_ns(timeout_s);
  char ps[16];
  int last = 0; /* errno of the last failed connect */
  snprintf(ps, sizeof ps, "%d", port);
  for (;;) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai != 0 && (gai != EAI_AGAIN || gn_expired(dl))) {
      /* a name that does not resolve is no reason to wait: say so at once (a temporary DNS failure retries) */
      snprintf(err, errlen, "cannot resolve host '%s': %s (check the name, or give the server's IP address)", host,
               gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
      errno = gai == EAI_SYSTEM ? errno : ENOENT;
      return -1;
    }
    for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last = errno;
        continue;
      }
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        freeaddrinfo(res);
        return fd;
      }
      last = errno;
      close(fd);
    }
    if (res != NULL) freeaddrinfo(res);
    if (gn_expired(dl)) {
      if (last == ECONNREFUSED)
        snprintf(err, errlen,
                 "%s:%d: connection refused: is the server running? (refused for %g s, --timeout; start it there "
                 "with gdrnet-perf --server --port %d)",
                 host, port, timeout_s, port);
      else
        snprintf(err, errlen, "%s:%d: %s; no connection within %g s (--timeout)", host, port,
                 last ? strerror(last) : "no address", timeout_s);
      errno = last ? last : ETIMEDOUT;
      return -1;
    }
    /* The server may not be up yet: retry, paced by poll() on nothing (a bounded wait, not a sync). */
    (void)poll(NULL, 0, 100);
  }
}

int gn_boot_send(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int gn_boot_recv(int fd, void *buf, size_t len, double timeout_s) {
  uint64_t dl = gn_deadline_ns(timeout_s);
  char *p = buf;
  while (len > 0) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = poll(&pf, 1, remaining_ms(dl));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return -1;
    if (n == 0) {
      errno = EPIPE;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int gn_boot_send_u64(int fd, uint64_t v) { return gn_boot_send(fd, &v, sizeof v); }

int gn_boot_recv_u64(int fd, uint64_t *v, double timeout_s) { return gn_boot_recv(fd, v, sizeof *v, timeout_s); }

int gn_boot_barrier(int fd, double timeout_s) {
  uint64_t token = 0x6764726e65746261ull; /* "gdrnetba" */
  uint64_t got = 0;
  if (gn_boot_send_u64(fd, token) != 0) return -1;
  if (gn_boot_recv_u64(fd, &got, timeout_s) != 0) return -1;
  if (got != token) {
    errno = EPROTO;
    return -1;
  }
  return 0;
}
