/* sock.c: interface filter syntax, handle and hello encode/verify, the non-blocking listen/connect/accept state
 * machines on loopback, rejection of garbage and strays (the listener keeps working), blob exchange, timeouts. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "sock.h"
#include "unit_common.h"

static int setup(void **state) {
  (void)state;
  gdr_log_init(ut_logger);
  unsetenv("GDRNET_CONNECT_TIMEOUT_MS");
  gdr_params_reset();
  ut_warn_reset();
  return 0;
}

static void loopback(union gdr_sockaddr *a) {
  memset(a, 0, sizeof(*a));
  a->sin.sin_family = AF_INET;
  a->sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static void test_filter_syntax(void **state) {
  struct gdr_filter f;
  char why[256];
  (void)state;
  assert_int_equal(gdr_filter_parse("eth", &f, why, sizeof(why)), ncclSuccess);
  assert_int_equal(f.n, 1);
  assert_true(gdr_filter_match(&f, "eth0", -1));
  assert_true(gdr_filter_match(&f, "eth10", -1));
  assert_false(gdr_filter_match(&f, "ib0", -1));

  assert_int_equal(gdr_filter_parse("^docker,lo", &f, why, sizeof(why)), ncclSuccess);
  assert_true(f.exclude);
  assert_false(gdr_filter_match(&f, "docker0", -1));
  assert_false(gdr_filter_match(&f, "lo", -1));
  assert_true(gdr_filter_match(&f, "eth0", -1));

  assert_int_equal(gdr_filter_parse("=eth0", &f, why, sizeof(why)), ncclSuccess);
  assert_true(f.exact);
  assert_true(gdr_filter_match(&f, "eth0", -1));
  assert_false(gdr_filter_match(&f, "eth01", -1));

  assert_int_equal(gdr_filter_parse("^=eth0, eth1 ", &f, why, sizeof(why)), ncclSuccess);
  assert_int_equal(f.n, 2);
  assert_false(gdr_filter_match(&f, "eth1", -1));
  assert_true(gdr_filter_match(&f, "eth10", -1));

  /* HCA syntax: dev[:port] */
  assert_int_equal(gdr_filter_parse("mlx5_0:1,mlx5_1", &f, why, sizeof(why)), ncclSuccess);
  assert_int_equal(f.e[0].port, 1);
  assert_int_equal(f.e[1].port, -1);
  assert_true(gdr_filter_match(&f, "mlx5_0", 1));
  assert_false(gdr_filter_match(&f, "mlx5_0", 2));
  assert_true(gdr_filter_match(&f, "mlx5_1", 2));
  assert_false(gdr_filter_match(&f, "mlx5_2", 1));
  assert_true(gdr_filter_match(&f, "mlx5_0:1", -1)); /* interface alias names like eth0:1 */

  assert_int_equal(gdr_filter_parse("", &f, why, sizeof(why)), ncclSuccess);
  assert_true(gdr_filter_match(&f, "anything", -1));
  assert_int_equal(gdr_filter_parse(NULL, &f, why, sizeof(why)), ncclSuccess);

  static const char *bad[] = {"^", "=", "^=", "eth0,,eth1", ",eth0", "eth0,", "eth0:", ":1", "eth0:x", "eth0:70000",
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    why[0] = '\0';
    assert_int_equal(gdr_filter_parse(bad[i], &f, why, sizeof(why)), ncclInvalidUsage);
    assert_true(strlen(why) > 0);
  }
  {
    char many[512] = "";
    for (int i = 0; i < GDR_FILTER_MAX + 1; i++) strcat(many, i ? ",e" : "e");
    assert_int_equal(gdr_filter_parse(many, &f, why, sizeof(why)), ncclInvalidUsage);
  }
}

static void test_if_find(void **state) {
  struct gdr_if ifs[GDR_MAX_IFS];
  int n = -1;
  char a[GDR_ADDR_STRLEN];
  (void)state;
  assert_int_equal(gdr_if_find("lo", GDR_SOCKET_FAMILY_AUTO, ifs, GDR_MAX_IFS, &n), ncclSuccess);
  assert_int_equal(n, 1);
  assert_string_equal(ifs[0].name, "lo");
  assert_string_equal(gdr_sockaddr_str(&ifs[0].addr, a, sizeof(a)), "127.0.0.1:0");
  assert_int_equal(gdr_if_find("=no_such_if", GDR_SOCKET_FAMILY_AUTO, ifs, GDR_MAX_IFS, &n), ncclSuccess);
  assert_int_equal(n, 0);
  assert_int_equal(gdr_if_find("", GDR_SOCKET_FAMILY_AUTO, ifs, GDR_MAX_IFS, &n), ncclSuccess);
  assert_true(n >= 1); /* something, if only lo */
  for (int i = 0; i < n; i++) assert_int_not_equal(strncmp(ifs[i].name, "docker", 6), 0);
  assert_int_equal(gdr_if_find("^lo", GDR_SOCKET_FAMILY_INET, ifs, 1, &n), ncclSuccess);
  assert_true(n <= 1);
  assert_int_equal(gdr_if_find("^", GDR_SOCKET_FAMILY_AUTO, ifs, GDR_MAX_IFS, &n), ncclInvalidUsage);
}

