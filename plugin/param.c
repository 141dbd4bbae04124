#include "param.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"

#ifndef GDRNET_CONFIG_DOC
#error "GDRNET_CONFIG_DOC (the installed path of docs/configuration.md) must be defined"
#endif

extern char **environ;

static const struct gdr_param_info g_info[GDR_PARAM_COUNT] = {
#define GDR_PARAM(ID, KIND, DEF, MIN, MAX, AUTOV, CHOICES, ALIAS, DOC)                                                 \
  [GDR_PARAM_##ID] = {"GDRNET_" #ID, GDR_PK_##KIND, DEF, MIN, MAX, AUTOV, CHOICES, ALIAS, DOC},
#include "params.def"
#undef GDR_PARAM
};

#define GDR_PARAM_STRMAX 512

struct gdr_param_value {
  int64_t i;
  enum gdr_param_source src;
  char s[GDR_PARAM_STRMAX];
};

/* The parsed knobs. Global because every part of the plugin reads them; written only under g_lock by
 * gdr_params_load(), read lock-free after g_loaded is set (release/acquire). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_loaded; /* 0 not yet, 1 loaded */
static ncclResult_t g_load_res;
static struct gdr_param_value g_val[GDR_PARAM_COUNT];

const struct gdr_param_info *gdr_param_info(enum gdr_param_id id) {
  if ((int)id < 0 || id >= GDR_PARAM_COUNT) return NULL;
  return &g_info[id];
}

enum gdr_param_id gdr_param_lookup(const char *name) {
  for (int i = 0; i < GDR_PARAM_COUNT; i++)
    if (strcmp(g_info[i].name, name) == 0) return (enum gdr_param_id)i;
  return GDR_PARAM_COUNT;
}

/* Copies the i-th '|'-separated choice into buf; 0 if it exists. */
static int choice_at(const char *choices, int i, char *buf, size_t len) {
  const char *p = choices;
  for (int k = 0; k < i; k++) {
    p = strchr(p, '|');
    if (p == NULL) return -1;
    p++;
  }
  size_t n = strcspn(p, "|");
  if (n + 1 > len) n = len - 1;
  memcpy(buf, p, n);
  buf[n] = '\0';
  return 0;
}

void gdr_param_accepted(const struct gdr_param_info *p, char *buf, size_t len) {
  switch (p->kind) {
  case GDR_PK_INT: snprintf(buf, len, "an integer in %" PRId64 "..%" PRId64, p->min, p->max); break;
  case GDR_PK_AUTOINT:
    /* the number that reads as auto is accepted too: say so when it lies outside the range (GID_INDEX -1) */
    if (p->autov < p->min || p->autov > p->max)
      snprintf(buf, len, "auto (or %" PRId64 ") or an integer in %" PRId64 "..%" PRId64, p->autov, p->min, p->max);
    else
      snprintf(buf, len, "auto or an integer in %" PRId64 "..%" PRId64, p->min, p->max);
    break;
  case GDR_PK_SIZE:
    snprintf(buf, len, "a size in %" PRId64 "..%" PRId64 " bytes (K, M, G suffixes allowed)", p->min, p->max);
    break;
  case GDR_PK_AUTOSIZE:
    snprintf(buf, len, "auto or a size in %" PRId64 "..%" PRId64 " bytes (K, M, G suffixes allowed)", p->min, p->max);
    break;
  case GDR_PK_ENUM: {
    size_t off = (size_t)snprintf(buf, len, "one of ");
    char c[64];
    for (int i = 0; choice_at(p->choices, i, c, sizeof(c)) == 0 && off < len; i++)
      off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", c);
    break;
  }
  case GDR_PK_STR:
  default: snprintf(buf, len, "a string"); break;
  }
}

/* Strict integer: optional sign, decimal digits, optional K/M/G suffix when allow_suffix. */
static int parse_int(const char *s, int allow_suffix, int64_t *out) {
  char *end = NULL;
  long long v;
  int64_t mult = 1;

  if (*s == '\0') return -1;
  errno = 0;
  v = strtoll(s, &end, 10);
  if (errno != 0 || end == s) return -1;
  if (allow_suffix && *end != '\0') {
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1LL << 10; break;
    case 'M': mult = 1LL << 20; break;
    case 'G': mult = 1LL << 30; break;
    default: return -1;
    }
    end++;
    if (toupper((unsigned char)*end) == 'B' || toupper((unsigned char)*end) == 'I') {
      /* accept 64KB, 64KiB */
      if (toupper((unsigned char)*end) == 'I') end++;
      if (toupper((unsigned char)*end) == 'B') end++;
    }
  }
  if (*end != '\0') return -1;
  if (v > INT64_MAX / mult || v < INT64_MIN / mult) return -1;
  *out = (int64_t)v * mult;
  return 0;
}

