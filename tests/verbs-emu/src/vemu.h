/* verbs emulator: internal declarations shared by the library's source files.
 * See tests/verbs-emu/README.md for the design. */
#ifndef VEMU_H
#define VEMU_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#define VEMU_EXPORT __attribute__((visibility("default")))

/* ThreadSanitizer builds (-DGDRNET_SANITIZE=thread): the emulator tells TSan what a NIC and the kernel do that it
 * cannot see (vemu_place below, and the socket writes in agent.c). */
#if defined(__SANITIZE_THREAD__)
#define VEMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VEMU_TSAN 1
#endif
#endif
#ifdef VEMU_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
void __tsan_read_range(void *addr, unsigned long size);
#endif
#define VEMU_MAX_DEVS 16
#define VEMU_NGID 6
#define VEMU_QPN_BLOCK 16
#define VEMU_MAX_INLINE 1024
#define VEMU_MAX_SGE 32
#define VEMU_MAX_QP_WR 16384
#define VEMU_MAX_CQE (1 << 22)
#define VEMU_PSN_MASK 0xffffffu
#define VEMU_DEFAULT_MAX_MSG (1ull << 30) /* what ConnectX ports report */

/* ------------------------------------------------------------ devices */
struct vdev {
	struct ibv_device dev;      /* must be first: handed out to users */
	void *ops_guard;            /* NULL: where a verbs_device keeps its ops (mlx5dv_is_supported reads it) */
	int index;
	int is_ib;
	uint16_t lid;
	uint64_t guid;              /* host order */
	union ibv_gid gid[VEMU_NGID];
	int gid_type[VEMU_NGID];    /* IBV_GID_TYPE_* */
	int ngid;
	int port_state;             /* IBV_PORT_ACTIVE / IBV_PORT_DOWN: the agent sets it (fault rules), any thread reads it;
	                             * through vemu_port_state / vemu_set_port_state (atomic) */
	int fatal;                  /* (atomic) device_fatal fired and the device is not back (for_ms): its contexts are dead */
};

static inline int vemu_port_state(const struct vdev *d) { return __atomic_load_n(&d->port_state, __ATOMIC_ACQUIRE); }
static inline void vemu_set_port_state(struct vdev *d, int s) { __atomic_store_n(&d->port_state, s, __ATOMIC_RELEASE); }

struct vctx {
	struct verbs_context vc;    /* ibv_context is the last member of verbs_context */
	struct vdev *dev;
	int async_wr;               /* write end of the async event pipe (read end is context.async_fd) */
	int dead;                   /* (atomic) opened before (or during) a device_fatal of its device: stays dead */
	struct vctx *next;          /* open contexts */
};

static inline struct vctx *to_vctx(struct ibv_context *c)
{
	return (struct vctx *)((char *)c - offsetof(struct verbs_context, context));
}

struct vpd {
	struct ibv_pd pd;
};

struct vmr {
	struct ibv_mr mr;
	struct vmr *hnext;
	uint64_t iova;              /* address the peers use */
	uint64_t base;              /* local address of iova (host pointer or device VA) */
	uint64_t len;
	int access;
	int is_dev;                 /* device memory (CUDA pointer or a DMA-BUF registration) */
	int cuda;                   /* base is a CUDA device address (copies go through the driver) */
	void *cuctx;                /* CUcontext of a CUDA registration */
	struct vdev *dev;
	int dead;                   /* deregistered: segments still pointing here must not touch its memory */
	struct vmr *dnext;          /* g.dead_mrs */
};

/* send-queue slots of a QP. As with hardware, a completed unsignaled WR keeps its slot until a later completion
 * of that QP is polled; the completion carries the slots it frees. Shared (refcounted) by the QP and those
 * completions, so a QP can be reset or destroyed with completions still in a CQ. */
struct vsq {
	int used;  /* atomic */
	int refs;  /* atomic */
};

struct cqmeta {
	struct vsq *sq;
	int slots;
};

struct vcq {
	struct ibv_cq cq;
	pthread_mutex_t lock;
	struct ibv_wc *ring;
	struct cqmeta *meta;
	uint32_t cap, head, count;
	int armed;
	int overrun;
	struct vctx *ctx;
	/* async events (g.mu): see ibv_get_async_event */
	struct vcq *cnext;          /* all CQs list */
	uint64_t serial;            /* unique for the process's lifetime: a record names the CQ it was made for */
	uint32_t ev_read, ev_acked;
};

