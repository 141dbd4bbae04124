/* verbs emulator: the per-process agent thread that plays the NIC.
 *
 * Every process that opens a device runs one agent. Agents talk over AF_UNIX stream sockets that
 * rendezvous in VEMU_DIR (agent-<id>.sock, id: a random 64-bit id per process). A QP's requests always travel on the connection its
 * process opened to the peer's process, and the responses come back on that same connection, so the
 * byte stream gives in-order placement per QP. The agent that owns the target memory places the
 * bytes (the target process never calls into verbs for a one-sided operation). The agent blocks in
 * epoll_wait (eventfd doorbell from post_send, sockets, timers) and never spins.
 *
 * Locking: the conn structures are touched by the agent thread only. QPs, MRs and CQs are under g.mu;
 * payload bytes are copied without the lock. */
#include "vemu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* wire frames. PROBE/PROBE_RESP stand in for the retry timer's retransmission: on expiry the initiator asks
 * the responder (behind everything already sent on that stream) which PSN it expects next, and resends from
 * there: exactly go-back-N from the first request that was dropped, without resending what is merely slow. */
enum { F_SEND = 1, F_WRITE, F_READ_REQ, F_READ_RESP, F_ACK, F_NAK, F_RNR, F_PROBE, F_PROBE_RESP, F_ATOMIC,
       F_ATOMIC_RESP };
/* HF_CAS: an F_ATOMIC is a compare-and-swap (else fetch-and-add); its 16-byte payload is compare_add then swap,
 * the F_ATOMIC_RESP's 8 bytes the value before */
enum { HF_IMM = 1, HF_CAS = 2 };

struct whdr {
	uint8_t type;
	uint8_t rnr_retry;
	uint8_t flags;
	uint8_t rd_atom;            /* READ/atomic: how many the initiator has outstanding with this one (max_dest_rd_atomic) */
	uint32_t dst_qpn;
	uint32_t src_qpn;
	uint32_t rkey;
	uint64_t seq;
	uint64_t raddr;
	uint64_t len;
	uint32_t imm;
	uint32_t status;
};

struct oframe {
	struct oframe *next;
	struct whdr h;
	uint64_t off;               /* bytes of header+payload written */
	int nseg;
	struct vseg *segs;
	char *heap;                 /* owned payload */
	uint32_t qpn;               /* local QP of a request (progress accounting), 0 for responses */
	/* staging of a CUDA source */
	char *stage;
	uint64_t stage_pos, stage_len;
	int voided;                 /* what follows the header is not what the request named (see TAIL_OK) */
	uint64_t tail;              /* the trailer as written (TAIL_OK or TAIL_VOID) */
};

/* Every frame that carries a payload (SEND, WRITE, READ_RESP, ATOMIC, ATOMIC_RESP) ends with an 8-byte trailer after
 * it: TAIL_OK, or TAIL_VOID when the initiator could not send the payload it announced. A header cannot be taken
 * back once it is on the stream, and a NIC never completes a message whose last packet it did not send: when a
 * request's QP goes to error or away while its frame is on the wire (a device loss, the application's ERR), or its
 * source MR is deregistered under it (zeros stand in for the bytes), the rest of the frame still goes out to keep the
 * stream framed, but void. The target places what came (a partial message, as a NIC's packets would be) and
 * completes nothing: no receive completion, no ACK; a void request is answered with a NAK (LOC_PROT_ERR, which a
 * QP already in error ignores), a void READ response fails the READ (REM_ACCESS_ERR). Frames of such a QP not yet
 * started are not sent at all. Without this a device loss let queued writes of the dead device land, zeros in
 * place of the deregistered source, and complete at the target (contract seed 20: a receive complete with zeros
 * from byte 536994). */
#define TAIL_OK 0x4c494154454d4556ull   /* "VEMETAIL" */
#define TAIL_VOID 0x44494f56554d4556ull /* "VEMUVOID" */

static int frame_has_tail(int type)
{
	return type == F_SEND || type == F_WRITE || type == F_READ_RESP || type == F_ATOMIC || type == F_ATOMIC_RESP;
}

/* bytes of a frame on the stream: header, payload (none for a READ request), trailer */
static uint64_t frame_wire_len(const struct oframe *f)
{
	if (f->h.type == F_READ_REQ)
		return sizeof(f->h);
	return sizeof(f->h) + f->h.len + (frame_has_tail(f->h.type) ? sizeof(f->tail) : 0);
}

struct lazyrec {
	struct lazyrec *next;
	struct vseg dst;
	char *data;
};

struct held {
	struct held *next;
	struct whdr h;
	char *data;
	struct vconn *conn;
	int rnr_count;              /* RNR NAKs sent for it */
	uint64_t next_try;
	int force_rnr;              /* no_recv_credit: the first check finds no receive */
};

static void held_free(struct held *h);

/* what to do once an incoming payload is fully read */
enum { RX_NONE, RX_DISCARD, RX_PLACE, RX_HOLD, RX_READ_RESP, RX_ATOMIC };

struct vconn {
	int fd;
	uint64_t peer;              /* the peer's emulator id (0: accepted, unknown) */
	int dead;
	struct vconn *next;
	struct oframe *oq_head, *oq_tail;
	/* input */
	char *ibuf;
	size_t ibuf_off, ibuf_len;
	int in_payload;
	struct whdr ih;
	size_t ih_got;
	uint64_t in_left;
	int in_tail;                /* the payload is in: reading its trailer */
	size_t tail_got;
	uint64_t tail;
	struct vseg *isegs;
	int nisegs, iseg_i;
	uint64_t iseg_off;
	int rx_kind;
	struct vrwr *rx_recv;       /* receive WR consumed by this message */
	int rx_status;              /* NAK status to send when done (0 = ACK) */
	int rx_recv_status;         /* status of the receive completion */
	int rx_ack;                 /* acknowledge a discarded duplicate */
	int rx_dup_atomic;          /* a discarded duplicate atomic: answered from the responder's saved result */
	char rx_atom[16];           /* an incoming atomic's operands */
	struct lazyrec *rx_lazy;
	struct held *rx_hold;       /* a parked request whose payload is being read */
	char *rx_heap;
	char *stage;
	uint64_t stage_fill;
	int want_out;
	int writing;                /* a thread is in writev on it (g.mu) */
	uint32_t rx_gen;            /* g.qp_gone_gen when the payload's placement was decided (placement_recheck) */
#ifdef VEMU_TSAN
	char tsan_sync;             /* TSan: released by its writers, acquired by its reader (conn_sendmsg) */
#endif
};

#define IBUF_SZ (256 * 1024)
static const char vemu_zeros[65536];
#define STAGE_SZ (4u << 20)

static int ep = -1;
static struct vconn *conns;
static struct lazyrec *lazy_head[VEMU_MAX_DEVS], *lazy_tail[VEMU_MAX_DEVS];
static uint64_t next_deadline;
static uint64_t self_id;

#define agent_thread vemu_in_agent()
static uint64_t pending_dl, sleep_until = 1;
/* GDR_LAZY drains asked of the agent by ibv_destroy_qp (g.mu) */
static uint64_t lazy_drain_req, lazy_drain_done;
static pthread_cond_t lazy_drain_cv = PTHREAD_COND_INITIALIZER;

void vemu_agent_fork_child(void)
{
	/* the parent's connections and agent do not exist in the child */
	ep = -1;
	conns = NULL;
	pending_dl = 0;
	sleep_until = 1;
	memset(lazy_head, 0, sizeof(lazy_head));
	memset(lazy_tail, 0, sizeof(lazy_tail));
	lazy_drain_req = lazy_drain_done = 0;
}

/* ------------------------------------------------------------ time */
static uint64_t qp_timeout_ns(struct vqp *q)
{
	if (!q->timeout)
		return 0; /* infinite */
	double ns = (double)(4096ull << q->timeout) * g.time_scale;
	return ns < 1000 ? 1000 : (uint64_t)ns;
}

static uint64_t rnr_ns(int t)
{
	static const uint32_t us100[32] = { 65536, 1,    2,    3,    4,    6,    8,     12,    16,    24,   32,
					    48,    64,   96,   128,  192,  256,  384,   512,   768,   1024, 1536,
					    2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152 };
	double ns = (double)us100[t & 31] * 10000.0 * g.time_scale;
	return ns < 1000 ? 1000 : (uint64_t)ns;
}

/* Timers. The agent keeps next_deadline; application threads (the direct send path) publish theirs in
 * pending_dl and ring the doorbell when the agent sleeps past it. sleep_until: 1 = the agent is awake (it reads
 * pending_dl before sleeping), 0 = asleep without timeout, else asleep until that time. */