ncclResult_t gdr_param_parse(const struct gdr_param_info *p, const char *text, int64_t *value, char *why,
                             size_t whylen) {
  char buf[GDR_PARAM_STRMAX];
  char acc[256];
  size_t n;
  const char *s = text;
  int64_t v = 0;

  while (isspace((unsigned char)*s)) s++;
  n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
  if (n >= sizeof(buf)) {
    snprintf(why, whylen, "value too long (%zu characters, at most %zu)", n, sizeof(buf) - 1);
    return ncclInvalidUsage;
  }
  memcpy(buf, s, n);
  buf[n] = '\0';
  gdr_param_accepted(p, acc, sizeof(acc));

  switch (p->kind) {
  case GDR_PK_STR: *value = 0; return ncclSuccess;
  case GDR_PK_ENUM: {
    char c[64];
    for (int i = 0; choice_at(p->choices, i, c, sizeof(c)) == 0; i++) {
      if (strcasecmp(c, buf) == 0) {
        *value = i;
        return ncclSuccess;
      }
    }
    snprintf(why, whylen, "accepted values: %s", acc);
    return ncclInvalidUsage;
  }
  case GDR_PK_AUTOINT:
  case GDR_PK_AUTOSIZE:
    if (strcasecmp(buf, "auto") == 0) {
      *value = p->autov;
      return ncclSuccess;
    }
    /* fall through */
  case GDR_PK_INT:
  case GDR_PK_SIZE:
    if (parse_int(buf, p->kind == GDR_PK_SIZE || p->kind == GDR_PK_AUTOSIZE, &v) != 0) {
      snprintf(why, whylen, "not a number; accepted values: %s", acc);
      return ncclInvalidUsage;
    }
    if (p->kind == GDR_PK_AUTOINT && v == p->autov) {
      *value = v;
      return ncclSuccess;
    }
    if (v < p->min || v > p->max) {
      snprintf(why, whylen, "out of range; accepted values: %s", acc);
      return ncclInvalidUsage;
    }
    *value = v;
    return ncclSuccess;
  }
  snprintf(why, whylen, "unknown knob kind");
  return ncclInternalError;
}

/* Stores a parsed value (the text as given, trimmed for numbers) into slot. */
static void store(struct gdr_param_value *slot, const struct gdr_param_info *p, const char *text, int64_t v,
                  enum gdr_param_source src) {
  slot->i = v;
  slot->src = src;
  if (p->kind == GDR_PK_ENUM) {
    choice_at(p->choices, (int)v, slot->s, sizeof(slot->s));
  } else {
    snprintf(slot->s, sizeof(slot->s), "%s", text);
  }
}

static size_t min3(size_t a, size_t b, size_t c) {
  size_t m = a < b ? a : b;
  return m < c ? m : c;
}

/* Edit distance (optimal string alignment: insert, delete, substitute, swap two neighbours), case-insensitive, of
 * short strings (names are < 64 characters). */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  size_t d[64][64];
  if (la > 63 || lb > 63) return (size_t)-1;
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++) {
    int ca = toupper((unsigned char)a[i - 1]);
    for (size_t j = 1; j <= lb; j++) {
      int cb = toupper((unsigned char)b[j - 1]);
      d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (ca == cb ? 0 : 1));
      if (i > 1 && j > 1 && ca == toupper((unsigned char)b[j - 2]) && toupper((unsigned char)a[i - 2]) == cb &&
          d[i - 2][j - 2] + 1 < d[i][j])
        d[i][j] = d[i - 2][j - 2] + 1;
    }
  }
  return d[la][lb];
}

