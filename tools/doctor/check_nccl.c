/* check_nccl.c - what NCCL itself will do with this host's environment, tried rather than guessed:
 *
 * - env/NCCL_NET_PLUGIN: the libraries NCCL 2.28 dlopens for NCCL_NET_PLUGIN (src/plugin/net.cc and plugin_open.cc
 *   of v2.28.9), in its order and with its flags (RTLD_NOW | RTLD_LOCAL): each comma-separated entry as given, then
 *   libnccl-net-<entry>.so unless the entry is a path or a lib*.so name; "none" (or an empty value): no external
 *   plugin; unset: libnccl-net.so. Reports which file loaded and whether it is this plugin (a table named "GDR"),
 *   or each dlerror.
 * - socket-ifname: the plugin's own interface selection (plugin/sock.c, gdr_if_find) for GDRNET_SOCKET_IFNAME /
 *   NCCL_SOCKET_IFNAME: a value that selects nothing makes the plugin's init fail.
 *
 * The doctor is single-threaded: the plugin's logger cannot carry a context pointer, so the WARN it prints during
 * the interface selection is kept in a file-static buffer for the finding's evidence. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <limits.h>
#include <link.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "doctor.h"
#include "log.h"
#include "param.h"
#include "sock.h"

#ifndef DR_INSTALL_LIBDIR
#define DR_INSTALL_LIBDIR "/usr/lib"
#endif

#define PLUGIN_SONAME "libnccl-net-gdr.so"

/* ---- env/NCCL_NET_PLUGIN ---- */

struct tried {
  char name[256];      /* what was passed to dlopen */
  char path[PATH_MAX]; /* the file it loaded, "" if none */
  int ver;             /* the newest ncclNetPlugin_vN NCCL 2.28 takes from it, 0 if none */
  char result[PATH_MAX + 256];
};

/* One dlopen as NCCL does it. Returns 1 if the file is this plugin (ours), 0 if it loaded but is something else,
 * -1 if it did not load; t->result says which file and what it is, or the dlerror. */
static int try_lib(const char *name, struct tried *t) {
  snprintf(t->name, sizeof t->name, "%s", name);
  t->path[0] = '\0';
  t->ver = 0;
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(t->result, sizeof t->result, "%s", e ? e : "dlopen failed");
    return -1;
  }
  char *path = t->path;
  struct link_map *lm = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL && lm->l_name != NULL)
    snprintf(t->path, sizeof t->path, "%s", lm->l_name);
  if (path[0] == '\0') snprintf(t->path, sizeof t->path, "%s", name);
  /* NCCL 2.28 takes the newest table it knows, v11 down to v6; each starts with the name */
  int ver = 0;
  const char *tname = NULL;
  for (int v = 11; v >= 6 && ver == 0; v--) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
    const char *const *tab = dlsym(h, sym);
    if (tab != NULL) {
      ver = v;
      tname = *tab;
    }
  }
  int ours = 0;
  if (ver == 0)
    snprintf(t->result, sizeof t->result, "loaded %s, but it exports no ncclNetPlugin_v6..v11: NCCL skips it", path);
  else if ((ours = tname != NULL && strcasecmp(tname, "GDR") == 0))
    snprintf(t->result, sizeof t->result, "loaded %s: this plugin (ncclNetPlugin_v%d, name \"GDR\")", path, ver);
  else
    snprintf(t->result, sizeof t->result, "loaded %s: another NCCL net plugin (ncclNetPlugin_v%d, name \"%s\")", path,
             ver, tname ? tname : "(null)");
  (void)dlclose(h);
  t->ver = ver;
  return ver == 0 ? -1 : ours;
}

/* Where this plugin is on disk, next to the doctor (a build tree's lib/, the install's libdir), for the fix. */
static void find_plugin_near(char *out, size_t len) {
  char exe[PATH_MAX];
  out[0] = '\0';
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash == NULL) return;
  *slash = '\0';
  const char *dirs[] = {"%s/../lib/" PLUGIN_SONAME, "%s/../" DR_INSTALL_LIBDIR "/" PLUGIN_SONAME,
                        DR_INSTALL_LIBDIR "/" PLUGIN_SONAME};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    char cand[PATH_MAX + 64], real[PATH_MAX];
    if (dirs[i][0] == '%')
      snprintf(cand, sizeof cand, dirs[i], exe);
    else
      snprintf(cand, sizeof cand, "%s", dirs[i]);
    if (access(cand, R_OK) == 0 && realpath(cand, real) != NULL) {
      snprintf(out, len, "%s", real);
      return;
    }
  }
}

/* A directory the dynamic loader searches by default (/lib, /usr/lib, /usr/local/lib, their lib64/lib32 and multiarch
 * forms): putting one on LD_LIBRARY_PATH changes nothing for it and can shadow a container's own libraries. */
