/* The TCP transport (gdr_transport_tcp).
 *
 * A connection = one control stream + nsocks data streams. The data streams of every connection of the process are
 * served by one pool of GDRNET_TCP_IO_THREADS I/O threads (tcp_pool.c: epoll, non-blocking; a send comm's streams
 * grouped in nthreads send lanes, a receive comm's streams each read on its own).
 *
 * Matching (NCCL IB's rule, per connection; protocol version 4): receives are posted in order (slot 0, 1, ...); a
 * grouped receive is one slot of n <= 8 buffers whose tags may repeat; the k-th isend with tag t fills the first free
 * buffer with tag t of the current slot (the oldest not yet filled). So the placement is fixed in advance: the k-th
 * isend with tag t lands in the k-th buffer with tag t, counting buffers in slot order. Both ends number by that:
 * the sender calls its k-th accepted isend with tag t message (t, k); the receiver gives each buffer it posts the
 * next ordinal of its tag, and a buffer number (id: 0, 1, ... in slot order, a group's buffers consecutive). Every
 * control message names what it is for: EAGER/RTS the message (t, k), CTS the buffer (id, with its t, k and size),
 * INLINE/ERR_SIZE and the data chunks the buffer id. Only the timing differs from RDMA's: an isend TCP can place may
 * be accepted before its slot is the current one (an eager message for a later slot, or one whose buffer is not
 * posted yet, waits in a bounce slot, counted against the credits); one it cannot send yet (no CTS, no credit)
 * gets a NULL request (try again), never an error. Each buffer reports its own sent size. With PXN (tag = source
 * rank, each sub's isend posted on its own) tag 1 of message m+1 may come before tag 2 of message m: it simply is
 * message (1, m+1).
 *
 * Small messages go EAGER, large ones are receiver-driven, as NCCL's IB transport posts its receives into a clear-to-send FIFO:
 *   - at connect the receiver sends GRANT{eager size E = its GDRNET_TCP_INLINE, C = GDRNET_TCP_EAGER_CREDITS}
 *     on the control stream (C = 0: no eager path, every message waits for a CTS as below), if the sender
 *     announced the eager feature in its HELLO (struct tcp_proto below; an older plugin gets no GRANT and the
 *     plain CTS protocol);
 *   - eager: a send of <= E bytes with a credit left goes out at once as EAGER{tag, ordinal, size} + payload on
 *     the control stream, written by NCCL's progress thread (no CTS, no thread hop: 1 syscall per message). The
 *     receiver copies it straight into its posted buffer, or, if that is not posted yet, into a bounce slot (one
 *     per credit, grown on demand) that irecv copies from when it posts that buffer. Every eager message takes a
 *     credit; the receiver hands them back in batches of max(1, C/2) (CREDIT{n}) once it has consumed them, so the
 *     sender reads the control stream about once every C/2 messages, not per message. Should every credit be held
 *     here (bounced messages for later slots, consumed ones not returned), the receiver returns the consumed ones
 *     at once and, while all are bounced, sends a CTS for each posted buffer that waits for an eager message, whose
 *     message then goes inline: the current slot always gets its messages;
 *   - a receive of <= E bytes can only be matched by an eager message (anything bigger is invalid usage), so irecv
 *     sends nothing for it. E defaults to 64 KiB = NCCL's LL step, the receive size NCCL posts for its small
 *     messages (16 B for an 8-byte all_reduce), so those cost no CTS either. A larger buffer sends CTS{id, tag,
 *     ordinal, posted size} at once (a grouped receive's in one write); isend of a message that is not eager waits
 *     (NULL request) until the CTS of its (tag, ordinal) is there, so the sender knows the buffer is posted and its
 *     size. A sender whose big message finds no CTS says RTS{tag, ordinal, size} once (at most TCP_MAX_RTS
 *     outstanding), so that a buffer posted with <= E bytes (which sends no CTS) detects the mismatch instead of
 *     both sides waiting forever (the receiver keeps an RTS for a buffer not posted yet until it is). A CTS for a
 *     message that went eager anyway is ignored;
 *   - send > posted: whoever sees both sizes first WARNs with both, tells the other side (ERR_SIZE from the
 *     sender after a CTS, ERR_RECV from the receiver for an eager message or an RTS) and fails the comm with
 *     ncclInvalidUsage; the other side WARNs with both sizes as well, and its next isend/test returns the
 *     error (an eager send may already have completed: the error comes with a later call);
 *   - after a CTS, size <= GDRNET_TCP_INLINE: INLINE header + payload on the control stream, as eager;
 *   - larger: cut into chunks (gdr_tcp_plan_chunks) spread round-robin over the send lanes; each chunk carries
 *     {buffer id, offset, length, total}, so the receiving stream reads it directly into the posted buffer at its
 *     offset (no copy besides the kernel's). Lane t owns the streams s with s % nthreads == t and writes its chunks
 *     over them in rotation (this plugin's receiving streams take chunks in any order).
 * Sends complete when their bytes are in the kernel; receives when every byte has landed (atomic counters the
 * I/O threads bump, test() reads). I/O threads sleep in epoll_wait, or with GDRNET_TCP_SPIN_US first poll (epoll
 * without a timeout, their ready list) for that long after their last progress, and for up to
 * GDRNET_TCP_SPIN_MAX_US while one of their connections expects traffic (receiver: a receive whose CTS went out is
 * not complete; sender: a CTS is not used yet; counts kept by the progress thread, read by the I/O threads as a
 * hint).
 * Requests live in a 32-slot ring per comm: the sender's by its count of accepted isends, the receiver's by buffer
 * id.
 *
 * System calls: the receiver reads the control stream in test() of an unfinished receive and stops after a short
 * read (the socket is drained) or once a payload read straight into the posted buffer is complete. The sender
 * reads it only when it needs something (a CTS, credits at or below C/4) and at least every TCP_SEND_POLL_CALLS
 * isend/test calls (to see an ERR_RECV or the peer's close when it has no CTS to wait for).
 *
 * Fused devices (makeVDevice; opts->ndevs > 1): the listener listens on every member's address (one socket each,
 * one nonce), its data streams are a multiple of the member count, and it tells a connector that understands it
 * (TCP_FEAT_FUSED) its addresses on the control stream right after the HELLO (blob TCP_BLOB_ADDRS); that connector
 * opens data stream s to address (s - 1) % n, so the chunks, which rotate over the streams, are striped over the
 * receiver's interfaces (and, with rail-aligned subnets, over the sender's by its routes). A connector that does not
 * (an older plugin) puts every stream on the first address, which also works. The communicator's traffic class, when
 * defined, is the IP TOS / IPv6 traffic class of the connection's sockets.
 *
 * Failure: EOF/reset on any stream, or TCP_USER_TIMEOUT/keepalive expiry (GDRNET_TCP_TIMEOUT_MS) on a silent peer,
 * fails the comm; test() then returns ncclRemoteError/ncclSystemError with a WARN naming the peer. A receiver whose
 * peer closed cleanly keeps completing what is still in flight and fails only what can no longer arrive. */
