/* doctor.h - gdrnet-doctor internals: findings, root-prefixed file access, the checks.
 *
 * Every file the checks read is named relative to a root ("/" on a live host, a fabricated tree in
 * tests: ROOT/sys/..., ROOT/proc/..., ROOT/dev/...). No check keeps global state: what one check
 * learns for a later one (RDMA devices, GPUs, DMA-BUF verdict...) lives in struct dr_ctx. */
#ifndef GDRNET_DOCTOR_H
#define GDRNET_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "pcicfg.h"

#ifndef DR_VERSION
#error "DR_VERSION (the project's version, from CMake) must be defined"
#endif

enum dr_status { DR_OK = 0, DR_INFO, DR_WARN, DR_FAIL };

struct dr_finding {
  char *id; /* stable, e.g. "memlock", "port/mlx5_0/1", "topo/mlx5_0/0000:03:00.0" */
  enum dr_status status;
  char *title; /* one line */
  char **evidence;
  size_t nevidence;
  char *fix; /* NULL when there is nothing to fix */
};

struct dr_report {
  struct dr_finding *f;
  size_t n, cap;
  bool oom; /* an allocation failed: the report is incomplete */
};

/* Tri-state answers. */
enum dr_tri { DR_NO = 0, DR_YES = 1, DR_UNKNOWN = 2 };

struct dr_rdma_port {
  int num;
  bool selected; /* by GDRNET_HCA / NCCL_IB_HCA (everything when unset) */
  char state[32], phys_state[32], link_layer[32], rate[64];
  bool active;
};

struct dr_rdma_dev {
  char name[64];
  char pcidir[4096]; /* realpath of <dev>/device (includes the root prefix), "" if not PCI */
  struct dr_pcipath path;
  bool is_pci;
  int numa;
  struct dr_rdma_port *ports;
  size_t nports;
  bool selected; /* some port selected by GDRNET_HCA / NCCL_IB_HCA */
};

/* GDRNET_HCA / NCCL_IB_HCA are parsed and matched by the plugin's own code (plugin/filter.c), so the doctor
 * selects exactly the HCAs the plugin will use. */
#include "filter.h"

struct dr_gpu {
  char bdf[16];
  char pcidir[4096];
  struct dr_pcipath path;
  bool have_path;
  int numa;
  char device_id[16];
};

struct dr_ctx {
  char root[4096]; /* without trailing '/'; "" for the live host */
  bool fabricated; /* --sysfs-root pointed somewhere other than "/" */
  bool probe_verbs, probe_cuda;
  struct dr_report *rep;

  /* learnt along the way */
  struct dr_rdma_dev *devs;
  size_t ndevs;
  struct dr_gpu *gpus;
  size_t ngpus;
  int verbs_devices; /* devices ibv_get_device_list() returned; -1 not probed */
  bool verbs_loaded;
  enum dr_tri verbs_dmabuf; /* ibv_reg_dmabuf_mr(fd=-1) probe */
  enum dr_tri cuda_dmabuf;  /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED on all GPUs */
  bool cuda_loaded;
  enum dr_tri peermem;
  enum dr_tri dmabuf; /* overall verdict */
  unsigned long long cap_eff;
  bool cap_known;
  char *pci_nics;   /* "0000:00:03.0 (1af4, virtio-pci), ..." network-class PCI functions, for "what else" */
  char *net_ifaces; /* "eth0 (virtio_net), ..." from /sys/class/net */
  size_t npci;      /* PCI functions seen */
  size_t npci_nics; /* of which network class (0x02xxxx) */
  /* for the outcome line (dr_outcome) */
  int plugin_ver;   /* the ncclNetPlugin_vN NCCL would take from this plugin; 0: NCCL would not load it */
  char *rdma_ports; /* "mlx5_0:1, mlx5_1:1": the ACTIVE ports the plugin would use; NULL: none */
  char *tcp_ifs;    /* "eth0": the interfaces of the plugin's handshake and TCP transport; NULL: not checked */
  bool quiet;       /* --quiet: WARN and FAIL findings only */
};

