/* SPDX-License-Identifier: Apache-2.0 */
/* ig-cuda-driver: a scriptable CUDA driver API client for the GPU probe tests.
 *
 *   ig-cuda-driver [--lib PATH]      (default: the stub libcuda.so.1 built by the tests)
 *
 * dlopen()s the library, resolves every function it knows with dlsym (a missing one is reported
 * by the command that needs it: `err missing <name>`), calls cuInit(0), cuDeviceGet(0) and
 * cuCtxCreate_v2, prints `ready <pid>`, then reads one command per line on stdin and writes
 * exactly one reply line per command line on stdout (flushed), so a test can drive it in lock
 * step. Lines longer than 4095 bytes are answered `err line too long` (one reply).
 *
 *   pid                                   -> ok <tgid>
 *   alloc <device|async|managed|vmm|host> <bytes> [ptsz]
 *                                         -> ok <id> <ptr-hex> | fail <CUresult>
 *   free <id>                             -> ok | fail <CUresult>   (the kind's own free call)
 *   launch <n> [ptsz]                     -> ok   (n x cuLaunchKernel[_ptsz])
 *   launchex <n> [ptsz]                   -> ok   (n x cuLaunchKernelEx[_ptsz])
 *   graph <n> [ptsz]                      -> ok   (n x cuGraphLaunch[_ptsz])
 *   sync <stream|ctx|event> [ptsz]        -> ok   (ptsz: cuStreamSynchronize_ptsz)
 *   delay <ns>                            -> ok   (igStubSetSyncDelayNs)
 *   fail-next                             -> ok   (igStubFailNextAlloc; a `child` started
 *                                               before the next alloc inherits the flag, and
 *                                               the driver keeps its own copy)
 *   calls <cuda-function-name>            -> ok <n>  (igStubCalls: the stub's own call counter)
 *   child <cgroup-dir|-> <device-bytes> <launches>
 *                                         -> ok <child-pid> | err <reason>
 *       fork a child that moves itself into <cgroup-dir> (its cgroup.procs; `-`: stay), does
 *       cuMemAlloc_v2(<device-bytes>), <launches> x cuLaunchKernel, cuStreamSynchronize, tells
 *       the parent, then waits; it frees and exits on `child-exit` or when the driver exits.
 *   child-exit [pid]                      -> ok   (the newest child, or that one; waitpid'd)
 *   sleep <ms>                            -> ok
 *   quit                                  -> (no reply) exit(0) without freeing anything
 * Anything else: `err <reason>`. A failed launch/sync call: `fail <CUresult>`.
 * End of input behaves as quit.
 *
 * Allocation ids are indexes into a table of live allocations (bounded: kMaxAllocs); a freed id
 * is reused by a later allocation. Single-threaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef IG_STUB_LIB_PATH
#define IG_STUB_LIB_PATH "libcuda.so.1"
#endif

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUgraphExec;
typedef void *CUfunction;

/* The driver functions, resolved by name. Field order = kFnNames order. */
struct cuda_api {
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuCtxCreate_v2)(CUcontext *, unsigned int, CUdevice);
	CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree_v2)(CUdeviceptr);
	CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
	CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
	CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const void *,
				unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
				   unsigned int, unsigned int, unsigned int, unsigned int,
				   CUstream, void **, void **);
	CUresult (*cuLaunchKernel_ptsz)(CUfunction, unsigned int, unsigned int, unsigned int,
					unsigned int, unsigned int, unsigned int, unsigned int,
					CUstream, void **, void **);
	CUresult (*cuLaunchKernelEx)(const void *, CUfunction, void **, void **);
	CUresult (*cuLaunchKernelEx_ptsz)(const void *, CUfunction, void **, void **);
	CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
	CUresult (*cuGraphLaunch_ptsz)(CUgraphExec, CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuStreamSynchronize_ptsz)(CUstream);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuEventSynchronize)(CUevent);
	void (*igStubSetSyncDelayNs)(unsigned long long);
	void (*igStubFailNextAlloc)(void);
	long long (*igStubCalls)(int);
};

