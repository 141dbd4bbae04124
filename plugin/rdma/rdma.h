/* The RDMA transport's internal structures, split by lifecycle like NCCL's IB transport:
 *   dev.c      init, devices, properties, GDR probes, relaxed ordering, registration (regcache.c)
 *   async.c    one thread per device reading async events; marks the connections they hit
 *   conn.c     listen/connect/accept state machines, QP bring-up, close
 *   p2p.c      isend/irecv/iflush/test (CTS FIFO, WRITE/WRITE_WITH_IMM, multi-QP, flush)
 *   transport.c the gdr_transport table
 * Wire formats and arithmetic are in proto.h, the verbs loader in ibvwrap.h. */
#ifndef GDRNET_RDMA_RDMA_H
#define GDRNET_RDMA_RDMA_H

#include <endian.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../log.h"
#include "../param.h"
#include "../sock.h"
#include "../transport.h"
#include "ibvwrap.h"
#include "proto.h"
#include "regcache.h"

#define GDR_RDMA_MAX_DEVS 32
#define GDR_RDMA_SEND_REQS (GDR_RDMA_MAX_REQS * GDR_RDMA_MAX_RECVS) /* 32 x 8 on the send side */
#define GDR_RDMA_CQ_BATCH 16
#define GDR_RDMA_CTS_SIGNAL_EVERY 16 /* one CTS write in 16 per QP is signaled to drain the send queue */

/* ------------------------------------------------------------------------------------------ devices -- */

struct gdr_rdma_comm;

struct gdr_rdma_dev {
  char name[80];       /* as NCCL sees it: "mlx5_0", or "mlx5_0:2" on multi-port devices */
  char ibname[64];     /* verbs device name */
  char *pci_path;      /* realpath of <ibdev_path>/device, or NULL */
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  int port;
  int link_layer;      /* IBV_LINK_LAYER_* */
  int active_mtu;      /* enum ibv_mtu */
  int gid_index;
  union ibv_gid gid;
  uint16_t lid;
  int grh_required;    /* the port says every packet needs a GRH (IBV_QPF_GRH_REQUIRED) */
  uint64_t guid;       /* sys_image_guid, as NCCL's IB transport */
  int speed;           /* Mbps */
  int max_qp;
  int max_qp_wr;
  int ptr_support;     /* NCCL_PTR_* */
  int relaxed;         /* register data buffers with IBV_ACCESS_RELAXED_ORDERING */
  char gdr_desc[512];  /* "GDR via nvidia-peermem", "GDR off: ..." */
  struct gdr_regcache cache;

  /* comms of this device, for the async thread */
  pthread_mutex_t lock;
  struct gdr_rdma_comm *comms;
  int ncomms;
  pthread_t thread;
  int thread_running;
  int stop_fd;         /* eventfd: wakes the async thread to stop */
  int fatal;           /* DEVICE_FATAL seen */
};

struct gdr_rdma_state {
  int ndevs;
  struct gdr_rdma_dev devs[GDR_RDMA_MAX_DEVS];
  union gdr_sockaddr if_addr; /* local address for listeners */
  char if_name[IF_NAMESIZE];
  int nqps;                   /* GDRNET_QPS_PER_CONN */
  int split;                  /* GDRNET_SPLIT_DATA */
};
extern struct gdr_rdma_state gdr_rdma;

/* dev.c */
ncclResult_t gdr_rdma_init(int *ndev, char *why, size_t whylen);
ncclResult_t gdr_rdma_get_properties(int dev, struct gdr_props *props);
void gdr_rdma_fini(void);
void gdr_rdma_quiesce(void);
ncclResult_t gdr_rdma_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t gdr_rdma_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                    void **mhandle);
ncclResult_t gdr_rdma_dereg_mr(void *comm, void *mhandle);
/* Registers a transport-internal buffer (FIFO, sizes, staging) outside the cache. */
struct ibv_mr *gdr_rdma_reg_internal(struct gdr_rdma_dev *d, void *buf, size_t len, int access);
const char *gdr_rdma_reg_hint(int err); /* a fix for a registration errno (memlock, ...) */