#ifndef GDRNET_TCP_H
#define GDRNET_TCP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sock.h"
#include "transport.h"

/* Chunk plan of a large message: nchunks chunks of chunk bytes (the last one shorter). chunk = size / nthreads
 * rounded up to 4 KiB, clamped to [min_chunk, max_chunk]. */
struct gdr_tcp_plan {
  size_t chunk;
  uint32_t nchunks;
};
void gdr_tcp_plan_chunks(size_t size, int nthreads, size_t min_chunk, size_t max_chunk, struct gdr_tcp_plan *plan);
static inline size_t gdr_tcp_chunk_off(const struct gdr_tcp_plan *p, uint32_t i) { return (size_t)i * p->chunk; }
static inline size_t gdr_tcp_chunk_len(const struct gdr_tcp_plan *p, size_t size, uint32_t i) {
  size_t off = (size_t)i * p->chunk;
  return off >= size ? 0 : (size - off < p->chunk ? size - off : p->chunk);
}

/* Stream/thread counts for this host: GDRNET_TCP_NSOCKS/NTHREADS, their NCCL aliases, the core count. */
void gdr_tcp_resolve_streams(int *nsocks, int *nthreads);
/* The same for one listener: bounded by setNetAttr's flows per peer, and a multiple of the fused device count (at
 * least one stream per member). */
void gdr_tcp_streams_for(const struct gdr_conn_opts *opts, int *nsocks, int *nthreads);
/* How long (ns) an I/O thread polls after its last progress before it sleeps in the kernel: GDRNET_TCP_SPIN_US,
 * auto = TCP_SPIN_AUTO_US where this rank has at least TCP_SPIN_AUTO_CORES cores (gdr_tcp_rank_cores), else 0
 * (always block: where the host's ranks share few cores, a polling thread takes a core from one that copies). */
uint64_t gdr_tcp_resolve_spin_ns(void);
/* The longer polling window while traffic is expected (GDRNET_TCP_SPIN_MAX_US; auto: TCP_SPIN_MAX_AUTO_US where
 * helpers poll at all, else 0), in ns. */
uint64_t gdr_tcp_resolve_spin_max_ns(void);
/* GDRNET_TCP_SPIN_THREADS resolved for a pool of nthreads: how many of them may poll at once (at most nthreads);
 * auto: TCP_SPIN_THREADS_AUTO, or with GDRNET_TCP_PROGRESS adaptive the rank's cores less TCP_IO_NCCL_THREADS (at
 * least 1; only threads with work poll). */
int gdr_tcp_resolve_spin_threads(int nthreads);
int gdr_tcp_resolve_spin_share(void); /* GDRNET_TCP_SPIN_SHARE resolved: 1 on */
/* GDRNET_TCP_PROXY_IO resolved: test() helps the I/O threads (gdr_tcp_pool_help). auto: on (TCP_PROXY_IO_AUTO).
 * NCCL's proxy thread spins anyway: where cores are shared it moves bytes the blocked I/O threads would wait for a
 * core to move; where the I/O threads poll it moves what a sleeping thread would wait for its wake-up to move. */
int gdr_tcp_resolve_proxy_io(void);
/* GDRNET_TCP_HELP_BYTES resolved: what one help pass moves per lane or stream. auto: TCP_HELP_BYTES_POLL where the I/O
 * threads poll (gdr_tcp_resolve_spin_ns() > 0: the pass only fills in for a sleeping thread and must bring NCCL's
 * proxy back to its steps soon), else TCP_HELP_BYTES_BLOCK (the proxy is a main mover of bytes). *why (may be NULL)
 * gets a short phrase for the INFO line. */
size_t gdr_tcp_resolve_help_bytes(const char **why);
/* GDRNET_TCP_HELP_AFTER_US resolved, in ns: auto TCP_HELP_AFTER_POLL_US where the I/O threads poll, else 0 (at once) */
uint64_t gdr_tcp_resolve_help_after_ns(void);
/* GDRNET_TCP_PROGRESS: when the I/O threads poll (tcp_pool.c has the rules). TCP_PROGRESS_AUTO is what auto means:
 * switching the default is that one line. *why (may be NULL) gets a short phrase for the INFO line. */