static const char *const kFnNames[] = {
	"cuInit", "cuDeviceGet", "cuCtxCreate_v2", "cuMemAlloc_v2", "cuMemFree_v2",
	"cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
	"cuMemAllocManaged", "cuMemCreate", "cuMemRelease", "cuMemHostAlloc", "cuMemFreeHost",
	"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
	"cuGraphLaunch", "cuGraphLaunch_ptsz", "cuStreamSynchronize", "cuStreamSynchronize_ptsz",
	"cuCtxSynchronize", "cuEventSynchronize", "igStubSetSyncDelayNs", "igStubFailNextAlloc",
	"igStubCalls",
};
_Static_assert(sizeof(kFnNames) / sizeof(kFnNames[0]) == sizeof(struct cuda_api) / sizeof(void *),
	       "kFnNames matches struct cuda_api");

/* The stub's counter order (stub_cuda.c enum ig_stub_fn), for `calls <name>`. */
static const char *const kStubCounterNames[] = {
	"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuCtxCreate_v2",
	"cuCtxDestroy_v2", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync",
	"cuMemAllocAsync_ptsz", "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemAllocManaged",
	"cuMemCreate", "cuMemRelease", "cuMemHostAlloc", "cuMemFreeHost", "cuLaunchKernel",
	"cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuGraphLaunch",
	"cuGraphLaunch_ptsz", "cuStreamSynchronize", "cuStreamSynchronize_ptsz",
	"cuCtxSynchronize", "cuEventSynchronize",
};

static struct cuda_api api;

enum alloc_kind { KIND_DEVICE, KIND_ASYNC, KIND_ASYNC_PTSZ, KIND_MANAGED, KIND_VMM, KIND_HOST };

struct allocation {
	int live;
	enum alloc_kind kind;
	unsigned long long ptr; /* device pointer, VMM handle or host pointer */
};

#define kMaxAllocs 65536
static struct allocation allocs[kMaxAllocs];

struct child {
	pid_t pid;   /* 0: slot free */
	int go_fd;   /* write end: closing it (or a byte) tells the child to free and exit */
	unsigned long seq; /* creation order: `child-exit` without a pid takes the newest */
};
static unsigned long child_seq;
#define kMaxChildren 16
static struct child children[kMaxChildren];

#define kMaxLine 4096
#define kMaxCount 100000000ULL /* launches per command */

