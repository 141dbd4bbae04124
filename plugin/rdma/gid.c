/* RoCE GID selection. See gid.h. */
#include "gid.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

int gdr_gid_is_zero(const uint8_t raw[16]) {
  for (int i = 0; i < 16; i++)
    if (raw[i]) return 0;
  return 1;
}

int gdr_gid_is_link_local(const uint8_t raw[16]) { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }

int gdr_gid_is_ipv4_mapped(const uint8_t raw[16]) {
  for (int i = 0; i < 10; i++)
    if (raw[i]) return 0;
  return raw[10] == 0xff && raw[11] == 0xff;
}

int gdr_gid_is_routable(const uint8_t raw[16]) {
  if (gdr_gid_is_zero(raw) || gdr_gid_is_link_local(raw)) return 0;
  if (gdr_gid_is_ipv4_mapped(raw) && raw[12] == 0 && raw[13] == 0 && raw[14] == 0 && raw[15] == 0) return 0;
  return 1;
}

int gdr_gid_type_parse(const char *text) {
  if (text == NULL) return GDR_GID_TYPE_UNKNOWN;
  if (strncmp(text, "RoCE v2", 7) == 0) return GDR_GID_TYPE_V2;
  if (strncmp(text, "IB/RoCE v1", 10) == 0 || strncmp(text, "RoCE v1", 7) == 0) return GDR_GID_TYPE_V1;
  return GDR_GID_TYPE_UNKNOWN;
}

/* Version rank: higher is better. `guess_v2` marks an unknown-type entry that repeats an earlier GID. */
static int version_rank(int type, int guess_v2, int want) {
  if (want == 0) return 0;
  int other = (want == 2) ? GDR_GID_TYPE_V1 : GDR_GID_TYPE_V2;
  int wanted = (want == 2) ? GDR_GID_TYPE_V2 : GDR_GID_TYPE_V1;
  if (type == wanted) return 3;
  if (type == other) return 0;
  /* unknown */
  if (guess_v2) return want == 2 ? 2 : 0;
  return 1;
}

static int family_rank(const uint8_t raw[16], int family) {
  int v4 = gdr_gid_is_ipv4_mapped(raw);
  if (family == GDR_GID_FAMILY_IPV4) return v4 ? 1 : 0;
  if (family == GDR_GID_FAMILY_IPV6) return v4 ? 0 : 1;
  return 0;
}

int gdr_gid_select(const struct gdr_gid_entry *tbl, int n, int family, int roce_version) {
  int best = -1, best_score = -1;
  for (int i = 0; i < n; i++) {
    if (!tbl[i].valid || !gdr_gid_is_routable(tbl[i].raw)) continue;
    int guess_v2 = 0;
    if (tbl[i].type == GDR_GID_TYPE_UNKNOWN) {
      for (int j = 0; j < i && !guess_v2; j++)
        if (tbl[j].valid && memcmp(tbl[j].raw, tbl[i].raw, 16) == 0) guess_v2 = 1;
    }
    int score = family_rank(tbl[i].raw, family) * 16 + version_rank(tbl[i].type, guess_v2, roce_version);
    if (score > best_score) { /* strict: ties keep the lower index */
      best = i;
      best_score = score;
    }
  }
  return best;
}

void gdr_gid_format(const uint8_t raw[16], char *buf, int len) {
  if (len <= 0) return;
  if (gdr_gid_is_ipv4_mapped(raw)) {
    snprintf(buf, (size_t)len, "::ffff:%u.%u.%u.%u", raw[12], raw[13], raw[14], raw[15]);
    return;
  }
  char tmp[INET6_ADDRSTRLEN];
  if (inet_ntop(AF_INET6, raw, tmp, sizeof(tmp)) == NULL) tmp[0] = '\0';
  snprintf(buf, (size_t)len, "%s", tmp);
}
