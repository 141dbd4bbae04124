/* report.c - findings and their two renderings (human, JSON). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "doctor.h"

void dr_report_init(struct dr_report *r) { memset(r, 0, sizeof *r); }

void dr_report_free(struct dr_report *r) {
  for (size_t i = 0; i < r->n; i++) {
    struct dr_finding *f = &r->f[i];
    free(f->id);
    free(f->title);
    free(f->fix);
    for (size_t j = 0; j < f->nevidence; j++) free(f->evidence[j]);
    free(f->evidence);
  }
  free(r->f);
  memset(r, 0, sizeof *r);
}

static char *vfmt(const char *fmt, va_list ap) {
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) return NULL;
  return s;
}

struct dr_finding *dr_add(struct dr_report *r, const char *id, enum dr_status st, const char *fmt, ...) {
  if (r->n == r->cap) {
    size_t ncap = r->cap ? r->cap * 2 : 32;
    struct dr_finding *nf = realloc(r->f, ncap * sizeof *nf);
    if (nf == NULL) {
      r->oom = true;
      return NULL;
    }
    r->f = nf;
    r->cap = ncap;
  }
  struct dr_finding *f = &r->f[r->n];
  memset(f, 0, sizeof *f);
  va_list ap;
  va_start(ap, fmt);
  f->title = vfmt(fmt, ap);
  va_end(ap);
  f->id = strdup(id);
  if (f->title == NULL || f->id == NULL) {
    free(f->title);
    free(f->id);
    r->oom = true;
    return NULL;
  }
  f->status = st;
  r->n++;
  return f;
}

void dr_evidence(struct dr_report *r, struct dr_finding *f, const char *fmt, ...) {
  if (f == NULL) return;
  char **ne = realloc(f->evidence, (f->nevidence + 1) * sizeof *ne);
  if (ne == NULL) {
    r->oom = true;
    return;
  }
  f->evidence = ne;
  va_list ap;
  va_start(ap, fmt);
  char *s = vfmt(fmt, ap);
  va_end(ap);
  if (s == NULL) {
    r->oom = true;
    return;
  }
  f->evidence[f->nevidence++] = s;
}

void dr_fix(struct dr_report *r, struct dr_finding *f, const char *fmt, ...) {
  if (f == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  char *s = vfmt(fmt, ap);
  va_end(ap);
  if (s == NULL) {
    r->oom = true;
    return;
  }
  if (f->fix == NULL) {
    f->fix = s;
    return;
  }
  /* several fixes: one per line */
  char *joined = NULL;
  if (asprintf(&joined, "%s\n%s", f->fix, s) < 0) {
    r->oom = true;
    free(s);
    return;
  }
  free(f->fix);
  free(s);
  f->fix = joined;
}

const struct dr_finding *dr_find(const struct dr_report *r, const char *id) {
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->f[i].id, id) == 0) return &r->f[i];
  return NULL;
}

size_t dr_count(const struct dr_report *r, enum dr_status st) {
  size_t n = 0;
  for (size_t i = 0; i < r->n; i++) n += r->f[i].status == st;
  return n;
}

const char *dr_status_tag(enum dr_status st) {
  switch (st) {
  case DR_OK: return "[ OK ]";
  case DR_INFO: return "[INFO]";
  case DR_WARN: return "[WARN]";
  default: return "[FAIL]";
  }
}

const char *dr_status_name(enum dr_status st) {
  switch (st) {
  case DR_OK: return "OK";
  case DR_INFO: return "INFO";
  case DR_WARN: return "WARN";
  default: return "FAIL";
  }
}

/* Print text indented, continuation lines aligned. */
static int put_indented(FILE *out, const char *lead, const char *text) {
  const char *p = text;
  int first = 1;
  while (*p || first) {
    const char *nl = strchr(p, '\n');
    int l = nl ? (int)(nl - p) : (int)strlen(p);
    if (fprintf(out, "       %s%.*s\n", first ? lead : "     ", l, p) < 0) return -1;
    first = 0;
    if (!nl) break;
    p = nl + 1;
  }
  return 0;
}

static bool failed(const struct dr_report *r, const char *id) {
  const struct dr_finding *f = dr_find(r, id);
  return f != NULL && f->status == DR_FAIL;
}

/* Why the plugin would not use RDMA (NULL: it would), from the findings of the checks, in the plugin's own order:
 * forced off, no library, no device, no port. */