static void want_deadline(uint64_t t)
{
	if (!t)
		return;
	if (agent_thread) {
		if (!next_deadline || t < next_deadline)
			next_deadline = t;
		return;
	}
	uint64_t cur = __atomic_load_n(&pending_dl, __ATOMIC_SEQ_CST);
	while ((!cur || t < cur) &&
	       !__atomic_compare_exchange_n(&pending_dl, &cur, t, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	uint64_t su = __atomic_load_n(&sleep_until, __ATOMIC_SEQ_CST);
	if (su != 1 && (su == 0 || t < su))
		vemu_ring();
}

/* ------------------------------------------------------------ CUDA-aware copies */
static void seg_copy_in(const struct vseg *s, uint64_t off, const void *src, uint64_t n)
{
	if (vemu_seg_dead(s))
		return;
	if (s->cuda)
		vemu_cuda_htod(s->cuctx, s->addr + off, src, n);
	else
		vemu_place((void *)(uintptr_t)(s->addr + off), src, n);
}

static void seg_copy_out(const struct vseg *s, uint64_t off, void *dst, uint64_t n)
{
	if (vemu_seg_dead(s)) {
		memset(dst, 0, n);
		return;
	}
	if (s->cuda)
		vemu_cuda_dtoh(s->cuctx, dst, s->addr + off, n);
	else
		memcpy(dst, (void *)(uintptr_t)(s->addr + off), n);
}

/* GDR_LAZY: bytes parked for device memory become visible at the next RDMA READ on the device */
static void lazy_flush(struct vdev *d)
{
	struct lazyrec *l = lazy_head[d->index];
	lazy_head[d->index] = lazy_tail[d->index] = NULL;
	int n = 0;
	while (l) {
		struct lazyrec *nx = l->next;
		seg_copy_in(&l->dst, 0, l->data, l->dst.len);
		free(l->data);
		free(l);
		l = nx;
		n++;
	}
	if (n)
		VTRACE("gdr_lazy flush dev=%s writes=%d\n", d->dev.name, n);
}

/* GDR_LAZY and ibv_destroy_qp: the device's parked writes are applied before the destroy returns. A real HCA
 * completes a QP's DMA before its destroy command completes (the kernel may unmap the memory next), so what a
 * destroyed QP acknowledged is in memory; without this, bytes a QP acknowledged before a connection moved to
 * another path (the plugin's TCP fallback) would land at some later READ, over newer data. The agent applies
 * them (device memory is copied in its thread, as every CUDA call of the emulator); g.mu held, released while
 * waiting. */
void vemu_lazy_drain_locked(struct vdev *d)
{
	if (!g.gdr_lazy || !lazy_head[d->index])
		return;
	if (agent_thread || !g.agent_started) {
		lazy_flush(d);
		return;
	}
	uint64_t t = ++lazy_drain_req;
	vemu_ring();
	while (lazy_drain_done < t)
		pthread_cond_wait(&lazy_drain_cv, &g.mu);
}

static void lazy_drain_serve(void)
{
	/* g.mu held */
	if (lazy_drain_done == lazy_drain_req)
		return;
	for (int i = 0; i < g.ndev; i++)
		lazy_flush(g.devs[i]);
	lazy_drain_done = lazy_drain_req;
	pthread_cond_broadcast(&lazy_drain_cv);
}

/* replace lazy segments by heap buffers; the records are published when the payload is complete */
static int lazify(struct vseg *s, int n, struct lazyrec **out)
{
	*out = NULL;
	struct lazyrec **tail = out;
	for (int i = 0; i < n; i++) {
		if (!s[i].lazy || !s[i].len)
			continue;
		struct lazyrec *l = calloc(1, sizeof(*l));
		char *buf = malloc(s[i].len);
		if (!l || !buf) {
			free(l);
			free(buf);
			return -1;
		}
		l->dst = s[i];
		l->data = buf;
		*tail = l;
		tail = &l->next;
		s[i].addr = (uint64_t)(uintptr_t)buf;
		s[i].cuda = 0;
		s[i].lazy = 0;
		s[i].mr = NULL;
	}
	return 0;
}

static void lazy_publish(struct lazyrec *l)
{
	while (l) {
		struct lazyrec *nx = l->next;
		int d = l->dst.dev ? l->dst.dev->index : 0;
		l->next = NULL;
		if (lazy_tail[d])
			lazy_tail[d]->next = l;
		else
			lazy_head[d] = l;
		lazy_tail[d] = l;
		l = nx;
	}
}

/* ------------------------------------------------------------ connections */
static void conn_epoll(struct vconn *c, int out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c };
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
	c->want_out = out;
}

static void tune_socket(int fd)
{
	int sz = 4 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* c->dead: set under g.mu by any thread (conn_mark_dead: an application thread's direct write can fail), read
 * without g.mu by the agent's reader (conn_read runs under g.memlock only): loaded and stored atomically */
static inline int conn_dead(struct vconn *c)
{
	return __atomic_load_n(&c->dead, __ATOMIC_ACQUIRE);
}

static struct vconn *conn_new(int fd, uint64_t peer)
{
	struct vconn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->fd = fd;
	c->peer = peer;
	c->ibuf = malloc(IBUF_SZ);
	if (fd >= 0) {
		tune_socket(fd);
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
		if (!vemu_fault_is_lost())
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	} else {
		c->dead = 1;
	}
	c->next = conns;
	conns = c;
	return c;
}

static void frame_free(struct oframe *f)
{
	free(f->segs);
	free(f->heap);
	free(f->stage);
	free(f);
}

/* mark a connection lost (g.mu held, any thread); the agent reaps it when nobody is writing on it */
static void conn_mark_dead(struct vconn *c)
{
	if (conn_dead(c))
		return;
	VTRACE("conn lost peer=%016llx\n", (unsigned long long)c->peer);
	__atomic_store_n(&c->dead, 1, __ATOMIC_RELEASE);
}

/* agent thread, g.mu held: close a dead connection and drop what it carried */
static void conn_reap(struct vconn *c)
{
	if (!conn_dead(c) || c->writing || c->fd < 0)
		return;
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	for (struct oframe *f = c->oq_head, *n; f; f = n) {
		n = f->next;
		struct vqp *q = f->qpn ? vemu_qp_find(f->qpn) : NULL;
		if (q && q->unsent > 0)
			q->unsent--;
		frame_free(f);
	}
	c->oq_head = c->oq_tail = NULL;
	/* an incoming message cut short: its receive WR is lost with the connection (the initiator times out) */
	free(c->isegs);
	c->isegs = NULL;
	for (struct lazyrec *l = c->rx_lazy, *n; l; l = n) {
		n = l->next;
		free(l->data);
		free(l);
	}
	c->rx_lazy = NULL;
	if (c->rx_hold)
		held_free(c->rx_hold);
	c->rx_hold = NULL;
	c->rx_heap = NULL;
	free(c->stage);
	c->stage = NULL;
	c->stage_fill = 0;
	free(c->rx_recv);
	c->rx_recv = NULL;
	c->in_payload = 0;
	c->in_tail = 0;
}

/* the emulator id owning a QPN (g.mu held); 0 when unknown */
static uint64_t qpn_owner(uint32_t qpn)
{
	if (vemu_qp_find(qpn))
		return self_id;
	char path[PATH_MAX], buf[32] = { 0 };
	snprintf(path, sizeof(path), "%s/qpn/%u", g.dir, qpn / VEMU_QPN_BLOCK);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtoull(buf, NULL, 16) : 0;
}

/* the agent socket of emulator id: VEMU_DIR/agent-<id>.sock. When that path does not fit in sun_path, the same file
 * through a descriptor of VEMU_DIR: /proc/self/fd/<fd>/agent-<id>.sock (every process opens its own, vemu_agent_start).
 * Only without /proc an abstract-namespace name derived from VEMU_DIR: abstract names are per network namespace, so
 * processes in two namespaces (two "hosts" sharing VEMU_DIR) would not find each other. */
static int dir_fd = -1; /* O_PATH descriptor of VEMU_DIR, opened once (g.mu held) */

static socklen_t agent_addr(uint64_t id, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int len = snprintf(a->sun_path, sizeof(a->sun_path), "%s/agent-%016llx.sock", g.dir, (unsigned long long)id);
	if (len < (int)sizeof(a->sun_path))
		return (socklen_t)sizeof(*a);
	if (dir_fd >= 0) {
		len = snprintf(a->sun_path, sizeof(a->sun_path), "/proc/self/fd/%d/agent-%016llx.sock", dir_fd,
			       (unsigned long long)id);
		if (len < (int)sizeof(a->sun_path))
			return (socklen_t)sizeof(*a);
	}
	uint64_t h = 1469598103934665603ull;
	for (const char *p = g.dir; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	memset(a->sun_path, 0, sizeof(a->sun_path));
	len = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "vemu-%016llx-%016llx", (unsigned long long)h,
		       (unsigned long long)id);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

static struct vconn *conn_to(uint64_t id)
{
	for (struct vconn *c = conns; c; c = c->next)
		if (c->peer == id && (c->fd >= 0 || conn_dead(c)))
			return c;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a;
	socklen_t alen = agent_addr(id, &a);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, alen)) {
		VTRACE("conn connect peer=%016llx failed: %s\n", (unsigned long long)id, strerror(errno));
		close(fd);
		fd = -1;
	}
	return conn_new(fd, id);
}

static void enqueue(struct vconn *c, struct oframe *f)
{
	if (conn_dead(c)) {
		frame_free(f);
		return;
	}
	f->next = NULL;
	if (c->oq_tail)
		c->oq_tail->next = f;
	else
		c->oq_head = f;
	c->oq_tail = f;
}

static struct oframe *frame_new(int type, uint32_t dst, uint32_t src, uint64_t seq)
{
	struct oframe *f = calloc(1, sizeof(*f));
	if (!f)
		abort();
	f->h.type = (uint8_t)type;
	f->h.dst_qpn = dst;
	f->h.src_qpn = src;
	f->h.seq = seq;
	return f;
}

static void respond(struct vconn *c, const struct whdr *req, int type, int status)
{
	struct oframe *f = frame_new(type, req->src_qpn, req->dst_qpn, req->seq);
	f->h.status = (uint32_t)status;
	enqueue(c, f);
}

/* ------------------------------------------------------------ writing
 * The out queue of a connection is under g.mu. One thread at a time writes on a connection (c->writing): the
 * agent, or an application thread in ibv_post_send when the connection is idle (the direct path, which saves
 * a thread wake-up per message). The syscall itself runs without the lock. */

/* sendmsg on a connection. Under ThreadSanitizer: the kernel reads the payload during the call, and the peer's
 * response (which completes the work request, after which the application may reuse its buffer) can be read by
 * the agent before the call has returned; TSan records sendmsg's reads when it returns and sees no order through
 * a socket. So the reads are recorded before the call, released on the connection, and acquired by the thread
 * that reads the connection's responses (conn_read); the kernel is called directly. */
static ssize_t conn_sendmsg(struct vconn *c, const struct msghdr *mh, int flags)
{
#ifdef VEMU_TSAN
	for (size_t i = 0; i < mh->msg_iovlen; i++)
		__tsan_read_range(mh->msg_iov[i].iov_base, mh->msg_iov[i].iov_len);
	__tsan_release(&c->tsan_sync);
	return syscall(SYS_sendmsg, c->fd, mh, flags);
#else
	return sendmsg(c->fd, mh, flags);
#endif
}

static int conn_write_locked(struct vconn *c)
{
	if (c->writing || conn_dead(c) || c->fd < 0 || vemu_fault_is_lost())
		return 0;
	c->writing = 1;
	int rc = 0;
	while (c->oq_head && !conn_dead(c)) {
		struct oframe *snap[62];
		int ns = 0;
		/* requests of a QP in error or gone: not started, not sent (a NIC stops its send queue); started, void */
		for (struct oframe **pp = &c->oq_head, *f; (f = *pp) != NULL && ns < 62;) {
			struct vqp *q = f->qpn ? vemu_qp_find(f->qpn) : NULL;
			if (f->qpn && (!q || q->qp.state == IBV_QPS_ERR || q->qp.state == IBV_QPS_RESET)) {
				if (f->off == 0) {
					VTRACE("drop qp=0x%x psn=%u (its QP is in error or gone: not sent)\n", f->qpn,
					       (unsigned)f->h.seq);
					*pp = f->next;
					if (c->oq_tail == f)
						c->oq_tail = NULL;
					if (q && q->unsent > 0)
						q->unsent--;
					frame_free(f);
					continue;
				}
				if (!f->voided && frame_has_tail(f->h.type))
					VTRACE("void qp=0x%x psn=%u (its QP went to error or away mid-frame)\n", f->qpn,
					       (unsigned)f->h.seq);
				f->voided = 1;
			}
			snap[ns++] = f;
			pp = &f->next;
		}
		if (!c->oq_tail)
			for (struct oframe *f = c->oq_head; f; f = f->next)
				c->oq_tail = f;
		if (!ns)
			break;
		pthread_mutex_unlock(&g.mu);
		pthread_rwlock_rdlock(&g.memlock); /* before the dead marks are read: see struct vglobal */
		struct iovec iov[64];
		int n = 0;
		/* gather header and host payload of consecutive frames (only the writer touches off/stage) */
		for (int fi = 0; fi < ns && n < 62; fi++) {
			struct oframe *f = snap[fi];
			uint64_t off = f->off;
			if (off < sizeof(f->h)) {
				iov[n].iov_base = (char *)&f->h + off;
				iov[n].iov_len = sizeof(f->h) - off;
				n++;
				off = sizeof(f->h);
			}
			uint64_t p = off - sizeof(f->h), base = 0;
			int stop = 0;
			for (int i = 0; i < f->nseg && n < 63; i++) {
				struct vseg *sg = &f->segs[i];
				if (p >= base + sg->len) {
					base += sg->len;
					continue;
				}
				uint64_t so = p - base;
				if (sg->cuda) {
					if (!f->stage)
						f->stage = malloc(f->h.len < STAGE_SZ ? f->h.len : STAGE_SZ);
					if (!(p >= f->stage_pos && p < f->stage_pos + f->stage_len)) {
						uint64_t k = sg->len - so < STAGE_SZ ? sg->len - so : STAGE_SZ;
						seg_copy_out(sg, so, f->stage, k);
						f->stage_pos = p;
						f->stage_len = k;
					}
					iov[n].iov_base = f->stage + (p - f->stage_pos);
					iov[n].iov_len = f->stage_pos + f->stage_len - p;
					n++;
					stop = 1;
					break;
				}
				if (f->voided || vemu_seg_dead(sg)) {
					/* deregistered under a queued request, or its QP went to error or away mid-frame:
					 * zeros, one bounded piece at a time, and the frame is void (its trailer). A NIC reads
					 * nothing more of a stopped QP's buffers: the application may have them back (the
					 * plugin completes such a send over TCP, and the buffer is reused at once) */
					f->voided = 1;
					iov[n].iov_base = (void *)vemu_zeros;
					iov[n].iov_len = sg->len - so < sizeof(vemu_zeros) ? sg->len - so : sizeof(vemu_zeros);
					n++;
					stop = 1;
					break;
				}
				iov[n].iov_base = (char *)(uintptr_t)(sg->addr + so);
				iov[n].iov_len = sg->len - so;
				n++;
				p = base + sg->len;
				base += sg->len;
			}
			if (stop || n >= 63)
				break;
			if (f->heap && f->h.len && p < f->h.len) {
				iov[n].iov_base = f->heap + p;
				iov[n].iov_len = f->h.len - p;
				n++;
			}
			if (frame_has_tail(f->h.type)) {
				/* the payload is all in iov (or was sent): the trailer, decided when its first byte goes */
				uint64_t done_tail = off > sizeof(f->h) + f->h.len ? off - sizeof(f->h) - f->h.len : 0;
				if (!done_tail)
					f->tail = f->voided ? TAIL_VOID : TAIL_OK;
				iov[n].iov_base = (char *)&f->tail + done_tail;
				iov[n].iov_len = sizeof(f->tail) - done_tail;
				n++;
			}
		}
		/* sendmsg with MSG_NOSIGNAL: a vanished peer must not SIGPIPE the application's thread */
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w = conn_sendmsg(c, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		int err = errno;
		pthread_rwlock_unlock(&g.memlock);
		pthread_mutex_lock(&g.mu);
		if (w < 0) {
			if (err == EINTR)
				continue;
			if (err == EAGAIN) {
				if (!c->want_out)
					conn_epoll(c, 1);
				break;
			}
			conn_mark_dead(c);
			rc = -1;
			break;
		}
		/* account the written bytes to the frames */
		uint64_t left = (uint64_t)w;
		uint64_t now = 0;
		while (left && c->oq_head) {
			struct oframe *f = c->oq_head;
			uint64_t total = frame_wire_len(f);
			uint64_t k = total - f->off < left ? total - f->off : left;
			f->off += k;
			left -= k;
			/* payload bytes moved (the peer_loss/device_fatal after_bytes count): not the header, not the trailer */
			uint64_t hb = sizeof(f->h), pe = f->h.type == F_READ_REQ ? hb : hb + f->h.len;
			uint64_t before = f->off - k > hb ? f->off - k : hb, after = f->off > hb ? f->off : hb;
			before = before < pe ? before : pe;
			after = after < pe ? after : pe;
			if (after > before)
				vemu_fault_peer_lost(after - before);
			if (f->qpn) {
				if (!now)
					now = vemu_now_ns();
				struct vqp *q = vemu_qp_find(f->qpn);
				if (q) {
					q->last_progress = now;
					if (f->off == total && q->unsent > 0)
						q->unsent--;
				}
			}
			if (f->off == total) {
				c->oq_head = f->next;
				if (!c->oq_head)
					c->oq_tail = NULL;
				frame_free(f);
			}
		}
	}
	if (!c->oq_head && c->want_out && !conn_dead(c))
		conn_epoll(c, 0);
	c->writing = 0;
	return rc;
}

static int conn_write(struct vconn *c)
{
	pthread_mutex_lock(&g.mu);
	int rc = conn_write_locked(c);
	pthread_mutex_unlock(&g.mu);
	return rc;
}

/* ------------------------------------------------------------ validation helpers (g.mu held) */
static int mr_range(struct vmr *m, uint64_t addr, uint64_t len)
{
	return addr >= m->iova && len <= m->len && addr - m->iova <= m->len - len;
}

static void seg_from_mr(struct vseg *s, struct vmr *m, uint64_t addr, uint64_t len)
{
	memset(s, 0, sizeof(*s));
	s->addr = m->base + (addr - m->iova);
	s->len = len;
	s->cuda = m->cuda;
	s->cuctx = m->cuctx;
	s->dev = m->dev;
	s->lazy = g.gdr_lazy && m->is_dev;
	s->mr = m;
}

/* local SGEs of a WR -> segments; returns 0 or an IBV_WC_* status */
static int local_segs(struct vqp *q, const struct ibv_sge *sge, int n, int need_write, struct vseg **out, int *nout)
{
	struct vseg *s = calloc((size_t)(n ? n : 1), sizeof(*s));
	int k = 0;
	if (!s)
		return IBV_WC_LOC_PROT_ERR;
	for (int i = 0; i < n; i++) {
		if (!sge[i].length)
			continue;
		struct vmr *m = vemu_mr_find(sge[i].lkey);
		if (!m || m->mr.pd != q->qp.pd || !mr_range(m, sge[i].addr, sge[i].length) ||
		    (need_write && !(m->access & IBV_ACCESS_LOCAL_WRITE))) {
			free(s);
			return IBV_WC_LOC_PROT_ERR;
		}
		seg_from_mr(&s[k++], m, sge[i].addr, sge[i].length);
	}
	*out = s;
	*nout = k;
	return 0;
}

/* ------------------------------------------------------------ transmit (g.mu held) */
static void send_request(struct vqp *q, struct vwr *w);
static int rd_atomic_outstanding(struct vqp *q, const struct vwr *upto);

static void transmit_qp(struct vqp *q)
{
	if (q->qp.state == IBV_QPS_ERR) {
		/* WRs posted in ERR are flushed */
		vemu_qp_to_err(q);
		return;
	}
	if (q->qp.state != IBV_QPS_RTS)
		return;
	if (vemu_port_state(q->ctx->dev) != IBV_PORT_ACTIVE)
		return;
	struct vwr *w;
	while ((w = q->sq_head)) {
		struct vseg *segs = NULL;
		int nseg = 0;
		/* IBV_SEND_FENCE: not begun before every earlier READ/atomic of the QP has its response (a fenced WRITE may
		 * send what a READ before it brought) */
		if (!w->status && (w->flags & IBV_SEND_FENCE) && rd_atomic_outstanding(q, NULL))
			return;
		if (!w->status && vemu_is_rd_atomic(w->opcode)) {
			/* max_rd_atomic: at most that many READs/atomics outstanding; the send queue waits (in order, as an
			 * HCA's does) until a response frees one. 0 allows none: the emulator fails the WR (an HCA would
			 * stall the QP for ever) */
			if (!q->max_rd_atomic)
				w->status = IBV_WC_LOC_QP_OP_ERR;
			else if (rd_atomic_outstanding(q, NULL) >= q->max_rd_atomic)
				return;
		}
		if (!w->status && !w->inl) {
			int st = local_segs(q, w->sge, w->nsge, w->opcode == IBV_WR_RDMA_READ || vemu_is_atomic(w->opcode),
					    &segs, &nseg);
			if (st)
				w->status = st;
		}
		if (w->status) {
			/* complete in order: wait until the earlier WRs are done */
			if (q->if_head)
				return;
			q->sq_head = w->next;
			if (!q->sq_head)
				q->sq_tail = NULL;
			int st = w->status;
			vemu_complete_send(q, w, st);
			vemu_qp_to_err(q);
			return;
		}
		w->rsegs = segs; /* the local segments stay with the WR (READ sink, retransmissions) */
		w->nrsegs = nseg;
		if (w->opcode == IBV_WR_RDMA_READ || vemu_is_atomic(w->opcode))
			lazy_flush(q->ctx->dev); /* the response is a device read: prior writes are visible first */
		if (g.trace)
			vemu_trace("exec qp=0x%x op=%s wr_id=0x%llx len=%llu dest=0x%x psn=%u\n", q->qp.qp_num,
				   vemu_wr_opname(w->opcode), (unsigned long long)w->wr_id, (unsigned long long)w->len,
				   q->dest_qpn, w->seq);
		q->sq_head = w->next;
		if (!q->sq_head)
			q->sq_tail = NULL;
		w->next = NULL;
		w->sent = 1;
		if (q->if_tail)
			q->if_tail->next = w;
		else
			q->if_head = w;
		q->if_tail = w;
		if (!q->unsent && q->if_head == w) {
			q->last_progress = vemu_now_ns();
			q->retries = 0;
		}
		send_request(q, w);
		uint64_t t = qp_timeout_ns(q);
		if (t)
			want_deadline(q->last_progress + t);
	}
}

/* READs and atomics of q on the wire up to and including w (NULL: all) */
static int rd_atomic_outstanding(struct vqp *q, const struct vwr *upto)
{
	int n = 0;
	for (struct vwr *x = q->if_head; x; x = x->next) {
		n += vemu_is_rd_atomic(x->opcode);
		if (x == upto)
			break;
	}
	return n;
}

/* put a request frame for w on the wire (first transmission and retransmissions); g.mu held */
static void send_request(struct vqp *q, struct vwr *w)
{
	if (!q->peer_id)
		q->peer_id = qpn_owner(q->dest_qpn);
	if (!q->conn)
		q->conn = q->peer_id ? conn_to(q->peer_id) : NULL;
	if (!q->conn) /* nobody owns the destination QPN: nothing answers, the WR times out */
		q->conn = conn_new(-1, 0);
	int type;
	switch (w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM: type = F_SEND; break;
	case IBV_WR_RDMA_READ: type = F_READ_REQ; break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD: type = F_ATOMIC; break;
	default: type = F_WRITE; break;
	}
	struct oframe *f = frame_new(type, q->dest_qpn, q->qp.qp_num, w->seq);
	f->h.rnr_retry = q->rnr_retry;
	f->h.rkey = w->rkey;
	f->h.raddr = w->raddr;
	f->h.len = w->len;
	f->h.imm = w->imm;
	if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		f->h.flags |= HF_IMM;
	f->qpn = q->qp.qp_num;
	if (type == F_READ_REQ || type == F_ATOMIC) {
		int n = rd_atomic_outstanding(q, w);
		f->h.rd_atom = (uint8_t)(n > 255 ? 255 : n);
	}
	if (type == F_ATOMIC) {
		f->h.len = 16;
		if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP)
			f->h.flags |= HF_CAS;
		f->heap = malloc(16);
		if (!f->heap)
			abort();
		memcpy(f->heap, &w->cmp_add, 8);
		memcpy(f->heap + 8, &w->swap, 8);
	} else if (type != F_READ_REQ) {
		if (w->inl) {
			if (w->len) {
				f->heap = malloc(w->len);
				memcpy(f->heap, w->inl, w->len);
			}
		} else if (w->nrsegs) {
			f->segs = malloc(sizeof(struct vseg) * (size_t)w->nrsegs);
			memcpy(f->segs, w->rsegs, sizeof(struct vseg) * (size_t)w->nrsegs);
			f->nseg = w->nrsegs;
			for (int i = 0; i < f->nseg; i++)
				f->segs[i].lazy = 0;
		}
	}
	if (!conn_dead(q->conn))
		q->unsent++;
	enqueue(q->conn, f);
}

/* the retry timer fired with requests outstanding: ask the responder where it stands (g.mu held) */
static void send_probe(struct vqp *q)
{
	if (!q->conn || conn_dead(q->conn))
		return;
	VTRACE("probe qp=0x%x try=%d first_psn=%u\n", q->qp.qp_num, q->retries, q->if_head ? q->if_head->seq : 0);
	struct oframe *f = frame_new(F_PROBE, q->dest_qpn, q->qp.qp_num, 0);
	enqueue(q->conn, f);
}

/* the responder expects PSN psn next: resend every outstanding request from there on (g.mu held) */
static void retransmit_from(struct vqp *q, uint32_t psn)
{
	int n = 0;
	for (struct vwr *w = q->if_head; w; w = w->next) {
		uint32_t d = (w->seq - psn) & VEMU_PSN_MASK;
		if (d >= 0x800000)
			continue; /* accepted already: its answer is on its way (or it waits for a receive) */
		VTRACE("retransmit qp=0x%x op=%s wr_id=0x%llx psn=%u try=%d\n", q->qp.qp_num, vemu_wr_opname(w->opcode),
		       (unsigned long long)w->wr_id, w->seq, q->retries);
		send_request(q, w);
		n++;
	}
	if (!n)
		q->retries = 0; /* the responder has everything: it is alive, just busy */
}

/* ------------------------------------------------------------ target side (g.mu held) */
static int needs_recv(const struct whdr *h)
{
	return h->type == F_SEND || (h->type == F_WRITE && (h->flags & HF_IMM));
}

static struct vrwr *pop_recv(struct vqp *q)
{
	struct vrwr *r = q->rq_head;
	if (r) {
		q->rq_head = r->next;
		if (!q->rq_head)
			q->rq_tail = NULL;
		q->rq_count--;
	}
	return r;
}

static void responder_error(struct vqp *q, int event)
{
	vemu_qp_to_err(q);
	vemu_async_event(q->ctx, (enum ibv_event_type)event, &q->qp, 0);
}

/* decide where an incoming request's payload goes. Returns an RX_* kind and fills the conn rx fields. */
static int plan_request(struct vconn *c, struct vqp *q, const struct whdr *h, struct held **hold)
{
	*hold = NULL;
	c->rx_recv = NULL;
	c->rx_status = 0;
	c->rx_recv_status = IBV_WC_SUCCESS;
	c->rx_lazy = NULL;
	c->rx_ack = 0;
	c->rx_dup_atomic = 0;
	if (!q || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) || q->dest_qpn != h->src_qpn) {
		VTRACE("drop op=%d dst=0x%x src=0x%x psn=%u (no such connected QP)\n", h->type, h->dst_qpn, h->src_qpn,
		       (unsigned)h->seq);
		return RX_DISCARD; /* silently dropped: the initiator times out and retransmits */
	}
	if (vemu_port_state(q->ctx->dev) != IBV_PORT_ACTIVE) {
		VTRACE("drop qp=0x%x psn=%u (port down)\n", q->qp.qp_num, (unsigned)h->seq);
		return RX_DISCARD; /* lost on a down link: the initiator's retry timer decides */
	}
	uint32_t diff = ((uint32_t)h->seq - q->rx_psn) & VEMU_PSN_MASK;
	if (diff >= 0x800000) {
		/* a duplicate (a retransmission of something already accepted) */
		if (q->held_head)
			return RX_DISCARD; /* still parked here: answered when it executes */
		if (h->type == F_READ_REQ)
			return -1; /* reads are executed again */
		if (h->type == F_ATOMIC) {
			c->rx_dup_atomic = 1; /* never twice: the saved result is sent again (atomic_replay) */
			return RX_DISCARD;
		}
		VTRACE("duplicate qp=0x%x psn=%u: acknowledged again\n", q->qp.qp_num, (unsigned)h->seq);
		c->rx_ack = 1;
		return RX_DISCARD;
	}
	if (diff) {
		VTRACE("drop qp=0x%x psn=%u expected %u (out of sequence)\n", q->qp.qp_num, (unsigned)h->seq, q->rx_psn);
		return RX_DISCARD;
	}
	q->rx_psn = (q->rx_psn + 1) & VEMU_PSN_MASK;
	int park = q->held_head != NULL;
	int credit_fault = 0;
	if (needs_recv(h)) {
		credit_fault = vemu_fault_no_recv_credit(); /* counts every incoming SEND/WRITE_WITH_IMM */
		if (credit_fault || !q->rq_head)
			park = 1;
	}
	if (park) {
		struct held *hd = calloc(1, sizeof(*hd));
		hd->h = *h;
		hd->conn = c;
		hd->force_rnr = credit_fault;
		if (h->type != F_READ_REQ && h->len)
			hd->data = malloc(h->len);
		*hold = hd;
		if (needs_recv(h))
			VTRACE("rnr qp=0x%x seq=%llu%s\n", q->qp.qp_num, (unsigned long long)h->seq,
			       credit_fault ? " (fault no_recv_credit)" : "");
		return RX_HOLD;
	}
	return -1; /* execute now */
}

/* build the placement for an executable request; returns RX_PLACE/RX_DISCARD or RX_NONE (READ handled) */
static int exec_request(struct vconn *c, struct vqp *q, const struct whdr *h)
{
	free(c->isegs);
	c->isegs = NULL;
	c->nisegs = 0;
	if (h->type == F_ATOMIC) /* executed once its operands are in (atomic_exec); a malformed one is dropped */
		return h->len == sizeof(c->rx_atom) ? RX_ATOMIC : RX_DISCARD;
	if (h->type == F_READ_REQ && h->rd_atom > q->max_dest_rd_atomic) {
		/* more READs/atomics outstanding than this responder's max_dest_rd_atomic: an invalid request */
		VTRACE("exec target qp=0x%x op=READ: %u outstanding > max_dest_rd_atomic %u: REM_INV_REQ\n", q->qp.qp_num,
		       h->rd_atom, q->max_dest_rd_atomic);
		respond(c, h, F_NAK, IBV_WC_REM_INV_REQ_ERR);
		responder_error(q, IBV_EVENT_QP_REQ_ERR);
		return RX_NONE;
	}
	if (h->type == F_READ_REQ) {
		struct vmr *m = h->len ? vemu_mr_find(h->rkey) : NULL;
		if (h->len && (!m || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_REMOTE_READ) ||
			       !(q->access & IBV_ACCESS_REMOTE_READ) || !mr_range(m, h->raddr, h->len))) {
			respond(c, h, F_NAK, IBV_WC_REM_ACCESS_ERR);
			responder_error(q, IBV_EVENT_QP_ACCESS_ERR);
			return RX_NONE;
		}
		lazy_flush(q->ctx->dev);
		struct oframe *f = frame_new(F_READ_RESP, h->src_qpn, h->dst_qpn, h->seq);
		f->h.len = h->len;
		if (h->len) {
			f->segs = calloc(1, sizeof(struct vseg));
			seg_from_mr(f->segs, m, h->raddr, h->len);
			f->segs->lazy = 0;
			f->nseg = 1;
		}
		enqueue(c, f);
		if (g.trace) {
			char acc[160] = "-";
			if (m)
				vemu_access_str((unsigned)m->access, acc, sizeof(acc));
			vemu_trace("exec target qp=0x%x op=READ len=%llu rkey=0x%x access=%s\n", q->qp.qp_num,
				   (unsigned long long)h->len, h->rkey, acc);
		}
		return RX_NONE;
	}
	if (h->type == F_WRITE) {
		if (h->len) {
			struct vmr *m = vemu_mr_find(h->rkey);
			if (!m || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_REMOTE_WRITE) ||
			    !(q->access & IBV_ACCESS_REMOTE_WRITE) || !mr_range(m, h->raddr, h->len)) {
				c->rx_status = IBV_WC_REM_ACCESS_ERR;
				responder_error(q, IBV_EVENT_QP_ACCESS_ERR);
				return RX_DISCARD;
			}
			c->isegs = calloc(1, sizeof(struct vseg));
			seg_from_mr(c->isegs, m, h->raddr, h->len);
			c->nisegs = 1;
		}
		if (h->flags & HF_IMM)
			c->rx_recv = pop_recv(q);
		if (g.trace) {
			char acc[160] = "-";
			struct vmr *m = h->len ? vemu_mr_find(h->rkey) : NULL;
			if (m)
				vemu_access_str((unsigned)m->access, acc, sizeof(acc));
			vemu_trace("exec target qp=0x%x op=%s len=%llu rkey=0x%x access=%s\n", q->qp.qp_num,
				   h->flags & HF_IMM ? "WRITE_IMM" : "WRITE", (unsigned long long)h->len, h->rkey, acc);
		}
		if (lazify(c->isegs, c->nisegs, &c->rx_lazy))
			return RX_DISCARD;
		return RX_PLACE;
	}
	/* SEND: scatter into the receive */
	struct vrwr *r = pop_recv(q);
	c->rx_recv = r;
	uint64_t cap = 0;
	for (int i = 0; i < r->nsge; i++)
		cap += r->sge[i].length;
	if (cap < h->len) {
		c->rx_recv_status = IBV_WC_LOC_LEN_ERR;
		c->rx_status = IBV_WC_REM_INV_REQ_ERR;
		return RX_DISCARD;
	}
	struct vseg *segs;
	int n;
	if (local_segs(q, r->sge, r->nsge, 1, &segs, &n)) {
		c->rx_recv_status = IBV_WC_LOC_PROT_ERR;
		c->rx_status = IBV_WC_REM_OP_ERR;
		return RX_DISCARD;
	}
	/* trim to the message length */
	uint64_t left = h->len;
	int k = 0;
	for (; k < n && left; k++) {
		if (segs[k].len > left)
			segs[k].len = left;
		left -= segs[k].len;
	}
	c->isegs = segs;
	c->nisegs = k;
	VTRACE("exec target qp=0x%x op=%s len=%llu\n", q->qp.qp_num, h->flags & HF_IMM ? "SEND_IMM" : "SEND",
	       (unsigned long long)h->len);
	if (lazify(c->isegs, c->nisegs, &c->rx_lazy))
		return RX_DISCARD;
	return RX_PLACE;
}