/* Append ", text" (or text) to a malloc'd string; returns 0 or -1. */
int dr_append(char **s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Basename of the <dir>/driver link ("" if none). */
void dr_driver_of(const char *dir, char *out, size_t len);
/* Scan PCI devices (GPUs, network functions) and /sys/class/net into the context. No findings. */
void dr_scan_pci(struct dr_ctx *c);
/* NCCL_NET_GDR_LEVEL on a 0 LOC .. 4 SYS scale; -1 unset or unparsable. */
int dr_gdr_level(const char *v);

/* ---- report ---- */
void dr_report_init(struct dr_report *r);
void dr_report_free(struct dr_report *r);
/* Adds a finding; returns it (NULL on allocation failure, recorded in r->oom). */
struct dr_finding *dr_add(struct dr_report *r, const char *id, enum dr_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void dr_evidence(struct dr_report *r, struct dr_finding *f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void dr_fix(struct dr_report *r, struct dr_finding *f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const struct dr_finding *dr_find(const struct dr_report *r, const char *id);
size_t dr_count(const struct dr_report *r, enum dr_status st);
const char *dr_status_tag(enum dr_status st);  /* "[ OK ]" ... */
const char *dr_status_name(enum dr_status st); /* "OK" ... */
/* One line: what NCCL would do on this host with this environment, e.g. "NCCL would load GDR v11 and run over TCP on
 * eth0, GDR off: no RDMA device". */
void dr_outcome(const struct dr_report *r, const struct dr_ctx *c, char *buf, size_t len);
int dr_print_human(const struct dr_report *r, const struct dr_ctx *c, FILE *out);
int dr_print_json(const struct dr_report *r, const struct dr_ctx *c, FILE *out);
/* JSON string literal (with quotes) of s, escaped per RFC 8259. */
int dr_json_string(FILE *out, const char *s);

/* ---- files under the root ---- */
/* buf = root + path (path starts with '/'). Returns 0, -1 if it does not fit. */
int dr_path(const struct dr_ctx *c, char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Read a whole small text file (at most max bytes), trailing whitespace removed. malloc'd; NULL and
 * errno on failure. full = a path that already includes the root. */
char *dr_read_text(const char *full, size_t max);
/* Same, path relative to the root. */
char *dr_read_rel(const struct dr_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Read up to cap bytes of a binary file; returns bytes read or -1 (errno). */
ssize_t dr_read_bin(const char *full, uint8_t *buf, size_t cap);
/* Sorted directory listing without "." and ".."; *names malloc'd; returns count or -1 (errno). */
ssize_t dr_list_dir(const char *full, char ***names);
void dr_free_list(char **names, size_t n);
bool dr_exists(const char *full);
/* realpath(full) that must stay inside the root; returns 0 or -1. */
int dr_realpath_in_root(const struct dr_ctx *c, const char *full, char *out, size_t len);
/* The path with the root prefix stripped (pointer into full). */
const char *dr_unroot(const struct dr_ctx *c, const char *full);
/* Parse an integer file; returns 0 on success. */
int dr_read_long(const char *full, long *v, int base);
/* Case-insensitive: is word (delimited by whitespace) in the text? */
bool dr_word_in(const char *text, const char *word);
/* Size in human units, e.g. "64 MiB". */
void dr_fmt_bytes(unsigned long long v, char *buf, size_t len);

/* ---- checks, in the order main() runs them ---- */
void dr_check_verbs_lib(struct dr_ctx *c);    /* rdma-core via dlopen */
void dr_check_rdma_devices(struct dr_ctx *c); /* /sys/class/infiniband: devices, ports, GIDs */
void dr_check_hca_verbs(struct dr_ctx *c);    /* the ports the plugin's own verbs loader opens, GDRNET_HCA applied */
void dr_check_limits(struct dr_ctx *c);       /* memlock, CAP_IPC_LOCK, /dev/infiniband */
void dr_check_gpus(struct dr_ctx *c);         /* GPUs on the PCI bus */
void dr_check_gdr(struct dr_ctx *c);          /* nvidia driver, peermem, DMA-BUF, CUDA */
void dr_check_iommu(struct dr_ctx *c);
void dr_check_topology(struct dr_ctx *c); /* GPU x NIC distance, ACS, relaxed ordering */
void dr_check_env(struct dr_ctx *c);      /* NCCL_* and GDRNET_* */
/* check_nccl.c, called by dr_check_env: NCCL_NET_PLUGIN dlopened as NCCL does; the plugin's interface selection
 * (after gdr_params_load; it replaces the plugin's logger). */
void dr_check_nccl_plugin(struct dr_ctx *c);
int dr_check_socket_ifname(struct dr_ctx *c); /* 1: a FAIL */

/* Run everything (main's body without option parsing). */
void dr_run_all(struct dr_ctx *c);
void dr_ctx_free(struct dr_ctx *c);

#endif
