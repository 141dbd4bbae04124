/* Socket utilities shared by the TCP and RDMA transports: interface selection, the 128-byte NCCL handle,
 * non-blocking listen/connect/accept with a verified hello, exact send/recv helpers and a typed blob exchange.
 *
 * Handshake of one stream (connect side -> accept side), all non-blocking:
 *   connector: socket, connect (retried on ECONNREFUSED/ETIMEDOUT until GDRNET_CONNECT_TIMEOUT_MS), send HELLO
 *              (magic, version, transport, listen nonce, connection id, stream index/count), wait for ACK.
 *   listener:  accept every pending connection, read its HELLO within a bounded time, check magic, version,
 *              transport and nonce; a bad or slow peer is closed with a WARN and the listener keeps working; a good
 *              one gets an ACK and is handed to the transport as a gdr_stream. A peer with the nonce that speaks the
 *              other transport cannot meet this one (mixed pairs, below): it gets GDR_ACK_MISMATCH, accept fails.
 * The transport groups streams by conn_id (a TCP connection = 1 control stream + N data streams; an RDMA
 * connection = 1 control stream), and keeps the control stream open as the connection's control channel.
 *
 * Error convention of every function here: ncclSuccess; ncclRemoteError when the peer closed/reset or spoke
 * garbage; ncclSystemError for local OS failures (errno preserved where it helps); ncclInvalidUsage for bad
 * configuration. Functions that know the peer WARN with its address; the raw I/O helpers do not log. */
#ifndef GDRNET_SOCK_H
#define GDRNET_SOCK_H

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "gdrnet/net_v8.h"

/* ------------------------------------------------------------------------------------------------ addresses -- */

union gdr_sockaddr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

#define GDR_ADDR_STRLEN 96
socklen_t gdr_sockaddr_len(const union gdr_sockaddr *a);
/* "10.1.2.3:5000", "[fe80::1%2]:5000"; never fails (writes "<unknown>" for odd families). Returns buf. */
const char *gdr_sockaddr_str(const union gdr_sockaddr *a, char *buf, size_t len);
int gdr_sockaddr_port(const union gdr_sockaddr *a);

/* ---------------------------------------------------------------------------------------------- interfaces -- */

#include "filter.h"

struct gdr_if {
  char name[IF_NAMESIZE];
  union gdr_sockaddr addr; /* port 0 */
  int index;               /* if_nametoindex */
};
#define GDR_MAX_IFS 32
/* Usable IP interfaces, in getifaddrs order, one address per interface (IPv4 preferred unless family says so;
 * IPv6 link-local only when the interface has nothing else). spec = GDRNET_SOCKET_IFNAME text ("" = NCCL Socket's
 * default: ib* interfaces, else everything but docker* and lo, else docker*, else lo). family:
 * GDR_SOCKET_FAMILY_* (param.h).
 * *n = 0 is not an error here. */
ncclResult_t gdr_if_find(const char *spec, int family, struct gdr_if *out, int max, int *n);
/* The same for the interfaces the knobs choose (GDRNET_SOCKET_IFNAME, GDRNET_SOCKET_FAMILY): the handshakes' and
 * the TCP transport's. */
ncclResult_t gdr_if_find_configured(struct gdr_if *out, int max, int *n);

/* ------------------------------------------------------------------------------------------------- handle -- */

#define GDR_HANDLE_MAGIC 0x4e524447u /* "GDRN" */
#define GDR_HANDLE_VERSION 1
/* handle.transport / hello.transport */
#define GDR_TP_TCP 1
#define GDR_TP_RDMA 2
/* capability bits (handle.caps, hello.caps, ack.caps): what a side can speak */
#define GDR_CAP_TCP 0x1u
#define GDR_CAP_RDMA 0x2u
#define GDR_CAP_FALLBACK 0x4u
#define GDR_CAP_FORCED 0x8u /* GDRNET_TRANSPORT names this side's transport (rdma, tcp): no per-connection choice */