enum { TCP_PROGRESS_KNOB_AUTO = 0, TCP_PROGRESS_FIXED = 1, TCP_PROGRESS_ADAPTIVE = 2 };
#define TCP_PROGRESS_AUTO TCP_PROGRESS_FIXED
int gdr_tcp_resolve_progress(const char **why);
#define TCP_SPIN_MAX_AUTO_US 1000
#define TCP_SPIN_AUTO_US 200
#define TCP_SPIN_AUTO_CORES 8
#define TCP_SPIN_THREADS_AUTO 1 /* GDRNET_TCP_SPIN_THREADS auto: one polling thread per process */
/* GDRNET_TCP_PROXY_IO auto: on. With 8+ cores per rank it was off until run 25 (docs/results/2026-12-07): on, with
 * 128 KiB passes, it bounded the KV example's tail and the 1 MiB rows where a sleeping I/O thread's wake-up came
 * late, and lowered the CPU per GB (0.89-1.07x Socket's on three hosts). */
#define TCP_PROXY_IO_AUTO 1
#define TCP_HELP_BYTES_POLL (128u << 10)  /* GDRNET_TCP_HELP_BYTES auto where the I/O threads poll */
#define TCP_HELP_BYTES_BLOCK (512u << 10) /* ... and where they sleep */
/* GDRNET_TCP_HELP_AFTER_US auto where the I/O threads poll: the proxy helps only once a connection's streams have
 * moved nothing this long (longer than a wake-up that comes in time). Run 25, host o: against help at once, busbw at
 * 128 MB 9.31 against 8.74 GB/s, CPU per GB 0.572 against 0.589, KV p50 568 against 637 us. */
#define TCP_HELP_AFTER_POLL_US 50
/* gdr_tcp_pool_wakes_late: the moving share of late wake-ups (in 1/65536) weighs the newest 1/TCP_LATE_WEIGHT; late
 * from half of them (their median beyond the proxy's wait), in time again below a quarter. One in ten (their p90) was
 * too early: on an H100 host whose wake-ups took 9-18 us at p50, 37-45 us on the KV example's receiving side, that
 * rule switched on in every run, and the KV example lost 8 % (run 27 r, docs/results/2026-12-07). */
#define TCP_LATE_WEIGHT 64
#define TCP_LATE_ON 32768
#define TCP_LATE_OFF 16384
/* The pool's stop logs the host's steal time over the pool's life (an INFO line) from this share of all CPU time, in
 * hundredths of a percent: on a VM, time its hypervisor ran other work while this VM's CPUs wanted to run. Run 28
 * (docs/results/2026-12-07), an H100 host whose wake-ups took 60-980 us at p90: 1.6-16 % in the plugin's 2-rank
 * nccl-tests runs with chunked messages, under 1.2 % in NCCL Socket's runs alternated with them, while the guest's own
 * run queues held a woken I/O thread 0.1-2 us. */
#define TCP_STEAL_NOTE_BP 100
/* The host's steal at run time (tcp_pool.c): an I/O thread that goes to sleep, or polls with nothing to do, reads
 * /proc/stat's cpu line once a window of TCP_STEAL_WINDOW_MS (longer where one read costs more than a thousandth of
 * that). A window with TCP_STEAL_ON_BP or more of steal switches "the host steals" on, TCP_STEAL_OFF_WINDOWS windows in
 * a row under TCP_STEAL_OFF_BP switch it off (the plugin's own traffic raises the steal it reacts to: the gap keeps it
 * from flapping). The pool's stop line counts the windows. While on, a send's chunks are at least
 * GDRNET_TCP_STEAL_CHUNK where that is set (off by default): run 28 (a host with 1.6-16 % steal in the plugin's runs,
 * under 1.2 % in NCCL Socket's) halved the hand-overs and the steal with 512 KiB chunks, and at 128 MB had 2.38x
 * Socket's busbw at 1.03x its CPU per GB, against 2.07x at 1.14x with the default's 64 KiB; run 29 z, another such
 * host with the rule on in its stealing period, had 4.46 against 4.40 GB/s there, and the KV example's lone block
 * 1052 against 875 us at p50 (docs/results/2026-12-07). A fast host reads 0 %: the rule never switches on there. */
#define TCP_STEAL_WINDOW_MS 250
#define TCP_STEAL_ON_BP 300
#define TCP_STEAL_OFF_BP 100
#define TCP_STEAL_OFF_WINDOWS 8
struct gdr_tcp_steal_state {
  int on;           /* the host steals now */
  int quiet;        /* windows in a row under TCP_STEAL_OFF_BP while on */
  uint64_t periods; /* times it switched on */
};
/* GDRNET_TCP_STEAL_CHUNK resolved: 0 (off) where it is not above GDRNET_TCP_MIN_CHUNK (0, the default) */
size_t gdr_tcp_resolve_steal_chunk(void);
/* One window's steal (bp, hundredths of a percent; < 0: unknown, changes nothing) into s: 1 if the host steals now */
int gdr_tcp_steal_step(struct gdr_tcp_steal_state *s, int64_t bp);
/* Whether the host steals now (the pool's windows; 0 where /proc/stat cannot be read) */
int gdr_tcp_pool_stealing(void);
/* Since the pool started: windows read, windows while the host stole, and times it began to */
void gdr_tcp_pool_steal_stats(uint64_t *windows, uint64_t *windows_on, uint64_t *periods);
/* Tests: the pool reads path instead of /proc/stat, in windows of window_ns (NULL, 0: the defaults). Set while no pool
 * runs: it takes effect at the next pool's start. */
void gdr_tcp_pool_set_steal_source(const char *path, uint64_t window_ns);
/* GDRNET_TCP_SPIN_SHARE auto: off; it lost the KV example on the H100 (docs/results/2026-12-07, run 23) */
#define TCP_SPIN_SHARE_AUTO 0
#define TCP_IO_NCCL_THREADS 2 /* busy threads of NCCL per rank (proxy progress + the application's), left their cores */
#define TCP_IO_MAX_AUTO 16    /* GDRNET_TCP_IO_THREADS auto: at most this many I/O threads per process */
/* GDRNET_TCP_CTS_INLINE auto: this where TCP_SPIN_AUTO_CORES cores run the helpers beside NCCL, else GDRNET_TCP_INLINE */
#define TCP_CTS_INLINE_AUTO 32768
/* Up to how many bytes a message whose clear-to-send came goes inline (GDRNET_TCP_CTS_INLINE, at most inline_max) */
size_t gdr_tcp_resolve_cts_inline(size_t inline_max);

