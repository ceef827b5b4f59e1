/*
 * A CUDA kernel emulator for the fake driver: flowkit's .cu files compiled
 * for the host (emu.h), run one block at a time, each thread of a block on
 * its own fiber. A fiber runs until it finishes or reaches a barrier
 * (__syncthreads, a warp shuffle, ballot or other warp-wide instruction);
 * when every thread of a block or a warp waits, the scheduler releases
 * them. It runs one warp as far as it goes before __syncthreads, then the
 * next. Threads run in a fixed order, so runs are deterministic; code
 * that relies on lockstep execution without a barrier (wrong on GPUs since
 * Volta) gives wrong results here too, and a barrier that not all threads
 * reach is reported as a deadlock instead of hanging. FLOWKIT_EMU_SCHEDULE=reverse runs the threads of a
 * block, and the blocks of a grid, in the opposite order, and cp.async's
 * copies as early as they may be done rather than as late: a kernel whose
 * results differ between the two schedules has a race that a barrier, a
 * wait or an atomic should order.
 *
 * Fibers switch with a few instructions of x86-64 assembly (no signal masks,
 * unlike swapcontext), so a launch of a million threads takes tens of
 * milliseconds. Launches are serialized.
 */
#include "entry.h"
#include "emu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <unordered_map>

#if !defined(__x86_64__)
#error "the kernel emulator switches fibers in x86-64 assembly"
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

std::unordered_map<std::string, const emu::Entry *> &registry() {
	static std::unordered_map<std::string, const emu::Entry *> r;
	return r;
}

} // namespace

emu::Registrar::Registrar(const Entry *entries, int n) {
	for (int i = 0; i < n; i++) registry()[entries[i].name] = &entries[i];
}

/* emu_switch saves the callee-saved registers on the current stack and its
 * pointer in *from, and resumes the fiber whose stack pointer is to. */
extern "C" void emu_switch(void **from, void *to);
asm(R"(
	.text
	.globl emu_switch
	.type emu_switch, @function
emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size emu_switch, .-emu_switch
)");

