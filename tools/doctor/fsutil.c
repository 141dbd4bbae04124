/* fsutil.c - every file the doctor reads goes through here, under the root prefix. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doctor.h"

int dr_path(const struct dr_ctx *c, char *buf, size_t len, const char *fmt, ...) {
  int n = snprintf(buf, len, "%s", c->root);
  if (n < 0 || (size_t)n >= len) return -1;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, len - (size_t)n, fmt, ap);
  va_end(ap);
  if (m < 0 || (size_t)m >= len - (size_t)n) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

static ssize_t read_all(int fd, uint8_t *buf, size_t cap) {
  size_t got = 0;
  while (got < cap) {
    ssize_t r = read(fd, buf + got, cap - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (got > 0) break; /* e.g. EIO past the readable part of a config space */
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

ssize_t dr_read_bin(const char *full, uint8_t *buf, size_t cap) {
  int fd = open(full, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t r = read_all(fd, buf, cap);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}

char *dr_read_text(const char *full, size_t max) {
  uint8_t *buf = malloc(max + 1);
  if (buf == NULL) return NULL;
  ssize_t r = dr_read_bin(full, buf, max);
  if (r < 0) {
    int e = errno;
    free(buf);
    errno = e;
    return NULL;
  }
  size_t n = (size_t)r;
  buf[n] = '\0';
  /* text: stop at an embedded NUL, strip trailing whitespace */
  n = strlen((char *)buf);
  while (n > 0 && isspace(buf[n - 1])) buf[--n] = '\0';
  return (char *)buf;
}

char *dr_read_rel(const struct dr_ctx *c, const char *fmt, ...) {
  char rel[4096], full[8192];
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(rel, sizeof rel, fmt, ap);
  va_end(ap);
  if (m < 0 || (size_t)m >= sizeof rel || dr_path(c, full, sizeof full, "%s", rel) < 0) {
    errno = ENAMETOOLONG;
    return NULL;
  }
  return dr_read_text(full, 65536);
}

static int cmp_names(const void *a, const void *b) { return strverscmp(*(char *const *)a, *(char *const *)b); }

void dr_free_list(char **names, size_t n) {
  if (names == NULL) return;
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

ssize_t dr_list_dir(const char *full, char ***names) {
  *names = NULL;
  DIR *d = opendir(full);
  if (d == NULL) return -1;
  char **v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  errno = 0;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (n == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      char **nv = realloc(v, ncap * sizeof *nv);
      if (nv == NULL) goto oom;
      v = nv;
      cap = ncap;
    }
    if ((v[n] = strdup(de->d_name)) == NULL) goto oom;
    n++;
    errno = 0;
  }
  closedir(d);
  if (n > 1) qsort(v, n, sizeof *v, cmp_names);
  *names = v;
  return (ssize_t)n;
oom:
  closedir(d);
  dr_free_list(v, n);
  errno = ENOMEM;
  return -1;
}

bool dr_exists(const char *full) {
  struct stat st;
  return lstat(full, &st) == 0;
}

int dr_realpath_in_root(const struct dr_ctx *c, const char *full, char *out, size_t len) {
  char *rp = realpath(full, NULL);
  if (rp == NULL) return -1;
  size_t rl = strlen(c->root);
  if (rl > 0) {
    char *rootrp = realpath(c->root, NULL);
    if (rootrp == NULL) {
      free(rp);
      return -1;
    }
    size_t l = strlen(rootrp);
    int inside = strncmp(rp, rootrp, l) == 0 && (rp[l] == '/' || rp[l] == '\0');
    /* report it under the root's spelling, not the canonical one */
    char *fixed = NULL;
    if (inside && asprintf(&fixed, "%s%s", c->root, rp + l) < 0) fixed = NULL;
    free(rootrp);
    free(rp);
    if (!inside || fixed == NULL) {
      free(fixed);
      errno = EXDEV;
      return -1;
    }
    rp = fixed;
  }
  if (strlen(rp) >= len) {
    free(rp);
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(out, rp);
  free(rp);
  return 0;
}

const char *dr_unroot(const struct dr_ctx *c, const char *full) {
  size_t rl = strlen(c->root);
  if (rl && strncmp(full, c->root, rl) == 0) return full + rl;
  return full;
}

int dr_read_long(const char *full, long *v, int base) {
  char *s = dr_read_text(full, 256);
  if (s == NULL) return -1;
  char *end;
  errno = 0;
  long x = strtol(s, &end, base);
  int ok = errno == 0 && end != s;
  free(s);
  if (!ok) {
    errno = EINVAL;
    return -1;
  }
  *v = x;
  return 0;
}

bool dr_word_in(const char *text, const char *word) {
  size_t wl = strlen(word);
  for (const char *p = text; p && *p;) {
    while (*p && isspace((unsigned char)*p)) p++;
    const char *e = p;
    while (*e && !isspace((unsigned char)*e)) e++;
    if ((size_t)(e - p) == wl && strncasecmp(p, word, wl) == 0) return true;
    p = e;
  }
  return false;
}

void dr_fmt_bytes(unsigned long long v, char *buf, size_t len) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (i < 5 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    i++;
  }
  snprintf(buf, len, "%llu %s", v, u[i]);
}