/* The name without its GDRNET_/NCCL_ prefix: what a user actually chose ("QPS_PER_CONN", "IB_HCA"). */
static const char *knob_stem(const char *name) {
  if (strncasecmp(name, "GDRNET_", 7) == 0) return name + 7;
  if (strncasecmp(name, "NCCL_", 5) == 0) return name + 5;
  return name;
}

/* Compares stems, not whole names (every knob shares "GDRNET_", which made GDRNET_FOO look close to GDRNET_HCA),
 * with both the knob's own stem and its NCCL alias's (GDRNET_IB_HCA means GDRNET_HCA: NCCL spells it
 * NCCL_IB_HCA). A suggestion is made only when it is close for the name's length (a third of the stem's
 * characters wrong at most, at least one) and unambiguous (two knobs equally close: no suggestion). */
const char *gdr_param_suggest(const char *name) {
  const char *stem = knob_stem(name);
  const char *best = NULL;
  size_t bestd = (size_t)-1;
  int tie = 0;
  for (int i = 0; i < GDR_PARAM_COUNT; i++) {
    size_t d = edit_distance(stem, knob_stem(g_info[i].name));
    if (g_info[i].alias != NULL) {
      size_t da = edit_distance(stem, knob_stem(g_info[i].alias));
      if (da < d) d = da;
    }
    if (d < bestd) {
      bestd = d;
      best = g_info[i].name;
      tie = 0;
    } else if (d == bestd) {
      tie = 1;
    }
  }
  size_t len = strlen(stem);
  size_t limit = len / 3 > 1 ? len / 3 : 1;
  return (best != NULL && !tie && bestd <= limit) ? best : NULL;
}

/* GDRNET_ variables the project's tools, tests and CI read: not plugin knobs, never reported. */
int gdr_param_reserved(const char *name) {
  static const char *const prefixes[] = {"GDRNET_TEST_", "GDRNET_SKIP_", "GDRNET_PERF_", "GDRNET_DOCTOR_"};
  static const char *const names[] = {"GDRNET_PLUGIN"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
    if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(name, names[i]) == 0) return 1;
  return 0;
}

/* A source build has no installed doc: the repository's docs/configuration.md, found from where this code was loaded
 * from (the plugin in <src>/build/lib, a test in <src>/build/tests/unit): the first directory above it that holds
 * docs/configuration.md beside plugin/params.def. Searched at run time, not compiled in: the binaries carry no build
 * path (plugin/check_no_build_paths.cmake). Computed once (pthread_once), then read only. */
static pthread_once_t g_src_doc_once = PTHREAD_ONCE_INIT;
static char g_src_doc[4096];

static void find_src_doc(void) {
  Dl_info info;
  char dir[sizeof(g_src_doc) - 64];
  if (dladdr((void *)&find_src_doc, &info) == 0 || info.dli_fname == NULL || info.dli_fname[0] == '\0') return;
  if (info.dli_fname[0] == '/') {
    if (snprintf(dir, sizeof dir, "%s", info.dli_fname) >= (int)sizeof dir) return;
  } else {
    /* Relative: a library dlopened by a relative path (gdrnet-perf --plugin build/lib/...), or the main program,
     * which glibc names by its argv[0] ("build/bin/gdrnet-doctor", or "gdrnet-doctor" found through PATH). */
    char real[PATH_MAX];
    if (strchr(info.dli_fname, '/') != NULL && realpath(info.dli_fname, real) != NULL) {
      if (snprintf(dir, sizeof dir, "%s", real) >= (int)sizeof dir) return;
    } else {
      ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
      if (n <= 0 || dir[0] != '/') return;
      dir[n] = '\0';
    }
  }
  for (int up = 0; up < 5; up++) {
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) return;
    *slash = '\0';
    char mark[sizeof dir + 32];
    snprintf(mark, sizeof mark, "%s/plugin/params.def", dir);
    snprintf(g_src_doc, sizeof g_src_doc, "%s/docs/configuration.md", dir);
    if (access(mark, R_OK) == 0 && access(g_src_doc, R_OK) == 0) return;
  }
  g_src_doc[0] = '\0';
}

