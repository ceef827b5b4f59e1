package cuda

import (
	"fmt"
	"unsafe"

	"github.com/flowkit/flowkit/units"
)

// DevicePtr is a device address (CUdeviceptr). The zero value is the null
// pointer.
type DevicePtr uintptr

// Add returns p offset by n bytes.
func (p DevicePtr) Add(n units.Bytes) DevicePtr { return p + DevicePtr(n) }

// Malloc allocates n bytes of device memory, aligned to at least 256 bytes.
// Malloc(0) returns the null pointer and no error.
func (c *Context) Malloc(n units.Bytes) (DevicePtr, error) {
	if n < 0 {
		return 0, argError("Malloc", "negative size %d", n)
	}
	if n == 0 {
		return 0, nil
	}
	if err := c.enter(); err != nil {
		return 0, err
	}
	defer c.exit()
	var p DevicePtr
	if r := cuMemAlloc(&p, uint64(n)); r != cudaSuccess {
		return 0, driverError(fmt.Sprintf("cuMemAlloc_v2(%v)", n), r)
	}
	return p, nil
}

// Free releases memory from Malloc. Freeing the null pointer does nothing.
func (c *Context) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.exit()
	if r := cuMemFree(p); r != cudaSuccess {
		return driverError(fmt.Sprintf("cuMemFree_v2(%#x)", uintptr(p)), r)
	}
	return nil
}

// HostBuffer is page-locked host memory from MallocHost: copies between it
// and the device run asynchronously at full bus speed. It is C memory, so
// it may be handed to the driver freely, and must be released with FreeHost.
type HostBuffer struct {
	Ptr unsafe.Pointer
	Len units.Bytes
}

// Bytes returns the buffer as a byte slice (nil when empty).
func (h HostBuffer) Bytes() []byte {
	if h.Ptr == nil || h.Len <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(h.Ptr), int(h.Len))
}

// Float32s returns the buffer as float32s; a trailing partial element is
// left out.
func (h HostBuffer) Float32s() []float32 {
	if h.Ptr == nil || h.Len < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(h.Ptr), int(h.Len/4))
}

// Uint16s returns the buffer as uint16s, e.g. bfloat16 bit patterns.
func (h HostBuffer) Uint16s() []uint16 {
	if h.Ptr == nil || h.Len < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(h.Ptr), int(h.Len/2))
}

// MallocHost allocates n bytes of page-locked host memory
// (cuMemAllocHost_v2). MallocHost(0) returns an empty buffer.
func (c *Context) MallocHost(n units.Bytes) (HostBuffer, error) {
	if n < 0 {
		return HostBuffer{}, argError("MallocHost", "negative size %d", n)
	}
	if n == 0 {
		return HostBuffer{}, nil
	}
	if err := c.enter(); err != nil {
		return HostBuffer{}, err
	}
	defer c.exit()
	var p uintptr
	if r := cuMemAllocHost(&p, uint64(n)); r != cudaSuccess {
		return HostBuffer{}, driverError(fmt.Sprintf("cuMemAllocHost_v2(%v)", n), r)
	}
	return HostBuffer{Ptr: cPointer(p), Len: n}, nil
}

// FreeHost releases a buffer from MallocHost. Freeing an empty buffer does
// nothing.
func (c *Context) FreeHost(h HostBuffer) error {
	if h.Ptr == nil {
		return nil
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.exit()
	if r := cuMemFreeHost(h.Ptr); r != cudaSuccess {
		return driverError("cuMemFreeHost", r)
	}
	return nil
}