namespace {

enum State { RUN, WAIT_BLOCK, WAIT_WARP, DONE, FAILED };

struct Fiber {
	void *sp;
	State state;
};

const size_t STACK = 128 << 10; /* per thread, with a guard page below */
const int MAX_THREADS = 1024;

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
char *stacks;       /* MAX_THREADS stacks, mapped on first use */
Fiber fibers[MAX_THREADS];
int nthreads, cur;
bool reverse; /* FLOWKIT_EMU_SCHEDULE=reverse */
void *sched_sp;
const emu::Entry *entry;
void **params;
uint64_t xchg[MAX_THREADS]; /* a warp's shuffle values, by thread */
const int GATHER = 32;               /* bytes a lane may give emu_warp_gather */
unsigned char gbuf[MAX_THREADS][GATHER]; /* a warp's gathered bytes, by thread */
char error[512];

/* A thread's cp.async copies not yet done. In the forward schedule each is
 * done as late as CUDA allows: when a cp.async.wait_group of its thread
 * lets no more than N committed groups stay pending, so that shared memory
 * read before the wait (or before the barrier after it) holds the old
 * bytes. In the reverse schedule each is done as early as it may be, when
 * it is issued, so that a copy into memory other threads still read (with
 * no barrier between their reads and the copy) goes over it. */
struct Copy {
	void *dst;
	const void *src;
	int bytes, size, group;
};
const int MAX_COPIES = 64;
Copy copies[MAX_THREADS][MAX_COPIES];
int ncopies[MAX_THREADS], commits[MAX_THREADS];

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* fail ends the launch with an error, from a fiber. */
void fail(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(error, sizeof error, "%s: block (%u, %u, %u) thread %d: ", entry->name, blockIdx.x, blockIdx.y,
	                 blockIdx.z, cur);
	vsnprintf(error + n, sizeof error - n, fmt, ap);
	va_end(ap);
	fibers[cur].state = FAILED;
	emu_switch(&fibers[cur].sp, sched_sp);
	abort(); /* a failed fiber is never resumed */
}

void wait(State s) {
	fibers[cur].state = s;
	emu_switch(&fibers[cur].sp, sched_sp);
}

/* warp_op[i] is the warp-wide operation thread i waits at: the lanes of a
 * warp released together must all be at the same kind. */
const char *warp_op[MAX_THREADS];

void wait_warp(const char *op) {
	warp_op[cur] = op;
	wait(WAIT_WARP);
}

void fiber_main() {
	entry->call(params);
	fibers[cur].state = DONE;
	emu_switch(&fibers[cur].sp, sched_sp);
	abort();
}

void start(int i) {
	uintptr_t *sp = (uintptr_t *)(stacks + (size_t)(i + 1) * STACK);
	*--sp = 0;                       /* fiber_main's return address: none */
	*--sp = (uintptr_t)fiber_main;   /* where emu_switch returns to */
	for (int r = 0; r < 6; r++) *--sp = 0;
	fibers[i].sp = sp;
	fibers[i].state = RUN;
	ncopies[i] = commits[i] = 0;
}

void set_thread(int i) {
	threadIdx.x = i % blockDim.x;
	threadIdx.y = i / blockDim.x % blockDim.y;
	threadIdx.z = i / (blockDim.x * blockDim.y);
}

/* release lets the threads waiting at a barrier go on: those of a warp whose
 * live lanes all wait at a warp barrier, or else the whole block when every
 * live thread waits at __syncthreads. It reports false if no thread can go
 * on (a deadlock), with the reason in error. */
bool release() {
	bool released = false;
	for (int w = 0; w < nthreads; w += 32) {
		int end = w + 32 < nthreads ? w + 32 : nthreads, waiting = 0, done = 0;
		for (int i = w; i < end; i++) {
			waiting += fibers[i].state == WAIT_WARP;
			done += fibers[i].state == DONE;
		}
		if (waiting == 0 || waiting + done < end - w) continue;
		if (done > 0) {
			snprintf(error, sizeof error, "%s: block (%u, %u, %u) warp %d: a full-mask warp operation with %d lanes exited",
			         entry->name, blockIdx.x, blockIdx.y, blockIdx.z, w / 32, done);
			return false;
		}
		for (int i = w; i < end; i++) fibers[i].state = RUN;
		released = true;
	}
	if (released) return true;
	int waiting = 0, live = 0;
	for (int i = 0; i < nthreads; i++) {
		live += fibers[i].state != DONE;
		waiting += fibers[i].state == WAIT_BLOCK;
	}
	if (waiting > 0 && waiting == live) {
		for (int i = 0; i < nthreads; i++)
			if (fibers[i].state == WAIT_BLOCK) fibers[i].state = RUN;
		return true;
	}
	int warp = 0;
	for (int i = 0; i < nthreads; i++) warp += fibers[i].state == WAIT_WARP;
	snprintf(error, sizeof error,
	         "%s: block (%u, %u, %u): deadlock: %d threads wait at __syncthreads, %d at warp operations, %d exited",
	         entry->name, blockIdx.x, blockIdx.y, blockIdx.z, waiting, warp, nthreads - live);
	return false;
}

/* run_warp runs the live lanes of the warp from thread w on, in the
 * schedule's order, until none can go on without the other warps: each
 * warp barrier they all reach lets them go on at once. It reports false
 * if a lane failed. */
bool run_warp(int w) {
	const int end = w + 32 < nthreads ? w + 32 : nthreads;
	for (;;) {
		for (int j = w; j < end; j++) {
			const int i = reverse ? end - 1 - (j - w) : j;
			if (fibers[i].state != RUN) continue;
			cur = i;
			set_thread(i);
			emu_switch(&sched_sp, fibers[i].sp);
			if (fibers[i].state == FAILED) return false;
		}
		for (int i = w; i < end; i++)
			if (fibers[i].state != WAIT_WARP) return true; /* at __syncthreads, done, or an error release() reports */
		for (int i = w + 1; i < end; i++)
			if (strcmp(warp_op[i], warp_op[w]) != 0) {
				snprintf(error, sizeof error, "%s: block (%u, %u, %u) warp %d: lanes at different warp-wide operations: lane 0 at %s, lane %d at %s",
				         entry->name, blockIdx.x, blockIdx.y, blockIdx.z, w / 32, warp_op[w], i - w, warp_op[i]);
				return false;
			}
		for (int i = w; i < end; i++) fibers[i].state = RUN;
	}
}

/* run_block runs every thread of the current block to the end, a warp at a
 * time (the last first in the reverse schedule), each as far as it goes
 * before a __syncthreads: one warp may be a whole loop iteration ahead of
 * another, as on a GPU, so that a barrier missing between them shows. */
bool run_block() {
	for (int i = 0; i < nthreads; i++) start(i);
	const int warps = (nthreads + 31) / 32;
	for (;;) {
		for (int k = 0; k < warps; k++)
			if (!run_warp(32 * (reverse ? warps - 1 - k : k))) return false;
		bool live = false;
		for (int i = 0; i < nthreads && !live; i++) live = fibers[i].state != DONE;
		if (!live) return true;
		if (!release()) return false;
	}
}

bool map_stacks() {
	if (stacks) return true;
	size_t size = (size_t)MAX_THREADS * STACK;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) return false;
	stacks = (char *)p;
	long page = sysconf(_SC_PAGESIZE);
	for (int i = 0; i < MAX_THREADS; i++) mprotect(stacks + (size_t)i * STACK, page, PROT_NONE);
	return true;
}

void check_mask(unsigned mask, const char *op) {
	if (mask != 0xffffffffu) fail("%s with mask %#x: the emulator supports full warps only", op, mask);
	int w = cur / 32 * 32;
	if (nthreads - w < 32) fail("%s in a partial warp of %d threads", op, nthreads - w);
}

} // namespace

void emu_fail(const char *fmt, ...) {
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fail("%s", msg);
	abort();
}

void __syncthreads() { wait(WAIT_BLOCK); }

int __syncthreads_or(int pred) {
	xchg[cur] = pred != 0;
	wait(WAIT_BLOCK);
	int r = 0;
	for (int i = 0; i < nthreads; i++) r |= fibers[i].state != DONE && xchg[i];
	wait(WAIT_BLOCK); /* everyone has read xchg */
	return r;
}