static int system_libdir(const char *dir) {
  const char *p = dir;
  if (strncmp(p, "/usr/local/", 11) == 0)
    p += 10;
  else if (strncmp(p, "/usr/", 5) == 0)
    p += 4;
  if (strncmp(p, "/lib", 4) != 0) return 0;
  p += 4;
  if (strncmp(p, "64", 2) == 0 || strncmp(p, "32", 2) == 0) p += 2;
  if (*p == '\0') return 1;
  if (*p != '/') return 0;
  p++;
  return strchr(p, '/') == NULL && strstr(p, "-linux-") != NULL; /* x86_64-linux-gnu, aarch64-linux-gnu, ... */
}

/* The fix when no entry loads this plugin, the shortest correct one first: NCCL_NET_PLUGIN=gdr where the loader
 * finds libnccl-net-gdr.so by name (an installed package); else the full path of the one next to the doctor (a build
 * tree; LD_LIBRARY_PATH only for a directory the loader does not search anyway); else install it. NCCL_NET=GDR in
 * each, so that NCCL fails rather than silently using its own transports when the plugin does not load. */
static void fix_not_found(struct dr_report *r, struct dr_finding *f, const char *val) {
  struct tried byname;
  if (try_lib(PLUGIN_SONAME, &byname) == 1) {
    dr_fix(r, f, "export NCCL_NET_PLUGIN=gdr NCCL_NET=GDR (NCCL then loads %s)", byname.path);
    return;
  }
  char near[PATH_MAX];
  find_plugin_near(near, sizeof near);
  if (near[0]) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", near);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    if (system_libdir(dir))
      dr_fix(r, f,
             "export NCCL_NET_PLUGIN=%s NCCL_NET=GDR (a full path: NCCL 2.27.5 and newer); or run ldconfig (as root) "
             "so that the loader finds %s by name, then export NCCL_NET_PLUGIN=gdr NCCL_NET=GDR",
             near, PLUGIN_SONAME);
    else
      dr_fix(r, f,
             "export NCCL_NET_PLUGIN=%s NCCL_NET=GDR (a full path: NCCL 2.27.5 and newer); with an older NCCL: "
             "export NCCL_NET_PLUGIN=gdr NCCL_NET=GDR LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
             near, dir);
    return;
  }
  dr_fix(r, f,
         "install libnccl-net-gdr, then export NCCL_NET_PLUGIN=gdr NCCL_NET=GDR; or build it and export "
         "NCCL_NET_PLUGIN=<build>/lib/%s NCCL_NET=GDR%s%s%s",
         PLUGIN_SONAME, val ? " (now \"" : "", val ? val : "", val ? "\")" : "");
}

