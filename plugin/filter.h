/* Device-name filters: NCCL_SOCKET_IFNAME / NCCL_IB_HCA / GDRNET_HCA syntax. A pure parser and matcher, shared
 * by the plugin (interfaces, HCAs) and by gdrnet-doctor (which names the HCAs the plugin will use). */
#ifndef GDRNET_FILTER_H
#define GDRNET_FILTER_H

#include <stddef.h>

#include "gdrnet/net_v8.h"

/* NCCL_SOCKET_IFNAME / NCCL_IB_HCA syntax: "[^][=]name[:port][,name[:port]...]".
 *   prefix match by default ("eth" matches eth0, eth1), "=" makes every entry exact, "^" excludes the entries.
 *   ":port" (HCA syntax) restricts an entry to one port; interfaces match with port = -1 (any). */
#define GDR_FILTER_MAX 32
struct gdr_filter {
  int exclude;
  int exact;
  int n;
  struct {
    char name[64];
    int port; /* -1: any */
  } e[GDR_FILTER_MAX];
};
/* ncclInvalidUsage (with why filled) on syntax errors: empty entries, too many entries, names too long, bad port. */
ncclResult_t gdr_filter_parse(const char *spec, struct gdr_filter *f, char *why, size_t whylen);
/* 1 if the name (and port, -1 = any) is selected by the filter. An empty filter (n == 0) selects everything
 * (or nothing if exclude). */
int gdr_filter_match(const struct gdr_filter *f, const char *name, int port);

#endif