const char *gdr_param_config_doc(void) {
  if (access(GDRNET_CONFIG_DOC, R_OK) == 0) return GDRNET_CONFIG_DOC;
  if (pthread_once(&g_src_doc_once, find_src_doc) == 0 && g_src_doc[0] != '\0') return g_src_doc;
  return "docs/configuration.md of the libnccl-net-gdr sources (not installed at " GDRNET_CONFIG_DOC ")";
}

static void warn_unknown(void) {
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    char name[128];
    size_t n;
    if (strncmp(*e, "GDRNET_", 7) != 0) continue;
    n = strcspn(*e, "=");
    if (n >= sizeof(name)) n = sizeof(name) - 1;
    memcpy(name, *e, n);
    name[n] = '\0';
    if (gdr_param_reserved(name)) continue;
    if (gdr_param_lookup(name) != GDR_PARAM_COUNT) continue;
    const char *s = gdr_param_suggest(name);
    if (s != NULL) {
      GDR_WARN("unknown knob %s ignored; did you mean %s? (knobs: %s)", name, s, gdr_param_config_doc());
    } else {
      GDR_WARN("unknown knob %s ignored (knobs: %s)", name, gdr_param_config_doc());
    }
  }
}

/* Parses everything into vals; returns ncclInvalidUsage if any GDRNET_ value is bad. Logs as it goes. */
static ncclResult_t load_all(struct gdr_param_value *vals) {
  ncclResult_t res = ncclSuccess;
  char why[384];

  for (int i = 0; i < GDR_PARAM_COUNT; i++) {
    const struct gdr_param_info *p = &g_info[i];
    const char *env = getenv(p->name);
    const char *alias = p->alias ? getenv(p->alias) : NULL;
    int64_t v = 0;
    ncclResult_t r;

    /* The default must parse: a table mistake is a bug we want to see at once. */
    r = gdr_param_parse(p, p->def, &v, why, sizeof(why));
    if (r != ncclSuccess) {
      GDR_WARN("internal: default \"%s\" of %s is invalid (%s)", p->def, p->name, why);
      res = ncclInternalError;
      continue;
    }
    store(&vals[i], p, p->def, v, GDR_PSRC_DEFAULT);

    if (env != NULL && env[0] != '\0') {
      r = gdr_param_parse(p, env, &v, why, sizeof(why));
      if (r != ncclSuccess) {
        GDR_WARN("%s=\"%s\" is invalid: %s", p->name, env, why);
        if (res == ncclSuccess) res = r;
        continue;
      }
      store(&vals[i], p, env, v, GDR_PSRC_ENV);
      GDR_INFO(NCCL_INIT | NCCL_ENV, "%s set by environment to %s", p->name, vals[i].s);
    } else if (alias != NULL && alias[0] != '\0') {
      r = gdr_param_parse(p, alias, &v, why, sizeof(why));
      if (r != ncclSuccess) {
        GDR_WARN("%s=\"%s\" (read for %s) is invalid for this plugin: %s; using the default %s", p->alias, alias,
                 p->name, why, p->def);
        continue;
      }
      store(&vals[i], p, alias, v, GDR_PSRC_ALIAS);
      GDR_INFO(NCCL_INIT | NCCL_ENV, "%s set from %s to %s", p->name, p->alias, vals[i].s);
    }
  }
  warn_unknown();
  return res;
}

ncclResult_t gdr_params_load(void) {
  ncclResult_t res;
  if (atomic_load_explicit(&g_loaded, memory_order_acquire)) return g_load_res;
  pthread_mutex_lock(&g_lock);
  if (!atomic_load_explicit(&g_loaded, memory_order_relaxed)) {
    g_load_res = load_all(g_val);
    atomic_store_explicit(&g_loaded, 1, memory_order_release);
  }
  res = g_load_res;
  pthread_mutex_unlock(&g_lock);
  return res;
}

void gdr_params_reset(void) {
  pthread_mutex_lock(&g_lock);
  atomic_store_explicit(&g_loaded, 0, memory_order_release);
  memset(g_val, 0, sizeof(g_val));
  g_load_res = ncclSuccess;
  pthread_mutex_unlock(&g_lock);
}

int64_t gdr_param_int(enum gdr_param_id id) {
  if ((int)id < 0 || id >= GDR_PARAM_COUNT) return 0;
  gdr_params_load();
  return g_val[id].i;
}

