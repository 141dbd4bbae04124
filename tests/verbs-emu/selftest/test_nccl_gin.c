/* Stock NCCL 2.28.9's IB transport on the emulator: the crash "Failing at address: 0x7" right after
 * "Initialized NET plugin IB" (H200 machine, libnccl.so.2+0x139a56), reproduced on CPU with the real library.
 *
 * The cause is NCCL's, not the emulator's (src/plugin/net.cc, ncclNetPluginInit, v2.28.7 and v2.28.9): with
 * NCCL_GIN_TYPE unset, initPluginLibsOnceFunc() sets the IB plugin's ncclGin to the placeholder (ncclGin_t *)-1;
 * ncclNetPluginInit() then tries GDAKI: ncclGinIbGdakiInit() (src/transport/net_ib.cc) succeeds and counts the
 * devices whose ibProvider is IB_PROVIDER_MLX5 -- none when libmlx5/mlx5dv_is_supported() does not claim the
 * device (the emulator, any non-mlx5 NIC) -- so ncclGinIbGdaki.devices() gives 0, ncclGin is left at -1, and
 * `pluginLib->ncclGin->init(...)` calls through address -1 + 8 = 0x7. 2.28.3 has no GIN; 2.29.3 adds the missing
 * `else pluginLib->ncclGin = &ncclGinIbProxy;`. The setting that avoids it is NCCL_GIN_TYPE=2 (the proxy GIN,
 * what 2.29 falls back to); NCCL_GIN_TYPE=0 leaves GIN out.
 *
 * The test calls NCCL's internal ncclNetInit(comm) (what commAlloc calls; no GPU needed up to there) with a zeroed
 * fake ncclComm, in a child per case (NCCL caches its parameters): without NCCL_GIN_TYPE it must die of SIGSEGV
 * at 0x7 at the known pc, with NCCL_GIN_TYPE=2 and =0 it must return ncclSuccess. Only for the libnccl.so.2 builds
 * whose offsets are known (by GNU build ID: PyTorch's nvidia-nccl-cu13 2.28.9 wheel = CUDA 13.0's copy); exits
 * 77 (skipped) for any other or none. VEMU_NCCL_LIB names the library to try. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

static const struct build {
	const char *id; /* GNU build ID, hex */
	uintptr_t get_version, net_init, crash_pc; /* offsets in the file's text: ncclGetVersion, ncclNetInit */
	size_t comm_size, off_shared_res, off_comm_hash;
} builds[] = {
	/* NCCL 2.28.9+cuda13.0 (nvidia-nccl-cu13 2.28.9; also /usr/local/cuda-13.0/lib): commAlloc (0x7cba5) calls
	 * ncclNetInit at 0x7d209; the faulting `call *0x8(%rcx)` is net.cc:216; the fields are those its code reads:
	 * comm->sharedRes at 0x88, comm->commHash at 0x1044c8 */
	{ "9fcf74d93a8c3605bf7718f594d0a24366e38536", 0x91c4b, 0x139790, 0x139a56, 0x110000, 0x88, 0x1044c8 },
};

static char found_id[64];
static const char *want_name;

static int note_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (!info->dlpi_name || !strstr(info->dlpi_name, want_name))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const char *name = p + sizeof(*n), *desc = name + ((n->n_namesz + 3) & ~3u);
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
				for (unsigned k = 0; k < n->n_descsz && k < 31; k++)
					sprintf(found_id + 2 * k, "%02x", (unsigned char)desc[k]);
				return 1;
			}
			p = desc + ((n->n_descsz + 3) & ~3u);
		}
	}
	return 0;
}

static uintptr_t base;
static const struct build *B;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	uintptr_t pc = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
	char m[160];
	int n = snprintf(m, sizeof(m), "child: SIGSEGV at address %p, pc libnccl+0x%lx\n", si->si_addr,
			 (unsigned long)(pc - base));
	ssize_t r = write(1, m, (size_t)n);
	(void)r;
	_exit(si->si_addr == (void *)7 && pc - base == B->crash_pc ? 42 : 43);
}

