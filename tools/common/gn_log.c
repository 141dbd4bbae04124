/* An NCCL-style logger for the plugin, with optional capture for tests. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gn.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_level_override = -1;
static int g_env_level = -1;
static unsigned long g_subsys = ~0ul;
static char g_prefix[64];
static int g_capture;
static char *g_cap;
static size_t g_cap_len, g_cap_cap;
static char g_tp_name[16], g_tp_reason[512]; /* from the plugin's "using the X transport (...)" line */
static char g_tool_env[4][64], g_tool[32];   /* variables the tool set itself (gn_log_tool_env), its name */

static const struct {
  const char *name;
  unsigned long bit;
} k_subsys[] = {
    {"INIT", NCCL_INIT},
    {"COLL", NCCL_COLL},
    {"P2P", NCCL_P2P},
    {"SHM", NCCL_SHM},
    {"NET", NCCL_NET},
    {"GRAPH", NCCL_GRAPH},
    {"TUNING", NCCL_TUNING},
    {"ENV", NCCL_ENV},
    {"ALLOC", NCCL_ALLOC},
    {"CALL", NCCL_CALL},
    {"PROXY", NCCL_PROXY},
    {"NVLS", NCCL_NVLS},
    {"BOOTSTRAP", NCCL_BOOTSTRAP},
    {"REG", NCCL_REG},
    {"ALL", ~0ul},
};

static void load_env_locked(void) {
  if (g_env_level >= 0) return;
  const char *e = getenv("NCCL_DEBUG");
  int lvl = NCCL_LOG_WARN;
  if (e != NULL) {
    if (strcasecmp(e, "VERSION") == 0)
      lvl = NCCL_LOG_VERSION;
    else if (strcasecmp(e, "WARN") == 0)
      lvl = NCCL_LOG_WARN;
    else if (strcasecmp(e, "INFO") == 0)
      lvl = NCCL_LOG_INFO;
    else if (strcasecmp(e, "ABORT") == 0)
      lvl = NCCL_LOG_ABORT;
    else if (strcasecmp(e, "TRACE") == 0)
      lvl = NCCL_LOG_TRACE;
    else if (strcasecmp(e, "NONE") == 0)
      lvl = NCCL_LOG_NONE;
  }
  g_env_level = lvl;
  const char *s = getenv("NCCL_DEBUG_SUBSYS");
  if (s != NULL && *s != '\0') {
    int invert = (*s == '^');
    if (invert) s++;
    unsigned long mask = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
      for (size_t i = 0; i < sizeof k_subsys / sizeof k_subsys[0]; i++)
        if (strcasecmp(t, k_subsys[i].name) == 0) mask |= k_subsys[i].bit;
    }
    g_subsys = invert ? ~mask : mask;
  } else {
    g_subsys = ~0ul; /* tools show the plugin's lines whatever their subsystem */
  }
}

void gn_log_set_level(int level) {
  pthread_mutex_lock(&g_mu);
  g_level_override = level;
  pthread_mutex_unlock(&g_mu);
}

int gn_log_level(void) {
  pthread_mutex_lock(&g_mu);
  load_env_locked();
  int l = g_level_override >= 0 ? g_level_override : g_env_level;
  pthread_mutex_unlock(&g_mu);
  return l;
}

void gn_log_set_prefix(const char *p) {
  pthread_mutex_lock(&g_mu);
  snprintf(g_prefix, sizeof g_prefix, "%s", p ? p : "");
  pthread_mutex_unlock(&g_mu);
}

void gn_log_capture(int on) {
  pthread_mutex_lock(&g_mu);
  g_capture = on;
  if (on) {
    free(g_cap);
    g_cap = NULL;
    g_cap_len = g_cap_cap = 0;
  }
  pthread_mutex_unlock(&g_mu);
}

void gn_log_tool_env(const char *name, const char *tool) {
  pthread_mutex_lock(&g_mu);
  snprintf(g_tool, sizeof g_tool, "%s", tool);
  for (size_t i = 0; i < sizeof g_tool_env / sizeof g_tool_env[0]; i++)
    if (g_tool_env[i][0] == '\0' || strcmp(g_tool_env[i], name) == 0) {
      snprintf(g_tool_env[i], sizeof g_tool_env[i], "%s", name);
      break;
    }
  pthread_mutex_unlock(&g_mu);
}

/* "NET/GDR : NAME set by environment to V" for a NAME the tool set: "... set by <tool> to V" (msg, a string in a
 * buffer of cap bytes, rewritten in place). A line the rewrite would not fit is left as it is, never cut. */