/* answer an atomic with the value the word had before it */
static void atomic_respond(struct vconn *c, const struct whdr *h, uint64_t old)
{
	struct oframe *f = frame_new(F_ATOMIC_RESP, h->src_qpn, h->dst_qpn, h->seq);
	f->h.len = 8;
	f->heap = malloc(8);
	if (!f->heap)
		abort();
	memcpy(f->heap, &old, 8);
	enqueue(c, f);
}

/* Execute an incoming atomic whose 16 bytes of operands are in args (g.mu held; the target's agent thread). Checked as
 * an HCA's responder does: its READ/atomic depth, then the rkey (REMOTE_ATOMIC on the MR and the QP, the 8 bytes in
 * range: else REM_ACCESS), then the alignment (8 bytes: else REM_INV_REQ). Host memory is changed with an atomic
 * instruction, so it is atomic against atomics arriving through other QPs, other processes mapping the same memory
 * (each target process's agent executes its own) and the CPU's own atomics; device memory through
 * vemu_cuda_atomic (see there for its limit). */
static void atomic_exec(struct vconn *c, struct vqp *q, const struct whdr *h, const char *args)
{
	int cas = !!(h->flags & HF_CAS);
	const char *opn = cas ? "CMP_SWAP" : "FETCH_ADD";
	if (!q || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS)) {
		VTRACE("drop qp=0x%x psn=%u %s (its QP left RTR/RTS)\n", h->dst_qpn, (unsigned)h->seq, opn);
		return;
	}
	if (h->rd_atom > q->max_dest_rd_atomic) {
		VTRACE("exec target qp=0x%x op=%s: %u outstanding > max_dest_rd_atomic %u: REM_INV_REQ\n", q->qp.qp_num,
		       opn, h->rd_atom, q->max_dest_rd_atomic);
		respond(c, h, F_NAK, IBV_WC_REM_INV_REQ_ERR);
		responder_error(q, IBV_EVENT_QP_REQ_ERR);
		return;
	}
	struct vmr *m = vemu_mr_find(h->rkey);
	if (!m || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_REMOTE_ATOMIC) ||
	    !(q->access & IBV_ACCESS_REMOTE_ATOMIC) || !mr_range(m, h->raddr, 8)) {
		VTRACE("exec target qp=0x%x op=%s raddr=0x%llx rkey=0x%x: REM_ACCESS\n", q->qp.qp_num, opn,
		       (unsigned long long)h->raddr, h->rkey);
		respond(c, h, F_NAK, IBV_WC_REM_ACCESS_ERR);
		responder_error(q, IBV_EVENT_QP_ACCESS_ERR);
		return;
	}
	if (h->raddr & 7) {
		VTRACE("exec target qp=0x%x op=%s raddr=0x%llx: not 8-byte aligned: REM_INV_REQ\n", q->qp.qp_num, opn,
		       (unsigned long long)h->raddr);
		respond(c, h, F_NAK, IBV_WC_REM_INV_REQ_ERR);
		responder_error(q, IBV_EVENT_QP_REQ_ERR);
		return;
	}
	uint64_t ca, sw, old = 0;
	memcpy(&ca, args, 8);
	memcpy(&sw, args + 8, 8);
	struct vseg s;
	seg_from_mr(&s, m, h->raddr, 8);
	if (s.addr & 7) {
		/* an MR whose iova and address differ modulo 8 (ibv_reg_mr_iova2): the word is not aligned in memory, where
		 * no atomic instruction reaches it whole; refused as misaligned */
		VTRACE("exec target qp=0x%x op=%s raddr=0x%llx: the MR's memory address 0x%llx is not 8-byte aligned: "
		       "REM_INV_REQ\n",
		       q->qp.qp_num, opn, (unsigned long long)h->raddr, (unsigned long long)s.addr);
		respond(c, h, F_NAK, IBV_WC_REM_INV_REQ_ERR);
		responder_error(q, IBV_EVENT_QP_REQ_ERR);
		return;
	}
	if (m->is_dev)
		lazy_flush(m->dev); /* a device read: what was written before it is visible first */
	if (s.cuda) {
		if (vemu_cuda_atomic(s.cuctx, s.addr, cas, ca, sw, &old)) {
			respond(c, h, F_NAK, IBV_WC_REM_OP_ERR);
			responder_error(q, IBV_EVENT_QP_FATAL);
			return;
		}
	} else {
		uint64_t *p = (uint64_t *)(uintptr_t)s.addr;
		if (cas) {
			old = ca;
			__atomic_compare_exchange_n(p, &old, sw, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		} else {
			old = __atomic_fetch_add(p, ca, __ATOMIC_SEQ_CST);
		}
	}
	if (g.trace) {
		char acc[160];
		vemu_access_str((unsigned)m->access, acc, sizeof(acc));
		vemu_trace("exec target qp=0x%x op=%s raddr=0x%llx rkey=0x%x compare_add=0x%llx swap=0x%llx old=0x%llx "
			   "access=%s mem=%s\n",
			   q->qp.qp_num, opn, (unsigned long long)h->raddr, h->rkey, (unsigned long long)ca,
			   (unsigned long long)sw, (unsigned long long)old, acc, s.cuda ? "device" : "host");
	}
	unsigned slot = (unsigned)h->seq % (sizeof(q->atom_done) / sizeof(q->atom_done[0]));
	q->atom_done[slot].psn = (uint32_t)h->seq & VEMU_PSN_MASK;
	q->atom_done[slot].val = old;
	q->atom_done[slot].valid = 1;
	atomic_respond(c, h, old);
}