/* child: 0 = ncclNetInit returned ncclSuccess, 42 = the known crash, other = something else */
static int run_case(const char *lib, const char *gin_type, const char *gin_enable)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (gin_type)
			setenv("NCCL_GIN_TYPE", gin_type, 1);
		else
			unsetenv("NCCL_GIN_TYPE");
		if (gin_enable)
			setenv("NCCL_GIN_ENABLE", gin_enable, 1);
		else
			unsetenv("NCCL_GIN_ENABLE");
		void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		if (!h)
			_exit(44);
		char *gv = dlsym(h, "ncclGetVersion");
		if (!gv)
			_exit(45);
		base = (uintptr_t)gv - B->get_version;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_segv;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGSEGV, &sa, NULL);
		int (*net_init)(void *) = (int (*)(void *))(base + B->net_init);
		char *comm = calloc(1, B->comm_size);
		*(void **)(comm + B->off_shared_res) = calloc(1, 4u << 20); /* comm->sharedRes (ginState) */
		*(uint64_t *)(comm + B->off_comm_hash) = 0x5eed;
		int rc = net_init(comm);
		printf("child (NCCL_GIN_TYPE=%s): ncclNetInit returned %d\n", gin_type ? gin_type : "unset", rc);
		fflush(stdout);
		_exit(rc ? 46 : 0);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *env = getenv("VEMU_NCCL_LIB");
	const char *cand[] = { env, "/usr/local/cuda-13.0/lib/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2",
			       "/usr/local/cuda/lib64/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2" };
	const char *lib = NULL;
	for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]) && !lib; i++) {
		if (!cand[i] || access(cand[i], R_OK))
			continue;
		/* identify it in a child: loading 200 MB of NCCL is its business */
		int fds[2];
		if (pipe(fds))
			return 1;
		pid_t pid = fork();
		if (pid == 0) {
			close(fds[0]);
			want_name = cand[i];
			if (dlopen(cand[i], RTLD_NOW | RTLD_LOCAL))
				dl_iterate_phdr(note_cb, NULL);
			ssize_t r = write(fds[1], found_id, strlen(found_id));
			(void)r;
			_exit(0);
		}
		close(fds[1]);
		char id[64] = { 0 };
		ssize_t r = read(fds[0], id, sizeof(id) - 1);
		(void)r;
		close(fds[0]);
		waitpid(pid, NULL, 0);
		for (size_t k = 0; k < sizeof(builds) / sizeof(builds[0]); k++)
			if (!strcmp(id, builds[k].id)) {
				B = &builds[k];
				lib = cand[i];
			}
		if (!lib)
			printf("%s: build ID %s is not one this test knows\n", cand[i], id[0] ? id : "(none)");
	}
	if (!lib) {
		printf("test_nccl_gin: no known NCCL 2.28.9 build: skipped\n");
		return 77;
	}
	printf("test_nccl_gin: %s (build %s)\n", lib, B->id);
	int rc = run_case(lib, NULL, NULL);
	printf("NCCL_GIN_TYPE unset: child status %d (42 = SIGSEGV at 0x7 at libnccl+0x%lx)\n", rc,
	       (unsigned long)B->crash_pc);
	if (rc != 42) {
		printf("FAIL: expected NCCL 2.28.9's GIN crash\n");
		return 1;
	}
	/* "no GIN" by NCCL_GIN_ENABLE=0 does not avoid it: only ncclGinConnectOnce reads that knob, the plugin table's
	 * placeholder is decided by NCCL_GIN_TYPE alone */
	rc = run_case(lib, NULL, "0");
	printf("NCCL_GIN_TYPE unset, NCCL_GIN_ENABLE=0: child status %d\n", rc);
	if (rc != 42) {
		printf("FAIL: expected the same crash with NCCL_GIN_ENABLE=0\n");
		return 1;
	}
	const char *fixes[] = { "2", "0" };
	for (int i = 0; i < 2; i++) {
		rc = run_case(lib, fixes[i], NULL);
		printf("NCCL_GIN_TYPE=%s: child status %d\n", fixes[i], rc);
		if (rc != 0) {
			printf("FAIL: NCCL_GIN_TYPE=%s should avoid the crash\n", fixes[i]);
			return 1;
		}
	}
	printf("test_nccl_gin: OK (NCCL 2.28.9 crashes without NCCL_GIN_TYPE; =2 and =0 avoid it)\n");
	return 0;
}
