// Kernels that exercise the emulator's barriers, warp operations and
// shared memory (see emu_test.go), and four that misuse them.
#define KERNEL extern "C" __global__ void

// warp_sum: y[i] = the sum of x over i's warp, by a butterfly of shuffles.
KERNEL warp_sum(const float *x, float *y, int n) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	float v = i < n ? x[i] : 0.0f;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	if (i < n) y[i] = v;
}

// reverse: each block reverses its slice of x through shared memory.
KERNEL reverse(const int *x, int *y) {
	__shared__ int buf[1024];
	const int b = blockIdx.x * blockDim.x, t = threadIdx.x;
	buf[t] = x[b + t];
	__syncthreads();
	y[b + t] = buf[blockDim.x - 1 - t];
}

// votes: any[block] = OR over the block of x, ballot[warp] = the warp's bits.
KERNEL votes(const int *x, int *any, unsigned *ballot) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	const int a = __syncthreads_or(x[i]);
	const unsigned b = __ballot_sync(0xffffffffu, x[i]);
	if (threadIdx.x == 0) any[blockIdx.x] = a;
	if (threadIdx.x % 32 == 0) ballot[i / 32] = b;
}

// deadlock: half a warp at a shuffle, the other half at __syncthreads.
KERNEL deadlock(float *y) {
	if (threadIdx.x < 16)
		y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
	else
		__syncthreads();
}

// exited: lane 0 returns before its warp shuffles.
KERNEL exited(float *y) {
	if (threadIdx.x % 32 == 0) return;
	y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// racy_broadcast: thread 0 of each block reads the block's x into shared
// memory and every thread copies it to y, with no barrier in between: right
// only if thread 0 happens to run first.
KERNEL racy_broadcast(const int *x, int *y) {
	__shared__ int v;
	if (threadIdx.x == 0) v = x[blockIdx.x];
	y[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// mma_tile: one warp; c[0:256] = a·b and c[256:512] = a·bᵀ, with a and b
// 16×16 bf16 and c fp32, all row-major: a's A fragment and b's B fragments
// (two 8-column halves) loaded by ldmatrix, b's with .trans for a·b (b
// read as [k][n]) and without for a·bᵀ (b read as [n][k]), multiplied by
// mma.sync and stored from the C layout (ptx.h); regs[12·lane …] are the
// lane's registers as loaded: a's four, then b's (.trans), then b's.
KERNEL mma_tile(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c, uint32_t *regs) {
	__shared__ __attribute__((aligned(16))) __nv_bfloat16 as[256], bs[256];
	const int l = threadIdx.x, g = l / 4, t = l % 4;
	for (int i = l; i < 256; i += 32) as[i] = a[i], bs[i] = b[i];
	__syncwarp();
	uint32_t fa[4], fb[4], fbt[4];
	emu_ldmatrix_x4(fa, as + (l & 15) * 16 + (l >> 4) * 8, false);
	emu_ldmatrix_x4(fb, bs + (l & 15) * 16 + (l >> 4) * 8, true);
	emu_ldmatrix_x4(fbt, bs + ((l & 7) + (l >> 4) * 8) * 16 + ((l >> 3) & 1) * 8, false);
	for (int i = 0; i < 4; i++) regs[12 * l + i] = fa[i], regs[12 * l + 4 + i] = fb[i], regs[12 * l + 8 + i] = fbt[i];
	for (int half = 0; half < 2; half++) {
		const float z[4] = {0, 0, 0, 0};
		const uint32_t b0[2] = {fb[2 * half], fb[2 * half + 1]}, b1[2] = {fbt[2 * half], fbt[2 * half + 1]};
		float d[4], e[4];
		emu_mma_m16n8k16_bf16(d, fa, b0, z);
		emu_mma_m16n8k16_bf16(e, fa, b1, z);
		for (int i = 0; i < 4; i++) {
			const int r = g + 8 * (i / 2), col = 8 * half + 2 * t + i % 2;
			c[r * 16 + col] = d[i];
			c[256 + r * 16 + col] = e[i];
		}
	}
}

// misaligned_ldmatrix: a row address 2 bytes past a 16-byte boundary.
KERNEL misaligned_ldmatrix(float *y) {
	__shared__ __attribute__((aligned(16))) __nv_bfloat16 m[8 * 16];
	uint32_t r[4];
	emu_ldmatrix_x4(r, m + (threadIdx.x % 8) * 8 + 1, false);
	y[threadIdx.x] = (float)r[0];
}

// mixed_warp_ops: half a warp at a shuffle, the other half at a ballot.
KERNEL mixed_warp_ops(float *y) {
	if (threadIdx.x < 16)
		y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
	else
		y[threadIdx.x] = (float)__ballot_sync(0xffffffffu, 1);
}

// cp_async_groups: thread i starts two groups of copies, x[4i …] into a
// and then x[256 + 4i …] into b, waits until at most one group is pending
// and records a's and b's first words (a is there; b may not be, as late
// as CUDA allows: the old -1), then waits for both.
KERNEL cp_async_groups(const int *x, int *got) {
	__shared__ __attribute__((aligned(16))) int a[4 * 64], b[4 * 64];
	const int i = threadIdx.x;
	a[4 * i] = b[4 * i] = -1;
	emu_cp_async(a + 4 * i, x + 4 * i, 16, 16);
	emu_cp_async_commit();
	emu_cp_async(b + 4 * i, x + 256 + 4 * i, 16, 16);
	emu_cp_async_commit();
	emu_cp_async_wait(1);
	got[2 * i] = a[4 * i];
	got[2 * i + 1] = b[4 * i];
	emu_cp_async_wait(0);
}

// cp_async: thread i copies x[4i … 4i+3] into shared memory with cp.async
// (zeros if i is odd: a source size of 0), after setting it to -1; before
// its wait it writes what the first word holds to before[i] (the old -1 as
// late as CUDA allows, the new value in the reverse schedule), and after
// the wait and a barrier the sum of its neighbour's four words to after[i].
KERNEL cp_async(const int *x, int *before, int *after) {
	__shared__ __attribute__((aligned(16))) int s[4 * 64];
	const int i = threadIdx.x, n = blockDim.x;
	for (int k = 0; k < 4; k++) s[4 * i + k] = -1;
	emu_cp_async(s + 4 * i, x + 4 * i, 16, i % 2 ? 0 : 16);
	emu_cp_async_commit();
	before[i] = s[4 * i];
	emu_cp_async_wait(0);
	__syncthreads();
	const int j = (i + 1) % n;
	after[i] = s[4 * j] + s[4 * j + 1] + s[4 * j + 2] + s[4 * j + 3];
}
