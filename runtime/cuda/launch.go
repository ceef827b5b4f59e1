package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Dim3 is a grid or block shape; a zero component is invalid.
type Dim3 struct{ X, Y, Z uint32 }

func (d Dim3) valid() bool { return d.X > 0 && d.Y > 0 && d.Z > 0 }

// kernelArgs holds kernel parameter values, each at its natural alignment
// in an 8-byte-aligned buffer, as cuLaunchKernel reads them: one pointer per
// parameter to a value of the parameter's size.
type kernelArgs struct {
	buf     []uint64
	offsets []uintptr // byte offset of each argument in buf
}

// argSize returns the size, which is also the alignment, of a kernel
// argument: the C types the kernel declares are 8 bytes for pointers,
// (unsigned) long long and double, 4 bytes for (unsigned) int and float.
func argSize(a any) (uintptr, bool) {
	switch a.(type) {
	case DevicePtr, int64, uint64, float64:
		return 8, true
	case int32, uint32, float32:
		return 4, true
	}
	return 0, false
}

// encodeArgs lays out args for cuLaunchKernel. Anything but DevicePtr,
// int32, uint32, int64, uint64, float32 and float64 is an error: Go's int
// and uintptr do not say which C type the kernel expects.
func encodeArgs(args []any) (kernelArgs, error) {
	var k kernelArgs
	var off uintptr
	k.offsets = make([]uintptr, len(args))
	for i, a := range args {
		size, ok := argSize(a)
		if !ok {
			return kernelArgs{}, argError("Launch", "argument %d has type %T; want DevicePtr, int32, uint32, int64, uint64, float32 or float64", i, a)
		}
		off = (off + size - 1) &^ (size - 1)
		k.offsets[i] = off
		off += size
	}
	k.buf = make([]uint64, (off+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(k.buf))), len(k.buf)*8)
	for i, a := range args {
		p := unsafe.Pointer(&b[k.offsets[i]])
		switch v := a.(type) {
		case DevicePtr:
			*(*uint64)(p) = uint64(v)
		case int64:
			*(*int64)(p) = v
		case uint64:
			*(*uint64)(p) = v
		case float64:
			*(*float64)(p) = v
		case int32:
			*(*int32)(p) = v
		case uint32:
			*(*uint32)(p) = v
		case float32:
			*(*float32)(p) = v
		}
	}
	return k, nil
}

// Launch enqueues f on s with the given grid, block and dynamic shared
// memory. args are the kernel's parameters in order; see encodeArgs for the
// accepted types. The driver copies the values during the call, so a
// captured launch keeps them.
func (s *Stream) Launch(f *Function, grid, block Dim3, sharedBytes int, args ...any) error {
	switch {
	case f == nil || f.h == 0:
		return argError("Launch", "nil function")
	case !grid.valid():
		return argError("Launch", "%s: invalid grid %v", f.name, grid)
	case !block.valid():
		return argError("Launch", "%s: invalid block %v", f.name, block)
	case sharedBytes < 0 || sharedBytes > math.MaxInt32:
		return argError("Launch", "%s: invalid shared memory size %d", f.name, sharedBytes)
	}
	k, err := encodeArgs(args)
	if err != nil {
		return err
	}
	// params is Go memory holding pointers into k.buf, passed to C: k.buf
	// must be pinned (cgo's pointer-passing rules).
	var params []unsafe.Pointer
	var pin runtime.Pinner
	defer pin.Unpin()
	if len(args) > 0 {
		base := unsafe.Pointer(unsafe.SliceData(k.buf))
		pin.Pin(base)
		params = make([]unsafe.Pointer, len(args))
		for i, off := range k.offsets {
			params[i] = unsafe.Add(base, off)
		}
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuLaunchKernel(f.h, grid, block, uint32(sharedBytes), s.h, unsafe.SliceData(params)); r != cudaSuccess {
		return driverError(fmt.Sprintf("cuLaunchKernel(%s, grid %v, block %v, shared %d)", f.name, grid, block, sharedBytes), r)
	}
	return nil
}