/* Mixed pairs (one side without RDMA). Each connection takes the transport both sides can speak: an RDMA listener
 * whose process may use TCP (GDRNET_TRANSPORT=auto and a TCP transport) announces GDR_CAP_TCP and opens a "TCP door"
 * (struct gdr_handle_door) where a peer without RDMA connects with the TCP transport; an RDMA process connects to a
 * TCP listener with its TCP transport. A pair that cannot meet (an explicit GDRNET_TRANSPORT against a peer that
 * cannot speak it) fails at once on both sides: the connector says HELLO with its own transport, and a listener of
 * another transport that finds the handle's nonce in it answers GDR_ACK_MISMATCH and fails its accept. */
/* The capabilities this process announces (GDR_CAP_*), from GDRNET_TRANSPORT; rdma_tcp: an RDMA process can also
 * speak TCP to a peer (its TCP transport is up). */
uint32_t gdr_caps_local(uint8_t transport, int rdma_tcp);
/* "GDRNET_TRANSPORT=auto (RDMA, TCP)", "GDRNET_TRANSPORT=auto (TCP only: no usable RDMA device)", ... Returns buf. */
const char *gdr_caps_str(uint32_t caps, char *buf, size_t len);

struct gdr_wire_addr {
  uint16_t family; /* AF_INET / AF_INET6 */
  uint16_t port;   /* network byte order */
  uint32_t scope_id;
  uint8_t addr[16];
};

/* The 128-byte ncclNet handle. The listener fills everything but state[] (zero); NCCL copies it to the
 * connecting rank, whose connect() calls keep their progress in state[] (see gdr_handle_state_*). */
struct gdr_handle {
  uint32_t magic;            /*   0 GDR_HANDLE_MAGIC */
  uint16_t version;          /*   4 GDR_HANDLE_VERSION */
  uint8_t transport;         /*   6 GDR_TP_* the listener chose */
  uint8_t caps;              /*   7 GDR_CAP_* */
  uint64_t nonce;            /*   8 random per listen (getrandom); the connector presents it in its HELLO */
  struct gdr_wire_addr addr; /*  16 where to connect */
  uint32_t dev;              /*  40 listener's device index (for messages) */
  uint16_t nstreams;         /*  44 TCP: data streams the listener wants; 0 = control stream only */
  uint16_t nthreads;         /*  46 TCP: helper threads per side (both sides must agree) */
  uint8_t tp_data[32];       /*  48 transport-specific, written by the listener */
  uint8_t spare[16];         /*  80 zero; room for later versions */
  uint8_t state[32];         /*  96 connect-side progress; zero as the listener wrote it */
};
_Static_assert(sizeof(struct gdr_handle) == NCCL_NET_HANDLE_MAXSIZE, "handle is NCCL's 128 bytes");

/* The TCP door of an RDMA listener with GDR_CAP_TCP, in handle.spare: a TCP listener on the handle's address, with
 * its own nonce and port; handle.nstreams, nthreads and tp_data are its TCP handle's (an RDMA handle uses none). */
struct gdr_handle_door {
  uint64_t nonce;
  uint16_t port; /* network byte order; 0: no door */
  uint8_t pad[2];
  uint32_t rank1; /* every handle, door or not: the listener's launcher rank + 1, 0 unknown (gdr_handle_rank) */
};
_Static_assert(sizeof(struct gdr_handle_door) == 16, "the door fills handle.spare");
/* Writes the door (the TCP handle tcp, whose address must be h's but for the port) into the RDMA handle h. */
void gdr_handle_door_set(struct gdr_handle *h, const struct gdr_handle *tcp);
/* The TCP handle of h's door, state[] included (a connect keeps its progress there: copy it back into h after each
 * call). -1 when h names no door. */
int gdr_handle_door_get(const struct gdr_handle *h, struct gdr_handle *tcp);

