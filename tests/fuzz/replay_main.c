/* main() of a fuzz target in a build without libFuzzer (every build but -DGDRNET_FUZZ=ON): runs each input file
 * given, or each file of each directory given (sorted by name), once through LLVMFuzzerTestOneInput. A broken
 * invariant or a sanitizer report aborts; exit 0 when every input ran, 1 on a usage or I/O error or when the
 * arguments held no input at all (a wrong corpus path must not pass). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long len;
  int rc = -1;
  if (f == NULL) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fprintf(stderr, "replay: %s: cannot size it\n", path);
    goto out;
  }
  buf = malloc(len > 0 ? (size_t)len : 1);
  if (buf == NULL || (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len)) {
    fprintf(stderr, "replay: %s: cannot read it\n", path);
    goto out;
  }
  LLVMFuzzerTestOneInput(buf, (size_t)len);
  rc = 0;
out:
  free(buf);
  fclose(f);
  return rc;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs every regular file of dir; returns how many, or -1. */
static int run_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char **names = NULL;
  size_t n = 0, cap = 0;
  int ran = 0;
  if (d == NULL) {
    fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      char **nn = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof(*names));
      if (nn == NULL) {
        ran = -1;
        break;
      }
      names = nn;
    }
    if ((names[n] = strdup(e->d_name)) == NULL) {
      ran = -1;
      break;
    }
    n++;
  }
  closedir(d);
  if (ran == 0) qsort(names, n, sizeof(*names), by_name);
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    if (ran >= 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode)) ran = run_file(path) == 0 ? ran + 1 : -1;
    free(names[i]);
  }
  free(names);
  return ran;
}

int main(int argc, char **argv) {
  int total = 0;
  LLVMFuzzerInitialize(&argc, &argv);
  for (int i = 1; i < argc; i++) {
    struct stat st;
    int k;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      return 1;
    }
    k = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) == 0 ? 1 : -1);
    if (k < 0) return 1;
    total += k;
  }
  printf("replay: %d input(s) ran\n", total);
  return total > 0 ? 0 : 1;
}