static void reply(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Parses a whole unsigned decimal/hex token; 0 on success. */
static int parse_u64(const char *s, unsigned long long max, unsigned long long *out)
{
	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

/* `ptsz` as the optional last token: 1; absent: 0; anything else: -1. */
static int parse_ptsz(const char *tok)
{
	if (!tok)
		return 0;
	return strcmp(tok, "ptsz") == 0 ? 1 : -1;
}

#define REQUIRE(fn)                                   \
	do {                                          \
		if (!api.fn) {                        \
			reply("err missing %s", #fn); \
			return;                       \
		}                                     \
	} while (0)

static void cmd_alloc(char **tok, int n)
{
	unsigned long long bytes;
	if (n < 3 || n > 4 || parse_u64(tok[2], (unsigned long long)SIZE_MAX, &bytes)) {
		reply("err usage: alloc <device|async|managed|vmm|host> <bytes> [ptsz]");
		return;
	}
	int ptsz = parse_ptsz(n == 4 ? tok[3] : NULL);
	const char *k = tok[1];
	enum alloc_kind kind;
	if (!strcmp(k, "device"))
		kind = KIND_DEVICE;
	else if (!strcmp(k, "async"))
		kind = KIND_ASYNC;
	else if (!strcmp(k, "managed"))
		kind = KIND_MANAGED;
	else if (!strcmp(k, "vmm"))
		kind = KIND_VMM;
	else if (!strcmp(k, "host"))
		kind = KIND_HOST;
	else {
		reply("err unknown allocation kind '%s'", k);
		return;
	}
	if (ptsz < 0 || (ptsz && kind != KIND_ASYNC)) {
		reply("err ptsz applies to async allocations only");
		return;
	}
	int id = -1;
	for (int i = 0; i < kMaxAllocs; i++)
		if (!allocs[i].live) {
			id = i;
			break;
		}
	if (id < 0) {
		reply("err allocation table full (%d)", kMaxAllocs);
		return;
	}
	unsigned long long ptr = 0;
	CUresult r;
	switch (kind) {
	case KIND_DEVICE:
		REQUIRE(cuMemAlloc_v2);
		REQUIRE(cuMemFree_v2);
		r = api.cuMemAlloc_v2(&ptr, (size_t)bytes);
		break;
	case KIND_ASYNC:
		if (ptsz) {
			REQUIRE(cuMemAllocAsync_ptsz);
			REQUIRE(cuMemFreeAsync_ptsz);
			r = api.cuMemAllocAsync_ptsz(&ptr, (size_t)bytes, NULL);
			kind = KIND_ASYNC_PTSZ;
		} else {
			REQUIRE(cuMemAllocAsync);
			REQUIRE(cuMemFreeAsync);
			r = api.cuMemAllocAsync(&ptr, (size_t)bytes, NULL);
		}
		break;
	case KIND_MANAGED:
		REQUIRE(cuMemAllocManaged);
		REQUIRE(cuMemFree_v2);
		r = api.cuMemAllocManaged(&ptr, (size_t)bytes, 1 /* CU_MEM_ATTACH_GLOBAL */);
		break;
	case KIND_VMM: {
		REQUIRE(cuMemCreate);
		REQUIRE(cuMemRelease);
		/* The stub does not read the properties; a zeroed block stands in for them. */
		unsigned char prop[64] = { 0 };
		r = api.cuMemCreate(&ptr, (size_t)bytes, prop, 0);
		break;
	}
	case KIND_HOST: {
		REQUIRE(cuMemHostAlloc);
		REQUIRE(cuMemFreeHost);
		void *p = NULL;
		r = api.cuMemHostAlloc(&p, (size_t)bytes, 0);
		ptr = (unsigned long long)(uintptr_t)p;
		break;
	}
	default:
		r = -1;
	}
	if (r != 0) {
		reply("fail %d", r);
		return;
	}
	allocs[id].live = 1;
	allocs[id].kind = kind;
	allocs[id].ptr = ptr;
	reply("ok %d 0x%llx", id, ptr);
}

static void cmd_free(char **tok, int n)
{
	unsigned long long id;
	if (n != 2 || parse_u64(tok[1], kMaxAllocs - 1, &id)) {
		reply("err usage: free <id>");
		return;
	}
	struct allocation *a = &allocs[id];
	if (!a->live) {
		reply("err no live allocation %llu", id);
		return;
	}
	CUresult r;
	switch (a->kind) {
	case KIND_DEVICE:
	case KIND_MANAGED:
		r = api.cuMemFree_v2(a->ptr);
		break;
	case KIND_ASYNC:
		r = api.cuMemFreeAsync(a->ptr, NULL);
		break;
	case KIND_ASYNC_PTSZ:
		r = api.cuMemFreeAsync_ptsz(a->ptr, NULL);
		break;
	case KIND_VMM:
		r = api.cuMemRelease(a->ptr);
		break;
	case KIND_HOST:
		r = api.cuMemFreeHost((void *)(uintptr_t)a->ptr);
		break;
	default:
		r = -1;
	}
	/* Forget the entry whatever the result: the driver owns the pointer no longer. */
	a->live = 0;
	if (r != 0)
		reply("fail %d", r);
	else
		reply("ok");
}

/* A stand-in CUfunction / CUgraphExec / CUevent: the stub never dereferences them. */
static char fake_object;

static void cmd_launch(char **tok, int n, int which)
{
	static const char *const usage[] = { "launch", "launchex", "graph" };
	unsigned long long count;
	int ptsz = parse_ptsz(n == 3 ? tok[2] : NULL);
	if (n < 2 || n > 3 || ptsz < 0 || parse_u64(tok[1], kMaxCount, &count)) {
		reply("err usage: %s <n> [ptsz]", usage[which]);
		return;
	}
	void *obj = &fake_object;
	unsigned char config[64] = { 0 }; /* CUlaunchConfig stand-in */
	if (which == 0) {
		if (ptsz)
			REQUIRE(cuLaunchKernel_ptsz);
		else
			REQUIRE(cuLaunchKernel);
	} else if (which == 1) {
		if (ptsz)
			REQUIRE(cuLaunchKernelEx_ptsz);
		else
			REQUIRE(cuLaunchKernelEx);
	} else {
		if (ptsz)
			REQUIRE(cuGraphLaunch_ptsz);
		else
			REQUIRE(cuGraphLaunch);
	}
	for (unsigned long long i = 0; i < count; i++) {
		CUresult r;
		if (which == 0)
			r = (ptsz ? api.cuLaunchKernel_ptsz : api.cuLaunchKernel)(
				obj, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
		else if (which == 1)
			r = (ptsz ? api.cuLaunchKernelEx_ptsz : api.cuLaunchKernelEx)(config, obj,
										 NULL, NULL);
		else
			r = (ptsz ? api.cuGraphLaunch_ptsz : api.cuGraphLaunch)(obj, NULL);
		if (r != 0) {
			reply("fail %d", r);
			return;
		}
	}
	reply("ok");
}

static void cmd_sync(char **tok, int n)
{
	int ptsz = parse_ptsz(n == 3 ? tok[2] : NULL);
	if (n < 2 || n > 3 || ptsz < 0) {
		reply("err usage: sync <stream|ctx|event> [ptsz]");
		return;
	}
	CUresult r;
	if (!strcmp(tok[1], "stream")) {
		if (ptsz) {
			REQUIRE(cuStreamSynchronize_ptsz);
			r = api.cuStreamSynchronize_ptsz(NULL);
		} else {
			REQUIRE(cuStreamSynchronize);
			r = api.cuStreamSynchronize(NULL);
		}
	} else if (ptsz) {
		reply("err ptsz applies to sync stream only");
		return;
	} else if (!strcmp(tok[1], "ctx")) {
		REQUIRE(cuCtxSynchronize);
		r = api.cuCtxSynchronize();
	} else if (!strcmp(tok[1], "event")) {
		REQUIRE(cuEventSynchronize);
		r = api.cuEventSynchronize(&fake_object);
	} else {
		reply("err unknown sync kind '%s'", tok[1]);
		return;
	}
	if (r != 0)
		reply("fail %d", r);
	else
		reply("ok");
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

/* In the child: report "ok" or "err <reason>" on fd, one line. */
static void child_report(int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int len = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (len < 0)
		len = 0;
	if (len > (int)sizeof(buf) - 2)
		len = (int)sizeof(buf) - 2;
	buf[len++] = '\n';
	(void)write_all(fd, buf, (size_t)len);
}

static void child_main(const char *cgroup_dir, unsigned long long bytes,
		       unsigned long long launches, int ready_fd, int go_fd)
{
	if (strcmp(cgroup_dir, "-") != 0) {
		char path[kMaxLine + 32];
		snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup_dir);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		char pid[32];
		int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
		if (fd < 0 || write_all(fd, pid, (size_t)len) != 0) {
			child_report(ready_fd, "err cannot join %s: %s", path, strerror(errno));
			_exit(1);
		}
		close(fd);
	}
	CUdeviceptr ptr = 0;
	CUresult r = api.cuMemAlloc_v2(&ptr, (size_t)bytes);
	if (r != 0) {
		child_report(ready_fd, "err cuMemAlloc_v2 returned %d", r);
		_exit(1);
	}
	for (unsigned long long i = 0; i < launches; i++) {
		r = api.cuLaunchKernel(&fake_object, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
		if (r != 0) {
			child_report(ready_fd, "err cuLaunchKernel returned %d", r);
			_exit(1);
		}
	}
	r = api.cuStreamSynchronize(NULL);
	if (r != 0) {
		child_report(ready_fd, "err cuStreamSynchronize returned %d", r);
		_exit(1);
	}
	child_report(ready_fd, "ok");
	close(ready_fd);
	char c;
	ssize_t rd;
	do
		rd = read(go_fd, &c, 1); /* a byte or EOF (the parent is gone) */
	while (rd < 0 && errno == EINTR);
	api.cuMemFree_v2(ptr);
	_exit(0);
}

static void cmd_child(char **tok, int n)
{
	unsigned long long bytes, launches;
	if (n != 4 || parse_u64(tok[2], (unsigned long long)SIZE_MAX, &bytes) ||
	    parse_u64(tok[3], kMaxCount, &launches)) {
		reply("err usage: child <cgroup-dir|-> <device-bytes> <launches>");
		return;
	}
	REQUIRE(cuMemAlloc_v2);
	REQUIRE(cuMemFree_v2);
	REQUIRE(cuLaunchKernel);
	REQUIRE(cuStreamSynchronize);
	int slot = -1;
	for (int i = 0; i < kMaxChildren; i++)
		if (!children[i].pid) {
			slot = i;
			break;
		}
	if (slot < 0) {
		reply("err too many children (%d)", kMaxChildren);
		return;
	}
	int ready[2], go[2];
	if (pipe2(ready, O_CLOEXEC) != 0) {
		reply("err pipe: %s", strerror(errno));
		return;
	}
	if (pipe2(go, O_CLOEXEC) != 0) {
		reply("err pipe: %s", strerror(errno));
		close(ready[0]);
		close(ready[1]);
		return;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		reply("err fork: %s", strerror(errno));
		close(ready[0]);
		close(ready[1]);
		close(go[0]);
		close(go[1]);
		return;
	}
	if (pid == 0) {
		close(ready[0]);
		close(go[1]);
		/* Other children's go pipes: holding their write ends would keep them from
		 * seeing EOF when the driver exits. */
		for (int i = 0; i < kMaxChildren; i++)
			if (children[i].pid)
				close(children[i].go_fd);
		child_main(tok[1], bytes, launches, ready[1], go[0]);
	}
	close(ready[1]);
	close(go[0]);
	char buf[512];
	size_t len = 0;
	for (;;) {
		ssize_t rd = read(ready[0], buf + len, sizeof(buf) - 1 - len);
		if (rd < 0 && errno == EINTR)
			continue;
		if (rd <= 0)
			break;
		len += (size_t)rd;
		if (memchr(buf, '\n', len) || len == sizeof(buf) - 1)
			break;
	}
	close(ready[0]);
	buf[len] = '\0';
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = '\0';
	if (strcmp(buf, "ok") == 0) {
		children[slot].pid = pid;
		children[slot].go_fd = go[1];
		children[slot].seq = ++child_seq;
		reply("ok %d", (int)pid);
		return;
	}
	close(go[1]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (strncmp(buf, "err ", 4) == 0)
		reply("err child: %s", buf + 4);
	else
		reply("err child exited before it was ready");
}

static void cmd_child_exit(char **tok, int n)
{
	int slot = -1;
	if (n == 1) {
		unsigned long newest = 0;
		for (int i = 0; i < kMaxChildren; i++)
			if (children[i].pid && children[i].seq >= newest) {
				newest = children[i].seq;
				slot = i;
			}
	} else if (n == 2) {
		unsigned long long pid;
		if (parse_u64(tok[1], 0x7fffffff, &pid)) {
			reply("err usage: child-exit [pid]");
			return;
		}
		for (int i = 0; i < kMaxChildren; i++)
			if (children[i].pid == (pid_t)pid)
				slot = i;
	} else {
		reply("err usage: child-exit [pid]");
		return;
	}
	if (slot < 0) {
		reply("err no such child");
		return;
	}
	(void)write_all(children[slot].go_fd, "x", 1);
	close(children[slot].go_fd);
	int status;
	pid_t r;
	while ((r = waitpid(children[slot].pid, &status, 0)) < 0 && errno == EINTR)
		;
	children[slot].pid = 0;
	if (r < 0)
		reply("err waitpid: %s", strerror(errno));
	else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		reply("err child ended with status 0x%x", status);
	else
		reply("ok");
}

static void cmd_calls(char **tok, int n)
{
	if (n != 2) {
		reply("err usage: calls <cuda-function-name>");
		return;
	}
	REQUIRE(igStubCalls);
	for (size_t i = 0; i < sizeof(kStubCounterNames) / sizeof(kStubCounterNames[0]); i++)
		if (!strcmp(tok[1], kStubCounterNames[i])) {
			reply("ok %lld", api.igStubCalls((int)i));
			return;
		}
	reply("err unknown function '%s'", tok[1]);
}

/* Returns 1 on quit. */
static int run_command(char *line)
{
	char *tok[8];
	int n = 0;
	char *save = NULL;
	for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
		if (n == (int)(sizeof(tok) / sizeof(tok[0]))) {
			reply("err too many arguments");
			return 0;
		}
		tok[n++] = t;
	}
	if (n == 0) {
		reply("err empty command");
		return 0;
	}
	const char *c = tok[0];
	unsigned long long v;
	if (!strcmp(c, "pid")) {
		reply("ok %d", (int)getpid());
	} else if (!strcmp(c, "alloc")) {
		cmd_alloc(tok, n);
	} else if (!strcmp(c, "free")) {
		cmd_free(tok, n);
	} else if (!strcmp(c, "launch")) {
		cmd_launch(tok, n, 0);
	} else if (!strcmp(c, "launchex")) {
		cmd_launch(tok, n, 1);
	} else if (!strcmp(c, "graph")) {
		cmd_launch(tok, n, 2);
	} else if (!strcmp(c, "sync")) {
		cmd_sync(tok, n);
	} else if (!strcmp(c, "delay")) {
		if (n != 2 || parse_u64(tok[1], 3600ULL * 1000000000ULL, &v)) {
			reply("err usage: delay <ns> (at most an hour)");
			return 0;
		}
		if (!api.igStubSetSyncDelayNs) {
			reply("err missing igStubSetSyncDelayNs");
			return 0;
		}
		api.igStubSetSyncDelayNs(v);
		reply("ok");
	} else if (!strcmp(c, "fail-next")) {
		if (n != 1) {
			reply("err usage: fail-next");
			return 0;
		}
		if (!api.igStubFailNextAlloc) {
			reply("err missing igStubFailNextAlloc");
			return 0;
		}
		api.igStubFailNextAlloc();
		reply("ok");
	} else if (!strcmp(c, "calls")) {
		cmd_calls(tok, n);
	} else if (!strcmp(c, "child")) {
		cmd_child(tok, n);
	} else if (!strcmp(c, "child-exit")) {
		cmd_child_exit(tok, n);
	} else if (!strcmp(c, "sleep")) {
		if (n != 2 || parse_u64(tok[1], 3600ULL * 1000, &v)) {
			reply("err usage: sleep <ms> (at most an hour)");
			return 0;
		}
		struct timespec ts = { .tv_sec = (time_t)(v / 1000),
				       .tv_nsec = (long)(v % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		reply("ok");
	} else if (!strcmp(c, "quit")) {
		return 1;
	} else {
		reply("err unknown command '%.64s'", c);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *lib = IG_STUB_LIB_PATH;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--lib") && i + 1 < argc) {
			lib = argv[++i];
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: %s [--lib PATH]   (default %s); commands on stdin, see "
			       "tests/gpu/cuda_driver.c\n",
			       argv[0], IG_STUB_LIB_PATH);
			return 0;
		} else {
			fprintf(stderr, "%s: unknown argument '%s' (usage: %s [--lib PATH])\n",
				argv[0], argv[i], argv[0]);
			return 2;
		}
	}
	/* A test that closes its end early must not kill us with SIGPIPE mid-reply. */
	signal(SIGPIPE, SIG_IGN);

	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("err dlopen %s: %s\n", lib, dlerror());
		return 1;
	}
	void **slots = (void **)&api;
	for (size_t i = 0; i < sizeof(kFnNames) / sizeof(kFnNames[0]); i++)
		slots[i] = dlsym(h, kFnNames[i]);
	if (!api.cuInit || !api.cuDeviceGet || !api.cuCtxCreate_v2) {
		printf("err missing cuInit, cuDeviceGet or cuCtxCreate_v2 in %s\n", lib);
		return 1;
	}
	CUresult r;
	CUdevice dev = 0;
	CUcontext ctx = NULL;
	if ((r = api.cuInit(0)) != 0) {
		printf("err cuInit returned %d\n", r);
		return 1;
	}
	if ((r = api.cuDeviceGet(&dev, 0)) != 0) {
		printf("err cuDeviceGet returned %d\n", r);
		return 1;
	}
	if ((r = api.cuCtxCreate_v2(&ctx, 0, dev)) != 0) {
		printf("err cuCtxCreate_v2 returned %d\n", r);
		return 1;
	}
	reply("ready %d", (int)getpid());

	char line[kMaxLine];
	while (fgets(line, sizeof(line), stdin)) {
		size_t len = strlen(line);
		if (len && line[len - 1] == '\n') {
			line[len - 1] = '\0';
		} else if (!feof(stdin)) {
			/* Longer than the buffer: drop the rest of the line, one reply. */
			int ch;
			while ((ch = getchar()) != EOF && ch != '\n')
				;
			reply("err line too long");
			continue;
		}
		if (run_command(line))
			break;
	}
	fflush(stdout);
	exit(0);
}
