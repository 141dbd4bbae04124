/* Loading the plugin exactly as NCCL does. */
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gn.h"

#define GN_PLUGIN_SONAME "libnccl-net-gdr.so"
#ifndef GDRNET_INSTALL_LIBDIR
#define GDRNET_INSTALL_LIBDIR "lib"
#endif

void gn_plugin_resolve(const char *explicit_path, char *out, size_t outlen) {
  if (explicit_path != NULL && *explicit_path != '\0') {
    snprintf(out, outlen, "%s", explicit_path);
    return;
  }
  const char *e = getenv("GDRNET_PLUGIN");
  if (e != NULL && *e != '\0') {
    snprintf(out, outlen, "%s", e);
    return;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash != NULL) {
      *slash = '\0';
      /* the build tree (bin/ next to lib/), then the install tree's libdir (lib/x86_64-linux-gnu...) */
      const char *libdirs[] = {"lib", GDRNET_INSTALL_LIBDIR};
      for (size_t i = 0; i < sizeof libdirs / sizeof libdirs[0]; i++) {
        char cand[PATH_MAX + 300];
        snprintf(cand, sizeof cand, "%s/../%s/%s", exe, libdirs[i], GN_PLUGIN_SONAME);
        if (access(cand, R_OK) == 0) {
          char real[PATH_MAX];
          snprintf(out, outlen, "%s", realpath(cand, real) ? real : cand);
          return;
        }
      }
    }
  }
  snprintf(out, outlen, "%s", GN_PLUGIN_SONAME);
}

int gn_plugin_open(gn_plugin_t *p, const char *path, char *err, size_t errlen) {
  return gn_plugin_open_version(p, path, 8, -1, err, errlen);
}

int gn_plugin_open_version(gn_plugin_t *p, const char *path, int version, int traffic_class, char *err,
                           size_t errlen) {
  char sym[32];
  void *table;
  memset(p, 0, sizeof *p);
  p->version = version;
  snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", version);
  snprintf(p->path, sizeof p->path, "%s", path);
  dlerror();
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (p->dl == NULL) {
    const char *e = dlerror();
    snprintf(err, errlen, "dlopen(%s) failed: %s", path, e ? e : "unknown error");
    return -1;
  }
  dlerror();
  table = dlsym(p->dl, sym);
  if (table == NULL) {
    const char *e = dlerror();
    snprintf(err, errlen, "%s: symbol %s not found: %s", path, sym, e ? e : "NULL value");
    dlclose(p->dl);
    p->dl = NULL;
    return -1;
  }
  p->net = version == 8 ? (ncclNet_v8_t *)table : gn_compat_open(table, version, traffic_class, err, errlen);
  if (p->net == NULL) {
    dlclose(p->dl);
    p->dl = NULL;
    return -1;
  }
  const ncclNet_v8_t *n = p->net;
  const char *missing = NULL;
  if (n->name == NULL) missing = "name";
  else if (!n->init) missing = "init";
  else if (!n->devices) missing = "devices";
  else if (!n->getProperties) missing = "getProperties";
  else if (!n->listen) missing = "listen";
  else if (!n->connect) missing = "connect";
  else if (!n->accept) missing = "accept";
  else if (!n->regMr) missing = "regMr";
  else if (!n->deregMr) missing = "deregMr";
  else if (!n->isend) missing = "isend";
  else if (!n->irecv) missing = "irecv";
  else if (!n->iflush) missing = "iflush";
  else if (!n->test) missing = "test";
  else if (!n->closeSend) missing = "closeSend";
  else if (!n->closeRecv) missing = "closeRecv";
  else if (!n->closeListen) missing = "closeListen";
  if (missing != NULL) {
    snprintf(err, errlen, "%s: %s.%s is NULL", path, sym, missing);
    if (version != 8) (void)gn_compat_close();
    dlclose(p->dl);
    p->dl = NULL;
    p->net = NULL;
    return -1;
  }
  return 0;
}

int gn_plugin_close(gn_plugin_t *p) {
  int rc = 0;
  if (p->version != 8 && p->net != NULL && gn_compat_close() != 0) rc = -1;
  if (p->dl != NULL && dlclose(p->dl) != 0) rc = -1;
  p->dl = NULL;
  p->net = NULL;
  return rc;
}

const char *gn_ptr_support_str(int ps) {
  static const char *tab[8] = {"none", "HOST", "CUDA", "HOST|CUDA", "DMABUF", "HOST|DMABUF", "CUDA|DMABUF",
                               "HOST|CUDA|DMABUF"};
  return tab[ps & 7];
}

void gn_props_summary(int dev, const ncclNetProperties_v8_t *pr, char *out, size_t outlen) {
  snprintf(out, outlen,
           "dev %d: %s  speed %d Mb/s  port %d  ptrSupport %s  regIsGlobal %d  maxComms %d  maxRecvs %d  "
           "latency %.1f us  guid 0x%" PRIx64 "  pci %s",
           dev, pr->name ? pr->name : "(null)", pr->speed, pr->port, gn_ptr_support_str(pr->ptrSupport),
           pr->regIsGlobal, pr->maxComms, pr->maxRecvs, (double)pr->latency, pr->guid,
           pr->pciPath ? pr->pciPath : "-");
}
