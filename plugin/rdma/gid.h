/* RoCE GID auto-selection, as a pure function over a GID table (unit-tested on fabricated tables).
 *
 * Rules, in priority order:
 *   1. never a zero GID, an IPv4-mapped 0.0.0.0, or a link-local fe80::/10 GID (not routable);
 *   2. the wanted address family first (IPv4-mapped ::ffff:a.b.c.d by default, then IPv6);
 *   3. the wanted RoCE version (v2 by default, UDP-encapsulated and routable);
 *   4. the lowest index.
 * The GID type comes from <ibdev_path>/ports/<p>/gid_attrs/types/<i> (or the verbs query when the
 * library has it).  Containers often hide those files: the type is then UNKNOWN, and a GID that
 * repeats an earlier entry of the table is taken to be the v2 twin of it (every RoCE driver lists a
 * v1 entry, then its v2 entry, for each address), which ranks below a known v2 and above an
 * unknown one. */
#ifndef GDRNET_RDMA_GID_H
#define GDRNET_RDMA_GID_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gdr_gid_type {
  GDR_GID_TYPE_UNKNOWN = 0, /* types file missing or unreadable */
  GDR_GID_TYPE_V1 = 1,      /* "IB/RoCE v1" */
  GDR_GID_TYPE_V2 = 2,      /* "RoCE v2" */
};

enum gdr_gid_family {
  GDR_GID_FAMILY_ANY = 0,
  GDR_GID_FAMILY_IPV4 = 4,
  GDR_GID_FAMILY_IPV6 = 6,
};

struct gdr_gid_entry {
  uint8_t raw[16];
  int type;  /* enum gdr_gid_type */
  int valid; /* 0: the query of this index failed; skip it */
};

/* Classifiers */
int gdr_gid_is_zero(const uint8_t raw[16]);
int gdr_gid_is_link_local(const uint8_t raw[16]);
int gdr_gid_is_ipv4_mapped(const uint8_t raw[16]);
/* Usable for RoCE: not zero, not link-local, not ::ffff:0.0.0.0 */
int gdr_gid_is_routable(const uint8_t raw[16]);

/* Parses the text of a gid_attrs/types file ("IB/RoCE v1", "RoCE v2", with or without newline). */
int gdr_gid_type_parse(const char *text);

/* Returns the index to use, or -1 when no entry qualifies.
 * family: GDR_GID_FAMILY_IPV4 (default policy), _IPV6, or _ANY (no preference).
 * roce_version: 2 (default), 1, or 0 (no preference). */
int gdr_gid_select(const struct gdr_gid_entry *tbl, int n, int family, int roce_version);

/* "v4:a.b.c.d", "v6:...", or the raw hex, for logs. */
void gdr_gid_format(const uint8_t raw[16], char *buf, int len);

#ifdef __cplusplus
}
#endif

#endif