static void test_addr_str(void **state) {
  union gdr_sockaddr a;
  char s[GDR_ADDR_STRLEN];
  (void)state;
  memset(&a, 0, sizeof(a));
  a.sin6.sin6_family = AF_INET6;
  a.sin6.sin6_port = htons(5000);
  inet_pton(AF_INET6, "fe80::1", &a.sin6.sin6_addr);
  a.sin6.sin6_scope_id = 2;
  assert_string_equal(gdr_sockaddr_str(&a, s, sizeof(s)), "[fe80::1%2]:5000");
  assert_int_equal(gdr_sockaddr_port(&a), 5000);
  assert_int_equal(gdr_sockaddr_len(&a), sizeof(struct sockaddr_in6));
  a.sa.sa_family = AF_UNIX;
  assert_non_null(strstr(gdr_sockaddr_str(&a, s, sizeof(s)), "unknown"));
  assert_int_equal(gdr_sockaddr_len(&a), 0);
}

static void test_handle_encode_check(void **state) {
  struct gdr_listener l;
  union gdr_sockaddr a, peer;
  struct gdr_handle h, bad;
  (void)state;
  loopback(&a);
  assert_int_equal(gdr_listener_open(&l, &a, GDR_TP_TCP, GDR_CAP_TCP), ncclSuccess);
  gdr_listener_handle(&l, 3, &h);
  assert_int_equal(h.magic, GDR_HANDLE_MAGIC);
  assert_int_equal(h.version, GDR_HANDLE_VERSION);
  assert_int_equal(h.transport, GDR_TP_TCP);
  assert_int_equal(h.dev, 3);
  assert_int_equal(h.nonce, l.nonce);
  assert_null(gdr_handle_state_get(&h));
  assert_int_equal(gdr_handle_check(&h, &peer), ncclSuccess);
  assert_int_equal(peer.sin.sin_port, l.addr.sin.sin_port);
  assert_int_equal(peer.sin.sin_addr.s_addr, htonl(INADDR_LOOPBACK));

  /* two listens: two nonces */
  {
    struct gdr_listener l2;
    assert_int_equal(gdr_listener_open(&l2, &a, GDR_TP_TCP, GDR_CAP_TCP), ncclSuccess);
    assert_int_not_equal(l2.nonce, l.nonce);
    gdr_listener_close(&l2);
  }
  bad = h;
  bad.magic ^= 1;
  assert_int_equal(gdr_handle_check(&bad, &peer), ncclInvalidUsage);
  bad = h;
  bad.version = 99;
  assert_int_equal(gdr_handle_check(&bad, &peer), ncclInvalidUsage);
  bad = h;
  bad.addr.family = 77;
  assert_int_equal(gdr_handle_check(&bad, &peer), ncclInvalidUsage);
  memset(&bad, 0xff, sizeof(bad)); /* garbage */
  assert_int_equal(gdr_handle_check(&bad, &peer), ncclInvalidUsage);

  /* connect-side state rides in the handle */
  int x;
  struct gdr_handle forged;
  assert_int_equal(gdr_handle_state_set(&h, &x), ncclSuccess);
  assert_ptr_equal(gdr_handle_state_get(&h), &x);
  assert_int_equal(gdr_handle_check(&h, &peer), ncclSuccess);
  /* the peer wrote the handle: a state this process did not set there is not used (the fuzz target "handle" found
   * connect dereferencing a pointer a handle carried) */
  forged = h;
  forged.state[16] ^= 1; /* the state's tag */
  assert_null(gdr_handle_state_get(&forged));
  memcpy(forged.state, "GDRSTATE", 8);
  memset(forged.state + 8, 0x41, 8);
  assert_null(gdr_handle_state_get(&forged));
  assert_int_equal(gdr_handle_state_set(&h, NULL), ncclSuccess);
  assert_null(gdr_handle_state_get(&h));
  forged = h;
  assert_int_equal(gdr_handle_state_set(&h, &x), ncclSuccess);
  memcpy(&forged, &h, sizeof(h));
  assert_int_equal(gdr_handle_state_set(&h, NULL), ncclSuccess);
  assert_null(gdr_handle_state_get(&forged)); /* a copy of a cleared state is dead too */
  gdr_listener_close(&l);
}