/* ------------------------------------------------------------------------------------------- internals -- */

#define TCP_NREQ NCCL_NET_MAX_REQUESTS /* request ring per comm */
#define TCP_MAX_STREAMS 64
#define TCP_TXQ 128                 /* control messages queued per comm */
#define TCP_RXBUF (64 * 1024)       /* control stream staging */
#define TCP_CHUNK_MAGIC 0x4b4e4843u /* "CHNK" */

#define TCP_MAX_CREDITS 1024
#define TCP_MAX_MESSAGE ((size_t)1 << 40) /* maxP2pBytes/maxCollBytes (v9+) */

/* TCP wire protocol version and features, carried in the handshake's transport-specific bytes: the listener's in
 * the handle (tp_data), the connector's in the HELLO of every stream (tp_data). Plugins older than version 2 leave
 * both zero: they do not know GRANT/EAGER/CREDIT/RTS (version 1 = the receiver-driven CTS protocol only). The
 * receiver sends GRANT (and so enables the eager path) only to a connector that announced TCP_FEAT_EAGER; GRANT
 * carries the receiver's version in its seq field. A connector that does not announce it (an older plugin) gets
 * the CTS protocol: every receive sends its CTS at once, no eager message, no RTS. A peer announcing a version
 * this plugin cannot speak (below TCP_PROTO_MIN, i.e. a future incompatible one) is rejected with a WARN. */
#define TCP_PROTO_MAGIC 0x50504354u /* "TCPP" */
#define TCP_PROTO_VERSION 4
#define TCP_PROTO_MIN 1 /* oldest peer version this plugin interoperates with (1 = zero tp_data) */
/* Version 4 matches every message to its buffer by (tag, ordinal within the tag) and has a 32-byte control header;
 * versions 2 and 3 (eager path, numbering by arrival) are refused at connect with a WARN naming both versions. A
 * version-1 peer (plain receives, CTS protocol only) still works: tags are ignored, ordinal = message number. */
#define TCP_PROTO_MATCH 4
#define TCP_FEAT_EAGER 0x1u  /* understands GRANT, sends EAGER/RTS, receives CREDIT */
#define TCP_FEAT_GROUPS 0x2u /* grouped receives (version 3: CTS_GROUP; version 4: matching by tag ordinal) */
#define TCP_FEAT_FUSED                                                                                                 \
  0x4u                             /* listener: sends its addresses (TCP_BLOB_ADDRS) to a connector announcing it, which
                             * understands them and spreads its data streams over them */
#define TCP_BLOB_ADDRS 0x52444154u /* "TADR": struct gdr_wire_addr[ndevs], listener -> connector, control stream */
struct tcp_proto {
  uint32_t magic;    /* TCP_PROTO_MAGIC, or 0 from a version-1 peer */
  uint16_t version;  /* TCP_PROTO_VERSION of the writer */
  uint16_t min_peer; /* the oldest peer version the writer can talk to */
  uint32_t features; /* TCP_FEAT_* */
  uint8_t ndevs;     /* listener (handle): the addresses it listens on; 0 or 1: the handle's only */
  uint8_t pad[19];
};
_Static_assert(sizeof(struct tcp_proto) == 32, "tcp_proto fills tp_data");
void gdr_tcp_proto_local(struct tcp_proto *p);
/* Reads a peer's tp_data: its version (1 for zeros) and features; -1 with why set when it cannot be spoken to. */
int gdr_tcp_proto_peer(const void *tp_data, unsigned *version, uint32_t *features, char *why, size_t whylen);
/* A listener's address count from its handle's tp_data (1 for an older plugin). */
int gdr_tcp_proto_ndevs(const void *tp_data);
#define TCP_SEND_POLL_CALLS 32 /* a sender reads the control stream at least once per this many isend/test calls */

/* Control messages. r->s: receiver to sender; s->r: sender to receiver. Version 4 names a message by its tag (aux)
 * and its ordinal within that tag (seq: the sender's k-th isend with tag t is (t, k)), and a receive buffer by its
 * buffer number (id: the receiver numbers its posted buffers 0, 1, ... in slot order, a grouped receive's buffers
 * consecutively); the k-th isend with tag t belongs in the receiver's k-th buffer with tag t (NCCL's rule, see the
 * top). A version-1 peer sends 24-byte headers (no id: id = seq) and knows only CTS/INLINE/ERR_SIZE. */
enum {
  TCP_MSG_CTS = 1,      /* r->s: buffer id, posted with `size` bytes, takes message (tag aux, ordinal seq) */
  TCP_MSG_INLINE = 2,   /* s->r: after a CTS: message (aux, seq) into buffer id: `size` payload bytes follow */
  TCP_MSG_ERR_SIZE = 3, /* s->r: message (aux, seq) for buffer id is `size` bytes, more than its CTS offered */
  TCP_MSG_EAGER = 4,    /* s->r: message (tag aux, ordinal seq) without a CTS, taking a credit: `size` payload bytes
                         * follow; the receiver puts it in its buffer (aux, seq), or holds it in a bounce slot until
                         * that buffer is posted */
  TCP_MSG_GRANT = 5,    /* r->s: the first message: eager messages of up to `size` bytes, `aux` credits, `seq` the
                         * receiver's TCP_PROTO_VERSION (0 from the first eager-capable plugins); sent only to a
                         * connector that announced TCP_FEAT_EAGER */
  TCP_MSG_CREDIT = 6,   /* r->s: `size` credits back */
  TCP_MSG_RTS = 7,      /* s->r: message (aux, seq) of `size` bytes (too big for eager) waits for its CTS */
  TCP_MSG_ERR_RECV = 8, /* r->s: message (tag id, ordinal seq) of `size` bytes is larger than its buffer of `aux`
                         * bytes */
  /* 9 was version 3's CTS_GROUP: version 4 sends one CTS per buffer (a grouped receive's in one write) */
};
#define TCP_MAX_RECVS 8 /* maxRecvs: buffers of one grouped receive */
#define TCP_MAX_RTS 64  /* RTS messages a sender may have outstanding (answered by no CTS yet), one per tag at most */

