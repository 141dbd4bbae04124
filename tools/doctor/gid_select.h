/* gid_select.h - choose the RoCE GID an RDMA connection should use.
 *
 * Pure function over a GID table (no I/O): the doctor feeds it what it read from
 * /sys/class/infiniband/<dev>/ports/<n>/gids and gid_attrs; a transport can feed it what
 * ibv_query_gid_table() returned. The ranking is the plugin's own (plugin/rdma/gid.c, linked in), so
 * the doctor names the GID the plugin will really use:
 *   1. skip all-zero entries (unused slots), ::ffff:0.0.0.0 and link-local fe80::/10 entries;
 *   2. prefer the wanted address family (IPv4-mapped ::ffff:a.b.c.d by default, i.e. IPv4 before IPv6);
 *   3. then the wanted RoCE version (v2 by default); an entry whose type is unknown (gid_attrs/types
 *      unreadable, as in many containers) ranks below a known match, above a known mismatch, and a
 *      little higher when it repeats an earlier GID of the table (drivers list each address as v1,
 *      then its v2 twin);
 *   4. the lowest position in the table.
 * The netdev attached to an entry is reported, not ranked (the plugin does not rank it either).
 * For InfiniBand ports none of this applies: the GID at index 0 is the port's own. */
#ifndef GDRNET_DOCTOR_GID_SELECT_H
#define GDRNET_DOCTOR_GID_SELECT_H

#include <stddef.h>
#include <stdint.h>

enum dr_gid_type {
  DR_GID_TYPE_UNKNOWN = 0, /* gid_attrs/types/<i> missing or unreadable */
  DR_GID_TYPE_V1 = 1,      /* "IB/RoCE v1" */
  DR_GID_TYPE_V2 = 2,      /* "RoCE v2" */
};

enum dr_gid_ndev {
  DR_GID_NDEV_UNKNOWN = 0, /* gid_attrs/ndevs/<i> missing or unreadable */
  DR_GID_NDEV_NONE = 1,    /* readable but empty */
  DR_GID_NDEV_PRESENT = 2,
};

struct dr_gid_entry {
  int index;
  uint8_t gid[16];
  enum dr_gid_type type;
  enum dr_gid_ndev ndev;
};

enum dr_gid_class {
  DR_GID_ZERO,       /* all zero, or ::ffff:0.0.0.0 */
  DR_GID_LINK_LOCAL, /* fe80::/10 */
  DR_GID_IPV4,       /* ::ffff:a.b.c.d */
  DR_GID_IPV6,       /* any other address */
};

/* Preferences (GDRNET_IB_ADDR_FAMILY / NCCL_IB_ADDR_FAMILY, GDRNET_IB_ROCE_VERSION / NCCL_IB_ROCE_VERSION_NUM). */
enum dr_gid_family { DR_GID_FAMILY_ANY = 0, DR_GID_FAMILY_IPV4 = 4, DR_GID_FAMILY_IPV6 = 6 };

enum dr_gid_class dr_gid_classify(const uint8_t gid[16]);

/* Returns the index (entry.index) of the GID to use, or -1 when no entry is usable.
 * family: DR_GID_FAMILY_IPV4 (the default policy), _IPV6 or _ANY; roce_version: 2 (default), 1, or 0 (any).
 * why (may be NULL) receives a one-line reason, e.g. "IPv4-mapped RoCE v2 GID" or
 * "no usable GID among 4 entries (2 all-zero, 2 link-local fe80::/10)". */
int dr_gid_select(const struct dr_gid_entry *tab, size_t n, enum dr_gid_family family, int roce_version, char *why,
                  size_t whylen);

/* Parse "fe80:0000:0000:0000:0202:c9ff:fe00:0001" (sysfs form, 8 groups of 1-4 hex digits,
 * no "::" shorthand) into 16 bytes. Returns 0, or -1 on malformed input. */
int dr_gid_parse(const char *s, uint8_t out[16]);

/* Format a GID for humans: IPv4-mapped as "::ffff:10.0.0.1", otherwise 8 groups. */
void dr_gid_format(const uint8_t gid[16], char *buf, size_t len);

const char *dr_gid_type_name(enum dr_gid_type t);

#endif