struct vchan {
	struct ibv_comp_channel ch;
	int wfd;
};

/* one copied send work request */
struct vwr {
	struct vwr *next;
	uint64_t wr_id;
	uint32_t seq;               /* PSN */
	int opcode;                 /* IBV_WR_* */
	unsigned flags;
	uint32_t imm;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t cmp_add, swap;     /* atomics: compare (CMP_AND_SWP) or add (FETCH_AND_ADD), swap */
	uint64_t len;
	int nsge;
	struct ibv_sge *sge;
	char *inl;                  /* inline copy */
	int signaled;
	int status;                 /* pending local error (IBV_WC_*), 0 = none */
	int sent;                   /* frame handed to the wire */
	struct vseg *rsegs;         /* RDMA READ sink (local) */
	int nrsegs;
};

struct vrwr {
	struct vrwr *next;
	uint64_t wr_id;
	int nsge;
	struct ibv_sge sge[];
};

struct held;                    /* incoming request parked at the target (RNR, port down) */

struct vqp {
	struct ibv_qp qp;
	struct vqp *hnext;          /* qpn hash */
	struct vqp *anext;          /* all QPs list */
	struct vctx *ctx;
	struct vcq *scq, *rcq;
	struct ibv_qp_cap cap;
	int sq_sig_all;
	/* attributes */
	int port;
	unsigned access;
	uint16_t pkey_index;
	int mtu;
	uint32_t dest_qpn;
	uint32_t rq_psn, sq_psn;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic;
	struct ibv_ah_attr ah;
	/* send side */
	struct vwr *sq_head, *sq_tail;      /* posted, not handed to the wire */
	struct vwr *if_head, *if_tail;      /* on the wire, waiting for a response */
	struct vsq *sq;                     /* send-queue slots in use (freed when completions are polled) */
	int sq_unsig;                       /* unsignaled WRs completed since the last completion of this QP */
	uint32_t next_seq;                  /* next PSN (24 bits), starts at sq_psn */
	uint64_t last_progress;             /* ns: last sign of life of the peer for this QP */
	int retries;                        /* retransmissions since the last progress */
	int unsent;                         /* request frames queued and not yet fully written */
	uint32_t rx_psn;                    /* responder: next expected PSN, starts at rq_psn */
	int dirty;
	struct vqp *dnext;
	uint64_t peer_id;                   /* agent id of dest_qpn's owner, 0 = unknown */
	struct vconn *conn;
	/* receive side */
	struct vrwr *rq_head, *rq_tail;
	int rq_count;
	struct held *held_head, *held_tail; /* parked incoming requests, in order */
	/* responder: the results of the last atomics executed (by PSN), replayed for a duplicate request instead of
	 * executing it twice (what an HCA's responder resources keep) */
	struct {
		uint32_t psn;
		int valid;
		uint64_t val;
	} atom_done[16];
	int destroyed;
	/* async events (g.mu): see ibv_get_async_event */
	uint64_t serial;            /* unique for the process's lifetime: a record names the QP it was made for */
	uint32_t ev_read, ev_acked;
};

/* a payload segment: host memory or a CUDA device address */
struct vseg {
	uint64_t addr;
	uint64_t len;
	int cuda;
	void *cuctx;
	int lazy;                           /* GDR_LAZY target: park the bytes instead of placing them */
	struct vdev *dev;
	struct vmr *mr;                     /* the registration it lies in (NULL: emulator-owned heap) */
};

/* a segment whose MR was deregistered: its bytes are dropped (placement) or sent as zeros (source), as a NIC
 * whose MR is gone no longer touches that memory. Read with g.mu held, or with g.memlock read-held. */
static inline int vemu_seg_dead(const struct vseg *s)
{
	return s->mr && __atomic_load_n(&s->mr->dead, __ATOMIC_ACQUIRE);
}