/* The peers' launcher ranks (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...: gdr_launcher_rank), carried without a
 * wire change older plugins notice: the listener's in its handle (struct gdr_handle_door.rank1, bytes 92..95, zero
 * in every older handle), the connector's in its HELLO's caps above GDR_HELLO_RANK_SHIFT (rank + 1, 24 bits; older
 * plugins test only the GDR_CAP_* bits). 0 there: not known. */
#define GDR_HELLO_RANK_SHIFT 8
#define GDR_HELLO_CAPS_MASK 0xffu
/* This process's launcher rank, or -1 (read once from the environment). */
int gdr_launcher_rank(void);
void gdr_handle_rank_set(struct gdr_handle *h, int rank);
int gdr_handle_rank(const struct gdr_handle *h); /* -1: not known */
/* A directory of the peers' ranks by address ("10.0.0.2:43121", gdr_sockaddr_str): a connector notes its
 * listener's (from the handle), a listener its connector's (from the HELLO); describe's callers look them up. Only
 * at connection set-up and by the stall detector, never on the data path. rank < 0: nothing noted. */
void gdr_peer_rank_note(const union gdr_sockaddr *peer, int rank);
int gdr_peer_rank_of(const char *addr); /* -1: not known */

/* Checks magic, version and address family of a handle received from NCCL (the connect side): ncclInvalidUsage
 * with a WARN otherwise (e.g. a handle from another plugin/version). Fills peer from handle->addr. */
ncclResult_t gdr_handle_check(const struct gdr_handle *h, union gdr_sockaddr *peer);

/* Connect-side state kept inside the handle buffer that NCCL passes to every connect() call. get returns a state
 * only if this process set it in this handle and has not cleared it (the peer wrote the rest of the handle: a
 * forged state[] yields NULL, a fresh connect). set fails (ncclSystemError, with a WARN) only for a non-NULL state
 * (no memory, no random tag); NULL clears and cannot fail. */
void *gdr_handle_state_get(const struct gdr_handle *h);
ncclResult_t gdr_handle_state_set(struct gdr_handle *h, void *state);

/* -------------------------------------------------------------------------------------------------- hello -- */

#define GDR_HELLO_MAGIC 0x48524447u /* "GDRH" */
#define GDR_ACK_MAGIC 0x41524447u   /* "GDRA" */
/* hello.kind */
#define GDR_STREAM_CTRL 0
#define GDR_STREAM_DATA 1

struct gdr_hello {
  uint32_t magic;      /*  0 */
  uint16_t version;    /*  4 */
  uint8_t transport;   /*  6 GDR_TP_* */
  uint8_t kind;        /*  7 GDR_STREAM_* */
  uint64_t nonce;      /*  8 the handle's */
  uint64_t conn_id;    /* 16 random per connection, same on all its streams */
  uint16_t stream;     /* 24 0 = control, 1..nstreams = data */
  uint16_t nstreams;   /* 26 data streams of this connection */
  uint32_t caps;       /* 28 GDR_CAP_* of the connector */
  uint8_t tp_data[32]; /* 32 transport-specific */
};
_Static_assert(sizeof(struct gdr_hello) == 64, "hello is 64 bytes");

struct gdr_hello_ack {
  uint32_t magic; /* GDR_ACK_MAGIC */
  uint16_t version;
  uint16_t status; /* 0 ok, GDR_ACK_MISMATCH */
  uint32_t caps;   /* of the acceptor */
  uint32_t pad;
};
_Static_assert(sizeof(struct gdr_hello_ack) == 16, "ack is 16 bytes");
#define GDR_ACK_MISMATCH 1 /* the connector's transport is not the listener's: both fail (caps: the listener's) */

/* Verifies a received HELLO against the listener's nonce and transport. 0 if good, else -1 and why says which
 * check failed (magic, version, transport, nonce). Pure function (unit-tested). */
int gdr_hello_verify(const struct gdr_hello *h, uint64_t nonce, uint8_t transport, char *why, size_t whylen);

/* A verified, acked stream handed to the transport. The fd is non-blocking; make it blocking if you want. */
struct gdr_stream {
  int fd;
  union gdr_sockaddr peer;
  struct gdr_hello hello;
};