/* a retransmitted atomic that was executed already: its saved result again; silence when it is too old (the
 * initiator's retry timer then decides) */
static void atomic_replay(struct vconn *c, const struct whdr *h)
{
	struct vqp *q = vemu_qp_find(h->dst_qpn);
	if (!q)
		return;
	unsigned slot = (unsigned)h->seq % (sizeof(q->atom_done) / sizeof(q->atom_done[0]));
	if (!q->atom_done[slot].valid || q->atom_done[slot].psn != ((uint32_t)h->seq & VEMU_PSN_MASK)) {
		VTRACE("duplicate atomic qp=0x%x psn=%u: no saved result, dropped\n", h->dst_qpn, (unsigned)h->seq);
		return;
	}
	VTRACE("duplicate atomic qp=0x%x psn=%u: saved result 0x%llx sent again\n", h->dst_qpn, (unsigned)h->seq,
	       (unsigned long long)q->atom_done[slot].val);
	atomic_respond(c, h, q->atom_done[slot].val);
}

/* the payload of an executed request has been placed (or discarded): complete it (g.mu held) */
/* g.mu held: the receive a request took completes flushed (its QP went to ERR under it); the caller frees r */
static void flush_taken_recv(struct vqp *q, const struct vrwr *r, const struct whdr *h)
{
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = r->wr_id;
	wc.status = IBV_WC_WR_FLUSH_ERR;
	wc.opcode = h->type == F_SEND ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
	wc.qp_num = h->dst_qpn;
	vemu_cq_push(q->rcq, &wc, NULL, 0);
}