/* async.c */
/* Adds/removes a comm to/from its device's list; the first add starts the device's async thread,
 * the last remove stops and joins it. */
ncclResult_t gdr_rdma_async_attach(struct gdr_rdma_comm *c);
void gdr_rdma_async_detach(struct gdr_rdma_comm *c);
/* Stops and joins the device's thread even if comms are still open (fini after leaked comms). */
void gdr_rdma_async_stop(struct gdr_rdma_dev *d);

/* ---------------------------------------------------------------------------------------- requests -- */

enum { GDR_RREQ_FREE = 0, GDR_RREQ_SEND, GDR_RREQ_RECV, GDR_RREQ_FLUSH };

struct gdr_rdma_req {
  struct gdr_rdma_comm *comm;
  int type;
  int nreqs;          /* receive: n of the group; send: n of the group it is part of */
  int events;         /* completions still awaited */
  int slot;           /* FIFO slot (seq % 32) */
  int idx;            /* send: position in the grouped receive it matched */
  uint64_t seq;       /* message sequence number (both sides name it alike) */
  ncclResult_t error; /* sticky failure of this request */
  /* send */
  size_t size;
  /* receive */
  size_t sent[GDR_RDMA_MAX_RECVS];
  size_t cap[GDR_RDMA_MAX_RECVS];
};

/* wr_id: kind in the top byte, slot in the next, seq in the low 48 bits */
enum { GDR_WR_DATA = 1, GDR_WR_RECV = 2, GDR_WR_CTS = 3, GDR_WR_FLUSH = 4, GDR_WR_SIZES = 5 };
static inline uint64_t gdr_wr_id(int kind, int slot, uint64_t seq) {
  return ((uint64_t)kind << 56) | ((uint64_t)(slot & 0xff) << 48) | (seq & 0xffffffffffffull);
}
static inline int gdr_wr_kind(uint64_t id) { return (int)(id >> 56); }
static inline int gdr_wr_slot(uint64_t id) { return (int)((id >> 48) & 0xff); }
static inline uint64_t gdr_wr_seq(uint64_t id) { return id & 0xffffffffffffull; }

/* ------------------------------------------------------------------------------------------- comms -- */

enum { GDR_RCOMM_SEND = 1, GDR_RCOMM_RECV = 2 };

/* Control-channel records after the handshake (32 bytes each). */
#define GDR_RDMA_CTRL_MAGIC 0x43524447u /* "GDRC" */
enum { GDR_CTRL_SIZE_ERR = 1, GDR_CTRL_BYE = 2 };
struct gdr_rdma_ctrl {
  uint32_t magic;
  uint32_t type;
  uint64_t seq;
  uint64_t a, b; /* SIZE_ERR: a = bytes the sender had, b = bytes the receive could take */
};
_Static_assert(sizeof(struct gdr_rdma_ctrl) == 32, "control record is 32 bytes");

/* blob types of the handshake */
#define GDR_RDMA_BLOB_HS 0x52444831u    /* "RDH1": struct gdr_rdma_hs */
#define GDR_RDMA_BLOB_READY 0x52444852u /* "RDHR": sender's QPs are RTS */

struct gdr_rdma_comm {
  int kind; /* GDR_RCOMM_* */
  struct gdr_rdma_dev *dev;
  int devidx;
  struct gdr_rdma_comm *next; /* device list (async thread) */
  int attached;

  /* control channel */
  int fd;
  char peer[GDR_ADDR_STRLEN];
  struct gdr_rdma_ctrl ctrl_in;
  size_t ctrl_in_off;
  uint64_t ctrl_next_check_ns;
  uint64_t eof_ns; /* when the peer's EOF was seen (0: not seen) */

  /* handshake */
  int stage;
  uint64_t deadline_ns;
  struct gdr_connector connector;
  struct gdr_blob_io bio;
  struct gdr_rdma_hs local, remote;
  uint32_t ready_word;

