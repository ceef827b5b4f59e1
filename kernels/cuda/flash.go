package cuda

import (
	"fmt"
	"math"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// flashKernels are the flash attention instances of one dtype and head
// width d (flash.cu): forward, dQ and dK/dV, each with the warps of its
// blocks as FlashBF16 and FlashF32 in flash.cu set them (a block takes 16
// rows a warp; a launch of more threads than a kernel's __launch_bounds__
// fails, and the tests check each launch against them).
type flashKernels struct {
	fwd, dq, dkdv *kernel
	fwdW, qW, kW  int
	d             int
}

// flash_fwd_T_dD(const T *qkv, T *out, float *lse, int seq, int heads, int kv, int hid, int causal, float scale)
// flash_dq_T_dD, flash_dkdv_T_dD(const T *qkv, const float *lse, const float *dv, const T *dout, T *dqkv, int seq, int heads, int kv, int hid, int causal, float scale)
var kFlash = func() map[flashKey]*flashKernels {
	m := map[flashKey]*flashKernels{}
	add := func(dt graph.DType, d, fw, qw, kw int) {
		n := fmt.Sprintf("%v_d%d", dt, d)
		m[flashKey{dt, d}] = &flashKernels{
			fwd:  def("flash", "flash_fwd_"+n, pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pF32),
			dq:   def("flash", "flash_dq_"+n, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pF32),
			dkdv: def("flash", "flash_dkdv_"+n, pPtr, pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pF32),
			fwdW: fw, qW: qw, kW: kw, d: d,
		}
	}
	for _, d := range []int{16, 32} {
		add(graph.F32, d, 4, 2, 2)
	}
	add(graph.F32, 64, 2, 1, 1)
	for _, d := range []int{16, 32, 64} {
		add(graph.BF16, d, 4, 4, 4)
	}
	add(graph.BF16, 128, 2, 2, 1)
	return m
}()

type flashKey struct {
	dt graph.DType
	d  int
}

// flash_prep_T(const T *out, const T *dout, float *dv, int batch, int seq, int heads, int d)
var kFlashPrep = defTyped("flash", "flash_prep", pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32)

// flashOf returns the instances for dt and head width d.
func flashOf(op string, dt graph.DType, d int) (*flashKernels, error) {
	if dt != graph.F32 && dt != graph.BF16 {
		return nil, fmt.Errorf("%w: %s: %v (want f32 or bf16)", ErrDType, op, dt)
	}
	if f, ok := kFlash[flashKey{dt, d}]; ok {
		return f, nil
	}
	widths := "16, 32 or 64"
	if dt == graph.BF16 {
		widths = "16, 32, 64 or 128"
	}
	return nil, argErr(op, "flash attention on the GPU takes %v heads %s wide, not %d", dt, widths, d)
}

// FlashAttentionSupported reports whether the flash attention kernels take
// an attention of these sizes in dt (as FlashAttentionForward takes them),
// and if not, why: for a plan's check before it runs.
func FlashAttentionSupported(dt graph.DType, batch, seq, heads, kvHeads, hid int) error {
	_, err := flashArgs("FlashAttention", dt, batch, seq, heads, kvHeads, hid)
	return err
}

// flashArgs checks the sizes of a flash attention and returns its kernels.
// Unlike the kernels that keep the probabilities, they hold no seq² of
// anything: seq is bounded by qkv's rows and the lse's elements alone.
func flashArgs(op string, dt graph.DType, batch, seq, heads, kvHeads, hid int) (*flashKernels, error) {
	d, _, err := attnShape(op, batch, seq, heads, kvHeads, hid)
	if err != nil {
		return nil, err
	}
	if err := fits32(op, "batch heads seq", batch, heads, seq); err != nil {
		return nil, err
	}
	if batch > 65535 || heads > 65535 { // a grid's y and z
		return nil, argErr(op, "batch %d, heads %d: a launch takes at most 65535 of each", batch, heads)
	}
	return flashOf(op, dt, d)
}

// blocksOf is a grid of blocks of rows rows over seq, one per head and
// sequence.
func blocksOf(seq, rows, heads, batch int) cu.Dim3 {
	return cu.Dim3{X: uint32((seq + rows - 1) / rows), Y: uint32(heads), Z: uint32(batch)}
}

func warps(w int) cu.Dim3 { return cu.Dim3{X: uint32(32 * w), Y: 1, Z: 1} }

// FlashAttentionForward sets out [batch·seq, hid] and lse [batch, heads,
// seq] (float32) as graph.Attention with Flash defines them, from qkv as
// AttentionForward takes it, without writing any score to memory.
func (k *Kernels) FlashAttentionForward(s *cu.Stream, dt graph.DType, qkv, out, lse cu.DevicePtr, batch, seq, heads, kvHeads, hid int, causal bool) error {
	const op = "FlashAttentionForward"
	f, err := flashArgs(op, dt, batch, seq, heads, kvHeads, hid)
	if err != nil || batch == 0 || seq == 0 {
		return err
	}
	if err := notNil(op, "qkv out lse", qkv, out, lse); err != nil {
		return err
	}
	return k.launch(s, f.fwd, blocksOf(seq, 16*f.fwdW, heads, batch), warps(f.fwdW),
		qkv, out, lse, int32(seq), int32(heads), int32(kvHeads), int32(hid), flag(causal), float32(1/math.Sqrt(float64(f.d))))
}

// FlashAttentionWorkspace is the scratch FlashAttentionBackward needs:
// rowsum(dO ⊙ O) of every row and head, float32.
func FlashAttentionWorkspace(batch, seq, heads int) units.Bytes {
	if batch <= 0 || seq <= 0 || heads <= 0 {
		return 0
	}
	return 4 * units.Bytes(batch) * units.Bytes(seq) * units.Bytes(heads)
}

// FlashAttentionBackward sets dqkv to the gradient of FlashAttentionForward
// given qkv, the out and lse it computed and dout, as graph.AttentionGrad
// with Flash defines it: flash_prep into work (FlashAttentionWorkspace
// bytes), then the dQ kernel and the dK, dV kernel, each element of dqkv
// written by one of them.
func (k *Kernels) FlashAttentionBackward(s *cu.Stream, dt graph.DType, qkv, out, lse, dout, dqkv, work cu.DevicePtr, batch, seq, heads, kvHeads, hid int, causal bool) error {
	const op = "FlashAttentionBackward"
	f, err := flashArgs(op, dt, batch, seq, heads, kvHeads, hid)
	if err != nil || batch == 0 || seq == 0 {
		return err
	}
	if err := notNil(op, "qkv out lse dout dqkv work", qkv, out, lse, dout, dqkv, work); err != nil {
		return err
	}
	prep, err := kFlashPrep.of(op, dt)
	if err != nil {
		return err
	}
	if err := k.flat(s, prep, int64(batch)*int64(heads)*int64(seq), out, dout, work, int32(batch), int32(seq), int32(heads), int32(f.d)); err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(f.d)))
	rest := []any{qkv, lse, work, dout, dqkv, int32(seq), int32(heads), int32(kvHeads), int32(hid), flag(causal), scale}
	if err := k.launch(s, f.dq, blocksOf(seq, 16*f.qW, heads, batch), warps(f.qW), rest...); err != nil {
		return err
	}
	return k.launch(s, f.dkdv, blocksOf(seq, 16*f.kW, kvHeads, batch), warps(f.kW), rest...)
}
