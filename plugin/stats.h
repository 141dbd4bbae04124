/* Counters in the Prometheus text format (GDRNET_STATS_FILE, every GDRNET_STATS_INTERVAL_S and at each close).
 *
 * Each device of a transport owns a struct gdr_dev_counters (relaxed atomics, bumped where the event happens) and
 * registers it; the core counts connections and bytes per transport. One thread of this module writes the file
 * (to PATH.tmp.<pid>, then rename: a node-exporter textfile collector never reads half a file), so the data path
 * never formats or writes anything. With GDRNET_STATS_FILE unset nothing runs.
 *
 * GDRNET_STATS_DIR (when GDRNET_STATS_FILE is unset): the file is DIR/gdrnet-<host>-<pid>.prom, for node-exporter's
 * textfile collector and gdrnet-top, and is removed at a clean stop instead of written a last time. Every file
 * carries the pid, the launcher's rank/job labels (gdrnet_info), when it was written and the interval, so that a
 * dead process's file is recognisable; after the per-device counters come the per-connection series (connstat.h). */
#ifndef GDRNET_STATS_H
#define GDRNET_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gdrnet/net_v8.h"

struct gdr_dev_counters {
  _Atomic uint64_t faults;        /* RDMA faults seen (completion errors, failed posts, async events) */
  _Atomic uint64_t recoveries;    /* recoveries on the same device that completed */
  _Atomic uint64_t replayed_msgs; /* messages replayed by them */
  _Atomic uint64_t replayed_bytes;
  _Atomic uint64_t recover_ns;  /* time spent recovering */
  _Atomic uint64_t failed;      /* connections that failed (NCCL got an error) */
  _Atomic uint64_t fallbacks;   /* moves of a connection to TCP */
  _Atomic uint64_t returns;     /* returns of a connection to RDMA */
  _Atomic uint64_t tcp_ns;      /* time connections spent on TCP (added when they leave it or close) */
  _Atomic uint64_t tcp_bytes;   /* bytes connections of this device carried over TCP */
  _Atomic uint64_t handed_msgs; /* messages handed over to TCP when connections moved */
  _Atomic uint64_t handed_bytes;
  _Atomic uint64_t tcp_only; /* connections that ran over TCP from the start (RDMA set-up failed) */
  _Atomic int64_t on_tcp;    /* gauge: connections over TCP now */
  _Atomic int64_t lost;      /* gauge: 1 while the device is lost (DEVICE_FATAL, not back yet) */
  _Atomic int64_t revived;   /* a lost device back (a new context) */
};

/* Per transport ("rdma", "tcp"), counted by the core. */
enum { GDR_STATS_TP_TCP = 0, GDR_STATS_TP_RDMA = 1, GDR_STATS_NTP = 2 };
struct gdr_tp_counters {
  _Atomic uint64_t conns; /* send and receive comms established */
  _Atomic int64_t open;   /* gauge: comms open now */
  _Atomic uint64_t bytes_sent, bytes_received;
  _Atomic uint64_t requests_failed; /* requests whose test() returned an error */
  /* GIN/RMA tables (plugin/gin/), by the transport under them */
  _Atomic uint64_t gin_puts;       /* puts issued (with or without a signal) */
  _Atomic uint64_t gin_signals;    /* signals issued (puts with a signal, signal-only ones) */
  _Atomic uint64_t gin_gets;       /* gets issued */
  _Atomic uint64_t gin_bytes;      /* bytes put or got by this process */
  _Atomic uint64_t gin_errors;     /* GIN comms failed (a dead peer, a failed completion) */
  _Atomic uint64_t gin_recoveries; /* one-sided RDMA QPs recovered in place */
  _Atomic uint64_t gin_replayed;   /* operations posted again by those recoveries */
  _Atomic uint64_t gin_moves;      /* peers moved to the message path (a failed recovery, GDRNET_FALLBACK=1) */
};
extern struct gdr_tp_counters gdr_stats_tp[GDR_STATS_NTP];
static inline int gdr_stats_tp_index(const char *transport_name) {
  return transport_name != NULL && transport_name[0] == 'r' ? GDR_STATS_TP_RDMA : GDR_STATS_TP_TCP;
}

/* Registers a device's counters (transport "rdma"/"tcp", its name and port) until gdr_stats_unregister(ctr).
 * Returns 0, or -1 when the table is full (the device is then left out of the file). */
int gdr_stats_register(const char *transport, const char *device, int port, const struct gdr_dev_counters *ctr);
void gdr_stats_unregister(const struct gdr_dev_counters *ctr);

/* Starts the writer thread if GDRNET_STATS_FILE is set (once; called after the knobs are loaded). */
ncclResult_t gdr_stats_start(void);
/* Asks for a write now (a comm closed); never blocks. */
void gdr_stats_poke(void);
/* Writes the file one last time and joins the thread. */
void gdr_stats_stop(void);

/* The file's text for the counters now (the writer's body; tests). Returns a malloc'd string, NULL if out of
 * memory. */
char *gdr_stats_render(void);
/* GDRNET_STATS_FILE with %p (pid) and %h (host name) expanded into out; 0, or -1 if it does not fit. */
int gdr_stats_path(const char *pattern, char *out, size_t len);

#endif /* GDRNET_STATS_H */
