/* check_limits.c - what a process needs to register memory with an RDMA device:
 * RLIMIT_MEMLOCK (or CAP_IPC_LOCK), and read/write access to /dev/infiniband/uverbs*. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doctor.h"

#define CAP_IPC_LOCK_BIT 14
#define CAP_DAC_OVERRIDE_BIT 1
#define MEMLOCK_WARN (1ULL << 30)  /* 1 GiB */
#define MEMLOCK_FAIL (64ULL << 20) /* 64 MiB */

struct creds {
  bool known;
  unsigned long uid, gid;
  unsigned long groups[256];
  size_t ngroups;
};

/* Uid/Gid/Groups/CapEff from <root>/proc/self/status (the doctor's own on a live host). */
static void read_status(struct dr_ctx *c, struct creds *cr, char *err, size_t errlen) {
  memset(cr, 0, sizeof *cr);
  char *s = dr_read_rel(c, "/proc/self/status");
  if (s == NULL) {
    snprintf(err, errlen, "%s", strerror(errno));
    if (!c->fabricated) {
      cr->known = true;
      cr->uid = geteuid();
      cr->gid = getegid();
      gid_t g[256];
      int n = getgroups(256, g);
      for (int i = 0; i < n; i++) cr->groups[cr->ngroups++] = g[i];
    }
    return;
  }
  bool have_uid = false, have_gid = false;
  for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
    unsigned long a, b;
    if (sscanf(line, "Uid: %lu %lu", &a, &b) == 2) {
      cr->uid = b; /* effective */
      have_uid = true;
    } else if (sscanf(line, "Gid: %lu %lu", &a, &b) == 2) {
      cr->gid = b;
      have_gid = true;
    } else if (strncmp(line, "Groups:", 7) == 0) {
      char *p = line + 7, *end;
      while (cr->ngroups < 256) {
        unsigned long g = strtoul(p, &end, 10);
        if (end == p) break;
        cr->groups[cr->ngroups++] = g;
        p = end;
      }
    } else if (strncmp(line, "CapEff:", 7) == 0) {
      char *end;
      unsigned long long v = strtoull(line + 7, &end, 16);
      if (end != line + 7) {
        c->cap_eff = v;
        c->cap_known = true;
      }
    }
  }
  cr->known = have_uid && have_gid;
  if (!cr->known) snprintf(err, errlen, "no Uid:/Gid: lines");
  free(s);
}

/* RLIMIT_MEMLOCK soft limit: returns 0 and sets *lim (RLIM_INFINITY for unlimited), or -1. */
static int memlock_limit(struct dr_ctx *c, unsigned long long *lim, unsigned long long *hard, char *src,
                         size_t srclen) {
  if (!c->fabricated) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
      snprintf(src, srclen, "getrlimit(RLIMIT_MEMLOCK): %s", strerror(errno));
      return -1;
    }
    *lim = rl.rlim_cur == RLIM_INFINITY ? (unsigned long long)RLIM_INFINITY : (unsigned long long)rl.rlim_cur;
    *hard = rl.rlim_max == RLIM_INFINITY ? (unsigned long long)RLIM_INFINITY : (unsigned long long)rl.rlim_max;
    snprintf(src, srclen, "getrlimit(RLIMIT_MEMLOCK)");
    return 0;
  }
  char *s = dr_read_rel(c, "/proc/self/limits");
  if (s == NULL) {
    snprintf(src, srclen, "/proc/self/limits: %s", strerror(errno));
    return -1;
  }
  int rc = -1;
  snprintf(src, srclen, "/proc/self/limits: no parsable \"Max locked memory\" line");
  for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "Max locked memory", 17) != 0) continue;
    char soft[64], hd[64];
    if (sscanf(line + 17, "%63s %63s", soft, hd) != 2) break;
    unsigned long long v[2];
    const char *t[2] = {soft, hd};
    int ok = 1;
    for (int i = 0; i < 2; i++) {
      char *end;
      if (strcmp(t[i], "unlimited") == 0) {
        v[i] = (unsigned long long)RLIM_INFINITY;
        continue;
      }
      errno = 0;
      v[i] = strtoull(t[i], &end, 10);
      if (errno || end == t[i] || *end) ok = 0;
    }
    if (!ok) break;
    *lim = v[0];
    *hard = v[1];
    snprintf(src, srclen, "/proc/self/limits: Max locked memory %s %s", soft, hd);
    rc = 0;
    break;
  }
  free(s);
  return rc;
}

static void fmt_limit(unsigned long long v, char *buf, size_t len) {
  if (v == (unsigned long long)RLIM_INFINITY)
    snprintf(buf, len, "unlimited");
  else
    dr_fmt_bytes(v, buf, len);
}

