/* gid_select.c - RoCE GID choice; see gid_select.h. */
#include "gid_select.h"

#include "rdma/gid.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum dr_gid_class dr_gid_classify(const uint8_t gid[16]) {
  static const uint8_t v4prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  int zero = 1;
  for (int i = 0; i < 16; i++) {
    if (gid[i] != 0) {
      zero = 0;
      break;
    }
  }
  if (zero) return DR_GID_ZERO;
  if (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80) return DR_GID_LINK_LOCAL;
  if (memcmp(gid, v4prefix, sizeof v4prefix) == 0)
    return (gid[12] | gid[13] | gid[14] | gid[15]) ? DR_GID_IPV4 : DR_GID_ZERO;
  return DR_GID_IPV6;
}

const char *dr_gid_type_name(enum dr_gid_type t) {
  switch (t) {
  case DR_GID_TYPE_V1: return "RoCE v1";
  case DR_GID_TYPE_V2: return "RoCE v2";
  default: return "type unknown";
  }
}

static void put_why(char *why, size_t whylen, const char *fmt, ...) {
  if (why == NULL || whylen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  int r = vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  if (r < 0) why[0] = '\0';
}

/* The ranking itself is the plugin's (plugin/rdma/gid.c, compiled into the doctor), so the doctor names exactly
 * the GID the plugin will use; this wrapper maps the doctor's table onto it and explains the choice. */
int dr_gid_select(const struct dr_gid_entry *tab, size_t n, enum dr_gid_family family, int roce_version, char *why,
                  size_t whylen) {
  enum { MAX_GIDS = 1024 };
  struct gdr_gid_entry tbl[MAX_GIDS];
  size_t nzero = 0, nll = 0;
  if (tab == NULL) n = 0;
  if (n > MAX_GIDS) n = MAX_GIDS;
  for (size_t i = 0; i < n; i++) {
    memcpy(tbl[i].raw, tab[i].gid, 16);
    tbl[i].type = tab[i].type == DR_GID_TYPE_V1   ? GDR_GID_TYPE_V1
                  : tab[i].type == DR_GID_TYPE_V2 ? GDR_GID_TYPE_V2
                                                  : GDR_GID_TYPE_UNKNOWN;
    tbl[i].valid = 1;
    enum dr_gid_class c = dr_gid_classify(tab[i].gid);
    nzero += c == DR_GID_ZERO;
    nll += c == DR_GID_LINK_LOCAL;
  }
  int fam = family == DR_GID_FAMILY_IPV4   ? GDR_GID_FAMILY_IPV4
            : family == DR_GID_FAMILY_IPV6 ? GDR_GID_FAMILY_IPV6
                                           : GDR_GID_FAMILY_ANY;
  int best = gdr_gid_select(tbl, (int)n, fam, roce_version);
  if (best < 0) {
    put_why(why, whylen, "no usable GID among %zu entries (%zu all-zero, %zu link-local fe80::/10)", n, nzero, nll);
    return -1;
  }
  const struct dr_gid_entry *e = &tab[best];
  int twin = 0;
  if (e->type == DR_GID_TYPE_UNKNOWN)
    for (int j = 0; j < best && !twin; j++) twin = memcmp(tab[j].gid, e->gid, 16) == 0;
  put_why(why, whylen, "%s %s GID%s", dr_gid_classify(e->gid) == DR_GID_IPV4 ? "IPv4-mapped" : "IPv6",
          dr_gid_type_name(e->type), twin ? " (repeats an earlier entry: probably its v2 twin)" : "");
  return e->index;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

int dr_gid_parse(const char *s, uint8_t out[16]) {
  if (s == NULL || out == NULL) return -1;
  while (isspace((unsigned char)*s)) s++;
  for (int g = 0; g < 8; g++) {
    unsigned v = 0;
    int nd = 0;
    while (nd < 5) {
      int h = hexval((unsigned char)*s);
      if (h < 0) break;
      v = v * 16 + (unsigned)h;
      nd++;
      s++;
    }
    if (nd == 0 || nd > 4) return -1;
    out[2 * g] = (uint8_t)(v >> 8);
    out[2 * g + 1] = (uint8_t)(v & 0xff);
    if (g < 7) {
      if (*s != ':') return -1;
      s++;
    }
  }
  while (isspace((unsigned char)*s)) s++;
  return *s == '\0' ? 0 : -1;
}

void dr_gid_format(const uint8_t gid[16], char *buf, size_t len) {
  if (buf == NULL || len == 0) return;
  int r;
  if (dr_gid_classify(gid) == DR_GID_IPV4)
    r = snprintf(buf, len, "::ffff:%u.%u.%u.%u", gid[12], gid[13], gid[14], gid[15]);
  else
    r = snprintf(buf, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", gid[0], gid[1],
                 gid[2], gid[3], gid[4], gid[5], gid[6], gid[7], gid[8], gid[9], gid[10], gid[11], gid[12], gid[13],
                 gid[14], gid[15]);
  if (r < 0) buf[0] = '\0';
}