const char *gdr_param_str(enum gdr_param_id id) {
  if ((int)id < 0 || id >= GDR_PARAM_COUNT) return "";
  gdr_params_load();
  return g_val[id].s;
}

enum gdr_param_source gdr_param_source(enum gdr_param_id id) {
  if ((int)id < 0 || id >= GDR_PARAM_COUNT) return GDR_PSRC_DEFAULT;
  gdr_params_load();
  return g_val[id].src;
}

/* Markdown cell text: '|' escaped. */
static int md_cell(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '|' && fputs("\\|", f) < 0) return -1;
    if (*s != '|' && fputc(*s, f) == EOF) return -1;
  }
  return 0;
}

/* docs/configuration.md's section on mixed clusters (what each connection of a mixed pair gets: sock.h) */
static const char mixed_doc[] =
    "\n"
    "## Mixed clusters: hosts with and without RDMA\n\n"
    "With `GDRNET_TRANSPORT=auto` (the default) on every rank, each connection takes the transport both\n"
    "of its ends can speak, decided in its handshake:\n\n"
    "- both ends have a usable RDMA device: RDMA;\n"
    "- either end has none (its RDMA driver did not load, its pod got no RDMA resource,\n"
    "  `GDRNET_IB_DISABLE=1`, `GDRNET_HCA` selects no port): TCP from the start, over the interface of\n"
    "  the handshake. The rank with RDMA keeps RDMA for every other peer; GPU buffers on its side are\n"
    "  staged through host memory, as on a connection that fell back to TCP. GIN/RMA (docs/abi.md): the\n"
    "  ranks with RDMA keep one-sided RDMA between them and use the message path to a rank without it.\n\n"
    "Each side logs one INFO line (`NCCL_DEBUG_SUBSYS=NET`) per such connection: the peer, both sides'\n"
    "setting and capabilities, and the decision, e.g. `TCP connection to 10.0.0.2:40111 (an RDMA\n"
    "listener's TCP door): mixed pair: this rank GDRNET_TRANSPORT=auto (TCP only: no usable RDMA\n"
    "device), the peer GDRNET_TRANSPORT=auto (RDMA, TCP): TCP from the start`.\n\n"
    "An explicit setting is not negotiated: `GDRNET_TRANSPORT=rdma` against a rank without RDMA (or\n"
    "against `GDRNET_TRANSPORT=tcp`) fails that connection at once on both sides, each with a WARN\n"
    "naming both settings (`here GDRNET_TRANSPORT=rdma (RDMA only), there GDRNET_TRANSPORT=auto (TCP\n"
    "only: no usable RDMA device); set GDRNET_TRANSPORT=auto where it is forced`). A rank with RDMA\n"
    "whose TCP transport is off (`GDRNET_FALLBACK=0`) cannot take peers without RDMA either, and says\n"
    "so the same way. `GDRNET_TRANSPORT=tcp` against `auto` works (TCP). Both ends must run this\n"
    "version of the plugin; an older peer refuses the other transport.\n";

int gdr_params_markdown(FILE *f) {
  int rc = 0;
  rc |=
      fputs(
          "# Configuration\n\n"
          "<!-- Generated from plugin/params.def by `gdrnet-gen-config-doc`; do not edit by hand.\n"
          "     Regenerate: cmake --build build --target gdrnet-gen-config-doc && "
          "build/plugin/gdrnet-gen-config-doc > docs/configuration.md -->\n\n"
          "libnccl-net-gdr reads these environment variables once, when NCCL initialises the plugin.\n\n"
          "- A knob set to an invalid value makes the plugin's init fail with a warning that names the knob,\n"
          "  the value and the accepted values, and what NCCL does next (2.28, `src/plugin/net.cc`):\n"
          "  - `NCCL_NET` unset (and no `netName` in the communicator's config): NCCL skips the plugin and\n"
          "    falls back to its own IB transport, else Socket, saying so only at INFO\n"
          "    (`Failed to initialize NET plugin GDR`);\n"
          "  - `NCCL_NET=GDR` (every plugin preset in nccl-tests-configs sets it): no fallback, an error: NCCL warns\n"
          "    `Failed to initialize any NET plugin` and the communicator's init fails.\n"
          "  The same holds for any other reason the init fails (no usable interface, `GDRNET_TRANSPORT=rdma`\n"
          "  without RDMA) and for a plugin NCCL cannot load at all.\n"
          "- Where NCCL's own transports have the same knob (the *NCCL alias* column), that variable is honoured\n"
          "  when the `GDRNET_` one is unset. An invalid alias value is warned about and ignored (it was meant\n"
          "  for NCCL's transport), the default is used.\n"
          "- An unknown `GDRNET_*` variable is warned about with the closest known name. Variables of the\n"
          "  project's tools and tests (`GDRNET_PLUGIN`, `GDRNET_TEST_*`, `GDRNET_SKIP_*`,\n"
          "  `GDRNET_PERF_*`, `GDRNET_DOCTOR_*`) are not knobs and are not reported.\n"
          "- Sizes accept K, M and G suffixes (binary: `64K` = 65536).\n\n",
          f) < 0;
  if (rc == 0) rc = gdr_params_markdown_table(f);
  if (rc == 0) rc = fputs(mixed_doc, f) < 0;
  return rc ? -1 : 0;
}