static void finish_request(struct vconn *c, const struct whdr *h)
{
	struct vqp *q = vemu_qp_find(h->dst_qpn);
	lazy_publish(c->rx_lazy);
	c->rx_lazy = NULL;
	struct vrwr *r = c->rx_recv;
	c->rx_recv = NULL;
	if (r && (!q || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS))) {
		/* The QP left RTR/RTS (the application moved it to ERR, or reset it) while the payload was being placed:
		 * the receive completes with a flush, and the request is not acknowledged -- an initiator told "done"
		 * for a message its target never completed would break RC's promise (the target's recovery would not
		 * know it has the data). The initiator times out or is flushed itself. */
		VTRACE("drop qp=0x%x psn=%u (left RTR/RTS while placing: flushed, not acknowledged)\n", h->dst_qpn,
		       (unsigned)h->seq);
		if (q && q->qp.state == IBV_QPS_ERR)
			flush_taken_recv(q, r, h);
		free(r);
		return;
	}
	if (r) {
		if (q && q->qp.state != IBV_QPS_RESET) {
			struct ibv_wc wc;
			memset(&wc, 0, sizeof(wc));
			wc.wr_id = r->wr_id;
			wc.status = (enum ibv_wc_status)c->rx_recv_status;
			if (q->qp.state == IBV_QPS_ERR && wc.status == IBV_WC_SUCCESS)
				wc.status = IBV_WC_WR_FLUSH_ERR;
			wc.opcode = h->type == F_SEND ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
			wc.byte_len = wc.status == IBV_WC_SUCCESS ? (uint32_t)h->len : 0;
			if (h->flags & HF_IMM) {
				wc.imm_data = h->imm;
				wc.wc_flags |= IBV_WC_WITH_IMM;
			}
			wc.qp_num = h->dst_qpn;
			wc.src_qp = h->src_qpn;
			uint64_t late = wc.status == IBV_WC_SUCCESS && !c->rx_status ? vemu_fault_late_cqe() : 0;
			if (late) {
				/* late_cqe: acknowledged now, written to the CQ later; the QP fails meanwhile (its flushed
				 * completions come behind this one, as a NIC writes what it acknowledged first) */
				VTRACE("fault late_cqe qp=0x%x psn=%u: completion in %llu ms, QP fatal\n", h->dst_qpn,
				       (unsigned)h->seq, (unsigned long long)late);
				vemu_cq_push_late(q->rcq, &wc, vemu_now_ns() + late * 1000000ull);
				want_deadline(vemu_now_ns() + late * 1000000ull);
				respond(c, h, F_ACK, 0);
				free(r);
				vemu_qp_to_err(q);
				vemu_async_event(q->ctx, IBV_EVENT_QP_FATAL, &q->qp, 0);
				return;
			}
			vemu_cq_push(q->rcq, &wc, NULL, 0);
			if (c->rx_recv_status != IBV_WC_SUCCESS)
				responder_error(q, IBV_EVENT_QP_REQ_ERR);
		}
		free(r);
	}
	if (c->rx_status) {
		respond(c, h, F_NAK, c->rx_status);
	} else if (q && (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS)) {
		respond(c, h, F_ACK, 0);
	} else {
		/* a WRITE whose target QP went to error (a device loss: its MR may be gone and the bytes dropped) or
		 * away while it was placed: not acknowledged either (a dead NIC acknowledges nothing; contract seed
		 * 350792133, device_fatal on the receiver: the sender took the ACK for placed bytes, the receiver's
		 * buffer held the canary) */
		VTRACE("drop qp=0x%x psn=%u (left RTR/RTS while placing: not acknowledged)\n", h->dst_qpn,
		       (unsigned)h->seq);
	}
}