static const char *why_tcp(const struct dr_report *r, const struct dr_ctx *c, char *buf, size_t len) {
  const char *v;
  if ((v = getenv("GDRNET_TRANSPORT")) && strcasecmp(v, "tcp") == 0) return "GDRNET_TRANSPORT=tcp";
  if (failed(r, "env/GDRNET_IB_DISABLE")) return "GDRNET_IB_DISABLE=1";
  if (failed(r, "env/NCCL_IB_DISABLE")) return "NCCL_IB_DISABLE=1";
  if (failed(r, "rdma-core")) return "libibverbs cannot be loaded";
  if (c->rdma_ports != NULL) return NULL;
  const struct dr_finding *h = dr_find(r, "hca");
  if (h != NULL && h->status == DR_FAIL) {
    snprintf(buf, len, "%.*s", (int)strcspn(h->title, " "), h->title); /* "NCCL_IB_HCA=mlx5_9" */
    snprintf(buf + strlen(buf), len - strlen(buf), " selects no ACTIVE RDMA port");
    return buf;
  }
  if (c->ndevs == 0 && c->verbs_devices <= 0) return "no RDMA device";
  return "no ACTIVE RDMA port";
}

void dr_outcome(const struct dr_report *r, const struct dr_ctx *c, char *buf, size_t len) {
  char tcpwhy[256], gdr[256];
  const char *net = getenv("NCCL_NET");
  const char *tw = why_tcp(r, c, tcpwhy, sizeof tcpwhy);
  const char *v;
  size_t o = 0;
#define PUT(...)                                                                                                       \
  do {                                                                                                                 \
    int w_ = snprintf(buf + o, len > o ? len - o : 0, __VA_ARGS__);                                                    \
    if (w_ > 0) o = o + (size_t)w_ < len ? o + (size_t)w_ : (len ? len - 1 : 0);                                       \
  } while (0)
  if (len == 0) return;
  buf[0] = '\0';
  if (c->plugin_ver > 0 && net != NULL && *net && strcasecmp(net, "GDR") != 0) {
    PUT("NCCL would load GDR v%d but use NCCL_NET=%s, not this plugin", c->plugin_ver, net);
    return;
  }
  if (c->plugin_ver > 0)
    PUT("NCCL would load GDR v%d and run over ", c->plugin_ver);
  else
    PUT("NCCL would not load GDR (see env/NCCL_NET_PLUGIN); loaded, it would run over ");
  if (tw != NULL)
    PUT("TCP%s%s", c->tcp_ifs ? " on " : "", c->tcp_ifs ? c->tcp_ifs : "");
  else
    PUT("RDMA on %s", c->rdma_ports);
  /* GPUDirect RDMA: the first reason it is off */
  const struct dr_finding *g = dr_find(r, "gdr");
  if (tw != NULL)
    snprintf(gdr, sizeof gdr, "GDR off: %s", tw);
  else if (c->ngpus == 0)
    snprintf(gdr, sizeof gdr, "GDR off: no NVIDIA GPU on the PCI bus");
  else if ((v = getenv("GDRNET_GDR")) && strcmp(v, "0") == 0)
    snprintf(gdr, sizeof gdr, "GDR off: GDRNET_GDR=0");
  else if (failed(r, "env/NCCL_NET_GDR_LEVEL"))
    snprintf(gdr, sizeof gdr, "GDR off: NCCL_NET_GDR_LEVEL=%s", getenv("NCCL_NET_GDR_LEVEL"));
  else if (c->ndevs == 0)
    snprintf(gdr, sizeof gdr, "GDR off: no kernel RDMA device (libibverbs lists %d without sysfs: an emulator?)",
             c->verbs_devices);
  else if (g == NULL)
    snprintf(gdr, sizeof gdr, "GDR not checked");
  else if (g->status == DR_OK)
    snprintf(gdr, sizeof gdr, "GDR on (%s)", strstr(g->title, " via ") ? strstr(g->title, " via ") + 5 : "");
  else if (g->status == DR_WARN)
    snprintf(gdr, sizeof gdr, "GDR unconfirmed: no nvidia-peermem, DMA-BUF unconfirmed");
  else
    snprintf(gdr, sizeof gdr, "GDR off: nvidia-peermem not loaded and DMA-BUF not usable");
  PUT(", %s", gdr);
#undef PUT
}

int dr_print_human(const struct dr_report *r, const struct dr_ctx *c, FILE *out) {
  if (!c->quiet && fprintf(out, "gdrnet-doctor %s  (root: %s%s)\n", DR_VERSION, c->root[0] ? c->root : "/",
                           c->fabricated ? ", fabricated tree" : "") < 0)
    return -1;
  for (size_t i = 0; i < r->n; i++) {
    const struct dr_finding *f = &r->f[i];
    if (c->quiet && f->status != DR_WARN && f->status != DR_FAIL) continue;
    if (fprintf(out, "%s %s: %s\n", dr_status_tag(f->status), f->id, f->title ? f->title : "(out of memory)") < 0)
      return -1;
    for (size_t j = 0; j < f->nevidence; j++)
      if (put_indented(out, "", f->evidence[j]) < 0) return -1;
    if (f->fix && put_indented(out, "fix: ", f->fix) < 0) return -1;
  }
  size_t nfail = dr_count(r, DR_FAIL), nwarn = dr_count(r, DR_WARN);
  if (r->oom && fprintf(out, "(out of memory: some findings are missing)\n") < 0) return -1;
  if (nfail == 0) {
    if (fprintf(out, "GPUDirect RDMA: READY") < 0) return -1;
    if (nwarn && fprintf(out, " (%zu warning%s)", nwarn, nwarn == 1 ? "" : "s") < 0) return -1;
  } else {
    if (fprintf(out, "GPUDirect RDMA: NOT READY: %zu problem%s", nfail, nfail == 1 ? "" : "s") < 0) return -1;
    if (nwarn && fprintf(out, " (and %zu warning%s)", nwarn, nwarn == 1 ? "" : "s") < 0) return -1;
  }
  char outcome[1024];
  dr_outcome(r, c, outcome, sizeof outcome);
  return fprintf(out, "\n%s\n", outcome) < 0 ? -1 : 0;
}