static void check_net_plugin(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  struct dr_finding *f;
  const char *val = getenv("NCCL_NET_PLUGIN");
  const char *net = getenv("NCCL_NET");
  int want_gdr = net != NULL && strcasecmp(net, "GDR") == 0;
  struct tried t[16];
  size_t nt = 0;
  int found = -1; /* index in t of the first entry that is ours */
  int other = -1; /* index of another plugin that loads before ours */

  if (val != NULL && (val[0] == '\0' || strcasecmp(val, "none") == 0)) {
    f = dr_add(r, "env/NCCL_NET_PLUGIN", DR_FAIL,
               "NCCL_NET_PLUGIN=\"%s\": NCCL loads no external net plugin, so not this one%s", val,
               val[0] ? "" : " (an empty value is an empty list)");
    dr_evidence(r, f, "NCCL 2.28 reads \"none\" as no plugin; 2.27 and older look for libnccl-net-none.so");
    fix_not_found(r, f, NULL);
    return;
  }
  /* the entries, as NCCL's strtok_r(",") splits them (empty ones vanish); unset: the default library */
  char list[4096];
  snprintf(list, sizeof list, "%s", val ? val : "libnccl-net.so");
  char *save = NULL;
  for (char *e = strtok_r(list, ",", &save); e != NULL && nt + 2 <= sizeof t / sizeof t[0];
       e = strtok_r(NULL, ",", &save)) {
    int rc = try_lib(e, &t[nt++]);
    /* a path, or a lib*.so name, is tried as given only (NCCL 2.27.5+) */
    size_t el = strlen(e);
    int libso = strncmp(e, "lib", 3) == 0 && el >= 3 && strcmp(e + el - 3, ".so") == 0;
    if (rc < 0 && val != NULL && strchr(e, '/') == NULL && !libso) {
      char alt[300];
      snprintf(alt, sizeof alt, "libnccl-net-%s.so", e);
      rc = try_lib(alt, &t[nt++]);
    }
    if (rc == 1 && found < 0) found = (int)nt - 1;
    if (rc == 0 && found < 0 && other < 0) other = (int)nt - 1;
  }

  if (found >= 0) {
    enum dr_status st = DR_OK;
    c->plugin_ver = t[found].ver;
    if (other >= 0 && !want_gdr) st = DR_WARN;
    f = dr_add(r, "env/NCCL_NET_PLUGIN", st, "%s%s: NCCL loads this plugin from %s (ncclNetPlugin_v%d)",
               val ? "NCCL_NET_PLUGIN=" : "NCCL_NET_PLUGIN unset, ", val ? val : "libnccl-net.so", t[found].path,
               t[found].ver);
    if (st == DR_WARN) {
      dr_evidence(r, f, "%s comes first: without NCCL_NET=GDR, NCCL uses the first plugin whose init succeeds",
                  t[other].name);
      dr_fix(r, f, "export NCCL_NET=GDR, or list gdr first in NCCL_NET_PLUGIN");
    }
  } else {
    enum dr_status st = val != NULL || want_gdr ? DR_FAIL : DR_INFO;
    if (val == NULL)
      f = dr_add(r, "env/NCCL_NET_PLUGIN", st,
                 "NCCL_NET_PLUGIN unset: NCCL loads libnccl-net.so, which is not this plugin here%s",
                 want_gdr ? "; with NCCL_NET=GDR, NCCL's init fails (\"Failed to initialize any NET plugin\")"
                          : ": NCCL uses its own IB/Socket transports");
    else
      f = dr_add(r, "env/NCCL_NET_PLUGIN", st, "NCCL_NET_PLUGIN=%s: no library NCCL tries is this plugin%s", val,
                 want_gdr ? "; with NCCL_NET=GDR, NCCL's init fails (\"Failed to initialize any NET plugin\")"
                          : ": NCCL uses its own IB/Socket transports");
    fix_not_found(r, f, val);
  }
  for (size_t i = 0; i < nt; i++) dr_evidence(r, f, "dlopen(\"%s\", RTLD_NOW|RTLD_LOCAL): %s", t[i].name, t[i].result);
  if (val != NULL)
    dr_evidence(r, f,
                "NCCL 2.27.5+ tries each comma-separated entry as given, then libnccl-net-<entry>.so (not for a path "
                "or a lib*.so name); 2.27.0-2.27.4 try one of the two (a full path fails there); 2.26 and older take "
                "no comma list");
}

/* ---- socket-ifname ---- */

static char g_plugin_warn[1024]; /* the plugin's last WARN during gdr_if_find (see the file's comment) */

static void capture_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
                           ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level != NCCL_LOG_WARN || fmt == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_plugin_warn, sizeof g_plugin_warn, fmt, ap);
  va_end(ap);
}