/* ------------------------------------------------------------ held requests (RNR, port down) */
static void held_free(struct held *h)
{
	free(h->data);
	free(h);
}

void vemu_held_drop(struct vqp *q)
{
	for (struct held *h = q->held_head, *n; h; h = n) {
		n = h->next;
		held_free(h);
	}
	q->held_head = q->held_tail = NULL;
}

static void place_from_buffer(struct vseg *s, int n, const char *data)
{
	uint64_t o = 0;
	for (int i = 0; i < n; i++) {
		seg_copy_in(&s[i], 0, data + o, s[i].len);
		o += s[i].len;
	}
}

static void run_held(struct vqp *q, uint64_t now)
{
	while (q->held_head && vemu_port_state(q->ctx->dev) == IBV_PORT_ACTIVE) {
		struct held *hd = q->held_head;
		if (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) {
			vemu_held_drop(q);
			return;
		}
		struct vconn *c = hd->conn;
		if (needs_recv(&hd->h)) {
			/* RNR: NAK now, the initiator retries after min_rnr_timer, up to rnr_retry times (7: forever) */
			int ok = q->rq_head != NULL && !hd->force_rnr;
			if (!ok) {
				if (hd->rnr_count && now < hd->next_try) {
					want_deadline(hd->next_try);
					return;
				}
				hd->force_rnr = 0;
				hd->rnr_count++;
				if (hd->h.rnr_retry != 7 && hd->rnr_count > hd->h.rnr_retry) {
					VTRACE("rnr exhausted qp=0x%x seq=%llu\n", q->qp.qp_num,
					       (unsigned long long)hd->h.seq);
					respond(c, &hd->h, F_NAK, IBV_WC_RNR_RETRY_EXC_ERR);
					/* the NAKed request was not accepted: what follows is out of sequence */
					q->rx_psn = (uint32_t)hd->h.seq & VEMU_PSN_MASK;
					vemu_held_drop(q);
					return;
				}
				respond(c, &hd->h, F_RNR, 0);
				hd->next_try = now + rnr_ns(q->min_rnr_timer);
				want_deadline(hd->next_try);
				return;
			}
		}
		q->held_head = hd->next;
		if (!q->held_head)
			q->held_tail = NULL;
		if (hd->h.type == F_ATOMIC) {
			if (hd->data && hd->h.len == 16)
				atomic_exec(c, q, &hd->h, hd->data);
			held_free(hd);
			if (q->qp.state == IBV_QPS_ERR)
				return;
			continue;
		}
		int kind = exec_request(c, q, &hd->h);
		if (kind == RX_PLACE) {
			/* a lazy target was turned into heap buffers by exec_request */
			place_from_buffer(c->isegs, c->nisegs, hd->data);
			vemu_fault_peer_lost(hd->h.len);
		}
		if (kind != RX_NONE)
			finish_request(c, &hd->h);
		free(c->isegs);
		c->isegs = NULL;
		c->nisegs = 0;
		held_free(hd);
		if (q->qp.state == IBV_QPS_ERR)
			return;
	}
}

/* ------------------------------------------------------------ initiator side responses (g.mu held) */
static int psn_before(uint32_t a, uint32_t b)
{
	uint32_t d = (b - a) & VEMU_PSN_MASK;
	return d && d < 0x800000;
}

/* a response for PSN psn implicitly acknowledges every earlier request (IB acks are cumulative) */
static void ack_before(struct vqp *q, uint32_t psn)
{
	struct vwr *w;
	while ((w = q->if_head) && psn_before(w->seq, psn)) {
		q->if_head = w->next;
		if (!q->if_head)
			q->if_tail = NULL;
		vemu_complete_send(q, w, IBV_WC_SUCCESS);
	}
}

static void handle_response(struct vconn *c, const struct whdr *h)
{
	struct vqp *q = vemu_qp_find(h->dst_qpn);
	c->rx_kind = RX_DISCARD;
	if (!q || q->qp.state != IBV_QPS_RTS || q->dest_qpn != h->src_qpn)
		return;
	uint32_t psn = (uint32_t)h->seq;
	q->last_progress = vemu_now_ns();
	if (h->type != F_PROBE_RESP)
		q->retries = 0;
	if (h->type == F_RNR) {
		VTRACE("ack qp=0x%x psn=%u kind=RNR_NAK\n", q->qp.qp_num, psn);
		return;
	}
	if (h->type == F_PROBE_RESP) {
		VTRACE("probe answer qp=0x%x expects psn=%u\n", q->qp.qp_num, psn);
		retransmit_from(q, psn);
		return;
	}
	ack_before(q, psn);
	struct vwr *w = q->if_head;
	if (!w || w->seq != psn)
		return; /* a late answer to something already completed, flushed or reset */
	if ((h->type == F_READ_RESP && w->opcode != IBV_WR_RDMA_READ) ||
	    (h->type == F_ATOMIC_RESP && (!vemu_is_atomic(w->opcode) || h->len != 8)))
		return; /* not the answer this request takes */
	if (h->type == F_READ_RESP || h->type == F_ATOMIC_RESP) {
		free(c->isegs);
		c->isegs = NULL;
		c->nisegs = 0;
		if (w->nrsegs) {
			c->isegs = malloc(sizeof(struct vseg) * (size_t)w->nrsegs);
			memcpy(c->isegs, w->rsegs, sizeof(struct vseg) * (size_t)w->nrsegs);
			c->nisegs = w->nrsegs;
			for (int i = 0; i < c->nisegs; i++)
				c->isegs[i].lazy = 0;
		}
		c->rx_kind = RX_READ_RESP;
		return;
	}
	VTRACE("ack qp=0x%x psn=%u wr_id=0x%llx kind=%s\n", q->qp.qp_num, psn, (unsigned long long)w->wr_id,
	       h->type == F_ACK ? "ACK" : ibv_wc_status_str(h->status));
	q->if_head = w->next;
	if (!q->if_head)
		q->if_tail = NULL;
	if (h->type == F_ACK) {
		vemu_complete_send(q, w, IBV_WC_SUCCESS);
		if (q->sq_head)
			transmit_qp(q);
	} else {
		vemu_complete_send(q, w, (int)h->status);
		vemu_qp_to_err(q);
	}
}

static void finish_read_resp(const struct whdr *h)
{
	struct vqp *q = vemu_qp_find(h->dst_qpn);
	if (!q)
		return;
	struct vwr *w = q->if_head;
	if (!w || w->seq != (uint32_t)h->seq)
		return;
	VTRACE("ack qp=0x%x psn=%u wr_id=0x%llx kind=%s len=%llu\n", q->qp.qp_num, w->seq,
	       (unsigned long long)w->wr_id, h->type == F_ATOMIC_RESP ? "ATOMIC_RESP" : "READ_RESP",
	       (unsigned long long)h->len);
	q->if_head = w->next;
	if (!q->if_head)
		q->if_tail = NULL;
	vemu_complete_send(q, w, IBV_WC_SUCCESS);
	if (q->sq_head)
		transmit_qp(q);
}

/* ------------------------------------------------------------ reading */
static void header_done(struct vconn *c)
{
	struct whdr *h = &c->ih;
	c->in_left = (h->type == F_SEND || h->type == F_WRITE || h->type == F_READ_RESP || h->type == F_ATOMIC ||
		      h->type == F_ATOMIC_RESP) ?
			     h->len :
			     0;
	c->iseg_i = 0;
	c->iseg_off = 0;
	c->rx_kind = RX_NONE;
	pthread_mutex_lock(&g.mu);
	c->rx_gen = g.qp_gone_gen;
	if (h->type == F_PROBE) {
		struct vqp *q = vemu_qp_find(h->dst_qpn);
		/* answered only by a connected QP on a live port, as packets would be */
		if (q && (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS) && q->dest_qpn == h->src_qpn &&
		    vemu_port_state(q->ctx->dev) == IBV_PORT_ACTIVE) {
			struct oframe *f = frame_new(F_PROBE_RESP, h->src_qpn, h->dst_qpn, q->rx_psn);
			enqueue(c, f);
		}
		c->rx_kind = RX_NONE;
	} else if (h->type == F_ACK || h->type == F_NAK || h->type == F_RNR || h->type == F_READ_RESP ||
		   h->type == F_PROBE_RESP || h->type == F_ATOMIC_RESP) {
		handle_response(c, h);
		if (h->type != F_READ_RESP && h->type != F_ATOMIC_RESP)
			c->rx_kind = RX_NONE;
	} else {
		struct vqp *q = vemu_qp_find(h->dst_qpn);
		struct held *hd;
		int kind = plan_request(c, q, h, &hd);
		if (kind == RX_HOLD) {
			/* owned by the connection until its payload is in; then queued on the QP */
			c->rx_hold = hd;
			c->rx_heap = hd->data;
		} else if (kind == -1) {
			kind = exec_request(c, q, h);
		}
		c->rx_kind = kind;
	}
	pthread_mutex_unlock(&g.mu);
}

/* A request frame whose trailer says void (see TAIL_OK): nothing of it completes. What it placed stays; its receive
 * goes back to the head of the receive queue (flushed if the QP left RTR/RTS); the initiator gets LOC_PROT_ERR. g.mu
 * held. */
static void void_request(struct vconn *c, const struct whdr *h)
{
	struct vqp *q = vemu_qp_find(h->dst_qpn);
	VTRACE("drop qp=0x%x psn=%u (void: the initiator could not send it whole; nothing completes)\n", h->dst_qpn,
	       (unsigned)h->seq);
	for (struct lazyrec *l = c->rx_lazy, *nx; l; l = nx) {
		nx = l->next;
		free(l->data);
		free(l);
	}
	c->rx_lazy = NULL;
	struct vrwr *r = c->rx_recv;
	c->rx_recv = NULL;
	if (r && q && (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS)) {
		r->next = q->rq_head;
		q->rq_head = r;
		if (!q->rq_tail)
			q->rq_tail = r;
		q->rq_count++;
		r = NULL;
	} else if (r && q && q->qp.state == IBV_QPS_ERR) {
		flush_taken_recv(q, r, h);
	}
	free(r);
	respond(c, h, F_NAK, IBV_WC_LOC_PROT_ERR);
}

/* a READ response whose trailer says void (the responder's memory went away under it): the READ fails */
static void void_read_resp(const struct whdr *h)
{
	struct vqp *q = vemu_qp_find(h->dst_qpn);
	if (!q || q->qp.state != IBV_QPS_RTS)
		return;
	struct vwr *w = q->if_head;
	if (!w || w->seq != (uint32_t)h->seq)
		return;
	VTRACE("ack qp=0x%x psn=%u wr_id=0x%llx kind=READ_RESP void\n", q->qp.qp_num, w->seq,
	       (unsigned long long)w->wr_id);
	q->if_head = w->next;
	if (!q->if_head)
		q->if_tail = NULL;
	vemu_complete_send(q, w, IBV_WC_REM_ACCESS_ERR);
	vemu_qp_to_err(q);
}