int dr_json_string(FILE *out, const char *s) {
  if (s == NULL) return fputs("null", out) == EOF ? -1 : 0;
  if (fputc('"', out) == EOF) return -1;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    int r;
    switch (*p) {
    case '"': r = fputs("\\\"", out); break;
    case '\\': r = fputs("\\\\", out); break;
    case '\n': r = fputs("\\n", out); break;
    case '\r': r = fputs("\\r", out); break;
    case '\t': r = fputs("\\t", out); break;
    case '\b': r = fputs("\\b", out); break;
    case '\f': r = fputs("\\f", out); break;
    default:
      if (*p < 0x20 || *p == 0x7f)
        r = fprintf(out, "\\u%04x", *p);
      else if (*p >= 0x80) {
        /* pass valid UTF-8 through; replace anything else so the document stays valid */
        int n = (*p >= 0xf0 && *p < 0xf5) ? 3 : (*p >= 0xe0) ? 2 : (*p >= 0xc2 && *p < 0xe0) ? 1 : -1;
        int ok = n > 0;
        for (int k = 1; ok && k <= n; k++)
          if ((p[k] & 0xc0) != 0x80) ok = 0;
        if (ok) {
          r = (int)fwrite(p, 1, (size_t)n + 1, out) == n + 1 ? 0 : EOF;
          p += n;
        } else {
          r = fputs("\\ufffd", out);
        }
      } else {
        r = fputc(*p, out);
      }
    }
    if (r == EOF || r < 0) return -1;
  }
  return fputc('"', out) == EOF ? -1 : 0;
}

int dr_print_json(const struct dr_report *r, const struct dr_ctx *c, FILE *out) {
  size_t nfail = dr_count(r, DR_FAIL);
  if (fprintf(out, "{\"tool\":\"gdrnet-doctor\",\"version\":\"%s\",\"root\":", DR_VERSION) < 0) return -1;
  if (dr_json_string(out, c->root[0] ? c->root : "/") < 0) return -1;
  if (fprintf(out, ",\"fabricated\":%s,\"findings\":[", c->fabricated ? "true" : "false") < 0) return -1;
  size_t shown = 0;
  for (size_t i = 0; i < r->n; i++) {
    const struct dr_finding *f = &r->f[i];
    if (c->quiet && f->status != DR_WARN && f->status != DR_FAIL) continue;
    if (fprintf(out, "%s\n{\"id\":", shown++ ? "," : "") < 0 || dr_json_string(out, f->id) < 0) return -1;
    if (fprintf(out, ",\"status\":\"%s\",\"title\":", dr_status_name(f->status)) < 0) return -1;
    if (dr_json_string(out, f->title) < 0 || fputs(",\"evidence\":[", out) == EOF) return -1;
    for (size_t j = 0; j < f->nevidence; j++)
      if ((j && fputc(',', out) == EOF) || dr_json_string(out, f->evidence[j]) < 0) return -1;
    if (fputs("],\"fix\":", out) == EOF || dr_json_string(out, f->fix) < 0 || fputc('}', out) == EOF) return -1;
  }
  if (fprintf(out,
              "\n],\"summary\":{\"ok\":%zu,\"info\":%zu,\"warn\":%zu,\"fail\":%zu},\"complete\":%s,"
              "\"ready\":%s,\"problems\":%zu,\"verdict\":",
              dr_count(r, DR_OK), dr_count(r, DR_INFO), dr_count(r, DR_WARN), nfail, r->oom ? "false" : "true",
              nfail ? "false" : "true", nfail) < 0)
    return -1;
  char verdict[96];
  if (nfail)
    snprintf(verdict, sizeof verdict, "NOT READY: %zu problem%s", nfail, nfail == 1 ? "" : "s");
  else
    snprintf(verdict, sizeof verdict, "READY");
  if (dr_json_string(out, verdict) < 0) return -1;
  char outcome[1024];
  dr_outcome(r, c, outcome, sizeof outcome);
  if (fputs(",\"outcome\":", out) == EOF || dr_json_string(out, outcome) < 0) return -1;
  return fputs("}\n", out) == EOF ? -1 : 0;
}