static void note_tool_env_locked(char *msg, size_t cap) {
  static const char pre[] = "NET/GDR : ", mid[] = " set by environment to ", by[] = " set by ", to[] = " to ";
  if (strncmp(msg, pre, sizeof(pre) - 1) != 0) return;
  char *name = msg + sizeof(pre) - 1;
  for (size_t i = 0; i < sizeof g_tool_env / sizeof g_tool_env[0] && g_tool_env[i][0]; i++) {
    size_t nl = strlen(g_tool_env[i]);
    if (strncmp(name, g_tool_env[i], nl) != 0 || strncmp(name + nl, mid, sizeof(mid) - 1) != 0) continue;
    char *at = name + nl; /* where " set by environment to V" starts */
    const char *val = at + sizeof(mid) - 1;
    size_t vl = strlen(val), tl = strlen(g_tool);
    size_t head = (sizeof(by) - 1) + tl + (sizeof(to) - 1); /* " set by <tool> to " */
    if ((size_t)(at - msg) + head + vl + 1 > cap) return;
    memmove(at + head, val, vl + 1); /* V and its NUL, first: the two spans may overlap */
    memcpy(at, by, sizeof(by) - 1);
    memcpy(at + sizeof(by) - 1, g_tool, tl);
    memcpy(at + sizeof(by) - 1 + tl, to, sizeof(to) - 1);
    return;
  }
}

/* "NET/GDR : using the tcp transport (GDRNET_TRANSPORT=auto ...: why); 1 device(s): ..." */
static void note_transport_locked(const char *msg) {
  static const char pre[] = "NET/GDR : using the ";
  if (strncmp(msg, pre, sizeof(pre) - 1) != 0) return;
  const char *name = msg + sizeof(pre) - 1;
  size_t n = strcspn(name, " ");
  if (n == 0 || n >= sizeof(g_tp_name) || strncmp(name + n, " transport (", 12) != 0) return;
  memcpy(g_tp_name, name, n);
  g_tp_name[n] = '\0';
  const char *r = name + n + 12, *end = strstr(r, "); ");
  size_t rl = end ? (size_t)(end - r) : strlen(r);
  if (rl >= sizeof(g_tp_reason)) rl = sizeof(g_tp_reason) - 1;
  memcpy(g_tp_reason, r, rl);
  g_tp_reason[rl] = '\0';
}

int gn_log_transport(char *name, size_t namelen, char *reason, size_t reasonlen) {
  pthread_mutex_lock(&g_mu);
  int rc = g_tp_name[0] ? 0 : -1;
  if (name && namelen) snprintf(name, namelen, "%s", g_tp_name);
  if (reason && reasonlen) snprintf(reason, reasonlen, "%s", g_tp_reason);
  pthread_mutex_unlock(&g_mu);
  return rc;
}

char *gn_log_captured(void) {
  pthread_mutex_lock(&g_mu);
  char *r = strdup(g_cap ? g_cap : "");
  pthread_mutex_unlock(&g_mu);
  return r;
}

static void cap_append_locked(const char *s, size_t n) {
  if (g_cap_len + n + 1 > g_cap_cap) {
    size_t nc = g_cap_cap ? g_cap_cap : 4096;
    while (nc < g_cap_len + n + 1) nc *= 2;
    char *p = realloc(g_cap, nc);
    if (p == NULL) return; /* drop the line rather than crash */
    g_cap = p;
    g_cap_cap = nc;
  }
  memcpy(g_cap + g_cap_len, s, n);
  g_cap_len += n;
  g_cap[g_cap_len] = '\0';
}

void gn_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char host[64] = "?";
  (void)gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  msg[0] = '\0';
  if (fmt != NULL) vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t ml = strlen(msg);
  while (ml > 0 && msg[ml - 1] == '\n') msg[--ml] = '\0';

  pthread_mutex_lock(&g_mu);
  load_env_locked();
  if (level == NCCL_LOG_INFO) note_transport_locked(msg);
  if (level == NCCL_LOG_INFO) note_tool_env_locked(msg, sizeof msg);
  int want = g_level_override >= 0 ? g_level_override : g_env_level;
  char out[2400];
  int pid = (int)getpid(), tid = (int)syscall(SYS_gettid);
  const char *pre = g_prefix;
  const char *f = file ? file : "?";
  switch ((int)level) {
  case NCCL_LOG_WARN:
  case NCCL_LOG_ABORT:
    snprintf(out, sizeof out, "%s:%d:%d [%s] %s:%d NCCL %s %s\n", host, pid, tid, pre[0] ? pre : "0", f, line,
             level == NCCL_LOG_WARN ? "WARN" : "ABORT", msg);
    break;
  case NCCL_LOG_TRACE:
    snprintf(out, sizeof out, "%s:%d:%d [%s] %s:%d NCCL TRACE %s\n", host, pid, tid, pre[0] ? pre : "0", f, line, msg);
    break;
  case NCCL_LOG_VERSION:
    snprintf(out, sizeof out, "%s:%d:%d [%s] NCCL VERSION %s\n", host, pid, tid, pre[0] ? pre : "0", msg);
    break;
  default: snprintf(out, sizeof out, "%s:%d:%d [%s] NCCL INFO %s\n", host, pid, tid, pre[0] ? pre : "0", msg); break;
  }
  if (g_capture) cap_append_locked(out, strlen(out));
  int lv = (int)level == NCCL_LOG_ABORT ? NCCL_LOG_WARN : (int)level;
  int print = lv <= want && lv != NCCL_LOG_NONE;
  if (print && lv >= NCCL_LOG_INFO && (flags & g_subsys) == 0) print = 0;
  if (print) {
    fputs(out, stderr);
    fflush(stderr);
  }
  pthread_mutex_unlock(&g_mu);
}