static void payload_done(struct vconn *c)
{
	struct whdr *h = &c->ih;
	int voided = 0;
	if (frame_has_tail(h->type)) {
		if (c->tail != TAIL_OK && c->tail != TAIL_VOID)
			abort(); /* the stream lost its framing: nothing after this could be trusted */
		voided = c->tail == TAIL_VOID;
	}
	c->in_tail = 0;
	c->tail = 0;
	pthread_mutex_lock(&g.mu);
	if (voided && c->rx_kind != RX_READ_RESP && c->rx_kind != RX_NONE) {
		if (c->rx_kind == RX_HOLD) {
			held_free(c->rx_hold);
			c->rx_hold = NULL;
			c->rx_heap = NULL;
			respond(c, h, F_NAK, IBV_WC_LOC_PROT_ERR);
		} else if (h->type == F_SEND || h->type == F_WRITE || h->type == F_ATOMIC) {
			void_request(c, h);
		}
		c->rx_kind = RX_NONE;
	} else if (voided && c->rx_kind == RX_READ_RESP) {
		void_read_resp(h);
		c->rx_kind = RX_NONE;
	}
	switch (c->rx_kind) {
	case RX_PLACE:
		finish_request(c, h);
		break;
	case RX_DISCARD:
		if (h->type == F_SEND || h->type == F_WRITE || h->type == F_READ_REQ) {
			if (c->rx_status || c->rx_recv)
				finish_request(c, h);
			else if (c->rx_ack)
				respond(c, h, F_ACK, 0);
		} else if (h->type == F_ATOMIC && c->rx_dup_atomic) {
			atomic_replay(c, h);
		}
		break;
	case RX_ATOMIC:
		atomic_exec(c, vemu_qp_find(h->dst_qpn), h, c->rx_atom);
		break;
	case RX_READ_RESP:
		finish_read_resp(h);
		break;
	case RX_HOLD: {
		struct held *hd = c->rx_hold;
		c->rx_hold = NULL;
		c->rx_heap = NULL;
		struct vqp *q = vemu_qp_find(h->dst_qpn);
		if (!q || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) || q->dest_qpn != h->src_qpn) {
			held_free(hd); /* the QP went away or into error meanwhile */
			break;
		}
		hd->next = NULL;
		if (q->held_tail)
			q->held_tail->next = hd;
		else
			q->held_head = hd;
		q->held_tail = hd;
		run_held(q, vemu_now_ns());
		break;
	}
	default:
		break;
	}
	pthread_mutex_unlock(&g.mu);
	free(c->isegs);
	c->isegs = NULL;
	c->nisegs = 0;
	c->stage_fill = 0;
	c->rx_kind = RX_NONE;
	c->in_payload = 0;
	c->ih_got = 0;
}

/* the payload is in: its trailer next (frames that carry one), then payload_done */
static void payload_end(struct vconn *c)
{
	if (frame_has_tail(c->ih.type)) {
		c->in_tail = 1;
		c->tail_got = 0;
		return;
	}
	payload_done(c);
}

/* bytes for device memory are gathered in a host staging buffer and copied with one driver call per chunk of up
 * to STAGE_SZ (a chunk never crosses a segment end, so the stage is empty between messages) */
static uint64_t stage_target(struct vconn *c, const struct vseg *s)
{
	uint64_t rest = s->len - c->iseg_off;
	return rest < STAGE_SZ ? rest : STAGE_SZ;
}

static void stage_advance(struct vconn *c, struct vseg *s)
{
	uint64_t t = stage_target(c, s);
	if (c->stage_fill < t)
		return;
	seg_copy_in(s, c->iseg_off, c->stage, t);
	c->iseg_off += t;
	c->stage_fill = 0;
	if (c->iseg_off == s->len) {
		c->iseg_i++;
		c->iseg_off = 0;
	}
}

/* The QP a payload is placed for (the target's, or a READ's initiator) may have been destroyed since its header:
 * ibv_destroy_qp bumps g.qp_gone_gen, then waits for g.memlock, so a placement step in progress finishes and the next
 * one sees the bump. The rest of the payload is then dropped: when ibv_destroy_qp returns, nothing more is placed for
 * that QP (a NIC places nothing for a QP that is gone; the plugin hands a receive's buffer to TCP after destroying
 * the QPs it was posted on). Called with memlock read-held, before bytes of a payload go to memory. */
static void placement_recheck(struct vconn *c)
{
	if (!c->in_payload || (c->rx_kind != RX_PLACE && c->rx_kind != RX_READ_RESP) ||
	    __atomic_load_n(&g.qp_gone_gen, __ATOMIC_ACQUIRE) == c->rx_gen)
		return;
	pthread_mutex_lock(&g.mu);
	c->rx_gen = g.qp_gone_gen;
	if (!vemu_qp_find(c->ih.dst_qpn)) {
		VTRACE("drop qp=0x%x psn=%u (destroyed while placing: the rest is not placed)\n", c->ih.dst_qpn,
		       (unsigned)c->ih.seq);
		for (struct lazyrec *l = c->rx_lazy, *nx; l; l = nx) {
			nx = l->next;
			free(l->data);
			free(l);
		}
		c->rx_lazy = NULL;
		c->rx_kind = RX_DISCARD;
	}
	pthread_mutex_unlock(&g.mu);
}

/* deliver n bytes of payload from buf to the current sink */
static void sink_bytes(struct vconn *c, const char *buf, uint64_t n)
{
	if (c->rx_kind == RX_HOLD && c->rx_heap) {
		memcpy(c->rx_heap + (c->ih.len - c->in_left), buf, n);
	} else if (c->rx_kind == RX_ATOMIC) {
		uint64_t at = c->ih.len - c->in_left;
		if (at < sizeof(c->rx_atom))
			memcpy(c->rx_atom + at, buf, at + n <= sizeof(c->rx_atom) ? n : sizeof(c->rx_atom) - at);
	} else if (c->rx_kind == RX_PLACE || c->rx_kind == RX_READ_RESP) {
		while (n && c->iseg_i < c->nisegs) {
			struct vseg *s = &c->isegs[c->iseg_i];
			if (s->cuda) {
				if (!c->stage && !(c->stage = malloc(STAGE_SZ)))
					abort();
				uint64_t t = stage_target(c, s);
				uint64_t k = t - c->stage_fill < n ? t - c->stage_fill : n;
				memcpy(c->stage + c->stage_fill, buf, k);
				c->stage_fill += k;
				buf += k;
				n -= k;
				stage_advance(c, s);
				continue;
			}
			uint64_t k = s->len - c->iseg_off < n ? s->len - c->iseg_off : n;
			seg_copy_in(s, c->iseg_off, buf, k);
			buf += k;
			n -= k;
			c->iseg_off += k;
			if (c->iseg_off == s->len) {
				c->iseg_i++;
				c->iseg_off = 0;
			}
		}
	}
}

/* read directly into host sink memory when the remaining payload is large */
static ssize_t read_direct(struct vconn *c)
{
	struct iovec iov[16];
	int n = 0;
	uint64_t want = c->in_left;
	if ((c->rx_kind == RX_PLACE || c->rx_kind == RX_READ_RESP) && c->iseg_i < c->nisegs &&
	    c->isegs[c->iseg_i].cuda && !vemu_seg_dead(&c->isegs[c->iseg_i])) {
		/* device memory: straight into the staging buffer */
		struct vseg *s = &c->isegs[c->iseg_i];
		if (!c->stage && !(c->stage = malloc(STAGE_SZ)))
			abort();
		uint64_t t = stage_target(c, s) - c->stage_fill;
		if (t > c->in_left)
			t = c->in_left;
		ssize_t r = read(c->fd, c->stage + c->stage_fill, t);
		if (r > 0) {
			c->stage_fill += (uint64_t)r;
			c->in_left -= (uint64_t)r;
			stage_advance(c, s);
		}
		return r;
	}
	if (c->rx_kind == RX_HOLD && c->rx_heap) {
		iov[0].iov_base = c->rx_heap + (c->ih.len - c->in_left);
		iov[0].iov_len = want;
		n = 1;
	} else if (c->rx_kind == RX_PLACE || c->rx_kind == RX_READ_RESP) {
#ifdef VEMU_TSAN
		return -2; /* placed by vemu_place, not by the kernel */
#endif
		int i = c->iseg_i;
		uint64_t off = c->iseg_off;
		for (; i < c->nisegs && n < 16 && want; i++) {
			struct vseg *s = &c->isegs[i];
			if (s->cuda || vemu_seg_dead(s))
				break; /* device memory: staged; deregistered: read into ibuf and dropped */
			uint64_t k = s->len - off < want ? s->len - off : want;
			iov[n].iov_base = (char *)(uintptr_t)(s->addr + off);
			iov[n].iov_len = k;
			want -= k;
			n++;
			off = 0;
		}
	}
	if (!n)
		return -2; /* no direct path (device memory or discard) */
	ssize_t r = readv(c->fd, iov, n);
	if (r > 0) {
		uint64_t left = (uint64_t)r;
		if (c->rx_kind == RX_HOLD) {
			c->in_left -= left;
			return r;
		}
		while (left) {
			struct vseg *s = &c->isegs[c->iseg_i];
			uint64_t k = s->len - c->iseg_off < left ? s->len - c->iseg_off : left;
			c->iseg_off += k;
			left -= k;
			if (c->iseg_off == s->len) {
				c->iseg_i++;
				c->iseg_off = 0;
			}
		}
		c->in_left -= (uint64_t)r;
	}
	return r;
}

/* after a read of r bytes from c: under ThreadSanitizer, what this connection's writers sent before these bytes
 * (responses to it among them) happened before (conn_sendmsg) */
static inline void conn_read_acquire(struct vconn *c, ssize_t r)
{
#ifdef VEMU_TSAN
	if (r > 0)
		__tsan_acquire(&c->tsan_sync);
#else
	(void)c;
	(void)r;
#endif
}