unsigned __ballot_sync(unsigned mask, int pred) {
	check_mask(mask, "__ballot_sync");
	int w = cur / 32 * 32;
	xchg[cur] = pred != 0;
	wait_warp("__ballot_sync");
	unsigned r = 0;
	for (int l = 0; l < 32; l++) r |= (unsigned)(xchg[w + l] != 0) << l;
	wait_warp("__ballot_sync");
	return r;
}

uint64_t emu_shfl_xor(unsigned mask, uint64_t bits, int lane_mask) {
	check_mask(mask, "__shfl_xor_sync");
	int w = cur / 32 * 32, lane = cur % 32;
	xchg[cur] = bits;
	wait_warp("__shfl_xor_sync");
	uint64_t r = xchg[w + ((lane ^ lane_mask) & 31)];
	wait_warp("__shfl_xor_sync");
	return r;
}

void emu_syncwarp(unsigned mask) {
	check_mask(mask, "__syncwarp");
	wait_warp("__syncwarp");
}

int emu_lane() { return cur % 32; }

void emu_warp_gather(const char *op, const void *mine, int bytes, void *all) {
	check_mask(0xffffffffu, op);
	if (bytes < 0 || bytes > GATHER) fail("%s: a gather of %d bytes a lane (at most %d)", op, bytes, GATHER);
	int w = cur / 32 * 32;
	memcpy(gbuf[cur], mine, (size_t)bytes);
	wait_warp(op);
	for (int l = 0; l < 32; l++) memcpy((unsigned char *)all + (size_t)l * bytes, gbuf[w + l], (size_t)bytes);
	wait_warp(op); /* everyone has read gbuf */
}

void emu_cp_async(void *dst, const void *src, int size, int bytes) {
	if ((uintptr_t)dst % size || (uintptr_t)src % size)
		fail("cp.async of %d bytes: %p or %p is not %d-byte aligned", size, dst, src, size);
	if (bytes < 0 || bytes > size) fail("cp.async of %d bytes with a source size of %d", size, bytes);
	if (reverse) {
		memcpy(dst, src, (size_t)bytes);
		memset((char *)dst + bytes, 0, (size_t)(size - bytes));
		return;
	}
	if (ncopies[cur] == MAX_COPIES) fail("more than %d cp.async copies pending in one thread", MAX_COPIES);
	copies[cur][ncopies[cur]++] = {dst, src, bytes, size, commits[cur]};
}

void emu_cp_async_commit() { commits[cur]++; }

void emu_cp_async_wait(int n) {
	int kept = 0;
	for (int i = 0; i < ncopies[cur]; i++) {
		Copy &c = copies[cur][i];
		if (c.group < commits[cur] - n) {
			memcpy(c.dst, c.src, (size_t)c.bytes);
			memset((char *)c.dst + c.bytes, 0, (size_t)(c.size - c.bytes));
		} else {
			copies[cur][kept++] = c;
		}
	}
	ncopies[cur] = kept;
}

extern "C" {

/* flowkit_emu_find returns the kernel called name, its parameter count and
 * the size of each parameter, or NULL if the library has no such kernel. */
const void *flowkit_emu_find(const char *name, int *nparams, const unsigned char **sizes) {
	auto it = registry().find(name);
	if (it == registry().end()) return NULL;
	*nparams = it->second->nparams;
	*sizes = it->second->sizes;
	return it->second;
}

/* flowkit_emu_launch runs kernel k over grid × block threads with params
 * as cuLaunchKernel's kernelParams. It returns 0, or -1 with the reason in
 * err. */
int flowkit_emu_launch(const void *k, const unsigned grid[3], const unsigned block[3], void **p, char *err,
                       size_t errlen) {
	pthread_mutex_lock(&mu);
	int rc = 0;
	unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
	if (threads == 0 || threads > MAX_THREADS) {
		snprintf(err, errlen, "%llu threads per block", threads);
		rc = -1;
	} else if (!map_stacks()) {
		snprintf(err, errlen, "cannot map %d fiber stacks", MAX_THREADS);
		rc = -1;
	} else {
		entry = (const emu::Entry *)k;
		params = p;
		nthreads = (int)threads;
		gridDim = {grid[0], grid[1], grid[2]};
		blockDim = {block[0], block[1], block[2]};
		const char *sched = getenv("FLOWKIT_EMU_SCHEDULE");
		reverse = sched && strcmp(sched, "reverse") == 0;
		auto at = [](unsigned i, unsigned n) { return reverse ? n - 1 - i : i; };
		for (unsigned z = 0; z < grid[2] && rc == 0; z++)
			for (unsigned y = 0; y < grid[1] && rc == 0; y++)
				for (unsigned x = 0; x < grid[0] && rc == 0; x++) {
					blockIdx = {at(x, grid[0]), at(y, grid[1]), at(z, grid[2])};
					if (!run_block()) {
						snprintf(err, errlen, "%s", error);
						rc = -1;
					}
				}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

} // extern "C"