struct tcp_ctrl_hdr {
  uint32_t type;
  uint32_t aux; /* GRANT: credits; ERR_RECV: the posted size (<= the eager size, so it fits); else the tag */
  uint64_t seq;
  uint64_t size; /* see the types */
  uint64_t id;   /* version 4: the receive buffer (CTS, INLINE, ERR_SIZE) */
};
_Static_assert(sizeof(struct tcp_ctrl_hdr) == 32, "ctrl header");
#define TCP_HDR_V1 24 /* the header of a version-1 peer: without id */

struct tcp_chunk_hdr {
  uint32_t magic;
  uint32_t len;
  uint64_t seq; /* the receive buffer's number (the id of its CTS) */
  uint64_t off;
  uint64_t total;
};
_Static_assert(sizeof(struct tcp_chunk_hdr) == 32, "chunk header");

enum { TCP_REQ_FREE = 0, TCP_REQ_SEND, TCP_REQ_RECV };
#define TCP_CLAIM_NONE 0
#define TCP_CLAIM_CTRL UINT64_MAX

struct tcp_req {
  struct tcp_comm *comm;
  int state; /* TCP_REQ_*; progress thread only */
  uint64_t seq;
  char *data;
  size_t size;            /* send: bytes to send; recv: posted size */
  _Atomic uint64_t armed; /* recv: seq + 1 while posted (helpers check chunks against it), 0 otherwise */
  /* recv: which way its message comes, taken by the first to see it (tcp_req_claim): TCP_CLAIM_NONE, TCP_CLAIM_CTRL
   * (inline, eager or bounced, on the control stream), or the chunks' total + 1 (the data streams); a message that
   * comes both ways, or chunks that disagree on its size, is a protocol error */
  _Atomic uint64_t claim;
  _Atomic size_t reserved; /* recv: chunk bytes the I/O threads have taken on (at most the chunks' total) */
  _Atomic size_t done;     /* bytes sent to the kernel / landed in the buffer */
  _Atomic size_t total;    /* recv: the sent size once known (SIZE_MAX before) */
  ncclResult_t err;        /* failure of this request alone (size mismatch) */
  int cts;                 /* recv: its CTS was sent (progress thread only) */
  int expect;              /* recv, first buffer: counted in the comm's rx_expect (progress thread only) */
  uint64_t wseq;           /* send: the buffer number its INLINE header and chunks carry (its CTS's id) */
  /* grouped receive: sub-requests in consecutive slots, one per buffer; the first one is NCCL's request */
  int gn;         /* recv, first sub-request: buffers in the group (1: a plain receive) */
  uint64_t gbase; /* recv: the group's first buffer number */
  int tag;        /* recv: this buffer's tag (0 with a version-1 peer) */
  uint64_t ord;   /* recv: its ordinal among the buffers with its tag; send: the message's, within its tag */
  int matched;    /* recv: a message was assigned to this buffer (eager, bounced, or inline/chunks) */
  /* device memory (tcp_cuda.c): the bytes travel through a pinned host buffer of this slot */
  char *stage; /* the slot's pinned buffer (kept for the slot's next requests) */
  size_t stage_cap;
  void *dev; /* recv: the device buffer the staged bytes are copied to at completion (NULL: host) */
  void *cuda_ctx;
};

/* Takes receive r's message for one way (TCP_CLAIM_CTRL, or a chunk's total + 1): 1 if the message is that way's,
 * now or already; 0 if it came the other way first (or chunks with another total did). */
static inline int tcp_req_claim(struct tcp_req *r, uint64_t way) {
  uint64_t was = TCP_CLAIM_NONE;
  return atomic_compare_exchange_strong_explicit(&r->claim, &was, way, memory_order_acq_rel, memory_order_acquire) ||
         was == way;
}

struct tcp_task { /* one message's chunks for one send lane: chunks first, first + stride, ... */
  struct tcp_req *req;
  uint64_t seq;
  char *data;
  size_t size;
  size_t chunk;
  uint32_t first, nchunks, stride;
};

struct tcp_comm;
struct tcp_io;

/* A send lane of a comm (historically one helper thread each, hence the name): the chunks of the tasks queued on
 * it go out one after the other over its streams fds[] in rotation (the order an older receiver's helper thread t
 * reads them in). The lanes and receive streams of every comm of the process are served by the per-process I/O
 * thread pool (tcp_pool.c). */
struct tcp_thread {
  struct tcp_comm *comm;
  int idx;
  int nfds;
  int fds[TCP_MAX_STREAMS];
  /* task queue: the progress thread pushes (queue_chunks), the lane's I/O thread pops */
  pthread_mutex_t mu;
  struct tcp_task q[TCP_NREQ];
  unsigned head;         /* under mu (written by the I/O thread only) */
  _Atomic unsigned tail; /* written under mu */
  int stop;              /* under mu: the comm is closing */
  /* the I/O thread serving it (fixed from comm start to close) */
  struct tcp_io *io;
  int in_ready;                  /* under io's ready lock: on its list of lanes with new tasks */
  struct tcp_thread *next_ready; /* likewise */
  struct tcp_thread *next_taken; /* the I/O thread's walk of a taken ready list (under io's lock) */
  /* the I/O thread's own state (under io's lock) */
  int busy; /* cur is being sent */
  int dead; /* a send failed: tasks are dropped (the comm is failed) */
  struct tcp_task cur;
  uint32_t ci;             /* cur's chunk being sent */
  size_t csent;            /* bytes of it (header + payload) in the kernel */
  struct tcp_chunk_hdr ch; /* its header */
  unsigned rot;
};
/* After pushing a task on th (th->tail++, under th->mu or after it): its I/O thread takes it. */
void gdr_tcp_lane_kick(struct tcp_thread *th);