/* "eth0 (10.0.0.5), lo (127.0.0.1)": the interfaces that are up with an address of the family. */
static void usable_ifaces(int family, char *buf, size_t len) {
  struct ifaddrs *list = NULL;
  size_t off = 0;
  char seen[GDR_MAX_IFS][IF_NAMESIZE];
  int n = 0;
  buf[0] = '\0';
  if (getifaddrs(&list) != 0) {
    snprintf(buf, len, "(getifaddrs failed)");
    return;
  }
  for (struct ifaddrs *a = list; a != NULL && off < len && n < GDR_MAX_IFS; a = a->ifa_next) {
    if (a->ifa_addr == NULL || !(a->ifa_flags & IFF_UP)) continue;
    int fam = a->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if ((family == GDR_SOCKET_FAMILY_INET && fam != AF_INET) || (family == GDR_SOCKET_FAMILY_INET6 && fam != AF_INET6))
      continue;
    int dup = 0;
    for (int k = 0; k < n; k++) dup |= strcmp(seen[k], a->ifa_name) == 0;
    if (dup) continue;
    snprintf(seen[n++], IF_NAMESIZE, "%s", a->ifa_name);
    char addr[INET6_ADDRSTRLEN] = "?";
    const void *src = fam == AF_INET ? (const void *)&((struct sockaddr_in *)a->ifa_addr)->sin_addr
                                     : (const void *)&((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;
    (void)inet_ntop(fam, src, addr, sizeof addr);
    int w = snprintf(buf + off, len - off, "%s%s (%s)", off ? ", " : "", a->ifa_name, addr);
    if (w < 0) break;
    off += (size_t)w;
  }
  freeifaddrs(list);
  if (buf[0] == '\0') snprintf(buf, len, "none");
}

/* Params must be loaded (gdr_params_load) by the caller, who sets its plugin logger back afterwards. Returns 1 when
 * the finding is a FAIL. */
int dr_check_socket_ifname(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  struct dr_finding *f;
  const char *spec = gdr_param_str(GDR_PARAM_SOCKET_IFNAME);
  int alias = gdr_param_source(GDR_PARAM_SOCKET_IFNAME) == GDR_PSRC_ALIAS;
  const char *knob = alias ? "NCCL_SOCKET_IFNAME" : "GDRNET_SOCKET_IFNAME";
  int family = (int)gdr_param_int(GDR_PARAM_SOCKET_FAMILY);
  struct gdr_if ifs[GDR_MAX_IFS];
  char usable[1024];
  int n = 0;

  if (spec == NULL) return 0;
  /* unset: the default order is NCCL's; only a live host's interfaces are worth a finding */
  if (spec[0] == '\0' && c->fabricated) return 0;
  g_plugin_warn[0] = '\0';
  gdr_log_init(capture_logger); /* the caller sets its own logger back */
  ncclResult_t res = gdr_if_find(spec, family, ifs, GDR_MAX_IFS, &n);
  if (res == ncclInvalidUsage) return 0; /* a malformed value: knob/<name> said so */
  usable_ifaces(family, usable, sizeof usable);
  if (res != ncclSuccess || n == 0) {
    if (spec[0])
      f = dr_add(r, "socket-ifname", DR_FAIL,
                 "%s=\"%s\" selects no interface that is up with an IP address: the plugin's init fails "
                 "(\"no IP interface is up and matches\")",
                 knob, spec);
    else
      f = dr_add(r, "socket-ifname", DR_FAIL,
                 "no interface is up with an IP address: the plugin's init fails (it needs one for its handshake)");
    if (g_plugin_warn[0])
      dr_evidence(r, f, "the plugin says: %s",
                  strncmp(g_plugin_warn, "NET/GDR : ", 10) == 0 ? g_plugin_warn + 10 : g_plugin_warn);
    dr_evidence(r, f, "interfaces up with an address here: %s", usable);
    if (alias) dr_evidence(r, f, "the plugin reads NCCL_SOCKET_IFNAME when GDRNET_SOCKET_IFNAME is unset");
    dr_fix(r, f,
           "set %s to one of the interfaces up here (%s; a prefix matches, \"=name\" is exact, \"^\" excludes), or "
           "unset it",
           knob, usable);
    return 1;
  }
  char chosen[768];
  size_t off = 0;
  chosen[0] = '\0';
  for (int i = 0; i < n && off < sizeof chosen; i++) {
    char a[INET6_ADDRSTRLEN + 16];
    (void)gdr_sockaddr_str(&ifs[i].addr, a, sizeof a);
    size_t al = strlen(a);
    if (al > 2 && strcmp(a + al - 2, ":0") == 0) a[al - 2] = '\0'; /* the port, 0 here */
    int w = snprintf(chosen + off, sizeof chosen - off, "%s%s (%s)", i ? ", " : "", ifs[i].name, a);
    if (w < 0) break;
    off += (size_t)w;
  }
  for (int i = 0; i < n; i++)
    if (dr_append(&c->tcp_ifs, "%s", ifs[i].name) < 0) r->oom = true;
  /* only loopback addresses: fine for ranks of one host, unreachable for every other host */
  int all_lo = 1;
  for (int i = 0; i < n; i++) {
    const union gdr_sockaddr *ad = &ifs[i].addr;
    all_lo &= (ad->sa.sa_family == AF_INET && (ntohl(ad->sin.sin_addr.s_addr) >> 24) == 127) ||
              (ad->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&ad->sin6.sin6_addr));
  }
  enum dr_status st = spec[0] ? DR_OK : DR_INFO;
  if (all_lo) st = DR_WARN;
  f = dr_add(r, "socket-ifname", st, "%s%s%s%s: the plugin's handshake and TCP use %s%s",
             spec[0] ? knob : "GDRNET_SOCKET_IFNAME unset", spec[0] ? "=\"" : "", spec, spec[0] ? "\"" : "", chosen,
             all_lo ? ", loopback only: ranks on other hosts cannot reach this one" : "");
  dr_evidence(r, f, "interfaces up with an address here: %s", usable);
  if (all_lo) {
    dr_evidence(r, f,
                "a peer on another host connects to the loopback address this rank advertises and fails after "
                "GDRNET_CONNECT_TIMEOUT_MS (\"the peer advertised a loopback address\")");
    dr_fix(r, f,
           "set %s to an interface that other hosts reach (up here: %s), or unset it; loopback suits single-host "
           "runs only",
           knob, usable);
  }
  return 0;
}

void dr_check_nccl_plugin(struct dr_ctx *c) { check_net_plugin(c); }