static void test_hello_verify(void **state) {
  struct gdr_hello h;
  char why[256];
  (void)state;
  memset(&h, 0, sizeof(h));
  h.magic = GDR_HELLO_MAGIC;
  h.version = GDR_HANDLE_VERSION;
  h.transport = GDR_TP_TCP;
  h.kind = GDR_STREAM_DATA;
  h.nonce = 0x1234;
  h.stream = 2;
  h.nstreams = 4;
  assert_int_equal(gdr_hello_verify(&h, 0x1234, GDR_TP_TCP, why, sizeof(why)), 0);
  assert_int_equal(gdr_hello_verify(&h, 0x1235, GDR_TP_TCP, why, sizeof(why)), -1);
  assert_non_null(strstr(why, "nonce"));
  assert_int_equal(gdr_hello_verify(&h, 0x1234, GDR_TP_RDMA, why, sizeof(why)), -1);
  assert_non_null(strstr(why, "transport"));
  struct gdr_hello b = h;
  b.magic = 0x47455420; /* "GET " */
  assert_int_equal(gdr_hello_verify(&b, 0x1234, GDR_TP_TCP, why, sizeof(why)), -1);
  assert_non_null(strstr(why, "magic"));
  b = h;
  b.version = 2;
  assert_int_equal(gdr_hello_verify(&b, 0x1234, GDR_TP_TCP, why, sizeof(why)), -1);
  assert_non_null(strstr(why, "version"));
  b = h;
  b.kind = 9;
  assert_int_equal(gdr_hello_verify(&b, 0x1234, GDR_TP_TCP, why, sizeof(why)), -1);
  b = h;
  b.stream = 5;
  assert_int_equal(gdr_hello_verify(&b, 0x1234, GDR_TP_TCP, why, sizeof(why)), -1);
}

/* Drives a connector and a listener until the connector is done; returns the accepted stream. */
static void handshake(struct gdr_listener *l, struct gdr_connector *c, struct gdr_stream *s) {
  int done = 0, got = 0;
  double t0 = ut_now();
  while (!done || !got) {
    if (!done) assert_int_equal(gdr_connector_poll(c, &done), ncclSuccess);
    if (!got) assert_int_equal(gdr_listener_poll(l, s, &got), ncclSuccess);
    assert_true(ut_now() - t0 < 10.0);
  }
}

static void test_connect_accept_blob(void **state) {
  struct gdr_listener l;
  struct gdr_connector c;
  struct gdr_stream s;
  union gdr_sockaddr a;
  struct gdr_handle h;
  unsigned char tp[32];
  (void)state;
  loopback(&a);
  for (int i = 0; i < 32; i++) tp[i] = (unsigned char)i;
  assert_int_equal(gdr_listener_open(&l, &a, GDR_TP_RDMA, GDR_CAP_RDMA | GDR_CAP_TCP), ncclSuccess);
  gdr_listener_handle(&l, 0, &h);
  assert_int_equal(gdr_connector_start(&c, &h, GDR_STREAM_CTRL, 0, 0, 0xabcdef, GDR_CAP_RDMA, tp), ncclSuccess);
  handshake(&l, &c, &s);
  assert_true(c.fd >= 0);
  assert_int_equal(s.hello.conn_id, 0xabcdef);
  assert_int_equal(s.hello.kind, GDR_STREAM_CTRL);
  assert_int_equal(s.hello.caps, GDR_CAP_RDMA);
  assert_memory_equal(s.hello.tp_data, tp, 32);
  assert_int_equal(c.ack.caps, GDR_CAP_RDMA | GDR_CAP_TCP);

  /* typed blobs both ways, non-blocking, including a large one that needs several calls */
  {
    static char big[512 * 1024], back[512 * 1024];
    struct gdr_blob_io so, ro;
    uint32_t len = 0;
    int sd = 0, rd = 0;
    double t0 = ut_now();
    for (size_t i = 0; i < sizeof(big); i++) big[i] = (char)(i * 7);
    memset(&so, 0, sizeof(so));
    memset(&ro, 0, sizeof(ro));
    while (!sd || !rd) {
      if (!sd) assert_int_equal(gdr_sock_blob_send(c.fd, &so, 42, big, sizeof(big), &sd), ncclSuccess);
      if (!rd) assert_int_equal(gdr_sock_blob_recv(s.fd, &ro, 42, back, sizeof(back), &len, &rd), ncclSuccess);
      assert_true(ut_now() - t0 < 10.0);
    }
    assert_int_equal(len, sizeof(big));
    assert_memory_equal(big, back, sizeof(big));
    /* wrong type and too big are protocol errors */
    memset(&so, 0, sizeof(so));
    memset(&ro, 0, sizeof(ro));
    sd = rd = 0;
    while (!sd) assert_int_equal(gdr_sock_blob_send(s.fd, &so, 7, "hi", 2, &sd), ncclSuccess);
    {
      ncclResult_t r = ncclSuccess;
      t0 = ut_now();
      while (r == ncclSuccess && !rd) {
        r = gdr_sock_blob_recv(c.fd, &ro, 8, back, sizeof(back), &len, &rd);
        assert_true(ut_now() - t0 < 10.0);
      }
      assert_int_equal(r, ncclRemoteError);
    }
  }
  /* EOF is an error for the raw helpers */
  {
    size_t off = 0;
    char b[4];
    close(s.fd);
    double t0 = ut_now();
    ncclResult_t r = ncclSuccess;
    while (r == ncclSuccess) {
      r = gdr_sock_recv_nb(c.fd, b, sizeof(b), &off);
      assert_true(ut_now() - t0 < 5.0);
    }
    assert_int_equal(r, ncclRemoteError);
  }
  close(c.fd);
  gdr_listener_close(&l);
}

