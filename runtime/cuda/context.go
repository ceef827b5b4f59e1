package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/flowkit/flowkit/units"
)

// deviceAttribute is CUdevice_attribute (cuda.h).
type deviceAttribute int32

const (
	attrClockRate           deviceAttribute = 13 // CU_DEVICE_ATTRIBUTE_CLOCK_RATE (kHz)
	attrMultiprocessorCount deviceAttribute = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrMemoryClockRate     deviceAttribute = 36 // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (kHz)
	attrGlobalMemBusWidth   deviceAttribute = 37 // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH (bits)
	attrL2CacheSize         deviceAttribute = 38 // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (bytes)
	attrComputeCapMajor     deviceAttribute = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrComputeCapMinor     deviceAttribute = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	attrMaxSharedOptin      deviceAttribute = 97 // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN (bytes)
)

// DeviceInfo describes a device, as the driver reports it.
type DeviceInfo struct {
	Ordinal     int
	Name        string
	Major       int // compute capability
	Minor       int
	SMs         int
	TotalMem    units.Bytes
	L2          units.Bytes
	ClockKHz    int // 0 if the driver no longer reports it
	MemClockKHz int // 0 if the driver no longer reports it
	BusWidth    int // memory bus width in bits, 0 if not reported
	Driver      int // DriverVersion, e.g. 13000

	// SharedPerBlockOptin is the most dynamic shared memory a block may use
	// after Function.SetMaxDynamicShared.
	SharedPerBlockOptin units.Bytes
}

// Context is a device's primary context, the one the CUDA runtime (and so
// cuBLAS) uses too. Its methods may be called from any goroutine.
type Context struct {
	dev    int32
	ctx    uintptr // CUcontext
	info   DeviceInfo
	closed atomic.Bool
}

var errClosed = errors.New("cuda: context is closed")

// Open initializes the driver and retains the primary context of the device
// with the given ordinal.
func Open(ordinal int) (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal > 1<<30 {
		return nil, argError("Open", "invalid device ordinal %d", ordinal)
	}
	c := &Context{}
	if r := cuDeviceGet(&c.dev, int32(ordinal)); r != cudaSuccess {
		return nil, driverError(fmt.Sprintf("cuDeviceGet(%d)", ordinal), r)
	}
	info, err := deviceInfo(ordinal, c.dev)
	if err != nil {
		return nil, err
	}
	c.info = info
	if r := cuDevicePrimaryCtxRetain(&c.ctx, c.dev); r != cudaSuccess {
		return nil, driverError(fmt.Sprintf("cuDevicePrimaryCtxRetain(%d)", ordinal), r)
	}
	return c, nil
}

func deviceInfo(ordinal int, dev int32) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: ordinal}
	name := make([]byte, 256)
	if r := cuDeviceGetName(name, dev); r != cudaSuccess {
		return info, driverError("cuDeviceGetName", r)
	}
	info.Name = cString(name)
	var total uint64
	if r := cuDeviceTotalMem(&total, dev); r != cudaSuccess {
		return info, driverError("cuDeviceTotalMem_v2", r)
	}
	info.TotalMem = units.Bytes(total)
	required := []struct {
		attr deviceAttribute
		dst  *int
	}{
		{attrComputeCapMajor, &info.Major},
		{attrComputeCapMinor, &info.Minor},
		{attrMultiprocessorCount, &info.SMs},
	}
	for _, a := range required {
		var v int32
		if r := cuDeviceGetAttribute(&v, a.attr, dev); r != cudaSuccess {
			return info, driverError(fmt.Sprintf("cuDeviceGetAttribute(%d)", a.attr), r)
		}
		*a.dst = int(v)
	}
	// Informational attributes: CUDA 13 deprecates the clock rates, so a
	// failure leaves the field 0 rather than failing Open.
	optional := func(attr deviceAttribute) int {
		var v int32
		if cuDeviceGetAttribute(&v, attr, dev) != cudaSuccess {
			return 0
		}
		return int(v)
	}
	info.L2 = units.Bytes(optional(attrL2CacheSize))
	info.ClockKHz = optional(attrClockRate)
	info.MemClockKHz = optional(attrMemoryClockRate)
	info.BusWidth = optional(attrGlobalMemBusWidth)
	info.SharedPerBlockOptin = units.Bytes(optional(attrMaxSharedOptin))
	var v int32
	if r := cuDriverGetVersion(&v); r != cudaSuccess {
		return info, driverError("cuDriverGetVersion", r)
	}
	info.Driver = int(v)
	return info, nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Info describes the context's device.
func (c *Context) Info() DeviceInfo { return c.info }

// Close releases the primary context. Everything allocated in it must be
// freed first; Close is a no-op the second time.
func (c *Context) Close() error {
	if c == nil || !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if r := cuDevicePrimaryCtxRelease(c.dev); r != cudaSuccess {
		return driverError("cuDevicePrimaryCtxRelease_v2", r)
	}
	return nil
}

// enter makes the context current on this goroutine's OS thread and keeps
// the goroutine on that thread until exit. Every driver call that depends
// on the current context sits between the two.
func (c *Context) enter() error {
	if c == nil {
		return errors.New("cuda: nil context")
	}
	if c.closed.Load() {
		return errClosed
	}
	runtime.LockOSThread()
	if r := cuCtxSetCurrent(c.ctx); r != cudaSuccess {
		runtime.UnlockOSThread()
		return driverError("cuCtxSetCurrent", r)
	}
	return nil
}

func (c *Context) exit() { runtime.UnlockOSThread() }

// Synchronize waits for all work in the context to finish.
func (c *Context) Synchronize() error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.exit()
	if r := cuCtxSynchronize(); r != cudaSuccess {
		return driverError("cuCtxSynchronize", r)
	}
	return nil
}

// MemInfo returns the free and total device memory.
func (c *Context) MemInfo() (free, total units.Bytes, err error) {
	if err := c.enter(); err != nil {
		return 0, 0, err
	}
	defer c.exit()
	var f, t uint64
	if r := cuMemGetInfo(&f, &t); r != cudaSuccess {
		return 0, 0, driverError("cuMemGetInfo_v2", r)
	}
	return units.Bytes(f), units.Bytes(t), nil
}
