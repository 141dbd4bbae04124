/* End-to-end tests: run the real gdrnet-doctor against fabricated /sys, /proc, /dev trees and assert on
 * its --json output and exit status, every finding both ways.
 * usage: test_doctor_cli <gdrnet-doctor> <fake libibverbs.so.1.14.99.0> <dir with fake libcuda.so.1>
 *        <libnccl-net-gdr.so>
 *        test_doctor_cli --dlopen NAME   (what the loader finds for NAME: see probe_dlopen)
 * What the doctor reports for a plugin NAME depends on the host (an installed libnccl-net-gdr puts
 * libnccl-net-gdr.so on the loader's path): the tests ask the loader what it finds, with the doctor's environment,
 * and expect that; the "not found" cases use names no host has. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixture.h"
#include "json_mini.h"

static const char *g_doctor, *g_fakeverbs, *g_fakecuda_dir, *g_plugin;
static char g_self[4096];       /* this program, for probe_dlopen */
static char g_plugin_dir[4096]; /* LD_LIBRARY_PATH=<the plugin's directory> */

struct res {
  int rc;
  char *out, *err;
  struct jv *doc;
};

static void res_free(struct res *r) {
  free(r->out);
  free(r->err);
  json_free(r->doc);
  memset(r, 0, sizeof *r);
}

static int append(char **buf, size_t *len, const char *data, size_t n) {
  char *nb = realloc(*buf, *len + n + 1);
  if (!nb) return -1;
  memcpy(nb + *len, data, n);
  *len += n;
  nb[*len] = '\0';
  *buf = nb;
  return 0;
}

/* Run `exe` (the doctor, or this program) with argv tail `args` (NULL-terminated) and exactly the environment
 * `env` (plus PATH and any sanitizer options). */
static struct res run_exe(const char *exe, const char *const *args, const char *const *env) {
  struct res r = {.rc = -1};
  const char *argv[64];
  const char *envp[64];
  size_t na = 0, ne = 0;
  argv[na++] = exe;
  for (size_t i = 0; args && args[i] && na < 62; i++) argv[na++] = args[i];
  argv[na] = NULL;
  envp[ne++] = "PATH=/usr/bin:/bin";
  static const char *pass[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
  static char passbuf[3][512];
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(pass[i]);
    if (v) {
      snprintf(passbuf[i], sizeof passbuf[i], "%s=%s", pass[i], v);
      envp[ne++] = passbuf[i];
    }
  }
  for (size_t i = 0; env && env[i] && ne < 62; i++) envp[ne++] = env[i];
  envp[ne] = NULL;

  int po[2], pe[2];
  assert_int_equal(pipe2(po, O_CLOEXEC), 0);
  assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    execve(exe, (char *const *)argv, (char *const *)envp);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  size_t lo = 0, le = 0;
  r.out = calloc(1, 1);
  r.err = calloc(1, 1);
  struct pollfd pf[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    int n = poll(pf, 2, 20000);
    assert_true(n > 0); /* a hang is a failure */
    for (int i = 0; i < 2; i++) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      ssize_t k = read(pf[i].fd, buf, sizeof buf);
      if (k > 0) {
        assert_int_equal(append(i ? &r.err : &r.out, i ? &le : &lo, buf, (size_t)k), 0);
      } else if (k == 0 || errno != EINTR) {
        close(pf[i].fd);
        pf[i].fd = -1;
        open_fds--;
      }
    }
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

static struct res run_raw(const char *const *args, const char *const *env) { return run_exe(g_doctor, args, env); }

/* "--dlopen NAME": dlopen(NAME) as the doctor does it; prints "<file>\t<name of its newest ncclNetPlugin_v11..v6
 * table, or ->" and exits 0, or exits 1 if nothing loads. */
static int dlopen_main(const char *name) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return 1;
  struct link_map *lm = NULL;
  const char *file = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL && lm->l_name != NULL ? lm->l_name : name;
  const char *tname = "-";
  for (int v = 11; v >= 6; v--) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
    const char *const *tab = dlsym(h, sym);
    if (tab != NULL) {
      tname = *tab != NULL ? *tab : "(null)";
      break;
    }
  }
  printf("%s\t%s\n", file, tname);
  fflush(stdout);
  dlclose(h);
  return 0;
}

/* What the loader finds for dlopen(name) in a process with the environment the doctor gets for `env`: this program
 * run again with --dlopen (a process of its own: the loader reads LD_LIBRARY_PATH once, at start). Returns 1 with
 * the file and the plugin table's name ("-" if none), 0 if nothing loads. */
static int probe_dlopen(const char *name, const char *const *env, char *file, size_t filelen, char *tname,
                        size_t tlen) {
  const char *a[] = {"--dlopen", name, NULL};
  struct res r = run_exe(g_self, a, env);
  int found = 0;
  file[0] = tname[0] = '\0';
  if (r.rc == 0) {
    char *tab = strchr(r.out, '\t'), *nl = strchr(r.out, '\n');
    if (tab == NULL || nl == NULL || nl < tab) fail_msg("--dlopen %s: unexpected output \"%s\"", name, r.out);
    *tab = *nl = '\0';
    snprintf(file, filelen, "%s", r.out);
    snprintf(tname, tlen, "%s", tab + 1);
    found = 1;
  } else if (r.rc != 1) {
    fail_msg("--dlopen %s: exit status %d: %s", name, r.rc, r.err);
  }
  res_free(&r);
  return found;
}

/* --json --sysfs-root <fx> [args...]; the output must be one well-formed JSON document. */
static struct res run_json(struct fx *f, const char *const *args, const char *const *env) {
  const char *a[32] = {"--json", "--sysfs-root", f->root};
  size_t n = 3;
  for (size_t i = 0; args && args[i] && n < 31; i++) a[n++] = args[i];
  a[n] = NULL;
  struct res r = run_raw(a, env);
  size_t at = 0;
  r.doc = json_parse(r.out, &at);
  if (r.doc == NULL) fail_msg("not JSON (rc %d) at offset %zu:\n%s\nstderr:\n%s", r.rc, at, r.out, r.err);
  if (r.rc != 0 && r.rc != 1) fail_msg("exit status %d\n%s\nstderr:\n%s", r.rc, r.out, r.err);
  /* the verdict agrees with the exit status and the findings */
  const struct jv *ready = json_get(r.doc, "ready");
  assert_non_null(ready);
  assert_int_equal(ready->b, r.rc == 0);
  const char *verdict = json_str(json_get(r.doc, "verdict"));
  assert_non_null(verdict);
  assert_true(r.rc == 0 ? strcmp(verdict, "READY") == 0 : strncmp(verdict, "NOT READY: ", 11) == 0);
  return r;
}

static const struct jv *finding(const struct res *r, const char *id) {
  const struct jv *fs = json_get(r->doc, "findings");
  if (fs == NULL || fs->t != J_ARR) fail_msg("no findings array");
  for (size_t i = 0; i < fs->n; i++) {
    const struct jv *f = fs->kids[i];
    const char *fid = json_str(json_get(f, "id"));
    if (fid && strcmp(fid, id) == 0) return f;
  }
  fail_msg("no finding '%s' in:\n%s", id, r->out);
  return NULL;
}

static bool has_finding(const struct res *r, const char *id) {
  const struct jv *fs = json_get(r->doc, "findings");
  for (size_t i = 0; fs && i < fs->n; i++) {
    const char *fid = json_str(json_get(fs->kids[i], "id"));
    if (fid && strcmp(fid, id) == 0) return true;
  }
  return false;
}

static void expect(const struct res *r, const char *id, const char *status) {
  const struct jv *f = finding(r, id);
  const char *st = json_str(json_get(f, "status"));
  if (st == NULL || strcmp(st, status) != 0)
    fail_msg("finding '%s': status %s, expected %s\n%s", id, st ? st : "(none)", status, r->out);
  /* every WARN/FAIL carries a fix */
  if (strcmp(status, "WARN") == 0 || strcmp(status, "FAIL") == 0) {
    const char *fix = json_str(json_get(f, "fix"));
    if (fix == NULL || fix[0] == '\0') fail_msg("finding '%s' is %s without a fix\n%s", id, status, r->out);
  }
}

static bool field_has(const struct jv *f, const char *field, const char *needle) {
  const struct jv *v = json_get(f, field);
  if (v == NULL) return false;
  if (v->t == J_STR) return strstr(v->str, needle) != NULL;
  if (v->t == J_ARR)
    for (size_t i = 0; i < v->n; i++)
      if (json_str(v->kids[i]) && strstr(v->kids[i]->str, needle)) return true;
  return false;
}

static void expect_has(const struct res *r, const char *id, const char *field, const char *needle) {
  if (!field_has(finding(r, id), field, needle))
    fail_msg("finding '%s': %s lacks \"%s\"\n%s", id, field, needle, r->out);
}

/* ---- fixtures ---- */

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof *f);
  if (f == NULL || fx_init(f) < 0 || fx_healthy_host(f) < 0) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  fx_cleanup(f);
  free(f);
  return 0;
}

static int setup_empty(void **state) {
  struct fx *f = calloc(1, sizeof *f);
  if (f == NULL || fx_init(f) < 0) return -1;
  *state = f;
  return 0;
}

#define NIC "0000:04:00.0"
#define GPU "0000:03:00.0"

/* ---- tests ---- */

