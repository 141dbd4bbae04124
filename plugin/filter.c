#include "filter.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ncclResult_t gdr_filter_parse(const char *spec, struct gdr_filter *f, char *why, size_t whylen) {
  const char *p = spec ? spec : "";
  memset(f, 0, sizeof(*f));
  while (isspace((unsigned char)*p)) p++;
  if (*p == '^') {
    f->exclude = 1;
    p++;
  }
  if (*p == '=') {
    f->exact = 1;
    p++;
  }
  if (*p == '\0') {
    if (f->exclude || f->exact) {
      snprintf(why, whylen, "\"%s\" has no names after its prefix", spec);
      return ncclInvalidUsage;
    }
    return ncclSuccess;
  }
  for (;;) {
    size_t n = strcspn(p, ",");
    const char *tok = p;
    while (n > 0 && isspace((unsigned char)*tok)) {
      tok++;
      n--;
    }
    while (n > 0 && isspace((unsigned char)tok[n - 1])) n--;
    if (n == 0) {
      snprintf(why, whylen, "\"%s\" has an empty entry", spec);
      return ncclInvalidUsage;
    }
    if (f->n == GDR_FILTER_MAX) {
      snprintf(why, whylen, "\"%s\" has more than %d entries", spec, GDR_FILTER_MAX);
      return ncclInvalidUsage;
    }
    if (n >= sizeof(f->e[0].name)) {
      snprintf(why, whylen, "an entry of \"%s\" is longer than %zu characters", spec, sizeof(f->e[0].name) - 1);
      return ncclInvalidUsage;
    }
    memcpy(f->e[f->n].name, tok, n);
    f->e[f->n].name[n] = '\0';
    f->e[f->n].port = -1;
    char *colon = strrchr(f->e[f->n].name, ':');
    if (colon != NULL) {
      char *end = NULL;
      long port = strtol(colon + 1, &end, 10);
      if (colon == f->e[f->n].name || colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535) {
        snprintf(why, whylen, "entry \"%s\" of \"%s\": expected name or name:port", f->e[f->n].name, spec);
        return ncclInvalidUsage;
      }
      f->e[f->n].port = (int)port;
    }
    f->n++;
    p += strcspn(p, ",");
    if (*p == '\0') break;
    p++;
  }
  return ncclSuccess;
}

static int filter_entry_match(const struct gdr_filter *f, int i, const char *name, int port) {
  char ename[64];
  const char *entry = f->e[i].name;
  if (f->e[i].port >= 0) {
    if (port < 0) {
      /* An interface (no port): an entry like "eth0:1" names the alias interface "eth0:1" as a whole. */
    } else {
      size_t n = (size_t)(strrchr(entry, ':') - entry);
      memcpy(ename, entry, n);
      ename[n] = '\0';
      entry = ename;
      if (f->e[i].port != port) return 0;
    }
  }
  if (f->exact) return strcmp(name, entry) == 0;
  return strncmp(name, entry, strlen(entry)) == 0;
}

int gdr_filter_match(const struct gdr_filter *f, const char *name, int port) {
  int matched = 0;
  if (f->n == 0) return 1;
  for (int i = 0; i < f->n && !matched; i++) matched = filter_entry_match(f, i, name, port);
  return f->exclude ? !matched : matched;
}