/* The launcher's rank both ways (sock.h): the listener's in its handle (kept by the door), the connector's in its
 * HELLO's caps above the GDR_CAP_* bits; each side notes the other's by address. A handle or HELLO of an older
 * plugin (zeros there) says nothing. */
static void test_peer_rank(void **state) {
  static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  struct gdr_listener l;
  struct gdr_connector c;
  struct gdr_stream s;
  union gdr_sockaddr a, local;
  struct gdr_handle h, th, d;
  char name[GDR_ADDR_STRLEN];
  socklen_t len = sizeof(local);
  (void)state;
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
  assert_int_equal(gdr_launcher_rank(), -1);
  setenv("SLURM_PROCID", "12", 1);
  assert_int_equal(gdr_launcher_rank(), 12);
  setenv("RANK", "x3", 1); /* not a number: the next variable */
  assert_int_equal(gdr_launcher_rank(), 12);
  setenv("RANK", "5", 1);
  assert_int_equal(gdr_launcher_rank(), 5);
  loopback(&a);
  assert_int_equal(gdr_listener_open(&l, &a, GDR_TP_RDMA, GDR_CAP_RDMA | GDR_CAP_TCP), ncclSuccess);
  gdr_listener_handle(&l, 0, &h);
  assert_int_equal(gdr_handle_rank(&h), 5);
  th = h;
  th.transport = GDR_TP_TCP;
  th.addr.port = htons(1);
  gdr_handle_door_set(&h, &th);
  assert_int_equal(gdr_handle_rank(&h), 5);
  assert_int_equal(gdr_handle_door_get(&h, &d), 0);
  assert_int_equal(gdr_handle_rank(&d), 5);
  setenv("RANK", "7", 1); /* the connector's process, as it were */
  assert_int_equal(gdr_connector_start(&c, &h, GDR_STREAM_CTRL, 0, 0, 0x1234, GDR_CAP_RDMA, NULL), ncclSuccess);
  handshake(&l, &c, &s);
  assert_int_equal(s.hello.caps & GDR_HELLO_CAPS_MASK, GDR_CAP_RDMA);
  assert_int_equal(s.hello.caps >> GDR_HELLO_RANK_SHIFT, 8);
  gdr_sockaddr_str(&c.peer, name, sizeof(name)); /* the connector's view: the listener */
  assert_int_equal(gdr_peer_rank_of(name), 5);
  assert_int_equal(getsockname(c.fd, &local.sa, &len), 0);
  gdr_sockaddr_str(&local, name, sizeof(name)); /* the listener's view: the connector's address */
  assert_int_equal(gdr_peer_rank_of(name), 7);
  assert_int_equal(gdr_peer_rank_of("192.0.2.99:1"), -1);
  close(s.fd);
  close(c.fd);
  /* an older plugin's handle: nothing */
  memset(h.spare, 0, sizeof(h.spare));
  assert_int_equal(gdr_handle_rank(&h), -1);
  gdr_listener_close(&l);
  unsetenv("RANK");
  unsetenv("SLURM_PROCID");
}

static int raw_connect(const union gdr_sockaddr *a) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, &a->sa, gdr_sockaddr_len(a)), 0);
  return fd;
}

/* Polls the listener for a while; returns 1 if a stream was (wrongly) accepted. */
static int poll_listener(struct gdr_listener *l, double secs) {
  double t0 = ut_now();
  while (ut_now() - t0 < secs) {
    struct gdr_stream s;
    int got = 0;
    assert_int_equal(gdr_listener_poll(l, &s, &got), ncclSuccess);
    if (got) {
      close(s.fd);
      return 1;
    }
    usleep(1000);
  }
  return 0;
}

