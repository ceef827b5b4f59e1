// Kernels that exercise the emulator's barriers, warp operations and
// shared memory (see emu_test.go), and two that misuse them.
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
