/* gid_select.c - RoCE GID choice; see gid_select.h. */
#include "gid_select.h"

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

/* higher is better: the wanted version 3, an unknown twin of an earlier GID 2 (when v2 is wanted),
 * unknown 1, the other version 0 */
static int version_rank(enum dr_gid_type t, int twin, int want) {
  if (want != 1 && want != 2) return 0;
  if ((int)t == want) return 3;
  if (t != DR_GID_TYPE_UNKNOWN) return 0;
  return (twin && want == 2) ? 2 : 1;
}

static void put_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put_why(char *why, size_t whylen, const char *fmt, ...) {
  if (why == NULL || whylen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  int r = vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  if (r < 0) why[0] = '\0';
}

int dr_gid_select(const struct dr_gid_entry *tab, size_t n, enum dr_gid_family family, int roce_version, char *why,
                  size_t whylen) {
  int best = -1, best_score = -1, best_twin = 0;
  size_t nzero = 0, nll = 0;
  if (tab == NULL) n = 0;
  for (size_t i = 0; i < n; i++) {
    const struct dr_gid_entry *e = &tab[i];
    enum dr_gid_class c = dr_gid_classify(e->gid);
    if (c == DR_GID_ZERO) {
      nzero++;
      continue;
    }
    if (c == DR_GID_LINK_LOCAL) {
      nll++;
      continue;
    }
    int twin = 0;
    if (e->type == DR_GID_TYPE_UNKNOWN)
      for (size_t j = 0; j < i && !twin; j++) twin = memcmp(tab[j].gid, e->gid, 16) == 0;
    int fam = family == DR_GID_FAMILY_IPV4 ? c == DR_GID_IPV4 : family == DR_GID_FAMILY_IPV6 ? c == DR_GID_IPV6 : 0;
    int score = fam * 16 + version_rank(e->type, twin, roce_version);
    if (score > best_score) { /* strict: ties keep the earlier entry */
      best = (int)i;
      best_score = score;
      best_twin = twin;
    }
  }
  if (best < 0) {
    put_why(why, whylen, "no usable GID among %zu entries (%zu all-zero, %zu link-local fe80::/10)", n, nzero, nll);
    return -1;
  }
  const struct dr_gid_entry *e = &tab[best];
  enum dr_gid_class c = dr_gid_classify(e->gid);
  put_why(why, whylen, "%s %s GID%s", c == DR_GID_IPV4 ? "IPv4-mapped" : "IPv6", dr_gid_type_name(e->type),
          best_twin && e->type == DR_GID_TYPE_UNKNOWN ? " (repeats an earlier entry: probably its v2 twin)" : "");
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
    r = snprintf(buf, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", gid[0],
                 gid[1], gid[2], gid[3], gid[4], gid[5], gid[6], gid[7], gid[8], gid[9], gid[10], gid[11], gid[12],
                 gid[13], gid[14], gid[15]);
  if (r < 0) buf[0] = '\0';
}