static void healthy_host_is_ready(void **state) {
  struct fx *f = *state;
  struct res r = run_json(f, NULL, NULL);
  assert_int_equal(r.rc, 0);
  expect(&r, "rdma-core", "INFO"); /* not probed under --sysfs-root */
  expect(&r, "rdma-devices", "OK");
  expect(&r, "port/mlx5_0/1", "OK");
  expect_has(&r, "port/mlx5_0/1", "title", "200 Gb/sec");
  expect_has(&r, "port/mlx5_0/1", "title", "RoCE");
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(&r, "gid/mlx5_0/1", "title", "GID index 3 (::ffff:10.0.0.5");
  expect_has(&r, "gid/mlx5_0/1", "evidence", "link-local (skipped)");
  expect(&r, "memlock", "OK");
  expect(&r, "cap-ipc-lock", "OK");
  expect(&r, "uverbs", "OK");
  expect(&r, "rdma-cm", "OK");
  expect(&r, "gpus", "OK");
  expect(&r, "nvidia-driver", "OK");
  expect_has(&r, "nvidia-driver", "title", "580.95.05 (open kernel modules)");
  expect(&r, "peermem", "OK");
  expect(&r, "dmabuf", "OK");
  expect(&r, "gdr", "OK");
  expect_has(&r, "gdr", "title", "nvidia-peermem and DMA-BUF");
  expect(&r, "iommu", "OK");
  expect(&r, "topo/mlx5_0/" GPU, "OK");
  expect_has(&r, "topo/mlx5_0/" GPU, "title", "PIX");
  expect(&r, "acs/mlx5_0/" GPU, "OK");
  expect_has(&r, "acs/mlx5_0/" GPU, "evidence", "0000:02:00.0: ACS Control 0x0000");
  expect_has(&r, "acs/mlx5_0/" GPU, "evidence", "0000:01:00.0: no ACS capability");
  expect(&r, "relaxed-ordering/mlx5_0", "OK");
  /* NCCL_NET_PLUGIN unset: libnccl-net.so, this plugin only where its default link is installed */
  char file[PATH_MAX], tname[64];
  int ours =
      probe_dlopen("libnccl-net.so", NULL, file, sizeof file, tname, sizeof tname) && strcasecmp(tname, "GDR") == 0;
  expect(&r, "env/NCCL_NET_PLUGIN", ours ? "OK" : "INFO");
  const struct jv *sum = json_get(r.doc, "summary");
  assert_non_null(sum);
  assert_int_equal((int)json_get(sum, "fail")->num, 0);
  assert_int_equal((int)json_get(sum, "warn")->num, 0);
  res_free(&r);

  /* human output: one tagged line per finding and the verdict */
  const char *a[] = {"--sysfs-root", f->root, NULL};
  r = run_raw(a, NULL);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "[ OK ] gdr: "));
  assert_non_null(strstr(r.out, "[INFO] rdma-core: "));
  assert_non_null(strstr(r.out, "\nGPUDirect RDMA: READY\n"));
  res_free(&r);
}

static void no_rdma_device(void **state) {
  struct fx *f = *state;
  /* a GPU and an Ethernet NIC without RDMA driver; nothing in /sys/class/infiniband */
  static uint8_t cfg[4096];
  fx_cfg(cfg, 0x10de, false, 0x2810, -1);
  assert_int_equal(fx_pci(f, "pci0000:00/0000:00:01.0/0000:01:00.0", 0x10de, 0x030200, 0, cfg, sizeof cfg), 0);
  assert_int_equal(fx_pci(f, "pci0000:00/0000:00:02.0/0000:05:00.0", 0x8086, 0x020000, 0, NULL, 0), 0);
  assert_int_equal(fx_mkdir(f, "sys/class/net/eth0"), 0);
  assert_int_equal(fx_symlink(f, "sys/class/net/eth0/device", "../../../devices/pci0000:00/0000:00:02.0/0000:05:00.0"),
                   0);
  assert_int_equal(fx_mkdir(f, "sys/bus/pci/drivers/ice"), 0);
  assert_int_equal(
      fx_symlink(f, "sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0/driver", "../../../../bus/pci/drivers/ice"), 0);
  assert_int_equal(fx_memlock(f, "unlimited", "unlimited"), 0);
  struct res r = run_json(f, NULL, NULL);
  assert_int_equal(r.rc, 1);
  expect(&r, "rdma-devices", "FAIL");
  expect_has(&r, "rdma-devices", "title", "no RDMA device (kernel shows no /sys/class/infiniband entries)");
  expect_has(&r, "rdma-devices", "title", "1 NVIDIA GPU,");
  expect_has(&r, "rdma-devices", "title", "eth0 (ice)");
  expect_has(&r, "rdma-devices", "evidence", "0000:05:00.0 (vendor 0x8086, class 0x020000, driver ice)");
  expect_has(&r, "rdma-devices", "fix", "modprobe mlx5_ib");
  expect_has(&r, "rdma-devices", "fix", "/dev/infiniband");
  expect(&r, "uverbs", "INFO");
  expect(&r, "gpus", "OK");
  expect(&r, "nvidia-driver", "FAIL"); /* a GPU but no driver */
  expect(&r, "peermem", "INFO");       /* follows from the driver: not counted twice */
  expect(&r, "dmabuf", "INFO");
  expect(&r, "gdr", "FAIL");
  assert_false(has_finding(&r, "topo/mlx5_0/" GPU));
  res_free(&r);

  /* a bare, empty tree: still a report, never a crash */
  struct fx e;
  assert_int_equal(fx_init(&e), 0);
  r = run_json(&e, NULL, NULL);
  assert_int_equal(r.rc, 1);
  expect(&r, "rdma-devices", "FAIL");
  expect_has(&r, "rdma-devices", "title", "0 NVIDIA GPUs");
  expect(&r, "gpus", "FAIL");
  expect(&r, "memlock", "WARN"); /* /proc/self/limits missing: unknown */
  res_free(&r);
  fx_cleanup(&e);
}

static void memlock_levels(void **state) {
  struct fx *f = *state;
  assert_int_equal(fx_status(f, 4242, 4242, 0), 0); /* no capabilities */
  assert_int_equal(fx_memlock(f, "536870912", "unlimited"), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "memlock", "WARN");
  expect_has(&r, "memlock", "title", "512 MiB");
  expect(&r, "cap-ipc-lock", "WARN");
  assert_int_equal(r.rc, 0); /* warnings only */
  res_free(&r);

  assert_int_equal(fx_memlock(f, "8388608", "8388608"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "memlock", "FAIL");
  expect_has(&r, "memlock", "fix", "ulimit -l unlimited");
  expect_has(&r, "memlock", "fix", "IPC_LOCK");
  assert_int_equal(r.rc, 1);
  res_free(&r);

  /* CAP_IPC_LOCK lifts the limit */
  assert_int_equal(fx_status(f, 4242, 4242, 1ULL << 14), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "memlock", "OK");
  expect_has(&r, "memlock", "title", "CAP_IPC_LOCK lifts it");
  expect(&r, "cap-ipc-lock", "OK");
  assert_int_equal(r.rc, 0);
  res_free(&r);

  /* unlimited without the capability: fine, capability not needed */
  assert_int_equal(fx_status(f, 4242, 4242, 0), 0);
  assert_int_equal(fx_memlock(f, "unlimited", "unlimited"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "memlock", "OK");
  expect(&r, "cap-ipc-lock", "INFO");
  res_free(&r);

  /* garbage limits file */
  assert_int_equal(fx_write(f, "proc/self/limits", "Max locked memory  lots  more  bytes\n\x01\x02"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "memlock", "WARN");
  expect_has(&r, "memlock", "title", "unknown");
  res_free(&r);
}

static void uverbs_permissions(void **state) {
  struct fx *f = *state;
  assert_int_equal(fx_chmod(f, "dev/infiniband/uverbs0", 0600), 0); /* owned by the test's uid, not 4242 */
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "uverbs", "FAIL");
  expect_has(&r, "uverbs", "evidence", "NO read/write for uid 4242");
  expect_has(&r, "uverbs", "fix", "udev");
  assert_int_equal(r.rc, 1);
  res_free(&r);

  /* root with CAP_DAC_OVERRIDE opens anything */
  assert_int_equal(fx_status(f, 0, 0, (1ULL << 14) | (1ULL << 1)), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "uverbs", "OK");
  res_free(&r);

  assert_int_equal(fx_unlink(f, "dev/infiniband/uverbs0"), 0);
  assert_int_equal(fx_unlink(f, "dev/infiniband/rdma_cm"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "uverbs", "FAIL");
  expect_has(&r, "uverbs", "title", "no /dev/infiniband/uverbs*");
  expect(&r, "rdma-cm", "INFO");
  res_free(&r);
}

static void port_down(void **state) {
  struct fx *f = *state;
  assert_int_equal(fx_port(f, "mlx5_0", 1, "1: DOWN", "3: Disabled", "Ethernet", "10 Gb/sec (1X QDR)"), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "port/mlx5_0/1", "WARN");
  expect_has(&r, "port/mlx5_0/1", "title", "DOWN");
  expect(&r, "rdma-devices", "FAIL");
  expect_has(&r, "rdma-devices", "title", "no ACTIVE port");
  assert_int_equal(r.rc, 1);
  res_free(&r);

  /* InfiniBand port in INIT: no subnet manager */
  assert_int_equal(fx_port(f, "mlx5_0", 1, "2: INIT", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "port/mlx5_0/1", "WARN");
  expect_has(&r, "port/mlx5_0/1", "fix", "opensm");
  expect(&r, "gid/mlx5_0/1", "WARN"); /* LID 0 */
  res_free(&r);

  /* InfiniBand ACTIVE with a LID */
  assert_int_equal(fx_port(f, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)"), 0);
  assert_int_equal(fx_write(f, "sys/class/infiniband/mlx5_0/ports/1/lid", "0x1a\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "port/mlx5_0/1", "OK");
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(&r, "gid/mlx5_0/1", "title", "InfiniBand");
  assert_int_equal(r.rc, 0);
  res_free(&r);
}

#define IBP "sys/class/infiniband/mlx5_0/ports/1/"
static void gid_choices(void **state) {
  struct fx *f = *state;
  /* without IPv4 entries: the IPv6 RoCE v2 one */
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 2, "0000:0000:0000:0000:0000:0000:0000:0000", NULL, NULL), 0);
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 3, "0000:0000:0000:0000:0000:0000:0000:0000", NULL, NULL), 0);
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 5, "2001:0db8:0000:0000:0000:0000:0000:0005", "IB/RoCE v1", "eth2"), 0);
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 6, "2001:0db8:0000:0000:0000:0000:0000:0005", "RoCE v2", "eth2"), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(&r, "gid/mlx5_0/1", "title", "GID index 6 (2001:0db8");
  res_free(&r);

  /* only link-local left: nothing usable */
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 5, "0000:0000:0000:0000:0000:0000:0000:0000", NULL, NULL), 0);
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 6, "0000:0000:0000:0000:0000:0000:0000:0000", NULL, NULL), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "gid/mlx5_0/1", "FAIL");
  expect_has(&r, "gid/mlx5_0/1", "title", "no usable RoCE GID");
  expect_has(&r, "gid/mlx5_0/1", "fix", "ip addr add");
  assert_int_equal(r.rc, 1);
  res_free(&r);
}