/* Expects the peer to be disconnected by the listener. */
static void expect_closed(int fd) {
  char b[64];
  struct pollfd p = {fd, POLLIN, 0};
  assert_int_equal(poll(&p, 1, 5000), 1);
  ssize_t n = recv(fd, b, sizeof(b), 0);
  assert_true(n <= 0);
}

static void test_rejects_garbage_and_strays(void **state) {
  struct gdr_listener l;
  union gdr_sockaddr a;
  struct gdr_handle h;
  (void)state;
  setenv("GDRNET_CONNECT_TIMEOUT_MS", "400", 1); /* bounds the hello wait in this test */
  gdr_params_reset();
  loopback(&a);
  assert_int_equal(gdr_listener_open(&l, &a, GDR_TP_TCP, GDR_CAP_TCP), ncclSuccess);
  gdr_listener_handle(&l, 0, &h);

  /* garbage: an HTTP request */
  int g = raw_connect(&l.addr);
  const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: y\r\n\r\nmore bytes to make 64....";
  assert_true(send(g, http, 64, MSG_NOSIGNAL) == 64);
  assert_false(poll_listener(&l, 0.1));
  expect_closed(g);
  close(g);
  assert_true(ut_warned("rejected connection"));
  assert_true(ut_warned("magic"));

  /* truncated hello, then EOF */
  ut_warn_reset();
  struct gdr_hello hello;
  memset(&hello, 0, sizeof(hello));
  hello.magic = GDR_HELLO_MAGIC;
  hello.version = GDR_HANDLE_VERSION;
  hello.transport = GDR_TP_TCP;
  hello.nonce = h.nonce;
  g = raw_connect(&l.addr);
  assert_true(send(g, &hello, 10, MSG_NOSIGNAL) == 10);
  shutdown(g, SHUT_WR);
  assert_false(poll_listener(&l, 0.1));
  close(g);
  assert_true(ut_warned("after 10 of 64 hello bytes"));

  /* a stray with the wrong nonce, through a real connector */
  ut_warn_reset();
  {
    struct gdr_handle stale = h;
    struct gdr_connector c;
    int done = 0;
    ncclResult_t r = ncclSuccess;
    double t0 = ut_now();
    stale.nonce ^= 0x5555;
    assert_int_equal(gdr_connector_start(&c, &stale, GDR_STREAM_CTRL, 0, 0, 1, GDR_CAP_TCP, NULL), ncclSuccess);
    while (r == ncclSuccess && !done) {
      struct gdr_stream s;
      int got = 0;
      r = gdr_connector_poll(&c, &done);
      assert_int_equal(gdr_listener_poll(&l, &s, &got), ncclSuccess);
      assert_int_equal(got, 0);
      assert_true(ut_now() - t0 < 5.0);
    }
    assert_int_equal(r, ncclRemoteError);
    assert_true(ut_warned("wrong nonce"));
    gdr_connector_abort(&c);
  }

  /* silent peers: more than the pending table: a peer silent for GDR_LISTEN_EVICT_MS makes room; then the rest are
   * dropped at the hello timeout */
  ut_warn_reset();
  setenv("GDRNET_CONNECT_TIMEOUT_MS", "1500", 1);
  gdr_params_reset();
  {
    enum { NS = GDR_LISTEN_PENDING + 2 };
    int silent[NS];
    for (int i = 0; i < NS; i++) silent[i] = raw_connect(&l.addr);
    assert_false(poll_listener(&l, 0.3));
    assert_false(ut_warned("evicted")); /* not before they had a chance */
    assert_false(poll_listener(&l, 0.5));
    assert_true(ut_warned("evicted"));
    assert_false(poll_listener(&l, 1.2));
    assert_true(ut_warned("no hello within"));
    for (int i = 0; i < NS; i++) close(silent[i]);
    assert_false(poll_listener(&l, 0.3)); /* the last ones (accepted late) see EOF */
  }
  /* many real streams at once (a TCP connection with 64 data streams): none is evicted */
  ut_warn_reset();
  assert_int_equal(l.fd >= 0, 1);
  for (int i = 0; i < GDR_LISTEN_PENDING; i++) assert_int_equal(l.pend[i].fd, -1); /* nothing left over */
  {
    enum { NC = 1 + 64 };
    static struct gdr_connector cs[NC];
    int done[NC] = {0}, ndone = 0, got = 0;
    double t0 = ut_now();
    for (int i = 0; i < NC; i++)
      assert_int_equal(gdr_connector_start(&cs[i], &h, i ? GDR_STREAM_DATA : GDR_STREAM_CTRL, (uint16_t)i, NC - 1, 9,
                                           GDR_CAP_TCP, NULL),
                       ncclSuccess);
    while (ndone < NC || got < NC) {
      for (int i = 0; i < NC; i++) {
        if (done[i]) continue;
        assert_int_equal(gdr_connector_poll(&cs[i], &done[i]), ncclSuccess);
        ndone += done[i];
      }
      for (;;) {
        struct gdr_stream s;
        int g = 0;
        assert_int_equal(gdr_listener_poll(&l, &s, &g), ncclSuccess);
        if (!g) break;
        got++;
        close(s.fd);
      }
      assert_true(ut_now() - t0 < 10.0);
    }
    for (int i = 0; i < NC; i++) close(cs[i].fd);
    assert_int_equal(ut_nwarn, 0);
  }

  /* and after all that, a good peer still gets in */
  {
    struct gdr_connector c;
    struct gdr_stream s;
    assert_int_equal(gdr_connector_start(&c, &h, GDR_STREAM_CTRL, 0, 0, 2, GDR_CAP_TCP, NULL), ncclSuccess);
    handshake(&l, &c, &s);
    assert_int_equal(s.hello.conn_id, 2);
    close(s.fd);
    close(c.fd);
  }
  gdr_listener_close(&l);
}