/* A receiving data stream: chunks read straight into the posted buffers as they come (I/O thread only). */
struct tcp_stream {
  struct tcp_comm *comm;
  int idx;
  int fd;
  struct tcp_io *io;
  int dead;               /* EOF or failed: out of the I/O thread's epoll set */
  struct tcp_chunk_hdr h; /* the next chunk's header, hgot bytes of it read */
  size_t hgot;
  struct tcp_req *r; /* the chunk being received (NULL: reading a header) */
  char *dst;
  size_t left;
};

struct tcp_bounce { /* an eager message that arrived before its buffer was posted */
  uint64_t ord;     /* the message (tag, ord) */
  int tag;
  int used;
  size_t size;
  size_t cap;
  char *buf;
  int full;            /* every payload byte is in buf */
  struct tcp_req *dst; /* its buffer, posted while the payload was still arriving (copied when full) */
};

struct tcp_tagent { /* per tag: the next ordinal (sender: to send; receiver: to post) */
  int tag;
  int used;
  uint64_t next;
  uint64_t rts; /* sender: ordinal + 1 of the message an RTS went out for (answered by no CTS yet) */
};

struct tcp_cts { /* sender: a clear-to-send not used yet */
  uint64_t ord, id, size;
  int tag;
  int used;
};

struct tcp_rts { /* receiver: an RTS for a buffer not posted yet */
  uint64_t ord, size;
  int tag;
  int used;
};

struct tcp_txent {
  struct tcp_ctrl_hdr hdr;
  const char *payload; /* the caller's bytes */
  size_t len;          /* payload bytes */
  size_t off;          /* over header + payload */
  struct tcp_req *req; /* inline send completed by this entry, or NULL */
};

struct tcp_comm {
  int is_send;
  int dev;
  int ctrl_fd;
  int nsocks, nthreads;
  int fds[TCP_MAX_STREAMS];
  struct tcp_thread *threads; /* is_send: nthreads send lanes */
  struct tcp_stream *streams; /* receiver: nsocks receiving streams */
  int attached;               /* its lanes/streams are served by the I/O pool (tcp_pool.c) */
  unsigned pool_gen;          /* the process (fork generation) whose pool serves it (tcp_pool.c, under its lock) */
  union gdr_sockaddr peer;
  char peer_str[GDR_ADDR_STRLEN];
  size_t inline_max, min_chunk, max_chunk;
  size_t steal_chunk;     /* GDRNET_TCP_STEAL_CHUNK: the smallest chunk while the host steals (0: off) */
  uint64_t chunks_queued; /* sender: chunks queue_chunks cut (the caller's thread; tests) */
  size_t cts_inline_max;  /* a message with its clear-to-send goes inline up to this (GDRNET_TCP_CTS_INLINE) */
  uint64_t spin_ns;       /* I/O threads: poll this long after their last progress before blocking (0: block) */
  uint64_t spin_max_ns;   /* ... and up to this long while traffic is expected (rx_expect/tx_expect > 0) */
  int proxy_io;           /* test() runs a pass of the I/O threads serving it when its request is not done */
  uint64_t help_after_ns; /* ... once its streams moved nothing for this long (GDRNET_TCP_HELP_AFTER_US; 0: at once) */
  uint64_t help_seen;     /* progress thread: the comm's moved as last seen without the pass's own bytes */
  uint64_t help_ns;       /* ... and when it last changed */

  /* progress-thread state */
  uint64_t next_seq; /* sender: isends accepted (its request ring); receiver: buffers posted (the next buffer id) */
  struct tcp_req req[TCP_NREQ];
  unsigned rr;    /* next send lane for a chunked send */
  int match_tags; /* version-4 peer: messages matched by (tag, ordinal); 0: a version-1 peer (one stream, tag 0) */
  size_t hdr_len; /* control header bytes on the wire: sizeof(struct tcp_ctrl_hdr), TCP_HDR_V1 for version 1 */
  struct tcp_tagent *tags; /* open addressing by tag, tags_cap a power of two (0: none yet) */
  unsigned tags_cap, tags_n;
  struct tcp_cts cts[TCP_NREQ]; /* sender: clear-to-sends not used (at most one per posted buffer) */
  unsigned ncts;
  unsigned rts_out;                 /* sender: RTS messages sent for messages not accepted yet */
  struct tcp_rts rtsq[TCP_MAX_RTS]; /* receiver: RTS messages for buffers not posted yet */
  unsigned nrts;
  struct tcp_txent txq[TCP_TXQ];
  unsigned tx_head, tx_tail;
  char *rx; /* TCP_RXBUF staging */
  size_t rx_len, rx_off;
  int rx_in_payload;            /* receiving an INLINE/EAGER payload into rx_dst */
  char *rx_dst;                 /* the posted buffer or a bounce slot */
  size_t rx_total, rx_left;     /* payload size, bytes still to come */
  struct tcp_req *rx_req;       /* the posted receive it completes, or NULL (bounce) */
  struct tcp_bounce *rx_bounce; /* the bounce slot it fills, or NULL */
  int rx_eager;                 /* it took a credit */
  int ctrl_eof;
  unsigned peer_version;  /* the peer's TCP_PROTO_VERSION (1: an older plugin) */
  uint32_t peer_features; /* its TCP_FEAT_* */
  uint32_t peer_caps;     /* GDR_CAP_* of its HELLO (accepted) or handle (connected) */
  int tx_dead;            /* receiver: the sender is gone, nothing more is sent */
  int warned;