static bool in_groups(const struct creds *cr, unsigned long g) {
  if (cr->gid == g) return true;
  for (size_t i = 0; i < cr->ngroups; i++)
    if (cr->groups[i] == g) return true;
  return false;
}

void dr_check_limits(struct dr_ctx *c) {
  struct dr_report *r = c->rep;
  struct creds cr;
  char serr[256] = "";
  read_status(c, &cr, serr, sizeof serr);
  bool ipc_lock = c->cap_known && (c->cap_eff >> CAP_IPC_LOCK_BIT & 1);

  /* RLIMIT_MEMLOCK */
  unsigned long long lim = 0, hard = 0;
  char src[256], ls[64], hs[64];
  bool lim_ok = memlock_limit(c, &lim, &hard, src, sizeof src) == 0;
  bool low = false;
  if (!lim_ok) {
    struct dr_finding *f = dr_add(r, "memlock", DR_WARN, "RLIMIT_MEMLOCK unknown");
    dr_evidence(r, f, "%s", src);
    dr_fix(r, f, "check `ulimit -l` in the job's environment: unlimited is recommended");
  } else {
    fmt_limit(lim, ls, sizeof ls);
    fmt_limit(hard, hs, sizeof hs);
    bool unlimited = lim == (unsigned long long)RLIM_INFINITY;
    enum dr_status st = unlimited || lim >= MEMLOCK_WARN ? DR_OK : lim >= MEMLOCK_FAIL ? DR_WARN : DR_FAIL;
    low = st != DR_OK;
    if (low && ipc_lock) st = DR_OK;
    struct dr_finding *f = dr_add(r, "memlock", st, "RLIMIT_MEMLOCK %s (hard %s)%s", ls, hs,
                                  low && ipc_lock ? ": low, but CAP_IPC_LOCK lifts it"
                                  : st == DR_FAIL ? ": too low to register NCCL's buffers"
                                  : st == DR_WARN ? ": may run out with many connections or large buffers"
                                                  : "");
    dr_evidence(r, f, "%s", src);
    dr_evidence(r, f,
                "the plugin pins its FIFOs, bounce buffers and every host buffer NCCL registers; "
                "unlimited is recommended (WARN below 1 GiB, FAIL below 64 MiB)");
    if (low && !ipc_lock) {
      dr_fix(r, f,
             "raise it: `ulimit -l unlimited` in the launching shell (hard limit permitting); "
             "/etc/security/limits.d/: `* - memlock unlimited`; systemd: LimitMEMLOCK=infinity; "
             "docker run --ulimit memlock=-1");
      dr_fix(r, f, "or grant CAP_IPC_LOCK (Kubernetes: securityContext.capabilities.add: [\"IPC_LOCK\"])");
    }
  }

  /* CAP_IPC_LOCK */
  if (!c->cap_known) {
    struct dr_finding *f = dr_add(r, "cap-ipc-lock", DR_INFO, "CAP_IPC_LOCK unknown");
    dr_evidence(r, f, "/proc/self/status: %s", serr[0] ? serr : "no CapEff line");
  } else {
    enum dr_status st = ipc_lock ? DR_OK : (lim_ok && !low) ? DR_INFO : DR_WARN;
    struct dr_finding *f = dr_add(r, "cap-ipc-lock", st, "CAP_IPC_LOCK %s%s", ipc_lock ? "effective" : "not held",
                                  ipc_lock        ? ": memory registration ignores RLIMIT_MEMLOCK"
                                  : st == DR_INFO ? " (not needed while RLIMIT_MEMLOCK is large enough)"
                                                  : ": registrations are bounded by RLIMIT_MEMLOCK");
    dr_evidence(r, f, "/proc/self/status CapEff %016llx (bit %d = %d)", c->cap_eff, CAP_IPC_LOCK_BIT, ipc_lock ? 1 : 0);
    if (st == DR_WARN)
      dr_fix(r, f,
             "Kubernetes: securityContext.capabilities.add: [\"IPC_LOCK\"]; Docker: --cap-add=IPC_LOCK; "
             "or raise RLIMIT_MEMLOCK to unlimited");
  }

  /* /dev/infiniband */
  char dir[4096];
  char **names = NULL;
  if (dr_path(c, dir, sizeof dir, "/dev/infiniband") < 0) return;
  ssize_t n = dr_list_dir(dir, &names);
  size_t nuv = 0, nbad = 0;
  bool dac = c->cap_known && (c->cap_eff >> CAP_DAC_OVERRIDE_BIT & 1);
  struct dr_finding *f = NULL;
  int lerr = errno;
  size_t present = 0;
  for (ssize_t i = 0; i < n; i++) present += strncmp(names[i], "uverbs", 6) == 0;
  if (present == 0 && c->ndevs == 0) {
    f = dr_add(r, "uverbs", DR_INFO, "no /dev/infiniband/uverbs* (consistent with no RDMA device)");
    dr_evidence(r, f, "%s: %s", dr_unroot(c, dir), n < 0 ? strerror(lerr) : "no uverbs entries");
  } else {
    f = dr_add(r, "uverbs", DR_OK, "/dev/infiniband/uverbs*");
    for (ssize_t i = 0; i < n; i++) {
      if (strncmp(names[i], "uverbs", 6) != 0) continue;
      nuv++;
      char p[8300];
      struct stat st;
      snprintf(p, sizeof p, "%s/%s", dir, names[i]);
      if (stat(p, &st) != 0) {
        nbad++;
        dr_evidence(r, f, "%s: %s", dr_unroot(c, p), strerror(errno));
        continue;
      }
      bool rw;
      const char *how;
      if (!cr.known) {
        rw = access(p, R_OK | W_OK) == 0;
        how = "access()";
      } else if (cr.uid == 0 && (dac || !c->cap_known)) {
        rw = true;
        how = "root with CAP_DAC_OVERRIDE";
      } else if (st.st_uid == cr.uid) {
        rw = (st.st_mode & 0600) == 0600;
        how = "owner bits";
      } else if (in_groups(&cr, st.st_gid)) {
        rw = (st.st_mode & 0060) == 0060;
        how = "group bits";
      } else {
        rw = (st.st_mode & 0006) == 0006;
        how = "other bits";
      }
      if (!rw && dac) {
        rw = true;
        how = "CAP_DAC_OVERRIDE";
      }
      nbad += !rw;
      dr_evidence(r, f, "%s: mode %04o uid %lu gid %lu%s -> %s for uid %lu (%s)", dr_unroot(c, p),
                  (unsigned)(st.st_mode & 07777), (unsigned long)st.st_uid, (unsigned long)st.st_gid,
                  S_ISCHR(st.st_mode) ? "" : " (not a character device)", rw ? "read/write" : "NO read/write", cr.uid,
                  how);
    }
    if (n < 0 || nuv == 0) {
      f->status = DR_FAIL;
      free(f->title);
      f->title = strdup("no /dev/infiniband/uverbs* device node: user-space verbs cannot open the RDMA device");
      if (f->title == NULL) r->oom = true;
      dr_evidence(r, f, "%s: %s", dr_unroot(c, dir), n < 0 ? strerror(lerr) : "no uverbs entries");
      dr_fix(r, f,
             "modprobe ib_uverbs; in a container pass the nodes in (Docker: --device=/dev/infiniband; "
             "Kubernetes: an RDMA device-plugin resource, or a hostPath volume for /dev/infiniband with "
             "privileges)");
    } else if (nbad) {
      f->status = DR_FAIL;
      free(f->title);
      if (asprintf(&f->title, "%zu of %zu /dev/infiniband/uverbs* not readable and writable by this user", nbad, nuv) <
          0) {
        f->title = NULL;
        r->oom = true;
      }
      dr_fix(r, f,
             "add the user to the devices' group (often rdma: usermod -aG rdma <user>), or a udev rule "
             "KERNEL==\"uverbs*\", MODE=\"0666\" (rdma-core ships 90-rdma-umad.rules/90-ib.rules)");
    } else {
      free(f->title);
      if (asprintf(&f->title, "%zu /dev/infiniband/uverbs* node%s, read/write for this user", nuv,
                   nuv == 1 ? "" : "s") < 0) {
        f->title = NULL;
        r->oom = true;
      }
    }
    if (c->ndevs > 0 && nuv > 0 && nuv < c->ndevs)
      dr_evidence(r, f, "%zu RDMA devices in sysfs but %zu uverbs nodes: some devices are not usable here", c->ndevs,
                  nuv);
    /* rdma_cm: not used by the plugin (it exchanges QP data over its own TCP socket) */
    bool cm = false;
    for (ssize_t i = 0; i < n; i++) cm |= strcmp(names[i], "rdma_cm") == 0;
    struct dr_finding *g =
        dr_add(r, "rdma-cm", cm ? DR_OK : DR_INFO, "/dev/infiniband/rdma_cm %s",
               cm ? "present" : "absent (the plugin does not need it; rdma_cm-based tools like ib_write_bw -R do)");
    if (!cm) dr_fix(r, g, "modprobe rdma_ucm (only for rdma_cm-based tools)");
  }
  dr_free_list(names, n > 0 ? (size_t)n : 0);
}