/* ------------------------------------------------------------------------------------------------ listen -- */

#define GDR_LISTEN_PENDING 128  /* connections whose HELLO is awaited at once; more wait in the kernel's backlog */
#define GDR_LISTEN_EVICT_MS 500 /* when the table is full, a peer silent for this long makes room for the next */
#define GDR_HELLO_TIMEOUT_MS                                                                                           \
  10000 /* a peer that does not say HELLO within this (or GDRNET_CONNECT_TIMEOUT_MS if less) is closed */

struct gdr_pending_conn {
  int fd; /* -1: free slot */
  union gdr_sockaddr peer;
  uint64_t accepted_ns, deadline_ns;
  size_t off; /* bytes of hello received, then of ack sent (after hello is complete) */
  int acking; /* hello verified, ack being sent */
  struct gdr_hello hello;
  struct gdr_hello_ack ack;
};

struct gdr_listener {
  int fd;
  union gdr_sockaddr addr; /* bound address with its port */
  uint64_t nonce;
  uint8_t transport;
  uint32_t caps;
  struct gdr_pending_conn pend[GDR_LISTEN_PENDING];
};

/* Binds a non-blocking listening socket on local's address (port 0 = ephemeral), draws the nonce. */
ncclResult_t gdr_listener_open(struct gdr_listener *l, const union gdr_sockaddr *local, uint8_t transport,
                               uint32_t caps);
/* Writes the handle that lets a peer connect (transport-specific fields left zero for the caller to fill). */
void gdr_listener_handle(const struct gdr_listener *l, uint32_t dev, struct gdr_handle *h);
/* Non-blocking: accepts pending connections, progresses HELLO/ACK, rejects bad peers (WARN, close). Returns at
 * most one verified stream per call in *out with *got = 1. Errors for a broken listening socket, and
 * (ncclInvalidUsage, WARN naming both settings) for a peer with this listen's nonce whose transport is not the
 * listener's: it is answered GDR_ACK_MISMATCH first. */
ncclResult_t gdr_listener_poll(struct gdr_listener *l, struct gdr_stream *out, int *got);
void gdr_listener_close(struct gdr_listener *l); /* closes the socket and every pending connection */

/* ----------------------------------------------------------------------------------------------- connect -- */

struct gdr_connector {
  int fd;
  int stage; /* internal */
  union gdr_sockaddr peer;
  uint64_t start_ns, deadline_ns, retry_ns;
  int attempts;
  int last_err; /* errno of the last failed TCP connect attempt */
  size_t off;
  struct gdr_hello hello;
  struct gdr_hello_ack ack;
};

/* Starts one stream towards the handle's listener. kind/stream/nstreams/conn_id/caps go into the HELLO;
 * tp_data (may be NULL) its transport-specific bytes. */
ncclResult_t gdr_connector_start(struct gdr_connector *c, const struct gdr_handle *h, uint8_t kind, uint16_t stream,
                                 uint16_t nstreams, uint64_t conn_id, uint32_t caps, const void *tp_data);
/* Non-blocking progress. *done = 1 when the ACK arrived: c->fd is the stream (non-blocking; the caller now owns
 * it and the connector is spent). An error (timeout, rejected, reset) has been WARNed with the peer address. */
ncclResult_t gdr_connector_poll(struct gdr_connector *c, int *done);
void gdr_connector_abort(struct gdr_connector *c); /* closes the fd if still owned */

/* This process (transport, caps) cannot meet the handle's listener. Non-blocking, its state in the handle: says
 * HELLO with its own transport so that the listener's accept fails at once too, then fails: ncclInvalidUsage with a
 * WARN naming both settings and the knob (ncclSuccess while in progress; at most ~1 s). */
ncclResult_t gdr_connect_refuse(struct gdr_handle *h, uint8_t transport, uint32_t caps);
/* For the one INFO line of a mixed pair's connection: "mixed pair: this rank <setting>, the peer <setting>". */
const char *gdr_mixed_str(uint32_t mine, uint32_t theirs, char *buf, size_t len);