/* Mixed pairs (sock.h): the TCP door in an RDMA handle round-trips and is absent elsewhere; a connector of another
 * transport with the handle's nonce makes both ends fail at once, each naming both settings, and the listener still
 * takes a good peer after it; the same HELLO with a wrong nonce is only a stray (closed, no error). */
static void test_mixed_door_and_mismatch(void **state) {
  struct gdr_listener l, t;
  union gdr_sockaddr a;
  struct gdr_handle h, th, d;
  (void)state;
  loopback(&a);
  assert_int_equal(gdr_listener_open(&l, &a, GDR_TP_RDMA, GDR_CAP_RDMA | GDR_CAP_FORCED), ncclSuccess);
  assert_int_equal(gdr_listener_open(&t, &a, GDR_TP_TCP, GDR_CAP_TCP), ncclSuccess);
  gdr_listener_handle(&l, 0, &h);
  gdr_listener_handle(&t, 0, &th);
  th.nstreams = 3;
  th.nthreads = 2;
  memset(th.tp_data, 0x5a, sizeof(th.tp_data));
  assert_int_equal(gdr_handle_door_get(&h, &d), -1); /* no GDR_CAP_TCP: no door */
  assert_int_equal(gdr_handle_door_get(&th, &d), -1); /* a TCP handle has none */
  gdr_handle_door_set(&h, &th);
  assert_true(h.caps & GDR_CAP_TCP);
  assert_int_equal(h.transport, GDR_TP_RDMA);
  assert_int_equal(gdr_handle_door_get(&h, &d), 0);
  assert_int_equal(d.transport, GDR_TP_TCP);
  assert_true(d.nonce == th.nonce);
  assert_memory_equal(&d.addr, &th.addr, sizeof(d.addr));
  assert_int_equal(d.nstreams, 3);
  assert_int_equal(d.nthreads, 2);
  assert_memory_equal(d.tp_data, th.tp_data, sizeof(d.tp_data));
  gdr_listener_close(&t);

  /* a TCP-only process against this RDMA listener (GDRNET_TRANSPORT=rdma: no door) */
  {
    struct gdr_handle x;
    struct gdr_stream s;
    ncclResult_t rc = ncclSuccess, rl = ncclSuccess;
    int got = 0;
    double t0 = ut_now();
    gdr_listener_handle(&l, 0, &x);
    ut_warn_reset();
    while (rc == ncclSuccess || rl == ncclSuccess) {
      if (rc == ncclSuccess) rc = gdr_connect_refuse(&x, GDR_TP_TCP, GDR_CAP_TCP);
      if (rl == ncclSuccess) rl = gdr_listener_poll(&l, &s, &got);
      assert_false(got);
      assert_true(ut_now() - t0 < 2.0);
    }
    assert_int_equal(rc, ncclInvalidUsage);
    assert_int_equal(rl, ncclInvalidUsage);
    assert_null(gdr_handle_state_get(&x));
    assert_true(ut_warned("accept: peer"));
    assert_true(ut_warned("here GDRNET_TRANSPORT=rdma (RDMA only), there GDRNET_TRANSPORT=auto (TCP only: no usable "
                          "RDMA device)"));
    assert_true(ut_warned("connect: peer"));
    assert_true(ut_warned("here GDRNET_TRANSPORT=auto (TCP only: no usable RDMA device), there GDRNET_TRANSPORT=rdma "
                          "(RDMA only); set GDRNET_TRANSPORT=auto where it is forced"));
  }
  /* the listener still serves a peer of its transport; a wrong nonce with another transport is only a stray */
  {
    struct gdr_connector c;
    struct gdr_stream s;
    struct gdr_handle stale = h;
    stale.nonce ^= 0x77;
    stale.transport = GDR_TP_TCP;
    assert_int_equal(gdr_connector_start(&c, &stale, GDR_STREAM_CTRL, 0, 0, 1, GDR_CAP_TCP, NULL), ncclSuccess);
    {
      int done = 0;
      ncclResult_t r = ncclSuccess;
      double t0 = ut_now();
      while (r == ncclSuccess && !done) {
        struct gdr_stream ss;
        int got = 0;
        r = gdr_connector_poll(&c, &done);
        assert_int_equal(gdr_listener_poll(&l, &ss, &got), ncclSuccess);
        assert_false(got);
        assert_true(ut_now() - t0 < 10.0);
      }
      assert_int_equal(r, ncclRemoteError);
    }
    gdr_connector_abort(&c);
    assert_int_equal(gdr_connector_start(&c, &h, GDR_STREAM_CTRL, 0, 0, 2, GDR_CAP_RDMA, NULL), ncclSuccess);
    handshake(&l, &c, &s);
    assert_int_equal(s.hello.conn_id, 2);
    close(s.fd);
    close(c.fd);
  }
  gdr_listener_close(&l);
}