/* The NIC's write of n bytes into host memory at dst. A NIC writes a message into strongly ordered memory in
 * ascending address order, and applications rely on it: they poll the last word of a structure the peer writes (a
 * CTS FIFO entry's sequence word, NCCL IB's FIFO idx) and then read the rest. glibc's memcpy does not keep that
 * order: above 8 vectors it stores the first vector last (a poller saw an entry's seq with its nreqs not yet
 * there). So a placement of up to VEMU_PLACE_ORDERED bytes (control structures) is made of ascending 8-byte
 * release stores (a plain mov on x86); a larger one, payload, is a memcpy. Under ThreadSanitizer every placement
 * is ascending relaxed atomic stores, 8 at a time where aligned, and the last word (and a trailing byte) a release
 * store: a poller whose acquire load sees the last word of a placement sees all of it. A release per word would
 * cost TSan a sync object per 8 bytes (seconds per MiB). */
#define VEMU_PLACE_ORDERED 4096
static inline void vemu_place(void *dst, const void *src, size_t n)
{
#ifdef VEMU_TSAN
	unsigned char *d = dst;
	const unsigned char *s = src;
	for (; n && ((uintptr_t)d & 7); n--)
		__atomic_store_n(d++, *s++, n == 1 ? __ATOMIC_RELEASE : __ATOMIC_RELAXED);
	for (; n >= 8; n -= 8, d += 8, s += 8) {
		uint64_t v;
		__builtin_memcpy(&v, s, 8);
		__atomic_store_n((uint64_t *)(void *)d, v, n < 16 ? __ATOMIC_RELEASE : __ATOMIC_RELAXED);
	}
	for (; n; n--)
		__atomic_store_n(d++, *s++, n == 1 ? __ATOMIC_RELEASE : __ATOMIC_RELAXED);
#else
	if (n > VEMU_PLACE_ORDERED) {
		__builtin_memcpy(dst, src, n);
		return;
	}
	unsigned char *d = dst;
	const unsigned char *s = src;
	for (; n && ((uintptr_t)d & 7); n--)
		__atomic_store_n(d++, *s++, __ATOMIC_RELEASE);
	for (; n >= 8; n -= 8, d += 8, s += 8) {
		uint64_t v;
		__builtin_memcpy(&v, s, 8);
		__atomic_store_n((uint64_t *)(void *)d, v, __ATOMIC_RELEASE);
	}
	for (; n; n--)
		__atomic_store_n(d++, *s++, __ATOMIC_RELEASE);
#endif
}

/* ------------------------------------------------------------ globals */
struct vglobal {
	pthread_mutex_t mu;
	/* Application memory is touched outside g.mu (sendmsg from it, readv into it) only with memlock read-held,
	 * and a segment's dead mark is read after memlock is taken. ibv_dereg_mr marks the MR dead under g.mu, then
	 * takes memlock for writing: when it returns, no access that could have missed the mark is still running (the
	 * caller may free the memory). Lock order: memlock before g.mu (the reader takes g.mu with memlock held;
	 * nothing takes memlock with g.mu held; ibv_dereg_mr holds nothing else while it waits). */
	pthread_rwlock_t memlock;
	struct vmr *dead_mrs;               /* deregistered MRs, kept: queued segments may still point to them */
	int inited;
	int init_err;
	char dir[512];
	uint64_t run_id;                    /* random id of this process's emulator (agent socket, QPN owner) */
	double time_scale;
	uint64_t max_msg_sz;                /* the ports' max_msg_sz (VEMU_MAX_MSG_SZ): a longer WR ends in LOC_LEN_ERR */
	int max_cqe;                        /* the devices' max_cqe (VEMU_MAX_CQE): a larger CQ is refused (EINVAL) */
	int gdr_lazy;
	char pci_path[512];
	int ndev;
	struct vdev *devs[VEMU_MAX_DEVS];
	struct ibv_device *devlist[VEMU_MAX_DEVS + 1];
	struct vctx *ctxs;
	struct vctx *closed_ctxs;
	/* keys and qpns */
	uint32_t key_counter;
	uint32_t qpn_next, qpn_end;
	struct vmr *mr_hash[4096];
	struct vqp *qp_hash[4096];
	struct vqp *qps;
	struct vcq *cqs;
	uint64_t obj_serial;                /* last serial given to a QP or CQ (g.mu) */
	pthread_cond_t ev_acked_cond;       /* an async event was acked (g.mu) */
	long ack_wait_s;                    /* VEMU_ACK_WAIT_S: destroy's wait for an unacked event before it aborts */
	int no_atomics;                     /* VEMU_ATOMIC_CAP=none: atomic_cap NONE, atomics refused at post */
	struct vqp *dirty_head;
	int nqp_rts;                        /* counts QPs that reached RTS (qp_fatal rule) */
	uint32_t qp_gone_gen;               /* bumped by ibv_destroy_qp under g.mu (atomic: read by the agent without it) */
	/* agent */
	int agent_started;
	pthread_t agent;
	int doorbell;                       /* eventfd */
	int doorbell_rung;
	int listen_fd;
	char sock_path[600];
	uint64_t start_ns;
	/* trace */
	FILE *trace;
	pthread_mutex_t trace_mu;
};
extern struct vglobal g;