/* -------------------------------------------------------------------------------------------------- I/O -- */

/* Non-blocking partial transfer: moves what the socket takes now, *off advances (done when *off == len).
 * EINTR retried, EAGAIN is success with no progress. EOF -> ncclRemoteError (errno = 0); reset etc. ->
 * ncclRemoteError (errno set); other failures ncclSystemError. Never raises SIGPIPE. */
ncclResult_t gdr_sock_send_nb(int fd, const void *buf, size_t len, size_t *off);
ncclResult_t gdr_sock_recv_nb(int fd, void *buf, size_t len, size_t *off);
/* Exact transfers for blocking sockets (helper threads); loop over short transfers and EINTR. Same errors. */
ncclResult_t gdr_sock_send_all(int fd, const void *buf, size_t len);
ncclResult_t gdr_sock_recv_all(int fd, void *buf, size_t len);

/* Typed blob over an established stream: header {u32 type, u32 len} then len bytes. Non-blocking; call again with
 * the same io until *done (io zeroed before the first call). recv: a type other than expect_type, or len > cap,
 * is ncclRemoteError with a WARN. */
#define GDR_BLOB_MAX (1u << 20)
struct gdr_blob_io {
  uint32_t hdr[2];
  size_t off; /* over header + payload */
};
ncclResult_t gdr_sock_blob_send(int fd, struct gdr_blob_io *io, uint32_t type, const void *data, uint32_t len,
                                int *done);
ncclResult_t gdr_sock_blob_recv(int fd, struct gdr_blob_io *io, uint32_t expect_type, void *data, uint32_t cap,
                                uint32_t *len, int *done);

/* --------------------------------------------------------------------------------------------- options -- */

ncclResult_t gdr_sock_set_nonblocking(int fd, int nonblocking);
/* TCP_NODELAY, SO_SNDBUF/SO_RCVBUF (bufsize 0 = keep autotuning), keepalive and TCP_USER_TIMEOUT so that a
 * silent peer is an error after timeout_ms (0 = leave the kernel's). */
ncclResult_t gdr_sock_tune(int fd, int nodelay, size_t bufsize, int timeout_ms);

/* ------------------------------------------------------------------------------------- graceful close -- */

/* Closes a stream without losing what this side already handed to the kernel (linger.c). A send that test()
 * reported done is in the socket's send queue, not yet at the peer; close() with unread bytes in the receive queue
 * (the peer's credits or CTS that arrive after the last read) makes the kernel answer with a reset that discards
 * that send queue. So: the write side is shut first (FIN after the data); a stream with nothing unacknowledged
 * (SIOCOUTQ 0) is closed at once; otherwise it lingers open, in a process-wide list, until the peer has
 * acknowledged everything, closed or reset its end, or GDRNET_TCP_LINGER_MS passed (then it is closed with a WARN
 * naming the bytes the peer never acknowledged). No thread: the list is swept, without blocking, by every later
 * gdr_sock_close_graceful and gdr_linger_sweep call, and drained (bounded by the same knob) by gdr_linger_drain,
 * which the transports call when the process's last comm closes (before NCCL may unload the plugin).
 * what: names the stream in that WARN ("control stream to 10.0.0.2:5000"). Takes ownership of fd. */
void gdr_sock_close_graceful(int fd, const char *what);
void gdr_linger_sweep(void); /* non-blocking: closes the lingering streams that are done */
void gdr_linger_drain(void); /* waits (bounded) until every lingering stream is done, closes the rest */
int gdr_linger_count(void);  /* streams lingering now (tests) */

/* ------------------------------------------------------------------------------------------------- misc -- */

uint64_t gdr_time_ns(void);                           /* CLOCK_MONOTONIC */
ncclResult_t gdr_random_bytes(void *buf, size_t len); /* getrandom(2) */

#endif /* GDRNET_SOCK_H */