static int conn_read_locked(struct vconn *c)
{
	if (vemu_fault_is_lost() || conn_dead(c) || c->fd < 0)
		return 0;
	for (int rounds = 0; !conn_dead(c); rounds++) {
		/* consume buffered input (always before leaving, or bytes would wait for the next epoll event) */
		while (c->ibuf_off < c->ibuf_len) {
			size_t avail = c->ibuf_len - c->ibuf_off;
			if (!c->in_payload) {
				size_t k = sizeof(c->ih) - c->ih_got < avail ? sizeof(c->ih) - c->ih_got : avail;
				memcpy((char *)&c->ih + c->ih_got, c->ibuf + c->ibuf_off, k);
				c->ih_got += k;
				c->ibuf_off += k;
				if (c->ih_got == sizeof(c->ih)) {
					c->in_payload = 1;
					header_done(c);
					if (!c->in_left)
						payload_end(c);
				}
			} else if (c->in_tail) {
				size_t k = sizeof(c->tail) - c->tail_got < avail ? sizeof(c->tail) - c->tail_got : avail;
				memcpy((char *)&c->tail + c->tail_got, c->ibuf + c->ibuf_off, k);
				c->tail_got += k;
				c->ibuf_off += k;
				if (c->tail_got == sizeof(c->tail))
					payload_done(c);
			} else {
				uint64_t k = c->in_left < avail ? c->in_left : avail;
				placement_recheck(c);
				sink_bytes(c, c->ibuf + c->ibuf_off, k);
				c->ibuf_off += k;
				c->in_left -= k;
				vemu_fault_peer_lost(k);
				if (!c->in_left)
					payload_end(c);
			}
		}
		c->ibuf_off = c->ibuf_len = 0;
		if (rounds >= 64)
			return 0; /* let the other connections have their turn; epoll reports the rest */
		ssize_t r;
		if (c->in_payload && c->in_left >= 65536) {
			placement_recheck(c);
			r = read_direct(c);
			conn_read_acquire(c, r);
			if (r > 0) {
				vemu_fault_peer_lost((uint64_t)r);
				if (!c->in_left)
					payload_end(c);
				continue;
			}
			if (r == -2) {
				r = read(c->fd, c->ibuf, IBUF_SZ < c->in_left ? IBUF_SZ : c->in_left);
				conn_read_acquire(c, r);
			}
		} else {
			r = read(c->fd, c->ibuf, IBUF_SZ);
			conn_read_acquire(c, r);
		}
		if (r > 0) {
			c->ibuf_len = (size_t)r;
			continue;
		}
		if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
			pthread_mutex_lock(&g.mu);
			conn_mark_dead(c);
			pthread_mutex_unlock(&g.mu);
			return -1;
		}
		if (errno == EINTR)
			continue;
		return 0;
	}
	return 0;
}

/* reads place bytes straight into registered memory: with g.memlock read-held (see struct vglobal) */
static int conn_read(struct vconn *c)
{
	pthread_rwlock_rdlock(&g.memlock);
	int rc = conn_read_locked(c);
	pthread_rwlock_unlock(&g.memlock);
	return rc;
}

/* ------------------------------------------------------------ timers */
static void check_timers(uint64_t now)
{
	/* g.mu held */
	next_deadline = 0;
	for (struct vqp *q = g.qps; q; q = q->anext) {
		if (q->held_head)
			run_held(q, now);
		if (q->qp.state != IBV_QPS_RTS || (!q->if_head && !q->sq_head))
			continue;
		uint64_t t = qp_timeout_ns(q);
		if (!t)
			continue;
		uint64_t dl = q->last_progress + t;
		if (now < dl) {
			want_deadline(dl);
			continue;
		}
		if (q->retries < q->retry_cnt) {
			/* the retry timer: find out what the responder lacks (unless nothing has even left yet) */
			q->retries++;
			if (!q->unsent && q->if_head && vemu_port_state(q->ctx->dev) == IBV_PORT_ACTIVE)
				send_probe(q);
			q->last_progress = now;
			want_deadline(now + t);
			continue;
		}
		struct vwr *w = q->if_head ? q->if_head : q->sq_head;
		VTRACE("timeout qp=0x%x wr_id=0x%llx retry_exc after %d retries\n", q->qp.qp_num,
		       (unsigned long long)w->wr_id, q->retries);
		if (q->if_head) {
			q->if_head = w->next;
			if (!q->if_head)
				q->if_tail = NULL;
		} else {
			q->sq_head = w->next;
			if (!q->sq_head)
				q->sq_tail = NULL;
		}
		vemu_complete_send(q, w, IBV_WC_RETRY_EXC_ERR);
		vemu_qp_to_err(q);
	}
}

/* ------------------------------------------------------------ the loop */
static void process_dirty(void)
{
	pthread_mutex_lock(&g.mu);
	struct vqp *q = g.dirty_head;
	g.dirty_head = NULL;
	for (; q; q = q->dnext) {
		q->dirty = 0;
		transmit_qp(q);
		uint64_t t = qp_timeout_ns(q);
		if (t && q->qp.state == IBV_QPS_RTS && (q->sq_head || q->if_head))
			want_deadline(q->last_progress + t);
	}
	pthread_mutex_unlock(&g.mu);
}

/* application thread in ibv_post_send, g.mu held: when the QP's connection is idle, put the new work requests
 * on the wire from this thread (saves waking the agent). Returns 1 when nothing is left for the agent. g.mu is
 * released around the write. */
int vemu_try_direct(struct vqp *q)
{
	static int enabled = -1;
	if (enabled < 0) {
		const char *e = getenv("VEMU_DIRECT");
		enabled = !(e && !strcmp(e, "0"));
	}
	struct vconn *c = q->conn;
	/* only when the QP has nothing in flight: a latency-bound exchange. A running stream of requests is left
	 * to the agent, which batches them into fewer system calls. */
	if (!enabled || agent_thread || q->dirty || q->if_head || q->qp.state != IBV_QPS_RTS || !c || conn_dead(c) ||
	    c->writing ||
	    c->oq_head || c->fd < 0 || vemu_port_state(q->ctx->dev) != IBV_PORT_ACTIVE || vemu_fault_is_lost())
		return 0;
	if (g.gdr_lazy)
		return 0; /* a READ would apply parked device writes: CUDA work stays in the agent */
	transmit_qp(q);
	if (q->sq_head)
		return 0; /* an error waits for earlier requests: the agent finishes it */
	for (struct oframe *f = c->oq_head; f; f = f->next)
		for (int i = 0; i < f->nseg; i++)
			if (f->segs[i].cuda)
				return 0; /* device memory is staged by the agent (CUDA calls stay in its thread) */
	conn_write_locked(c);
	return 1;
}

/* agent thread: a port came back ACTIVE: resume what waited for it */
void vemu_port_changed(struct vdev *d)
{
	pthread_mutex_lock(&g.mu);
	uint64_t now = vemu_now_ns();
	for (struct vqp *q = g.qps; q; q = q->anext) {
		if (q->ctx->dev != d)
			continue;
		if (q->held_head)
			run_held(q, now);
		transmit_qp(q);
	}
	pthread_mutex_unlock(&g.mu);
}

/* peer_loss: stop all socket I/O, as if unplugged (timers keep running) */
static void go_dark(void)
{
	static int applied;
	if (applied)
		return;
	applied = 1;
	VTRACE("fault peer_loss: this process stops answering\n");
	for (struct vconn *c = conns; c; c = c->next)
		if (!conn_dead(c))
			epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	epoll_ctl(ep, EPOLL_CTL_DEL, g.listen_fd, NULL);
}

static void *agent_main(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	vemu_set_agent_thread();
	struct epoll_event evs[64];
	for (;;) {
		uint64_t now = vemu_now_ns();
		int tmo = -1;
		uint64_t port_dl = 0;
		vemu_fault_port_timers(now, &port_dl);
		want_deadline(port_dl);
		__atomic_store_n(&sleep_until, next_deadline, __ATOMIC_SEQ_CST);
		uint64_t pend = __atomic_exchange_n(&pending_dl, 0, __ATOMIC_SEQ_CST);
		if (pend) {
			want_deadline(pend);
			__atomic_store_n(&sleep_until, next_deadline, __ATOMIC_SEQ_CST);
		}
		if (next_deadline) {
			if (next_deadline <= now)
				tmo = 0;
			else
				tmo = (int)((next_deadline - now + 999999) / 1000000);
		}
		int n = epoll_wait(ep, evs, 64, tmo);
		__atomic_store_n(&sleep_until, 1, __ATOMIC_SEQ_CST);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &g.doorbell) {
				uint64_t v;
				ssize_t r = read(g.doorbell, &v, sizeof(v));
				(void)r;
				__atomic_store_n(&g.doorbell_rung, 0, __ATOMIC_RELEASE);
				continue;
			}
			if (p == &g.listen_fd) {
				for (;;) {
					int fd = accept4(g.listen_fd, NULL, NULL, SOCK_CLOEXEC);
					if (fd < 0)
						break;
					conn_new(fd, 0);
				}
				continue;
			}
			struct vconn *c = p;
			if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				conn_read(c);
			if (!conn_dead(c) && (evs[i].events & EPOLLOUT))
				conn_write(c);
		}
		process_dirty();
		if (vemu_fault_is_lost())
			go_dark();
		now = vemu_now_ns();
		if (next_deadline && now >= next_deadline) {
			pthread_mutex_lock(&g.mu);
			check_timers(now);
			pthread_mutex_unlock(&g.mu);
		}
		pthread_mutex_lock(&g.mu);
		lazy_drain_serve();
		for (struct vconn *c = conns; c; c = c->next) {
			if (c->oq_head && !conn_dead(c))
				conn_write_locked(c);
			if (conn_dead(c))
				conn_reap(c);
		}
		pthread_mutex_unlock(&g.mu);
		vemu_flush_deferred();
		pthread_mutex_lock(&g.mu);
		want_deadline(vemu_deferred_deadline()); /* a lagging completion's time */
		pthread_mutex_unlock(&g.mu);
	}
	return NULL;
}

static void unlink_sock(void)
{
	if (g.sock_path[0]) /* cleared in a forked child (core.c) */
		unlink(g.sock_path);
}

/* g.mu held */
int vemu_agent_start(void)
{
	if (g.agent_started)
		return 0;
	self_id = g.run_id;
	ep = epoll_create1(EPOLL_CLOEXEC);
	g.doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	g.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (ep < 0 || g.doorbell < 0 || g.listen_fd < 0)
		return -1;
	struct sockaddr_un a;
	if (dir_fd < 0 && strlen(g.dir) + sizeof("/agent-0123456789abcdef.sock") > sizeof(a.sun_path)) {
		char self[64];
		dir_fd = open(g.dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		snprintf(self, sizeof(self), "/proc/self/fd/%d", dir_fd);
		if (dir_fd >= 0 && access(self, F_OK) != 0) { /* no /proc: the abstract name */
			close(dir_fd);
			dir_fd = -1;
		}
	}
	socklen_t alen = agent_addr(self_id, &a);
	if (a.sun_path[0]) {
		snprintf(g.sock_path, sizeof(g.sock_path), "%s", a.sun_path);
		unlink(a.sun_path);
	}
	if (bind(g.listen_fd, (struct sockaddr *)&a, alen) || listen(g.listen_fd, 512)) {
		fprintf(stderr, "vemu: cannot listen on %s%s: %s\n", a.sun_path[0] ? "" : "@",
			a.sun_path[0] ? a.sun_path : a.sun_path + 1, strerror(errno));
		return -1;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &g.listen_fd };
	epoll_ctl(ep, EPOLL_CTL_ADD, g.listen_fd, &ev);
	struct epoll_event ev2 = { .events = EPOLLIN, .data.ptr = &g.doorbell };
	epoll_ctl(ep, EPOLL_CTL_ADD, g.doorbell, &ev2);
	g.start_ns = vemu_now_ns();
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&g.agent, &at, agent_main, NULL)) {
		pthread_attr_destroy(&at);
		return -1;
	}
	pthread_attr_destroy(&at);
	atexit(unlink_sock);
	g.agent_started = 1;
	return 0;
}