static int md_row(FILE *f, const struct gdr_param_info *p) {
  char acc[256];
  int rc = 0;
  gdr_param_accepted(p, acc, sizeof(acc));
  rc |= fprintf(f, "| `%s` | %s%s%s | ", p->name, p->def[0] ? "`" : "", p->def[0] ? p->def : "(unset)",
                p->def[0] ? "`" : "") < 0;
  rc |= md_cell(f, acc);
  rc |= fprintf(f, " | %s%s%s | ", p->alias ? "`" : "", p->alias ? p->alias : "", p->alias ? "`" : "") < 0;
  rc |= md_cell(f, p->doc);
  rc |= fputs(" |\n", f) < 0;
  return rc;
}

int gdr_params_markdown_table_of(FILE *f, const char *const *names) {
  int rc = fputs("| knob | default | accepted values | NCCL alias | meaning |\n"
                 "|---|---|---|---|---|\n",
                 f) < 0;
  if (names == NULL) {
    for (int i = 0; i < GDR_PARAM_COUNT && rc == 0; i++) rc |= md_row(f, &g_info[i]);
    return rc ? -1 : 0;
  }
  for (const char *const *n = names; *n != NULL && rc == 0; n++) {
    int i = 0;
    while (i < GDR_PARAM_COUNT && strcmp(g_info[i].name, *n) != 0) i++;
    if (i == GDR_PARAM_COUNT) {
      fprintf(stderr, "gdr_params_markdown_table_of: %s is not a knob of params.def\n", *n);
      return -1;
    }
    rc |= md_row(f, &g_info[i]);
  }
  return rc ? -1 : 0;
}

int gdr_params_markdown_table(FILE *f) { return gdr_params_markdown_table_of(f, NULL); }

/* ---------------------------------------------------------------------------------- shared knobs' resolvers -- */

int gdr_fallback_allowed(void) { return gdr_param_int(GDR_PARAM_FALLBACK) != 0; }

const char *gdr_fallback_off_reason(void) { return "GDRNET_FALLBACK=0"; }

int64_t gdr_connect_timeout_ms(void) { return gdr_param_int(GDR_PARAM_CONNECT_TIMEOUT_MS); }

uint64_t gdr_connect_timeout_ns(void) { return (uint64_t)gdr_connect_timeout_ms() * 1000000ull; }

int64_t gdr_recovery_timeout_ms(void) { return gdr_param_int(GDR_PARAM_RECOVERY_TIMEOUT_MS); }

uint64_t gdr_recovery_timeout_ns(void) { return (uint64_t)gdr_recovery_timeout_ms() * 1000000ull; }

int gdr_recovery_attempts(void) { return (int)gdr_param_int(GDR_PARAM_RECOVERY_ATTEMPTS); }

const char *gdr_recovery_off_reason(void) { return "GDRNET_RECOVERY_ATTEMPTS=0"; }

const char *gdr_param_set_name(enum gdr_param_id id) {
  const struct gdr_param_info *p = gdr_param_info(id);
  if (p == NULL) return "?";
  return gdr_param_source(id) == GDR_PSRC_ALIAS && p->alias != NULL ? p->alias : p->name;
}