/* core.c */
uint64_t vemu_now_ns(void);
struct vqp *vemu_qp_find(uint32_t qpn);
struct vmr *vemu_mr_find(uint32_t key);
void vemu_cq_push(struct vcq *cq, const struct ibv_wc *wc, struct vsq *sq, int slots);
void vemu_cq_push_late(struct vcq *cq, const struct ibv_wc *wc, uint64_t not_before_ns); /* agent, g.mu held */
uint64_t vemu_deferred_deadline(void);              /* g.mu held: the earliest lagging completion, 0 = none */
struct vsq *vemu_sq_new(void);
void vemu_sq_unref(struct vsq *sq);
void vemu_set_agent_thread(void);
int vemu_in_agent(void);
void vemu_flush_deferred(void);
void vemu_async_event(struct vctx *ctx, enum ibv_event_type type, void *elem, int port);
void vemu_qp_to_err(struct vqp *qp);               /* g.mu held: flush everything */
void vemu_complete_send(struct vqp *qp, struct vwr *w, int status);
int vemu_ensure_init(void);
void vemu_ring(void);
const char *vemu_wr_opname(int op);
void vemu_access_str(unsigned access, char *buf, size_t n);

/* agent.c */
int vemu_agent_start(void);
void vemu_agent_fork_child(void);
void vemu_held_drop(struct vqp *q);                 /* g.mu held */
int vemu_try_direct(struct vqp *q);                 /* g.mu held: send from the posting thread */
void vemu_port_changed(struct vdev *d);             /* agent thread: port came back, resume traffic */
void vemu_lazy_drain_locked(struct vdev *d);        /* g.mu held: GDR_LAZY writes parked on d applied */

/* fault.c */
int vemu_faults_parse(const char *spec);            /* 0 ok, -1 malformed (message printed) */
int vemu_fault_call(const char *call);              /* errno to fail with, 0 = proceed */
int vemu_fault_wc(int wr_opcode);                   /* IBV_WC_* status to force, 0 = none */
int vemu_fault_qp_fatal(void);                      /* 1 when this QP (reaching RTS) must fail */
int vemu_fault_no_recv_credit(void);                /* 1 when this incoming message must see RNR */
uint64_t vemu_fault_late_cqe(void);                 /* ms: this receive completion lags, its QP fails; 0 = none */
int vemu_fault_peer_lost(uint64_t add_bytes);       /* accounts payload bytes; 1 once lost */
int vemu_fault_is_lost(void);
void vemu_fault_port_timers(uint64_t now, uint64_t *next_deadline); /* agent: apply port_down rules */
void vemu_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define VTRACE(...) do { if (g.trace) vemu_trace(__VA_ARGS__); } while (0)

/* cuda.c */
int vemu_cuda_available(void);
int vemu_cuda_is_dev_ptr(uint64_t ptr, void **ctx);
void vemu_cuda_prepare(void *ctx);
int vemu_cuda_htod(void *ctx, uint64_t dst, const void *src, size_t n);
int vemu_cuda_dtoh(void *ctx, void *dst, uint64_t src, size_t n);
int vemu_cuda_dtod(void *ctx, uint64_t dst, uint64_t src, size_t n);
int vemu_cuda_atomic(void *ctx, uint64_t addr, int cas, uint64_t cmp_add, uint64_t swap, uint64_t *old);

/* RDMA READ and the atomics: the requests that take a responder resource (max_rd_atomic / max_dest_rd_atomic) */
static inline int vemu_is_rd_atomic(int wr_opcode)
{
	return wr_opcode == IBV_WR_RDMA_READ || wr_opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       wr_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}
static inline int vemu_is_atomic(int wr_opcode)
{
	return wr_opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

#endif