static void test_connect_timeout_bounded(void **state) {
  struct gdr_listener l;
  union gdr_sockaddr a;
  struct gdr_handle h;
  struct gdr_connector c;
  int done = 0;
  ncclResult_t r = ncclSuccess;
  double t0;
  (void)state;
  setenv("GDRNET_CONNECT_TIMEOUT_MS", "300", 1);
  gdr_params_reset();
  loopback(&a);
  assert_int_equal(gdr_listener_open(&l, &a, GDR_TP_TCP, GDR_CAP_TCP), ncclSuccess);
  gdr_listener_handle(&l, 0, &h);
  gdr_listener_close(&l); /* nobody listens there any more: refused, retried, then an error */
  assert_int_equal(gdr_connector_start(&c, &h, GDR_STREAM_CTRL, 0, 0, 1, GDR_CAP_TCP, NULL), ncclSuccess);
  t0 = ut_now();
  while (r == ncclSuccess && !done) {
    r = gdr_connector_poll(&c, &done);
    usleep(500);
    assert_true(ut_now() - t0 < 5.0);
  }
  assert_int_equal(r, ncclRemoteError);
  assert_true(ut_now() - t0 >= 0.25);
  assert_true(ut_warned("failed"));
  assert_true(ut_warned("Connection refused"));
  gdr_connector_abort(&c);
  /* a listener that accepts but never answers: the ack wait is bounded too */
  {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    union gdr_sockaddr b;
    socklen_t blen = sizeof(b);
    loopback(&b);
    assert_int_equal(bind(lfd, &b.sa, gdr_sockaddr_len(&b)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(getsockname(lfd, &b.sa, &blen), 0);
    h.addr.port = b.sin.sin_port;
    assert_int_equal(gdr_connector_start(&c, &h, GDR_STREAM_CTRL, 0, 0, 1, GDR_CAP_TCP, NULL), ncclSuccess);
    r = ncclSuccess;
    done = 0;
    t0 = ut_now();
    while (r == ncclSuccess && !done) {
      r = gdr_connector_poll(&c, &done);
      usleep(500);
      assert_true(ut_now() - t0 < 5.0);
    }
    assert_int_equal(r, ncclRemoteError);
    assert_true(ut_warned("no answer to our hello within"));
    gdr_connector_abort(&c);
    close(lfd);
  }
}

/* A connect that fails names a loopback address the peer advertised (a peer on another host whose interface selection
 * found only lo); any other address keeps the plain "is the peer alive and reachable?". */
static void test_connect_loopback_hint(void **state) {
  struct gdr_listener l;
  union gdr_sockaddr a;
  struct gdr_handle h;
  struct gdr_connector c;
  (void)state;
  setenv("GDRNET_CONNECT_TIMEOUT_MS", "200", 1);
  gdr_params_reset();
  for (int i = 0; i < 2; i++) {
    int done = 0;
    ncclResult_t r = ncclSuccess;
    loopback(&a);
    assert_int_equal(gdr_listener_open(&l, &a, GDR_TP_TCP, GDR_CAP_TCP), ncclSuccess);
    gdr_listener_handle(&l, 0, &h);
    gdr_listener_close(&l); /* nobody listens there any more */
    if (i == 1) {
      static const uint8_t testnet[4] = {192, 0, 2, 1}; /* TEST-NET-1: not loopback, never answers */
      memcpy(h.addr.addr, testnet, sizeof(testnet));
      h.addr.port = htons(9);
    }
    ut_warn_reset();
    assert_int_equal(gdr_connector_start(&c, &h, GDR_STREAM_CTRL, 0, 0, 1, GDR_CAP_TCP, NULL), ncclSuccess);
    double t0 = ut_now();
    while (r == ncclSuccess && !done) {
      r = gdr_connector_poll(&c, &done);
      usleep(500);
      assert_true(ut_now() - t0 < 5.0);
    }
    assert_int_equal(r, ncclRemoteError);
    if (i == 0) {
      assert_true(ut_warned("connect to 127.0.0.1:"));
      assert_true(ut_warned("the peer advertised a loopback address"));
    } else {
      assert_true(ut_warned("connect to 192.0.2.1:9"));
      assert_false(ut_warned("loopback"));
      assert_true(ut_warned("is the peer alive and reachable?"));
    }
    gdr_connector_abort(&c);
  }
}

struct blob_arg {
  int fd;
  size_t len;
};

static void *writer(void *a) {
  struct blob_arg *b = a;
  char *buf = malloc(b->len);
  for (size_t i = 0; i < b->len; i++) buf[i] = (char)(i * 13);
  assert_int_equal(gdr_sock_send_all(b->fd, buf, b->len), ncclSuccess);
  free(buf);
  return NULL;
}

/* Exact blocking helpers: a 4 MiB transfer through a socket pair (many short transfers), then EOF. */
static void test_exact_blocking_io(void **state) {
  int sv[2];
  struct blob_arg a;
  pthread_t t;
  size_t len = 4 << 20;
  char *buf = malloc(len);
  (void)state;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  a.fd = sv[0];
  a.len = len;
  assert_int_equal(pthread_create(&t, NULL, writer, &a), 0);
  assert_int_equal(gdr_sock_recv_all(sv[1], buf, len), ncclSuccess);
  assert_int_equal(pthread_join(t, NULL), 0);
  for (size_t i = 0; i < len; i++) assert_int_equal(buf[i], (char)(i * 13));
  close(sv[0]);
  assert_int_equal(gdr_sock_recv_all(sv[1], buf, 1), ncclRemoteError); /* EOF */
  close(sv[1]);
  free(buf);
}

static void test_tune_and_io(void **state) {
  int sv[2];
  char buf[1 << 16];
  size_t off = 0;
  (void)state;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(gdr_sock_set_nonblocking(sv[0], 1), ncclSuccess);
  /* fill the pipe: the non-blocking send stops (no error) when the peer's buffer is full */
  memset(buf, 1, sizeof(buf));
  for (int i = 0; i < 1000; i++) {
    size_t before = off;
    assert_int_equal(gdr_sock_send_nb(sv[0], buf, sizeof(buf), &off), ncclSuccess);
    if (off == sizeof(buf)) off = 0;
    else if (off == before) break;
  }
  close(sv[1]);
  off = 0;
  ncclResult_t r = gdr_sock_send_nb(sv[0], buf, sizeof(buf), &off); /* peer gone: EPIPE, never SIGPIPE */
  assert_int_equal(r, ncclRemoteError);
  close(sv[0]);
  /* tuning a TCP socket */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_int_equal(gdr_sock_tune(fd, 1, 1 << 20, 5000), ncclSuccess);
  assert_int_equal(gdr_sock_tune(fd, 0, 0, 0), ncclSuccess);
  close(fd);
  /* random bytes */
  uint64_t x = 0, y = 0;
  assert_int_equal(gdr_random_bytes(&x, sizeof(x)), ncclSuccess);
  assert_int_equal(gdr_random_bytes(&y, sizeof(y)), ncclSuccess);
  assert_int_not_equal(x, y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_filter_syntax, setup),
      cmocka_unit_test_setup(test_if_find, setup),
      cmocka_unit_test_setup(test_addr_str, setup),
      cmocka_unit_test_setup(test_handle_encode_check, setup),
      cmocka_unit_test_setup(test_hello_verify, setup),
      cmocka_unit_test_setup(test_connect_accept_blob, setup),
      cmocka_unit_test_setup(test_rejects_garbage_and_strays, setup),
      cmocka_unit_test_setup(test_mixed_door_and_mismatch, setup),
      cmocka_unit_test_setup(test_peer_rank, setup),
      cmocka_unit_test_setup(test_connect_timeout_bounded, setup),
      cmocka_unit_test_setup(test_connect_loopback_hint, setup),
      cmocka_unit_test_setup(test_tune_and_io, setup),
      cmocka_unit_test_setup(test_exact_blocking_io, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
