/* The RDMA transport's one seam to the TCP transport it nests (plugin/tcp). A connection that RDMA cannot carry
 * keeps its RDMA comm and hands its messages to a TCP comm of the TCP transport inside it (fallback.c's moves, and
 * conn.c's connections that run over TCP from the start, mixed pairs among them); dev.c starts and stops the TCP
 * transport for that. Every use of plugin/tcp from rdma/ goes through these calls: fb_tcp.c is the one file of
 * rdma/ that includes tcp/tcp.h. A TCP comm, listener or request is opaque here. */
#ifndef GDRNET_RDMA_FB_TCP_H
#define GDRNET_RDMA_FB_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "../sock.h"
#include "../transport.h"

struct gdr_rdma_mh;

/* The TCP transport for the fallback: 0 and *dev, its device on the handshake's address if_addr (the first device
 * when none has it); -1 when it cannot work here (why: the TCP transport's reason, or empty). fini: when init gave
 * 0. */
int gdr_fb_tcp_init(const union gdr_sockaddr *if_addr, int *dev, char *why, size_t whylen);
void gdr_fb_tcp_fini(void);
/* TCP device dev has the address addr (a peer reaches it where it reaches an RDMA listener on addr). */
int gdr_fb_tcp_dev_at(int dev, const union gdr_sockaddr *addr);

/* Connections, as the TCP transport's table (transport.h) makes them; close: a comm of either side. */
ncclResult_t gdr_fb_tcp_listen(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **listen);
ncclResult_t gdr_fb_tcp_connect(int dev, const struct gdr_conn_opts *opts, struct gdr_handle *handle, void **comm);
ncclResult_t gdr_fb_tcp_accept(void *listen, void **comm);
void gdr_fb_tcp_close_listen(void *listen);
void gdr_fb_tcp_close(void *comm, int sender);
/* A connect in progress on this handle is given up (its sockets closed); nothing when none is. */
void gdr_fb_tcp_connect_abort(struct gdr_handle *handle);
/* The peer of a TCP comm: its address (for logs) and *caps, the GDR_CAP_* it announced. */
const char *gdr_fb_tcp_peer(const void *comm, uint32_t *caps);

/* Messages: NCCL's buffers with the RDMA transport's memory handles (NULL for none: a 0-byte buffer); device memory
 * is staged through pinned host buffers by the TCP transport. A NULL request: TCP is full, try again. */
ncclResult_t gdr_fb_tcp_isend(void *comm, void *data, size_t size, int tag, const struct gdr_rdma_mh *mh,
                              void **request);
ncclResult_t gdr_fb_tcp_irecv(void *comm, int n, void **data, size_t *sizes, int *tags, struct gdr_rdma_mh *const *mhs,
                              void **request);
ncclResult_t gdr_fb_tcp_test(void *request, int *done, size_t *sizes);

/* What the way back to RDMA splits the stream by, per tag (tcp.h: gdr_tcp_tag_counts, gdr_tcp_tag_count), and the
 * comm's next message number (logs). */
int gdr_fb_tcp_tag_counts(const void *comm, int *tags, uint64_t *counts, int max);
uint64_t gdr_fb_tcp_tag_count(const void *comm, int tag);
uint64_t gdr_fb_tcp_next_seq(const void *comm);
/* The nested comm's facts for the per-connection state (transport.h's describe): 0, or -1 when none. */
int gdr_fb_tcp_describe(void *comm, struct gdr_conn_desc *out);

#endif /* GDRNET_RDMA_FB_TCP_H */