  /* eager path (design at the top) */
  size_t eager_max;          /* receiver: E it granted (0 with no credits); sender: E granted to it */
  uint32_t ncredits;         /* C: receiver: granted; sender: as granted */
  uint32_t credits;          /* sender: eager messages it may still send */
  int granted;               /* sender: GRANT seen (before it, the old receiver-driven protocol only) */
  uint32_t unreturned;       /* receiver: consumed eager messages not credited back yet */
  unsigned idle_calls;       /* sender: isend/test calls since the control stream was last read */
  struct tcp_bounce *bounce; /* receiver: ncredits slots for eager messages whose buffer is not posted yet */
  unsigned nbounce;          /* slots in use (each holds a credit) */
  /* counters for tests and traces */
  uint64_t n_eager, n_bounced, n_cts;
  uint64_t n_chunked; /* sender: messages cut into chunks over the data streams (the rest went inline/eager) */

  /* shared with the I/O threads */
  _Atomic int streams_eof; /* data streams that saw a clean EOF */
  _Atomic uint64_t moved;  /* bytes the I/O threads wrote or read on the data streams (gdr_tcp_moved) */
  _Atomic int failed;      /* fail_res is set */
  _Atomic int stopping;    /* the comm is leaving the I/O pool (close): I/O errors are no longer reported */
  _Atomic int rx_expect;   /* receiver: receives whose CTS went out and that are not complete (written by the
                            * progress thread; I/O threads read it as a hint to keep polling) */
  _Atomic int tx_expect;   /* sender: clear-to-sends received for messages not sent yet (likewise) */
  pthread_mutex_t fail_mu;
  int fail_mu_ok; /* fail_mu initialised */
  int nsync;      /* threads[] whose mu/cv are initialised */
  ncclResult_t fail_res;
  char fail_why[256];
};

struct tcp_mr {
  void *data;
  size_t size;
  int type;
  void *cuda_ctx; /* device memory (the RDMA->TCP fallback carries NCCL's GPU buffers): staged in this context */
};

/* tcp_cuda.c: device memory over TCP, staged through pinned host buffers (a slot's buffer grows on demand and is
 * freed with the comm). Copies go through cuda.c (the plugin's own non-blocking stream, never behind NCCL's
 * kernels). */
/* An mhandle for data (host or, with type NCCL_PTR_CUDA, device memory) without a registration call (the RDMA
 * transport's fallback builds these for NCCL's buffers). */
ncclResult_t gdr_tcp_mr_make(void *data, size_t size, int type, struct tcp_mr *mr);
/* Send: the bytes of [data, +size) device memory copied into r's staging buffer; *host gets it. */
ncclResult_t gdr_tcp_stage_out(struct tcp_req *r, const struct tcp_mr *mr, const void *data, size_t size, char **host);
/* Receive: r receives into its staging buffer (size bytes) and remembers the device buffer; *host gets it. */
ncclResult_t gdr_tcp_stage_in(struct tcp_req *r, const struct tcp_mr *mr, void *data, size_t size, char **host);
/* Receive complete: bytes staged bytes go to the device buffer (nothing for host memory). */
ncclResult_t gdr_tcp_stage_done(struct tcp_req *r, size_t bytes);
void gdr_tcp_stage_free(struct tcp_comm *c);

/* tcp_conn.c */
ncclResult_t gdr_tcp_comm_start(struct tcp_comm *c); /* hands its data streams to the I/O pool */
/* tcp_pool.c: the per-process I/O threads (design there) */
ncclResult_t gdr_tcp_pool_attach(struct tcp_comm *c);
void gdr_tcp_pool_detach(struct tcp_comm *c); /* when it returns, no I/O thread touches c any more */
/* 1 when c was made by the process this one was forked from: its sockets are shared with that process, which still
 * uses them. A fork child may only close such a comm: its fds are closed, nothing is shut down or sent on them, and
 * neither that process's pool (epoll sets) nor the child's own is touched. */
int gdr_tcp_comm_inherited(const struct tcp_comm *c);
/* The cores this rank may use: its CPU affinity; when that is every online core, the host's cores divided by the
 * ranks on the host that the launcher names (*from: that variable, else NULL). At least 1. */
int gdr_tcp_rank_cores(const char **from);
/* One bounded non-blocking pass of the I/O threads serving c, each only if it is not at work itself (trylock), by
 * a thread that is not one of them (NCCL's proxy thread in test()). 1 if it moved bytes. */
int gdr_tcp_pool_help(struct tcp_comm *c);
uint64_t gdr_tcp_pool_help_passes(void);  /* help passes that moved bytes, process-wide (tests) */
uint64_t gdr_tcp_pool_share_passes(void); /* a polling thread's passes over a sleeping one that moved bytes (tests) */
/* The pool size for this process: GDRNET_TCP_IO_THREADS, auto from the cores (*why: how it was chosen). */
int gdr_tcp_pool_size(char *why, size_t whylen);
/* The most I/O threads seen polling at once since the pool started (tests: GDRNET_TCP_SPIN_THREADS holds) */
int gdr_tcp_pool_spin_peak(void);
/* Polling (tests, traces). An I/O thread that holds a token and stops polling counts why in gdr_tcp_pool_stops:
 * IDLE (adaptive: no request of its comms is outstanding), WINDOW (no progress for its window), SLOW (adaptive: its
 * progress comes further apart than the window). */
