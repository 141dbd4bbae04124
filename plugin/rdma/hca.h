/* HCA filter: NCCL_IB_HCA syntax, as a pure parser and matcher (no verbs, unit-tested).
 *
 *   ""                  every device and port
 *   "mlx5_0,mlx5_1:1"   only these; a name matches as a prefix ("mlx5_1" also takes "mlx5_10")
 *   "=mlx5_0"           exact names only
 *   "^mlx5_3"           every device but these (prefix match)
 *   "^=mlx5_3:2"        every device but exactly mlx5_3 port 2
 * An entry without ":port" matches every port of the device. */
#ifndef GDRNET_RDMA_HCA_H
#define GDRNET_RDMA_HCA_H

#ifdef __cplusplus
extern "C" {
#endif

#define GDR_HCA_MAX_ENTRIES 32
#define GDR_HCA_NAME_MAX 64

struct gdr_hca_entry {
  char name[GDR_HCA_NAME_MAX];
  int port; /* -1: any port */
};

struct gdr_hca_filter {
  int exclude; /* "^": keep what does NOT match */
  int exact;   /* "=": names compare whole, not as prefixes */
  int n;       /* 0: no filter, everything matches */
  struct gdr_hca_entry e[GDR_HCA_MAX_ENTRIES];
};

/* Parses `spec` (NULL or empty: no filter). Returns the number of entries that were ignored
 * (malformed port, too many entries, over-long names), 0 when the whole spec was understood. */
int gdr_hca_filter_parse(const char *spec, struct gdr_hca_filter *f);

/* 1 when (dev, port) passes the filter, 0 when it is filtered out. */
int gdr_hca_filter_match(const struct gdr_hca_filter *f, const char *dev, int port);

#ifdef __cplusplus
}
#endif

#endif