  /* verbs */
  struct ibv_cq *cq;
  int nqps, split, nparts;
  struct ibv_qp *qps[GDR_RDMA_MAX_QPS];
  uint32_t cts_count[GDR_RDMA_MAX_QPS]; /* receiver: CTS writes posted per QP */
  int max_inline;
  enum ibv_mtu mtu;

  /* fatal state, set by the async thread or by a failed completion */
  atomic_int fatal;
  char fatal_why[384];
  int fatal_warned;

  uint64_t head; /* next message sequence number */

  /* sender */
  struct gdr_cts_slot *fifo; /* written by the receiver */
  struct ibv_mr *fifo_mr;
  struct gdr_sizes_slot *sizes_src; /* sizes of grouped sends, source of the WRITE_WITH_IMM */
  struct ibv_mr *sizes_src_mr;
  uint64_t rsizes_addr;
  uint32_t rsizes_rkey;
  struct gdr_rdma_req *send_slot[GDR_RDMA_FIFO_SLOTS][GDR_RDMA_MAX_RECVS];
  int send_matched[GDR_RDMA_FIFO_SLOTS]; /* isends matched to the slot's current message, not posted yet */
  int send_live[GDR_RDMA_FIFO_SLOTS];    /* send requests of the slot not yet released by test */
  uint64_t slot_seq[GDR_RDMA_FIFO_SLOTS]; /* the message those requests belong to */
  size_t send_size[GDR_RDMA_FIFO_SLOTS][GDR_RDMA_MAX_RECVS];
  void *send_data[GDR_RDMA_FIFO_SLOTS][GDR_RDMA_MAX_RECVS];
  uint32_t send_lkey[GDR_RDMA_FIFO_SLOTS][GDR_RDMA_MAX_RECVS];

  /* receiver */
  struct gdr_cts_slot *cts_src; /* staging of the entries the receiver writes */
  struct ibv_mr *cts_src_mr;
  struct gdr_sizes_slot *sizes; /* written by the sender (grouped receives) */
  struct ibv_mr *sizes_mr;
  uint64_t rfifo_addr;
  uint32_t rfifo_rkey;
  struct gdr_rdma_req *recv_slot[GDR_RDMA_FIFO_SLOTS];
  /* flush (GDR): a QP connected to itself, reading 1 byte into flush_buf */
  struct ibv_qp *flush_qp;
  void *flush_buf;
  struct ibv_mr *flush_mr;

  int nreqs_alloc;
  struct gdr_rdma_req *reqs;
  int nreqs_pool;
};

struct gdr_rdma_listen {
  int dev;
  struct gdr_listener l;
  struct gdr_rdma_comm *pending; /* the connection being accepted */
};

/* conn.c */
ncclResult_t gdr_rdma_listen(int dev, struct gdr_handle *handle, void **listen_comm);
ncclResult_t gdr_rdma_connect(int dev, struct gdr_handle *handle, void **send_comm);
ncclResult_t gdr_rdma_accept(void *listen_comm, void **recv_comm);
ncclResult_t gdr_rdma_close_send(void *send_comm);
ncclResult_t gdr_rdma_close_recv(void *recv_comm);
ncclResult_t gdr_rdma_close_listen(void *listen_comm);
void gdr_rdma_comm_mark_fatal(struct gdr_rdma_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The error a comm's calls return once it failed (WARNs the reason once). ncclSuccess if healthy. */
ncclResult_t gdr_rdma_comm_check(struct gdr_rdma_comm *c);
/* "::ffff:10.0.0.1" (RoCE GID) or "LID 5" (IB) of this side (remote = 0) or of the peer (remote = 1). */
void gdr_rdma_addr_str(const struct gdr_rdma_comm *c, int remote, char *buf, size_t len);
/* Reads what the peer said on the control channel (non-blocking). */
ncclResult_t gdr_rdma_ctrl_poll(struct gdr_rdma_comm *c);

/* p2p.c */
ncclResult_t gdr_rdma_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle, void **request);
ncclResult_t gdr_rdma_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                            void **request);
ncclResult_t gdr_rdma_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request);
ncclResult_t gdr_rdma_test(void *request, int *done, size_t *sizes);

#endif /* GDRNET_RDMA_RDMA_H */
