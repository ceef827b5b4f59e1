package cudafake_test

import (
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/internal/cudafake"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// TestKernelEmulator runs testdata/emu's kernels on the emulator, through
// the fake driver and the Go bindings, in child processes: shuffles,
// ballots, __syncthreads(_or), shared memory, and the stand-ins for
// ldmatrix, mma.sync and cp.async compute what CUDA and the PTX ISA define
// (TestEmuRuns, in both schedules; the reverse one shows a race the
// forward one hides), and a kernel that misuses a barrier or a warp-wide
// operation fails the launch with the reason and leaves the context
// faulted, as a GPU would, instead of hanging (TestEmuFault, one child per
// kernel: a fault is sticky).
func TestKernelEmulator(t *testing.T) {
	opt := cudafake.EmulatedKernels("testdata/emu")
	cudafake.RunTests(t, "TestEmuRuns$", 1, opt)
	t.Run("reverse", func(t *testing.T) {
		t.Setenv("FLOWKIT_EMU_SCHEDULE", "reverse")
		cudafake.RunTests(t, "TestEmuRuns$", 1, opt)
	})
	for kernel, want := range map[string]string{
		"deadlock":            "emulated kernel deadlock failed: deadlock: block (0, 0, 0): deadlock: 16 threads wait at __syncthreads, 16 at warp operations, 0 exited",
		"exited":              "emulated kernel exited failed: exited: block (0, 0, 0) warp 0: a full-mask warp operation with 1 lanes exited",
		"misaligned_ldmatrix": "emulated kernel misaligned_ldmatrix failed: misaligned_ldmatrix: block (0, 0, 0) thread 0: ldmatrix: row address ",
		"mixed_warp_ops":      "emulated kernel mixed_warp_ops failed: mixed_warp_ops: block (0, 0, 0) warp 0: lanes at different warp-wide operations: lane 0 at __shfl_xor_sync, lane 16 at __ballot_sync",
	} {
		t.Run(kernel, func(t *testing.T) {
			t.Setenv("FLOWKIT_EMU_FAULT", kernel)
			log := cudafake.RunTests(t, "TestEmuFault$", 1, opt)
			require.Contains(t, log, "fake cuda: "+want)
		})
	}
}

// emu opens the fake device with testdata/emu's module, or skips t outside
// TestKernelEmulator's children.
func emu(t *testing.T) (*cu.Context, *cu.Stream, *cu.Module) {
	t.Helper()
	if os.Getenv("FLOWKIT_FAKE_CUDA_KERNELS") != "emu" {
		t.Skip("runs against the kernel emulator: see TestKernelEmulator")
	}
	require.NoError(t, cu.Init())
	ctx, err := cu.Open(0)
	require.NoError(t, err)
	s, err := ctx.NewStream()
	require.NoError(t, err)
	ptx, err := os.ReadFile("testdata/emu/emu.ptx")
	require.NoError(t, err)
	m, err := ctx.LoadPTX(append(ptx, 0))
	require.NoError(t, err)
	return ctx, s, m
}

// upload copies v to new device memory.
func upload[T any](t *testing.T, ctx *cu.Context, s *cu.Stream, v []T) cu.DevicePtr {
	t.Helper()
	n := units.Bytes(len(v)) * units.Bytes(unsafe.Sizeof(v[0]))
	p, err := ctx.Malloc(n)
	require.NoError(t, err)
	require.NoError(t, s.CopyHtoD(p, unsafe.Pointer(&v[0]), n))
	return p
}

// download copies len(v) elements from p into v.
func download[T any](t *testing.T, s *cu.Stream, v []T, p cu.DevicePtr) {
	t.Helper()
	require.NoError(t, s.CopyDtoH(unsafe.Pointer(&v[0]), p, units.Bytes(len(v))*units.Bytes(unsafe.Sizeof(v[0]))))
	require.NoError(t, s.Synchronize())
}

func TestEmuRuns(t *testing.T) {
	ctx, s, m := emu(t)
	fn := func(name string) *cu.Function {
		f, err := m.Function(name)
		require.NoError(t, err)
		return f
	}

	// Four blocks of 96 threads (three warps), 350 elements: the last warp
	// is partly out of range, and its sum covers its live lanes only.
	const n, block, blocks = 350, 96, 4
	x := make([]float32, blocks*block)
	for i := range n {
		x[i] = float32(i%7) + 0.25
	}
	dx, dy := upload(t, ctx, s, x), upload(t, ctx, s, make([]float32, blocks*block))
	require.NoError(t, s.Launch(fn("warp_sum"), cu.Dim3{X: blocks, Y: 1, Z: 1}, cu.Dim3{X: block, Y: 1, Z: 1}, 0, dx, dy, int32(n)))
	y := make([]float32, blocks*block)
	download(t, s, y, dy)
	for i := range n {
		var want float32
		for j := i / 32 * 32; j < i/32*32+32 && j < n; j++ {
			want += x[j]
		}
		require.InDelta(t, want, y[i], 1e-4, "warp_sum[%d]", i)
	}

	// reverse: shared memory seen by the whole block, per block.
	xi := make([]int32, 3*256)
	for i := range xi {
		xi[i] = int32(i)
	}
	dxi, dyi := upload(t, ctx, s, xi), upload(t, ctx, s, make([]int32, len(xi)))
	require.NoError(t, s.Launch(fn("reverse"), cu.Dim3{X: 3, Y: 1, Z: 1}, cu.Dim3{X: 256, Y: 1, Z: 1}, 0, dxi, dyi))
	yi := make([]int32, len(xi))
	download(t, s, yi, dyi)
	for i := range yi {
		require.Equal(t, int32(i/256*256+255-i%256), yi[i], "reverse[%d]", i)
	}

	// votes: block 0 all zero; block 1 one vote, in lane 5 of warp 1.
	v := make([]int32, 2*64)
	v[64+32+5] = 1
	dv, dany, dballot := upload(t, ctx, s, v), upload(t, ctx, s, []int32{-1, -1}), upload(t, ctx, s, []uint32{7, 7, 7, 7})
	require.NoError(t, s.Launch(fn("votes"), cu.Dim3{X: 2, Y: 1, Z: 1}, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, dv, dany, dballot))
	anyv, ballot := make([]int32, 2), make([]uint32, 4)
	download(t, s, anyv, dany)
	download(t, s, ballot, dballot)
	require.Equal(t, []int32{0, 1}, anyv)
	require.Equal(t, []uint32{0, 0, 0, 1 << 5}, ballot)

	// mma_tile: ldmatrix and mma.sync in the PTX ISA's fragment layouts
	// give a·b and a·bᵀ, exactly (small integers: every sum is exact).
	ab, bb := make([]uint16, 256), make([]uint16, 256)
	av, bv := make([]float64, 256), make([]float64, 256)
	for i := range 256 {
		av[i], bv[i] = float64((i*7)%11-5), float64((i*5)%13-6)
		ab[i], bb[i] = bf16Bits(av[i]), bf16Bits(bv[i])
	}
	dab, dbb, dc, dregs := upload(t, ctx, s, ab), upload(t, ctx, s, bb), upload(t, ctx, s, make([]float32, 512)), upload(t, ctx, s, make([]uint32, 32*12))
	require.NoError(t, s.Launch(fn("mma_tile"), cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 32, Y: 1, Z: 1}, 0, dab, dbb, dc, dregs))
	c, regs := make([]float32, 512), make([]uint32, 32*12)
	download(t, s, c, dc)
	download(t, s, regs, dregs)
	// The registers ldmatrix loaded, against the PTX ISA's tables for
	// mma.m16n8k16's operands (g = lane/4, t = lane%4; two bf16 a
	// register, the first in the low half): A's a0…a3 hold (g, 2t…),
	// (g+8, 2t…), (g, 2t+8…), (g+8, 2t+8…); B's b0, b1 hold (k 2t…, n g)
	// and (k 2t+8…, n g), for columns 0…7 and then 8…15.
	pair := func(m []uint16, r0, c0, r1, c1 int) uint32 { return uint32(m[16*r0+c0]) | uint32(m[16*r1+c1])<<16 }
	for l := range 32 {
		g, q := l/4, 2*(l%4)
		want := []uint32{
			pair(ab, g, q, g, q+1), pair(ab, g+8, q, g+8, q+1), pair(ab, g, q+8, g, q+9), pair(ab, g+8, q+8, g+8, q+9),
			pair(bb, q, g, q+1, g), pair(bb, q+8, g, q+9, g), pair(bb, q, g+8, q+1, g+8), pair(bb, q+8, g+8, q+9, g+8),
			pair(bb, g, q, g, q+1), pair(bb, g, q+8, g, q+9), pair(bb, g+8, q, g+8, q+1), pair(bb, g+8, q+8, g+8, q+9),
		}
		require.Equal(t, want, regs[12*l:12*l+12], "lane %d: a's registers, b's (.trans), b's", l)
	}
	for r := range 16 {
		for col := range 16 {
			var p, pt float64
			for k := range 16 {
				p += av[16*r+k] * bv[16*k+col]
				pt += av[16*r+k] * bv[16*col+k]
			}
			require.Equal(t, float32(p), c[16*r+col], "a·b [%d][%d]", r, col)
			require.Equal(t, float32(pt), c[256+16*r+col], "a·bᵀ [%d][%d]", r, col)
		}
	}

	// cp_async: the copies land at the wait (or at once in the reverse
	// schedule), zeros where the source size is 0.
	xc := make([]int32, 4*64)
	for i := range xc {
		xc[i] = int32(i + 1)
	}
	dxc, dbefore, dafter := upload(t, ctx, s, xc), upload(t, ctx, s, make([]int32, 64)), upload(t, ctx, s, make([]int32, 64))
	require.NoError(t, s.Launch(fn("cp_async"), cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, dxc, dbefore, dafter))
	before, after := make([]int32, 64), make([]int32, 64)
	download(t, s, before, dbefore)
	download(t, s, after, dafter)
	for i := range 64 {
		want := int32(-1)
		if os.Getenv("FLOWKIT_EMU_SCHEDULE") == "reverse" {
			want = 0
			if i%2 == 0 {
				want = xc[4*i]
			}
		}
		require.Equal(t, want, before[i], "before the wait, thread %d", i)
		j, sum := (i+1)%64, int32(0)
		if j%2 == 0 {
			sum = xc[4*j] + xc[4*j+1] + xc[4*j+2] + xc[4*j+3]
		}
		require.Equal(t, sum, after[i], "after the wait, thread %d", i)
	}

	// cp_async_groups: wait_group 1 leaves the second group pending (as late
	// as CUDA allows) or done (at once, in the reverse schedule).
	xg := make([]int32, 512)
	for i := range xg {
		xg[i] = int32(i + 1)
	}
	dxg, dgot := upload(t, ctx, s, xg), upload(t, ctx, s, make([]int32, 128))
	require.NoError(t, s.Launch(fn("cp_async_groups"), cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, dxg, dgot))
	got := make([]int32, 128)
	download(t, s, got, dgot)
	for i := range 64 {
		second := int32(-1)
		if os.Getenv("FLOWKIT_EMU_SCHEDULE") == "reverse" {
			second = xg[256+4*i]
		}
		require.Equal(t, []int32{xg[4*i], second}, got[2*i:2*i+2], "thread %d: the first group's word, the second's", i)
	}

	// racy_broadcast is right when thread 0 runs first, and the reverse
	// schedule shows its race: thread 63 reads v before thread 0 sets it.
	dxb, dyb := upload(t, ctx, s, []int32{10, 20}), upload(t, ctx, s, make([]int32, 128))
	require.NoError(t, s.Launch(fn("racy_broadcast"), cu.Dim3{X: 2, Y: 1, Z: 1}, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, dxb, dyb))
	yb := make([]int32, 128)
	download(t, s, yb, dyb)
	if os.Getenv("FLOWKIT_EMU_SCHEDULE") == "reverse" {
		require.NotEqual(t, yb[63], yb[0], "block 0's last thread, first to run, reads v before thread 0 sets it")
	} else {
		for i, v := range yb {
			require.Equal(t, int32(10*(1+i/64)), v, "y[%d]", i)
		}
	}
}

// bf16Bits is v in bfloat16 (v has at most 8 significant bits).
func bf16Bits(v float64) uint16 { return uint16(math.Float32bits(float32(v)) >> 16) }

func TestEmuFault(t *testing.T) {
	ctx, s, m := emu(t)
	f, err := m.Function(os.Getenv("FLOWKIT_EMU_FAULT"))
	require.NoError(t, err)
	dy := upload(t, ctx, s, make([]float32, 64))
	// The fake runs work as it is enqueued, so the launch itself may fail.
	err = s.Launch(f, cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 32, Y: 1, Z: 1}, 0, dy)
	if err == nil {
		err = s.Synchronize()
	}
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"), err.Error())
}