enum { TCP_POLL_ON = 0, TCP_POLL_STOP_IDLE = 1, TCP_POLL_STOP_WINDOW = 2, TCP_POLL_STOP_SLOW = 3 };
uint64_t gdr_tcp_pool_stops(int why);
int gdr_tcp_pool_spinning(void); /* polling tokens held now */
/* Wake-ups of sleeping I/O threads by a kick (new chunks for a lane, what a help pass left): from the kick until the
 * thread runs again, since the pool started. This is what sleeping costs a hand-over on this host (the kernel's
 * scheduler, the VM's idle cores): the INFO line at the pool's stop names it, so that a slow host shows in its own
 * logs. Percentiles from a log histogram (4 buckets an octave: within 19 %), at most max_ns. */
struct gdr_tcp_wake_stats {
  uint64_t n;
  uint64_t p50_ns, p90_ns, p99_ns, max_ns;
};
void gdr_tcp_pool_wake_stats(struct gdr_tcp_wake_stats *w);
/* Whether the wake-ups come late now: of the recent ones (a moving share over about TCP_LATE_WEIGHT of them), at
 * least TCP_LATE_ON in 65536 took longer than GDRNET_TCP_HELP_AFTER_US (until fewer than TCP_LATE_OFF do). While they
 * do, NCCL's proxy thread helps at once instead of waiting that long for a wake-up that mostly comes later. Always 0
 * where the proxy helps at once anyway (GDRNET_TCP_HELP_AFTER_US 0). */
int gdr_tcp_pool_wakes_late(void);
/* Wake-ups later than GDRNET_TCP_HELP_AFTER_US since the pool started, and how many times they began to come late */
void gdr_tcp_pool_late_stats(uint64_t *late, uint64_t *periods);
/* Tests: counts a wake-up of ns, as an I/O thread does when it runs after a kick */
void gdr_tcp_pool_wake_note(uint64_t ns);
/* /proc/stat's first line ("cpu  user nice system idle iowait irq softirq steal ..."): the host's steal and its
 * total CPU time (the first eight fields), in clock ticks. 0, or -1 if text is not such a line. */
int gdr_tcp_steal_parse(const char *text, uint64_t *steal, uint64_t *total);
/* The steal between two readings (steal, total) a and b, in hundredths of a percent of the CPU time between them;
 * -1 if no time passed or a counter went back. */
int64_t gdr_tcp_steal_bp(const uint64_t a[2], const uint64_t b[2]);
/* The I/O thread serving send lane i (sender) or receiving stream i (receiver) of c; -1 if none (tests). */
int gdr_tcp_pool_io_of(const struct tcp_comm *c, int i);
/* Tests: hook(idx, why) runs on I/O thread idx each time it is about to sleep in epoll_wait, after it has let go of
 * its lock and its token (why: TCP_POLL_*, why it stopped polling; TCP_POLL_ON when it was not polling). NULL: none. */
void gdr_tcp_pool_set_sleep_hook(void (*hook)(int idx, int why));
/* I/O threads running now (tests) */
int gdr_tcp_pool_running(void);
/* I/O threads that entered their loop, past their start-up (tests: a fork under ASan must not catch one starting) */
int gdr_tcp_pool_entered(void);
void gdr_tcp_comm_fail(struct tcp_comm *c, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* tcp_p2p.c */
ncclResult_t gdr_tcp_eager_setup(struct tcp_comm *c); /* receiver: bounce slots, GRANT sent */
void gdr_tcp_eager_free(struct tcp_comm *c);
ncclResult_t gdr_tcp_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t gdr_tcp_dereg_mr(void *comm, void *mhandle);
/* Device memory for an internal user (the GIN core's windows): staged like the fallback's (gdr_tcp_mr_make). */
ncclResult_t gdr_tcp_reg_mr_staged(void *comm, void *data, size_t size, void **mhandle);
ncclResult_t gdr_tcp_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request);
/* Sender: how many isends that returned no request announced their message (an RTS with its size) to the
 * receiver: each is the next message of its tag on this comm, and its retry must come to this comm again (the RDMA
 * fallback routes by it). */
int gdr_tcp_send_announced(const void *send_comm);
/* Per tag, this comm's messages so far (the RDMA fallback's way back splits the stream per tag by them): sender:
 * isends accepted with the tag, or one more when the next one announced itself (an RTS: its retry comes here);
 * receiver: buffers posted with the tag. Fills up to max (tag, count) pairs, tags with a count of 0 left out;
 * returns how many there are (more than max: the arrays hold the first max). */
int gdr_tcp_tag_counts(const void *comm, int *tags, uint64_t *counts, int max);
/* Of one tag: isends accepted (sender) or buffers posted (receiver), without the announced one. */
uint64_t gdr_tcp_tag_count(const void *comm, int tag);
ncclResult_t gdr_tcp_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                           void **request);
ncclResult_t gdr_tcp_test(void *request, int *done, size_t *sizes);
/* tcp_init.c */
ncclResult_t gdr_tcp_dev_addr(int dev, union gdr_sockaddr *addr);
/* tcp_conn.c */
ncclResult_t gdr_tcp_listen(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **listen_comm);
ncclResult_t gdr_tcp_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **send_comm);
/* A connect in progress on this handle (its state lives in the handle) is given up: its sockets closed, its state
 * freed. Nothing happens when none is (a handle this process never connected with, or one that completed). */
void gdr_tcp_connect_abort(struct gdr_handle *handle);
ncclResult_t gdr_tcp_accept(void *listen_comm, void **recv_comm);
ncclResult_t gdr_tcp_close_send(void *send_comm);
ncclResult_t gdr_tcp_close_recv(void *recv_comm);
ncclResult_t gdr_tcp_close_listen(void *listen_comm);
int gdr_tcp_describe(void *comm, struct gdr_conn_desc *out); /* transport.h describe */
uint64_t gdr_tcp_moved(void *comm);                          /* the transport's moved (transport.h) */

#endif /* GDRNET_TCP_H */
