/* HCA filter (NCCL_IB_HCA syntax). See hca.h. */
#include "hca.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_space(const char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  return s;
}

int gdr_hca_filter_parse(const char *spec, struct gdr_hca_filter *f) {
  int ignored = 0;
  memset(f, 0, sizeof(*f));
  if (spec == NULL) return 0;
  spec = skip_space(spec);
  /* "^" and "=" may come in either order, each at most once */
  for (int i = 0; i < 2; i++) {
    if (*spec == '^' && !f->exclude) {
      f->exclude = 1;
      spec = skip_space(spec + 1);
    } else if (*spec == '=' && !f->exact) {
      f->exact = 1;
      spec = skip_space(spec + 1);
    }
  }
  while (*spec) {
    const char *end = strchr(spec, ',');
    size_t len = end ? (size_t)(end - spec) : strlen(spec);
    /* trim the token */
    const char *tok = skip_space(spec);
    size_t tlen = len - (size_t)(tok - spec);
    while (tlen > 0 && isspace((unsigned char)tok[tlen - 1])) tlen--;
    if (tlen > 0) {
      const char *colon = memchr(tok, ':', tlen);
      size_t nlen = colon ? (size_t)(colon - tok) : tlen;
      int port = -1, ok = 1;
      if (colon) {
        const char *p = colon + 1;
        size_t plen = tlen - nlen - 1;
        char buf[16];
        if (plen == 0 || plen >= sizeof(buf)) {
          ok = 0;
        } else {
          memcpy(buf, p, plen);
          buf[plen] = '\0';
          char *ep;
          long v = strtol(buf, &ep, 10);
          if (*ep != '\0' || v < 0 || v > 255) ok = 0;
          else port = (int)v;
        }
      }
      if (nlen == 0 || nlen >= GDR_HCA_NAME_MAX || f->n == GDR_HCA_MAX_ENTRIES) ok = 0;
      if (ok) {
        memcpy(f->e[f->n].name, tok, nlen);
        f->e[f->n].name[nlen] = '\0';
        f->e[f->n].port = port;
        f->n++;
      } else {
        ignored++;
      }
    }
    if (end == NULL) break;
    spec = end + 1;
  }
  return ignored;
}

static int entry_match(const struct gdr_hca_entry *e, int exact, const char *dev, int port) {
  size_t n = strlen(e->name);
  if (exact) {
    if (strcmp(e->name, dev) != 0) return 0;
  } else {
    if (strncmp(e->name, dev, n) != 0) return 0;
  }
  return e->port == -1 || e->port == port;
}

int gdr_hca_filter_match(const struct gdr_hca_filter *f, const char *dev, int port) {
  if (f->n == 0) return 1;
  int hit = 0;
  for (int i = 0; i < f->n && !hit; i++) hit = entry_match(&f->e[i], f->exact, dev, port);
  return f->exclude ? !hit : hit;
}