static void gid_container_and_overrides(void **state) {
  struct fx *f = *state;
  /* containers: no gid_attrs at all */
  static const char *files[] = {IBP "gid_attrs/types/0", IBP "gid_attrs/types/1", IBP "gid_attrs/types/2",
                                IBP "gid_attrs/types/3", IBP "gid_attrs/ndevs/0", IBP "gid_attrs/ndevs/1",
                                IBP "gid_attrs/ndevs/2", IBP "gid_attrs/ndevs/3"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) assert_int_equal(fx_unlink(f, files[i]), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(
      &r, "gid/mlx5_0/1", "title",
      "GID index 3 (::ffff:10.0.0.5, IPv4-mapped type unknown GID (repeats an earlier entry: probably its v2 twin))");
  expect_has(&r, "gid/mlx5_0/1", "evidence", "gid_attrs/types unreadable for 4 non-zero entries");
  res_free(&r);
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 2, "0000:0000:0000:0000:0000:ffff:0a00:0005", "IB/RoCE v1", "eth2"), 0);
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2", "eth2"), 0);

  /* GDRNET_GID_INDEX forces a v1 entry: reported, warned */
  const char *e1[] = {"GDRNET_GID_INDEX=2", NULL};
  r = run_json(f, NULL, e1);
  expect(&r, "gid/mlx5_0/1", "WARN");
  expect_has(&r, "gid/mlx5_0/1", "title", "forced by GDRNET_GID_INDEX");
  expect_has(&r, "gid/mlx5_0/1", "evidence", "automatic choice would be 3");
  res_free(&r);
  /* NCCL_IB_GID_INDEX honoured when ours is unset */
  const char *e2[] = {"NCCL_IB_GID_INDEX=3", NULL};
  r = run_json(f, NULL, e2);
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(&r, "gid/mlx5_0/1", "title", "forced by NCCL_IB_GID_INDEX (same as the automatic choice)");
  res_free(&r);
  /* an empty slot, an absent index, junk */
  const char *e3[] = {"GDRNET_GID_INDEX=4", "NCCL_IB_GID_INDEX=3", NULL};
  r = run_json(f, NULL, e3);
  expect(&r, "gid/mlx5_0/1", "FAIL");
  expect_has(&r, "gid/mlx5_0/1", "title", "empty GID slot");
  assert_int_equal(r.rc, 1);
  res_free(&r);
  const char *e4[] = {"GDRNET_GID_INDEX=40", NULL};
  r = run_json(f, NULL, e4);
  expect(&r, "gid/mlx5_0/1", "FAIL");
  res_free(&r);
  const char *e5[] = {"GDRNET_GID_INDEX=three", NULL};
  r = run_json(f, NULL, e5);
  expect(&r, "gid/mlx5_0/1", "FAIL");
  res_free(&r);
  /* -1 and auto mean automatic, as in NCCL and the plugin */
  const char *e6[] = {"NCCL_IB_GID_INDEX=-1", NULL};
  r = run_json(f, NULL, e6);
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(&r, "gid/mlx5_0/1", "title", "GID index 3");
  expect_has(&r, "gid/mlx5_0/1", "evidence", "NCCL_IB_GID_INDEX=-1: automatic selection");
  res_free(&r);
  const char *e7[] = {"GDRNET_GID_INDEX=auto", "NCCL_IB_ROCE_VERSION_NUM=1", NULL};
  r = run_json(f, NULL, e7);
  expect(&r, "gid/mlx5_0/1", "WARN"); /* the user asked for v1: chosen, and warned about */
  expect_has(&r, "gid/mlx5_0/1", "title", "GID index 2");
  expect_has(&r, "gid/mlx5_0/1", "evidence",
             "prefers IPv4-mapped, RoCE v1 (address family default, NCCL_IB_ROCE_VERSION_NUM=1)");
  res_free(&r);
  /* IPv6 wanted but none there: IPv4 still chosen */
  const char *e8[] = {"GDRNET_IB_ADDR_FAMILY=AF_INET6", NULL};
  r = run_json(f, NULL, e8);
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(&r, "gid/mlx5_0/1", "title", "GID index 3");
  res_free(&r);

  /* a malformed GID file is an empty slot, not a crash */
  assert_int_equal(fx_write(f, IBP "gids/0", "not a gid\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "gid/mlx5_0/1", "OK");
  expect_has(&r, "gid/mlx5_0/1", "evidence", "1 GID file malformed");
  res_free(&r);
}

static void gpu_memory_paths(void **state) {
  struct fx *f = *state;
  /* no peermem, DMA-BUF fine (open driver, 6.8 kernel, dmabuf sysfs) */
  assert_int_equal(fx_unlink(f, "sys/module/nvidia_peermem/version"), 0);
  assert_int_equal(rmdir(strcat(strcpy((char[600]){0}, f->root), "/sys/module/nvidia_peermem")), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "peermem", "INFO");
  expect(&r, "dmabuf", "OK");
  expect(&r, "gdr", "OK");
  expect_has(&r, "gdr", "title", "via DMA-BUF");
  res_free(&r);

  /* proprietary modules: no DMA-BUF, no peermem -> no GPUDirect */
  assert_int_equal(
      fx_write(f, "proc/driver/nvidia/version",
               "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"),
      0);
  assert_int_equal(fx_write(f, "sys/module/nvidia/version", "535.183.01\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "peermem", "WARN");
  expect_has(&r, "peermem", "fix", "modprobe nvidia-peermem");
  expect(&r, "dmabuf", "WARN");
  expect_has(&r, "dmabuf", "evidence", "proprietary kernel modules");
  expect_has(&r, "dmabuf", "fix", "open kernel modules");
  expect(&r, "gdr", "FAIL");
  assert_int_equal(r.rc, 1);
  res_free(&r);

  /* a module directory without its version file is not what the plugin detects */
  assert_int_equal(fx_mkdir(f, "sys/module/nvidia_peermem"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "peermem", "WARN");
  expect_has(&r, "peermem", "evidence", "has no version file");
  expect(&r, "gdr", "FAIL");
  res_free(&r);

  /* legacy nv_peer_mem rescues it */
  assert_int_equal(fx_write(f, "sys/kernel/mm/memory_peers/nv_mem/version", "1.3-0\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "peermem", "OK");
  expect_has(&r, "peermem", "evidence", "nv_peer_mem");
  expect(&r, "dmabuf", "INFO");
  expect(&r, "gdr", "OK");
  res_free(&r);

  /* old kernel, open modules: DMA-BUF MRs need 5.12 */
  assert_int_equal(fx_unlink(f, "sys/kernel/mm/memory_peers/nv_mem/version"), 0);
  assert_int_equal(fx_write(f, "proc/driver/nvidia/version",
                            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"),
                   0);
  assert_int_equal(fx_unlink(f, "sys/module/nvidia/version"), 0);
  assert_int_equal(fx_write(f, "proc/sys/kernel/osrelease", "5.4.0-150-generic\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "nvidia-driver", "OK");
  expect_has(&r, "nvidia-driver", "title", "550.54.15 (open kernel modules)");
  expect(&r, "dmabuf", "WARN");
  expect_has(&r, "dmabuf", "fix", "kernel >= 5.12");
  expect(&r, "gdr", "FAIL");
  res_free(&r);

  /* nothing known about the kernel's dma-buf or version, driver flavour unknown: cannot confirm */
  assert_int_equal(fx_unlink(f, "proc/sys/kernel/osrelease"), 0);
  assert_int_equal(fx_unlink(f, "proc/driver/nvidia/version"), 0);
  assert_int_equal(fx_write(f, "sys/module/nvidia/version", "580.95.05\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "dmabuf", "INFO");
  expect_has(&r, "dmabuf", "title", "cannot confirm");
  expect(&r, "gdr", "WARN");
  res_free(&r);
}

static void iommu_modes(void **state) {
  struct fx *f = *state;
  assert_int_equal(fx_mkdir(f, "sys/class/iommu/dmar0"), 0);
  assert_int_equal(fx_write(f, "proc/cmdline", "BOOT_IMAGE=/vmlinuz ro intel_iommu=on\n"), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "iommu", "WARN");
  expect_has(&r, "iommu", "fix", "iommu=pt");
  expect_has(&r, "iommu", "evidence", "intel_iommu=on");
  assert_int_equal(r.rc, 0);
  res_free(&r);

  assert_int_equal(fx_write(f, "proc/cmdline", "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "iommu", "OK");
  expect_has(&r, "iommu", "title", "passthrough");
  res_free(&r);

  /* the group type is authoritative */
  assert_int_equal(fx_write(f, "sys/kernel/iommu_groups/7/type", "DMA-FQ\n"), 0);
  assert_int_equal(fx_symlink(f, "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/" NIC "/iommu_group",
                              "../../../../../../kernel/iommu_groups/7"),
                   0);
  r = run_json(f, NULL, NULL);
  expect(&r, "iommu", "WARN");
  expect_has(&r, "iommu", "evidence", "mlx5_0 iommu_group/type: DMA-FQ");
  res_free(&r);
  assert_int_equal(fx_write(f, "sys/kernel/iommu_groups/7/type", "identity\n"), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "iommu", "OK");
  res_free(&r);
}

/* Build GPU + NIC at the given paths (bridges along the way created with ACS clear). */
static void place(struct fx *f, const char *gpu_path, int gnuma, const char *nic_path, int nnuma) {
  static uint8_t cfg[4096];
  const char *paths[2] = {gpu_path, nic_path};
  int numa[2] = {gnuma, nnuma};
  for (int k = 0; k < 2; k++) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", paths[k]);
    /* every component after the host bridge except the last is a bridge */
    char *slash = strchr(tmp, '/');
    while (slash && strchr(slash + 1, '/')) {
      char *next = strchr(slash + 1, '/');
      *next = '\0';
      assert_int_equal(fx_bridge(f, tmp, numa[k], 0), 0);
      *next = '/';
      slash = next;
    }
  }
  fx_cfg(cfg, 0x10de, false, 0x2810, -1);
  assert_int_equal(fx_pci(f, gpu_path, 0x10de, 0x030200, gnuma, cfg, sizeof cfg), 0);
  fx_cfg(cfg, 0x15b3, false, 0x2810 | 0x10, -1);
  assert_int_equal(fx_pci(f, nic_path, 0x15b3, 0x020700, nnuma, cfg, sizeof cfg), 0);
  assert_int_equal(fx_ibdev(f, "mlx5_0", nic_path), 0);
  assert_int_equal(fx_port(f, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)"), 0);
  assert_int_equal(fx_write(f, IBP "lid", "0x3\n"), 0);
  assert_int_equal(fx_gid(f, "mlx5_0", 1, 0, "fe80:0000:0000:0000:0e42:a1ff:fe00:0001", NULL, NULL), 0);
}

static void topo_case(const char *gpu_path, int gnuma, const char *nic_path, int nnuma, const char *dist,
                      const char *status, const char *const *env) {
  struct fx f;
  assert_int_equal(fx_init(&f), 0);
  place(&f, gpu_path, gnuma, nic_path, nnuma);
  const char *bdf = strrchr(gpu_path, '/') + 1;
  char id[128];
  snprintf(id, sizeof id, "topo/mlx5_0/%s", bdf);
  struct res r = run_json(&f, NULL, env);
  expect(&r, id, status);
  expect_has(&r, id, "title", dist);
  if (strcmp(status, "WARN") == 0) expect_has(&r, id, "fix", "NCCL_NET_GDR_LEVEL=");
  res_free(&r);
  fx_cleanup(&f);
}

static void topology_distances(void **state) {
  (void)state;
  topo_case("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", 0,
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0", 0, ": PIX (", "OK", NULL);
  topo_case("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0", 0,
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:06:00.0", 0, ": PXB (", "OK", NULL);
  topo_case("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "pci0000:00/0000:00:03.0/0000:05:00.0", 0, ": PHB (", "WARN",
            NULL);
  topo_case("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "pci0000:40/0000:40:01.0/0000:41:00.0", 0, ": NODE (", "WARN",
            NULL);
  topo_case("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "pci0000:80/0000:80:01.0/0000:81:00.0", 1, ": SYS (", "WARN",
            NULL);
  /* the user allowed GDR through the host bridge */
  const char *env[] = {"NCCL_NET_GDR_LEVEL=PHB", NULL};
  topo_case("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "pci0000:00/0000:00:03.0/0000:05:00.0", 0, ": PHB (", "OK", env);
  /* ... or made it stricter than the pair */
  const char *env2[] = {"NCCL_NET_GDR_LEVEL=PIX", NULL};
  topo_case("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0", 0,
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:06:00.0", 0, ": PXB (", "WARN", env2);
}

static void closest_nic_only(void **state) {
  struct fx *f = *state;
  /* a second NIC on the other socket, with ACS redirect on its root port: NCCL pairs the GPU with the
   * closer mlx5_0, so mlx5_1 only shows up as context */
  static uint8_t cfg[4096];
  assert_int_equal(fx_bridge(f, "pci0000:80/0000:80:01.0", 1, 0x001d), 0);
  fx_cfg(cfg, 0x15b3, false, 0x2800, -1); /* relaxed ordering off */
  assert_int_equal(fx_pci(f, "pci0000:80/0000:80:01.0/0000:81:00.0", 0x15b3, 0x020000, 1, cfg, sizeof cfg), 0);
  assert_int_equal(fx_ibdev(f, "mlx5_1", "pci0000:80/0000:80:01.0/0000:81:00.0"), 0);
  assert_int_equal(fx_port(f, "mlx5_1", 1, "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)"), 0);
  assert_int_equal(fx_write(f, "sys/class/infiniband/mlx5_1/ports/1/lid", "0x7\n"), 0);
  assert_int_equal(fx_write_bin(f, "dev/infiniband/uverbs1", "", 0), 0);
  assert_int_equal(fx_chmod(f, "dev/infiniband/uverbs1", 0666), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "topo/mlx5_0/" GPU, "OK");
  expect_has(&r, "topo/mlx5_0/" GPU, "evidence", "farther NICs (NCCL will not pair them with this GPU): mlx5_1 SYS");
  assert_false(has_finding(&r, "topo/mlx5_1/" GPU));
  assert_false(has_finding(&r, "acs/mlx5_1/" GPU));
  expect(&r, "relaxed-ordering/mlx5_1", "WARN");
  expect(&r, "rdma-devices", "OK");
  expect_has(&r, "uverbs", "title", "2 /dev/infiniband/uverbs* nodes");
  assert_int_equal(r.rc, 0);
  res_free(&r);

  /* GDRNET_HCA pins the far NIC: now that pair is judged, and its root port's ACS matters */
  const char *env[] = {"GDRNET_HCA=mlx5_1", "NCCL_IB_HCA=mlx5_0", NULL};
  r = run_json(f, NULL, env);
  expect(&r, "hca", "OK");
  expect_has(&r, "hca", "title", "GDRNET_HCA=mlx5_1 selects mlx5_1:1");
  expect(&r, "topo/mlx5_1/" GPU, "WARN");
  expect_has(&r, "topo/mlx5_1/" GPU, "title", ": SYS (");
  expect(&r, "acs/mlx5_1/" GPU, "WARN");
  expect_has(&r, "acs/mlx5_1/" GPU, "fix", "setpci -s 0000:80:01.0 ECAP_ACS+0x6.w=0000");
  assert_false(has_finding(&r, "topo/mlx5_0/" GPU));
  assert_false(has_finding(&r, "relaxed-ordering/mlx5_0"));
  res_free(&r);
}

static void hca_filter(void **state) {
  struct fx *f = *state;
  static const struct {
    const char *env, *status, *title;
  } cases[] = {
      {"GDRNET_HCA=mlx5", "OK", "GDRNET_HCA=mlx5 selects mlx5_0:1"},
      {"GDRNET_HCA==mlx5_0:1", "OK", "selects mlx5_0:1"},
      {"NCCL_IB_HCA=mlx5_1", "FAIL", "NCCL_IB_HCA=mlx5_1 selects none of the ACTIVE ports"},
      {"GDRNET_HCA=^=mlx5_0", "FAIL", "selects none of the ACTIVE ports"},
      {"GDRNET_HCA=^mlx5_9", "OK", "selects mlx5_0:1"},
      {"GDRNET_HCA=mlx5_0:2", "FAIL", "selects none"},
      {"GDRNET_HCA==mlx5", "FAIL", "selects none"},
      {"GDRNET_HCA=mlx5_0:x", "FAIL", "is malformed"},
      {"GDRNET_HCA=mlx5_0,,mlx5_1", "FAIL", "is malformed"},
      {"GDRNET_HCA=^", "FAIL", "is malformed"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *env[] = {cases[i].env, NULL};
    struct res r = run_json(f, NULL, env);
    expect(&r, "hca", cases[i].status);
    expect_has(&r, "hca", "title", cases[i].title);
    assert_int_equal(r.rc, strcmp(cases[i].status, "FAIL") == 0 ? 1 : 0);
    res_free(&r);
  }
  struct res r = run_json(f, NULL, NULL);
  assert_false(has_finding(&r, "hca"));
  res_free(&r);
}

static void acs_on_the_path(void **state) {
  struct fx *f = *state;
  /* the GPU's switch downstream port redirects P2P: traffic meant to stay in the switch goes up */
  assert_int_equal(fx_bridge(f, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", 0, 0x001d), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "acs/mlx5_0/" GPU, "FAIL");
  expect_has(&r, "acs/mlx5_0/" GPU, "evidence",
             "0000:02:00.0: ACS Control 0x001d at 0x14e (SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+)");
  expect_has(&r, "acs/mlx5_0/" GPU, "fix", "setpci -s 0000:02:00.0 ECAP_ACS+0x6.w=0000");
  expect_has(&r, "acs/mlx5_0/" GPU, "fix", "BIOS");
  assert_int_equal(r.rc, 1);
  res_free(&r);

  /* the root port is not between them (they meet in the switch), so its ACS does not matter */
  assert_int_equal(fx_bridge(f, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", 0, 0x0000), 0);
  assert_int_equal(fx_bridge(f, "pci0000:00/0000:00:01.0", 0, 0x001d), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "acs/mlx5_0/" GPU, "OK");
  res_free(&r);

  /* unprivileged read: 256 bytes of config space, cannot tell */
  static uint8_t cfg[4096];
  fx_cfg(cfg, 0x10b5, true, 0, 0x1d);
  assert_int_equal(fx_write_bin(f, "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/config", cfg, 256),
                   0);
  r = run_json(f, NULL, NULL);
  expect(&r, "acs/mlx5_0/" GPU, "WARN");
  expect_has(&r, "acs/mlx5_0/" GPU, "title", "cannot tell");
  expect_has(&r, "acs/mlx5_0/" GPU, "fix", "as root");
  res_free(&r);

  /* config file missing or truncated to nothing: still a finding */
  assert_int_equal(fx_write_bin(f, "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/config", cfg, 3), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "acs/mlx5_0/" GPU, "WARN");
  res_free(&r);

  /* far pair (PHB) with ACS on the root ports: a warning, not a failure */
  struct fx g;
  assert_int_equal(fx_init(&g), 0);
  place(&g, "pci0000:00/0000:00:01.0/0000:01:00.0", 0, "pci0000:00/0000:00:03.0/0000:05:00.0", 0);
  assert_int_equal(fx_bridge(&g, "pci0000:00/0000:00:03.0", 0, 0x0004), 0);
  r = run_json(&g, NULL, NULL);
  expect(&r, "acs/mlx5_0/0000:01:00.0", "WARN");
  expect_has(&r, "acs/mlx5_0/0000:01:00.0", "evidence", "0000:00:03.0: ACS Control 0x0004");
  res_free(&r);
  fx_cleanup(&g);
}

static void relaxed_ordering(void **state) {
  struct fx *f = *state;
  static uint8_t cfg[4096];
  const char *nic_cfg = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/" NIC "/config";
  fx_cfg(cfg, 0x15b3, false, 0x2800, -1);
  assert_int_equal(fx_write_bin(f, nic_cfg, cfg, sizeof cfg), 0);
  struct res r = run_json(f, NULL, NULL);
  expect(&r, "relaxed-ordering/mlx5_0", "WARN");
  expect_has(&r, "relaxed-ordering/mlx5_0", "fix", "setpci -s " NIC " CAP_EXP+0x8.w=2810");
  assert_int_equal(r.rc, 0);
  res_free(&r);
  /* non-root reads see 64 bytes */
  assert_int_equal(fx_write_bin(f, nic_cfg, cfg, 64), 0);
  r = run_json(f, NULL, NULL);
  expect(&r, "relaxed-ordering/mlx5_0", "INFO");
  expect_has(&r, "relaxed-ordering/mlx5_0", "title", "cannot tell");
  res_free(&r);
}

static void nccl_environment(void **state) {
  struct fx *f = *state;
  const char *good[] = {"NCCL_NET=gdr", "NCCL_NET_PLUGIN=gdr", "NCCL_NET_GDR_LEVEL=SYS", g_plugin_dir, NULL};
  struct res r = run_json(f, NULL, good);
  char want[4200];
  snprintf(want, sizeof want, "NCCL loads this plugin from %s (", g_plugin); /* LD_LIBRARY_PATH's, not another */
  expect(&r, "env/NCCL_NET", "OK");
  expect(&r, "env/NCCL_NET_PLUGIN", "OK");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "title", want);
  expect(&r, "env/NCCL_NET_GDR_LEVEL", "OK");
  assert_int_equal(r.rc, 0);
  res_free(&r);

  const char *bad[] = {"NCCL_NET=Socket",
                       "NCCL_NET_PLUGIN=aws-ofi",
                       "NCCL_IB_DISABLE=1",
                       "NCCL_NET_GDR_LEVEL=LOC",
                       "NCCL_NET_GDR_READ=0",
                       "NCCL_P2P_DISABLE=1",
                       "GDRNET_TRANSPORT=tcp",
                       "GDRNET_GDR=0",
                       "GDRNET_QPS_PER_CONN=4",
                       "NCCL_IB_HCA=mlx5_0",
                       NULL};
  r = run_json(f, NULL, bad);
  expect(&r, "env/NCCL_NET", "FAIL");
  expect(&r, "env/NCCL_NET_PLUGIN", "FAIL");
  expect(&r, "env/NCCL_IB_DISABLE", "FAIL"); /* the plugin honours it: no RDMA */
  expect(&r, "env/NCCL_NET_GDR_LEVEL", "FAIL");
  expect(&r, "env/NCCL_NET_GDR_READ", "WARN");
  expect(&r, "env/NCCL_P2P_SHM", "INFO");
  expect(&r, "env/GDRNET_TRANSPORT", "FAIL");
  expect(&r, "env/GDRNET_GDR", "FAIL");
  expect(&r, "env/knobs", "INFO");
  expect_has(&r, "env/knobs", "evidence", "GDRNET_QPS_PER_CONN=4");
  expect_has(&r, "env/knobs", "evidence", "NCCL_IB_HCA=mlx5_0");
  /* LOC also makes the pair's distance too far */
  expect(&r, "topo/mlx5_0/" GPU, "WARN");
  assert_int_equal(r.rc, 1);
  res_free(&r);

  const char *odd[] = {"NCCL_NET_GDR_LEVEL=FAR", "NCCL_NET_GDR_LEVEL_X=1", "NCCL_DMABUF_ENABLE=0", "GDRNET_GDR=1",
                       NULL};
  r = run_json(f, NULL, odd);
  expect(&r, "env/NCCL_NET_GDR_LEVEL", "WARN");
  expect(&r, "env/DMABUF", "INFO"); /* peermem is loaded in this fixture */
  expect(&r, "env/GDRNET_GDR", "WARN");
  res_free(&r);
  /* GDRNET_DMABUF wins over NCCL's name; without peermem, turning DMA-BUF off is a warning */
  assert_int_equal(fx_unlink(f, "sys/module/nvidia_peermem/version"), 0);
  assert_int_equal(rmdir(strcat(strcpy((char[600]){0}, f->root), "/sys/module/nvidia_peermem")), 0);
  const char *db[] = {"GDRNET_DMABUF=0", "NCCL_DMABUF_ENABLE=1", NULL};
  r = run_json(f, NULL, db);
  expect(&r, "env/DMABUF", "WARN");
  expect_has(&r, "env/DMABUF", "title", "GDRNET_DMABUF=0");
  res_free(&r);
  const char *db2[] = {"GDRNET_DMABUF=1", "NCCL_DMABUF_ENABLE=0", NULL};
  r = run_json(f, NULL, db2);
  assert_false(has_finding(&r, "env/DMABUF"));
  expect(&r, "env/knobs", "INFO");
  res_free(&r);
}

/* The plugin's knobs, checked with the plugin's own table and parser. */
static void plugin_knobs(void **state) {
  struct fx *f = *state;
  /* valid values (including -1 for an auto knob, a tools' variable): no knob finding */
  const char *good[] = {"GDRNET_QPS_PER_CONN=4",    "GDRNET_GID_INDEX=-1", "GDRNET_TCP_INLINE=32K",
                        "GDRNET_TEST_PLUGIN=/x.so", "NCCL_IB_TIMEOUT=18",  NULL};
  struct res r = run_json(f, NULL, good);
  expect(&r, "env/knobs", "INFO");
  expect_has(&r, "env/knobs", "title", "every value valid for the plugin");
  assert_false(has_finding(&r, "knob/GDRNET_QPS_PER_CONN"));
  assert_false(has_finding(&r, "knob/GDRNET_TEST_PLUGIN"));
  assert_int_equal(r.rc, 0);
  res_free(&r);

  /* what init rejects is a FAIL; unknown names and bad NCCL alias values are WARNs */
  const char *bad[] = {"GDRNET_QPS_PER_CONN=99", "GDRNET_TRANSPORT=ib",    "GDRNET_TCP_INLINE=2G",
                       "GDRNET_FOO=1",           "GDRNET_HAC=mlx5_0",      "GDRNET_IB_HCA=mlx5_0",
                       "NCCL_IB_TIMEOUT=x",      "GDRNET_SOCKET_IFNAME=^", NULL};
  r = run_json(f, NULL, bad);
  assert_int_equal(r.rc, 1);
  expect(&r, "knob/GDRNET_QPS_PER_CONN", "FAIL");
  expect_has(&r, "knob/GDRNET_QPS_PER_CONN", "title", "init fails");
  expect_has(&r, "knob/GDRNET_QPS_PER_CONN", "fix", "an integer in 1..16");
  expect(&r, "knob/GDRNET_TRANSPORT", "FAIL");
  expect_has(&r, "knob/GDRNET_TRANSPORT", "fix", "one of auto, rdma, tcp");
  expect(&r, "knob/GDRNET_TCP_INLINE", "FAIL");
  expect(&r, "knob/GDRNET_SOCKET_IFNAME", "FAIL");
  expect(&r, "knob/GDRNET_FOO", "WARN");
  assert_false(field_has(finding(&r, "knob/GDRNET_FOO"), "title", "did you mean")); /* nothing is close to FOO */
  /* the reference named exists: the installed doc, else (this source build) the repository's */
  const char *fix = json_str(json_get(finding(&r, "knob/GDRNET_FOO"), "fix"));
  const char *doc = fix ? strstr(fix, "the knobs: ") : NULL;
  assert_non_null(doc);
  doc += strlen("the knobs: ");
  assert_non_null(strstr(doc, "configuration.md"));
  if (access(doc, R_OK) != 0) fail_msg("the fix names %s, which does not exist", doc);
  expect(&r, "knob/GDRNET_HAC", "WARN");
  expect_has(&r, "knob/GDRNET_HAC", "title", "did you mean GDRNET_HCA?");
  expect_has(&r, "knob/GDRNET_IB_HCA", "title", "did you mean GDRNET_HCA?"); /* NCCL's spelling */
  expect(&r, "knob/NCCL_IB_TIMEOUT", "WARN");
  expect_has(&r, "knob/NCCL_IB_TIMEOUT", "title", "ignored, the default is used");
  res_free(&r);

  /* NCCL_IB_DISABLE=1 or GDRNET_IB_DISABLE=1: the plugin uses no RDMA; NCCL never reads GDRNET_*, so only
   * NCCL's name turns NCCL's own IB transport off too */
  const char *off[] = {"GDRNET_IB_DISABLE=1", NULL};
  r = run_json(f, NULL, off);
  expect(&r, "env/GDRNET_IB_DISABLE", "FAIL");
  expect_has(&r, "env/GDRNET_IB_DISABLE", "title", "this plugin uses no RDMA");
  assert_false(field_has(finding(&r, "env/GDRNET_IB_DISABLE"), "title", "NCCL's IB"));
  assert_int_equal(r.rc, 1);
  res_free(&r);
  const char *off1[] = {"NCCL_IB_DISABLE=1", NULL};
  r = run_json(f, NULL, off1);
  expect_has(&r, "env/NCCL_IB_DISABLE", "title", "neither NCCL's IB transport nor this plugin's");
  res_free(&r);
  const char *off2[] = {"GDRNET_IB_DISABLE=0", "NCCL_IB_DISABLE=1", NULL}; /* ours wins, as in the plugin */
  r = run_json(f, NULL, off2);
  assert_false(has_finding(&r, "env/NCCL_IB_DISABLE"));
  assert_false(has_finding(&r, "env/GDRNET_IB_DISABLE"));
  res_free(&r);
}

/* No kernel RDMA device, but the library the plugin loads (GDRNET_IBVERBS_LIB, e.g. the verbs emulator) lists one:
 * the plugin uses RDMA through it, it does not fall back to TCP. */
static void verbs_lib_without_sysfs(void **state) {
  struct fx *f = *state;
  char lib[1024];
  snprintf(lib, sizeof lib, "GDRNET_IBVERBS_LIB=%s", g_fakeverbs);
  const char *probe[] = {"--probe-libs", "--no-cuda", NULL};
  const char *env[] = {lib, NULL};
  struct res r = run_json(f, probe, env);
  expect(&r, "rdma-devices", "FAIL"); /* GPUDirect still needs a kernel device */
  expect_has(&r, "rdma-devices", "evidence", "the plugin uses RDMA through it");
  expect_has(&r, "rdma-devices", "evidence", "GDRNET_IBVERBS_LIB=");
  assert_false(field_has(finding(&r, "rdma-devices"), "fix", "falls back to TCP"));
  expect_has(&r, "rdma-devices", "fix", "rdma/rdma_shared_device_a: 1"); /* the resource packaging/k8s requests */
  assert_false(field_has(finding(&r, "rdma-devices"), "fix", "hca_shared_devices_a"));
  res_free(&r);
  /* and without any device at all, it does */
  r = run_json(f, NULL, NULL);
  expect_has(&r, "rdma-devices", "fix", "falls back to TCP");
  res_free(&r);
}

static void json_escaping(void **state) {
  struct fx *f = *state;
  /* quotes, backslashes, control characters, UTF-8 and invalid bytes survive as valid JSON */
  const char *env[] = {"NCCL_NET=a\"b\\c\td\x01"
                       "e\xc3\xa9"
                       "f\xff",
                       NULL};
  struct res r = run_json(f, NULL, env);
  const struct jv *fnd = finding(&r, "env/NCCL_NET");
  const char *title = json_str(json_get(fnd, "title"));
  assert_non_null(title);
  assert_non_null(strstr(title, "NCCL_NET=a\"b\\c\td\x01"
                                "e\xc3\xa9"
                                "f\xef\xbf\xbd:"));
  res_free(&r);
}

/* NCCL_NET_PLUGIN: the doctor dlopens what NCCL 2.28 dlopens, in its order, and reports the file or the dlerror. */
static void net_plugin_loading(void **state) {
  struct fx *f = *state;
  char full[4200], withemu[8400];
  snprintf(full, sizeof full, "NCCL_NET_PLUGIN=%s", g_plugin);
  /* a path that does not exist */
  const char *e1[] = {"NCCL_NET_PLUGIN=/nonexistent/libnccl-net-gdr.so", NULL};
  struct res r = run_json(f, NULL, e1);
  expect(&r, "env/NCCL_NET_PLUGIN", "FAIL");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence",
             "dlopen(\"/nonexistent/libnccl-net-gdr.so\", RTLD_NOW|RTLD_LOCAL): /nonexistent/libnccl-net-gdr.so: "
             "cannot open shared object file");
  assert_false(field_has(finding(&r, "env/NCCL_NET_PLUGIN"), "evidence", "libnccl-net-/")); /* a path: as given */
  assert_int_equal(r.rc, 1);
  res_free(&r);
  /* by a name no library has, without build/lib on LD_LIBRARY_PATH: both names fail; the fix names this build's
   * plugin and its directory */
  char file[PATH_MAX], tname[64], real[PATH_MAX], want[2 * PATH_MAX + 64];
  assert_int_equal(probe_dlopen("gdr-doctor-test-absent", NULL, file, sizeof file, tname, sizeof tname), 0);
  assert_int_equal(probe_dlopen("libnccl-net-gdr-doctor-test-absent.so", NULL, file, sizeof file, tname, sizeof tname),
                   0);
  const char *e2[] = {"NCCL_NET_PLUGIN=gdr-doctor-test-absent", NULL};
  r = run_json(f, NULL, e2);
  expect(&r, "env/NCCL_NET_PLUGIN", "FAIL");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence", "dlopen(\"gdr-doctor-test-absent\", RTLD_NOW|RTLD_LOCAL)");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence",
             "dlopen(\"libnccl-net-gdr-doctor-test-absent.so\", RTLD_NOW|RTLD_LOCAL)");
  if (probe_dlopen("libnccl-net-gdr.so", e2, file, sizeof file, tname, sizeof tname) == 1) {
    /* an installed package's plugin loads by name: the shortest fix names it */
    expect_has(&r, "env/NCCL_NET_PLUGIN", "fix", "export NCCL_NET_PLUGIN=gdr NCCL_NET=GDR (NCCL then loads /");
  } else {
    /* nothing loads by name: this build's plugin by its full path, its directory for an older NCCL */
    assert_non_null(realpath(g_plugin, real));
    snprintf(want, sizeof want, "export NCCL_NET_PLUGIN=%s NCCL_NET=GDR", real);
    expect_has(&r, "env/NCCL_NET_PLUGIN", "fix", want);
    *strrchr(real, '/') = '\0';
    snprintf(want, sizeof want, "LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH", real);
    expect_has(&r, "env/NCCL_NET_PLUGIN", "fix", want);
  }
  res_free(&r);
  /* "gdr" without build/lib on LD_LIBRARY_PATH: whatever the loader finds on this host (an installed package's
   * plugin, or nothing), the doctor says it */
  const char *e2g[] = {"NCCL_NET_PLUGIN=gdr", NULL};
  assert_int_equal(probe_dlopen("gdr", e2g, file, sizeof file, tname, sizeof tname), 0);
  int sys = probe_dlopen("libnccl-net-gdr.so", e2g, file, sizeof file, tname, sizeof tname);
  r = run_json(f, NULL, e2g);
  expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence", "dlopen(\"gdr\", RTLD_NOW|RTLD_LOCAL)");
  snprintf(want, sizeof want, "dlopen(\"libnccl-net-gdr.so\", RTLD_NOW|RTLD_LOCAL): %s%s", sys ? "loaded " : "",
           sys ? file : "");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence", want);
  if (sys && strcasecmp(tname, "GDR") == 0) {
    snprintf(want, sizeof want, "NCCL loads this plugin from %s (", file);
    expect(&r, "env/NCCL_NET_PLUGIN", "OK");
    expect_has(&r, "env/NCCL_NET_PLUGIN", "title", want);
  } else {
    expect(&r, "env/NCCL_NET_PLUGIN", "FAIL");
    expect_has(&r, "env/NCCL_NET_PLUGIN", "fix", "LD_LIBRARY_PATH=");
  }
  res_free(&r);
  /* ... and with build/lib on it: OK, naming that file (before any installed one) */
  const char *e3[] = {"NCCL_NET_PLUGIN=gdr", g_plugin_dir, NULL};
  r = run_json(f, NULL, e3);
  expect(&r, "env/NCCL_NET_PLUGIN", "OK");
  snprintf(want, sizeof want, "NCCL loads this plugin from %s (ncclNetPlugin_v", g_plugin);
  expect_has(&r, "env/NCCL_NET_PLUGIN", "title", want);
  assert_int_equal(r.rc, 0);
  res_free(&r);
  /* the full path */
  const char *e4[] = {full, NULL};
  r = run_json(f, NULL, e4);
  expect(&r, "env/NCCL_NET_PLUGIN", "OK");
  res_free(&r);
  /* a comma list (NCCL 2.27+): an entry that is not found, one that is no plugin, then this one */
  snprintf(withemu, sizeof withemu, "NCCL_NET_PLUGIN=aws-ofi,%s,%s", g_fakeverbs, g_plugin);
  const char *e5[] = {withemu, NULL};
  r = run_json(f, NULL, e5);
  expect(&r, "env/NCCL_NET_PLUGIN", "OK");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence", "dlopen(\"libnccl-net-aws-ofi.so\"");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence", "exports no ncclNetPlugin_v6..v11: NCCL skips it");
  res_free(&r);
  /* none (NCCL 2.28): no external plugin */
  const char *e6[] = {"NCCL_NET_PLUGIN=none", g_plugin_dir, NULL};
  r = run_json(f, NULL, e6);
  expect(&r, "env/NCCL_NET_PLUGIN", "FAIL");
  expect_has(&r, "env/NCCL_NET_PLUGIN", "title", "no external net plugin");
  res_free(&r);
  /* unset: libnccl-net.so, which is this plugin only if its default link is installed; with NCCL_NET=GDR, NCCL's
   * init then fails (checkable where the host has no libnccl-net.so) */
  const char *e7[] = {"NCCL_NET=GDR", NULL};
  if (!probe_dlopen("libnccl-net.so", e7, file, sizeof file, tname, sizeof tname)) {
    r = run_json(f, NULL, e7);
    expect(&r, "env/NCCL_NET_PLUGIN", "FAIL");
    expect_has(&r, "env/NCCL_NET_PLUGIN", "title", "Failed to initialize any NET plugin");
    expect_has(&r, "env/NCCL_NET_PLUGIN", "evidence", "dlopen(\"libnccl-net.so\"");
    res_free(&r);
  }
}

/* The fix for an unset or wrong NCCL_NET_PLUGIN, shortest first: NCCL_NET_PLUGIN=gdr NCCL_NET=GDR where the loader finds
 * the plugin by name (an installed package; here LD_LIBRARY_PATH stands in for the system path), the full path of a
 * build tree's plugin otherwise; never "keep NCCL_NET_PLUGIN=gdr" when it is not gdr. */
static void net_plugin_fix(void **state) {
  struct fx *f = *state;
  char real[4096], first[4200];
  assert_non_null(realpath(g_plugin, real));
  const char *e1[] = {"NCCL_NET_PLUGIN=nosuch", g_plugin_dir, NULL};
  struct res r = run_json(f, NULL, e1);
  expect(&r, "env/NCCL_NET_PLUGIN", "FAIL");
  const char *fix = json_str(json_get(finding(&r, "env/NCCL_NET_PLUGIN"), "fix"));
  assert_non_null(fix);
  if (strncmp(fix, "export NCCL_NET_PLUGIN=gdr NCCL_NET=GDR (NCCL then loads ", 57) != 0 ||
      strstr(fix, "LD_LIBRARY_PATH") != NULL || strstr(fix, "keep") != NULL)
    fail_msg("plugin found by name: fix \"%s\"", fix);
  res_free(&r);
  /* a build tree's plugin, not on the loader's path: its full path first */
  snprintf(first, sizeof first, "export NCCL_NET_PLUGIN=%s NCCL_NET=GDR ", real);
  const char *e2[] = {"NCCL_NET_PLUGIN=nosuch", NULL};
  const char *e3[] = {NULL};
  const char *const *envs[] = {e2, e3};
  for (int i = 0; i < 2; i++) {
    r = run_json(f, NULL, envs[i]);
    fix = json_str(json_get(finding(&r, "env/NCCL_NET_PLUGIN"), "fix"));
    assert_non_null(fix);
    if (strncmp(fix, first, strlen(first)) != 0 || strstr(fix, "keep") != NULL)
      fail_msg("build tree, NCCL_NET_PLUGIN %s: fix \"%s\"", i ? "unset" : "=nosuch", fix);
    res_free(&r);
  }
}

/* The outcome line (human: the last line; JSON: "outcome") says what NCCL would load and run over, and why GPUDirect
 * RDMA is off; --quiet keeps only the WARN and FAIL findings (JSON too), the verdict and the outcome. */
static void outcome_and_quiet(void **state) {
  struct fx *f = *state;
  char full[4200];
  snprintf(full, sizeof full, "NCCL_NET_PLUGIN=%s", g_plugin);
  const char *e1[] = {full, "NCCL_NET=GDR", NULL};
  struct res r = run_json(f, NULL, e1);
  assert_string_equal(json_str(json_get(r.doc, "outcome")),
                      "NCCL would load GDR v11 and run over RDMA on mlx5_0:1, GDR on (nvidia-peermem and DMA-BUF)");
  res_free(&r);
  const char *e2[] = {full, "GDRNET_TRANSPORT=tcp", NULL};
  r = run_json(f, NULL, e2);
  assert_string_equal(json_str(json_get(r.doc, "outcome")),
                      "NCCL would load GDR v11 and run over TCP, GDR off: GDRNET_TRANSPORT=tcp");
  res_free(&r);
  const char *e3[] = {"NCCL_NET_PLUGIN=nosuch", NULL};
  r = run_json(f, NULL, e3);
  const char *o = json_str(json_get(r.doc, "outcome"));
  assert_non_null(o);
  assert_non_null(strstr(o, "NCCL would not load GDR (see env/NCCL_NET_PLUGIN)"));
  res_free(&r);
  const char *e4[] = {full, "NCCL_NET=IB", NULL};
  r = run_json(f, NULL, e4);
  assert_string_equal(json_str(json_get(r.doc, "outcome")),
                      "NCCL would load GDR v11 but use NCCL_NET=IB, not this plugin");
  res_free(&r);
  /* --json --quiet: the WARN/FAIL findings only, the summary still counts all */
  const char *q[] = {"--quiet", NULL};
  r = run_json(f, q, e2);
  const struct jv *fs = json_get(r.doc, "findings");
  assert_non_null(fs);
  assert_int_equal(fs->n, 1);
  expect(&r, "env/GDRNET_TRANSPORT", "FAIL");
  assert_true(json_get(json_get(r.doc, "summary"), "ok")->num > 0);
  res_free(&r);
  /* human --quiet: no OK/INFO line, no header; the verdict, then the outcome last */
  const char *a[] = {"--sysfs-root", f->root, "--quiet", NULL};
  r = run_raw(a, e2);
  assert_int_equal(r.rc, 1);
  assert_null(strstr(r.out, "[ OK ]"));
  assert_null(strstr(r.out, "[INFO]"));
  assert_null(strstr(r.out, "gdrnet-doctor "));
  assert_non_null(strstr(r.out, "[FAIL] env/GDRNET_TRANSPORT: "));
  assert_non_null(strstr(r.out, "\nGPUDirect RDMA: NOT READY: 1 problem\nNCCL would load GDR v11 and run over TCP, GDR "
                                "off: GDRNET_TRANSPORT=tcp\n"));
  assert_int_equal(r.out[strlen(r.out) - 1], '\n');
  res_free(&r);
  /* without --quiet the OK findings are there, and the outcome is still the last line */
  const char *b[] = {"--sysfs-root", f->root, NULL};
  r = run_raw(b, e1);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "[ OK ]"));
  const char *last = "\nNCCL would load GDR v11 and run over RDMA on mlx5_0:1, GDR on (nvidia-peermem and DMA-BUF)\n";
  assert_true(strlen(r.out) > strlen(last));
  assert_string_equal(r.out + strlen(r.out) - strlen(last), last);
  res_free(&r);
}

/* GDRNET_SOCKET_IFNAME / NCCL_SOCKET_IFNAME go through the plugin's own interface selection: one that selects nothing
 * fails the plugin's init, and the finding names the interfaces that exist (this host's: lo at least). */
static void socket_ifname(void **state) {
  struct fx *f = *state;
  const char *e1[] = {"GDRNET_SOCKET_IFNAME=nosuchif", NULL};
  struct res r = run_json(f, NULL, e1);
  expect(&r, "socket-ifname", "FAIL");
  expect_has(&r, "socket-ifname", "title", "GDRNET_SOCKET_IFNAME=\"nosuchif\"");
  expect_has(&r, "socket-ifname", "title", "init fails");
  expect_has(&r, "socket-ifname", "evidence", "interfaces up with an address here: ");
  expect_has(&r, "socket-ifname", "evidence", "lo (127.0.0.1)");
  expect_has(&r, "socket-ifname", "fix", "lo (127.0.0.1)");
  assert_false(field_has(finding(&r, "env/knobs"), "title", "every value valid")); /* the issue's "all valid" */
  assert_int_equal(r.rc, 1);
  res_free(&r);
  const char *e2[] = {"NCCL_SOCKET_IFNAME=nosuchif", NULL}; /* NCCL's name, read when ours is unset */
  r = run_json(f, NULL, e2);
  expect(&r, "socket-ifname", "FAIL");
  expect_has(&r, "socket-ifname", "title", "NCCL_SOCKET_IFNAME=\"nosuchif\"");
  res_free(&r);
  /* loopback only: works on one host, but ranks on other hosts cannot connect: a WARN (still ready) */
  const char *e3[] = {"GDRNET_SOCKET_IFNAME=lo", NULL};
  r = run_json(f, NULL, e3);
  expect(&r, "socket-ifname", "WARN");
  expect_has(&r, "socket-ifname", "title", "use lo (127.0.0.1)");
  expect_has(&r, "socket-ifname", "title", "ranks on other hosts cannot reach this one");
  expect_has(&r, "socket-ifname", "fix", "an interface that other hosts reach");
  expect_has(&r, "env/knobs", "title", "every value valid for the plugin");
  assert_int_equal(r.rc, 0);
  res_free(&r);
}

static void usage_errors(void **state) {
  (void)state;
  const char *a1[] = {"--bogus", NULL};
  struct res r = run_raw(a1, NULL);
  assert_int_equal(r.rc, 2);
  assert_non_null(strstr(r.err, "unknown option '--bogus'"));
  assert_non_null(strstr(r.err, "usage: gdrnet-doctor"));
  assert_string_equal(r.out, "");
  res_free(&r);
  const char *a2[] = {"--json", "--sysfs-root", NULL};
  r = run_raw(a2, NULL);
  assert_int_equal(r.rc, 2);
  assert_non_null(strstr(r.err, "--sysfs-root"));
  res_free(&r);
  const char *a3[] = {"--sysfs-root", "/nonexistent/gdrnet-doctor-test", NULL};
  r = run_raw(a3, NULL);
  assert_int_equal(r.rc, 2);
  res_free(&r);
  const char *a4[] = {"json", NULL};
  r = run_raw(a4, NULL);
  assert_int_equal(r.rc, 2);
  res_free(&r);
  const char *a5[] = {"--help", NULL};
  r = run_raw(a5, NULL);
  assert_int_equal(r.rc, 0);
  assert_non_null(strstr(r.out, "usage: gdrnet-doctor [--json] [--quiet] [--sysfs-root DIR]"));
  assert_non_null(strstr(r.out, "Exit status: 0 ready"));
  assert_non_null(strstr(r.out, "--version"));
  res_free(&r);
  const char *a6[] = {"--version", NULL};
  r = run_raw(a6, NULL);
  assert_int_equal(r.rc, 0);
  assert_string_equal(r.out, "gdrnet-doctor " DR_VERSION "\n");
  res_free(&r);
}

static void library_probes(void **state) {
  struct fx *f = *state;
  const char *probe[] = {"--probe-libs", NULL};
  /* rdma-core missing */
  const char *e1[] = {"GDRNET_IBVERBS_LIB=/nonexistent/libibverbs.so.1", NULL};
  struct res r = run_json(f, probe, e1);
  expect(&r, "rdma-core", "FAIL");
  expect_has(&r, "rdma-core", "fix", "libibverbs1");
  assert_int_equal(r.rc, 1);
  res_free(&r);

  /* our stand-in: version from the file name, its devices, the DMA-BUF probe both ways */
  char lib[1024], ldp[1024];
  snprintf(lib, sizeof lib, "GDRNET_IBVERBS_LIB=%s", g_fakeverbs);
  snprintf(ldp, sizeof ldp, "LD_LIBRARY_PATH=%s", g_fakecuda_dir);
  const char *e2[] = {lib, ldp, NULL};
  r = run_json(f, probe, e2);
  expect(&r, "rdma-core", "OK");
  expect_has(&r, "rdma-core", "title", "rdma-core 99.0");
  expect_has(&r, "rdma-core", "evidence", "1 device: fake0");
  expect_has(&r, "rdma-core", "evidence", "DMA-BUF MRs supported");
  expect(&r, "cuda", "OK");
  expect_has(&r, "cuda", "evidence", "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=1");
  expect(&r, "dmabuf", "OK");
  expect_has(&r, "dmabuf", "evidence", "verbs ibv_reg_dmabuf_mr probe: yes");
  assert_int_equal(r.rc, 0);
  res_free(&r);

  const char *e3[] = {lib, ldp, "FAKEVERBS_DMABUF=0", "FAKECUDA_DMABUF=0", NULL};
  r = run_json(f, probe, e3);
  expect_has(&r, "rdma-core", "evidence", "DMA-BUF MRs not supported");
  expect_has(&r, "dmabuf", "evidence", "CUDA CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: no");
  expect(&r, "dmabuf", "INFO"); /* peermem is loaded in this fixture */
  expect(&r, "gdr", "OK");
  res_free(&r);

  const char *e4[] = {lib, "FAKEVERBS_NDEV=0", NULL};
  const char *nocuda[] = {"--probe-libs", "--no-cuda", NULL};
  r = run_json(f, nocuda, e4);
  expect_has(&r, "rdma-core", "evidence", "0 devices");
  expect(&r, "cuda", "INFO");
  expect_has(&r, "cuda", "title", "not probed");
  res_free(&r);

  /* no CUDA driver at all (only checkable where the host has none) */
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e5[] = {lib, NULL};
    r = run_json(f, probe, e5);
    expect(&r, "cuda", "INFO");
    expect_has(&r, "cuda", "title", "no CUDA driver");
    res_free(&r);
  } else {
    dlclose(h);
  }
}

static void hostile_files(void **state) {
  struct fx *f = *state;
  /* binary junk and truncation everywhere the doctor reads text */
  static const char junk[] = "\x00\xff\xfe garbage \x01\x02\n:::\n";
  const char *files[] = {"proc/self/status",
                         "proc/cmdline",
                         "proc/driver/nvidia/version",
                         "sys/module/nvidia/version",
                         IBP "state",
                         IBP "link_layer",
                         IBP "rate",
                         IBP "gids/3",
                         IBP "gid_attrs/types/3",
                         "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/" NIC "/numa_node",
                         "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/" NIC "/config",
                         "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/config",
                         "proc/self/limits"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    assert_int_equal(fx_write_bin(f, files[i], junk, sizeof junk - 1), 0);
  /* a GPU whose class file is empty, a dangling link in the PCI list */
  assert_int_equal(
      fx_write_bin(f, "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/" GPU "/class", "", 0), 0);
  assert_int_equal(fx_symlink(f, "sys/bus/pci/devices/0000:ff:00.0", "../../../devices/nowhere"), 0);
  struct res r = run_json(f, NULL, NULL);
  assert_int_equal(r.rc, 1);
  expect(&r, "gpus", "FAIL");
  expect(&r, "port/mlx5_0/1", "WARN");
  res_free(&r);
  /* and the human rendering of the same tree */
  const char *a[] = {"--sysfs-root", f->root, NULL};
  r = run_raw(a, NULL);
  assert_int_equal(r.rc, 1);
  assert_non_null(strstr(r.out, "GPUDirect RDMA: NOT READY: "));
  res_free(&r);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--dlopen") == 0) return dlopen_main(argv[2]);
  if (argc != 5) {
    fprintf(stderr, "usage: %s <gdrnet-doctor> <fake libibverbs> <fake libcuda dir> <libnccl-net-gdr.so>\n", argv[0]);
    return 2;
  }
  g_doctor = argv[1];
  g_fakeverbs = argv[2];
  g_fakecuda_dir = argv[3];
  g_plugin = argv[4];
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n <= 0) return 2;
  g_self[n] = '\0';
  snprintf(g_plugin_dir, sizeof g_plugin_dir, "LD_LIBRARY_PATH=%s", g_plugin);
  char *slash = strrchr(g_plugin_dir, '/');
  if (slash == NULL) return 2;
  *slash = '\0';
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(healthy_host_is_ready, setup, teardown),
      cmocka_unit_test_setup_teardown(no_rdma_device, setup_empty, teardown),
      cmocka_unit_test_setup_teardown(memlock_levels, setup, teardown),
      cmocka_unit_test_setup_teardown(uverbs_permissions, setup, teardown),
      cmocka_unit_test_setup_teardown(port_down, setup, teardown),
      cmocka_unit_test_setup_teardown(gid_choices, setup, teardown),
      cmocka_unit_test_setup_teardown(gid_container_and_overrides, setup, teardown),
      cmocka_unit_test_setup_teardown(gpu_memory_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(iommu_modes, setup, teardown),
      cmocka_unit_test(topology_distances),
      cmocka_unit_test_setup_teardown(closest_nic_only, setup, teardown),
      cmocka_unit_test_setup_teardown(hca_filter, setup, teardown),
      cmocka_unit_test_setup_teardown(acs_on_the_path, setup, teardown),
      cmocka_unit_test_setup_teardown(relaxed_ordering, setup, teardown),
      cmocka_unit_test_setup_teardown(nccl_environment, setup, teardown),
      cmocka_unit_test_setup_teardown(plugin_knobs, setup, teardown),
      cmocka_unit_test_setup_teardown(verbs_lib_without_sysfs, setup_empty, teardown),
      cmocka_unit_test_setup_teardown(json_escaping, setup, teardown),
      cmocka_unit_test_setup_teardown(net_plugin_loading, setup, teardown),
      cmocka_unit_test_setup_teardown(net_plugin_fix, setup, teardown),
      cmocka_unit_test_setup_teardown(outcome_and_quiet, setup, teardown),
      cmocka_unit_test_setup_teardown(socket_ifname, setup, teardown),
      cmocka_unit_test(usage_errors),
      cmocka_unit_test_setup_teardown(library_probes, setup, teardown),
      cmocka_unit_test_setup_teardown(hostile_files, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
