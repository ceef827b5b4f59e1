package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// jitOption is CUjit_option (cuda.h).
type jitOption int32

const (
	jitInfoLogBuffer           jitOption = 3 // CU_JIT_INFO_LOG_BUFFER: char*
	jitInfoLogBufferSizeBytes  jitOption = 4 // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: unsigned int in, bytes filled out
	jitErrorLogBuffer          jitOption = 5 // CU_JIT_ERROR_LOG_BUFFER: char*
	jitErrorLogBufferSizeBytes jitOption = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: unsigned int in, bytes filled out
)

// funcAttribute is CUfunction_attribute (cuda.h).
type funcAttribute int32

const funcAttrMaxDynamicSharedSizeBytes funcAttribute = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

// jitLogSize is the size of each JIT log buffer handed to the driver.
const jitLogSize = 16 << 10

// Module is loaded device code (CUmodule).
type Module struct {
	ctx *Context
	h   uintptr // CUmodule
}

// Function is a kernel of a Module (CUfunction).
type Function struct {
	mod  *Module
	h    uintptr // CUfunction
	name string
}

// LoadPTX JIT-compiles PTX for the context's device and loads it. A
// compilation failure's error carries ptxas's log in Error.Log.
func (c *Context) LoadPTX(ptx []byte) (*Module, error) {
	if len(ptx) == 0 {
		return nil, argError("LoadPTX", "empty PTX")
	}
	image := make([]byte, len(ptx)+1) // NUL-terminated: the driver reads PTX as a C string
	copy(image, ptx)
	infoLog := make([]byte, jitLogSize)
	errLog := make([]byte, jitLogSize)
	// The option values hold the logs' addresses, so the logs must be pinned
	// while the driver writes into them.
	var pin runtime.Pinner
	pin.Pin(&infoLog[0])
	pin.Pin(&errLog[0])
	defer pin.Unpin()
	options := []jitOption{jitInfoLogBuffer, jitInfoLogBufferSizeBytes, jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	values := []uintptr{
		uintptr(unsafe.Pointer(&infoLog[0])), jitLogSize,
		uintptr(unsafe.Pointer(&errLog[0])), jitLogSize,
	}

	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.exit()
	m := &Module{ctx: c}
	if r := cuModuleLoadDataEx(&m.h, &image[0], options, values); r != cudaSuccess {
		e := driverError("cuModuleLoadDataEx", r)
		e.Log = strings.TrimSpace(jitLog(errLog, values[3]))
		return nil, e
	}
	return m, nil
}

// jitLog returns the part of a log buffer the driver filled; filled is the
// value it wrote back into the size option (an unsigned int in a void*).
func jitLog(buf []byte, filled uintptr) string {
	n := int(uint32(filled))
	if n > len(buf) {
		n = len(buf)
	}
	return cString(buf[:n])
}

func (m *Module) enter() error {
	if m == nil || m.h == 0 {
		return errors.New("cuda: nil or unloaded module")
	}
	return m.ctx.enter()
}

// Function looks up a kernel by its (mangled, unless extern "C") name.
func (m *Module) Function(name string) (*Function, error) {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return nil, argError("Function", "invalid kernel name %q", name)
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.ctx.exit()
	cname := append([]byte(name), 0)
	f := &Function{mod: m, name: name}
	if r := cuModuleGetFunction(&f.h, m.h, &cname[0]); r != cudaSuccess {
		return nil, driverError(fmt.Sprintf("cuModuleGetFunction(%q)", name), r)
	}
	return f, nil
}

// Unload unloads the module; its Functions must not be used afterwards.
// It is a no-op the second time.
func (m *Module) Unload() error {
	if m == nil || m.h == 0 {
		return nil
	}
	if err := m.enter(); err != nil {
		return err
	}
	defer m.ctx.exit()
	if r := cuModuleUnload(m.h); r != cudaSuccess {
		return driverError("cuModuleUnload", r)
	}
	m.h = 0
	return nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// SetMaxDynamicShared allows launches of f with up to bytes of dynamic
// shared memory; above 48 KiB this opt-in is required (up to
// DeviceInfo.SharedPerBlockOptin).
func (f *Function) SetMaxDynamicShared(bytes int) error {
	if bytes < 0 || bytes > math.MaxInt32 {
		return argError("SetMaxDynamicShared", "invalid size %d", bytes)
	}
	if f == nil || f.h == 0 {
		return argError("SetMaxDynamicShared", "nil function")
	}
	if err := f.mod.enter(); err != nil {
		return err
	}
	defer f.mod.ctx.exit()
	if r := cuFuncSetAttribute(f.h, funcAttrMaxDynamicSharedSizeBytes, int32(bytes)); r != cudaSuccess {
		return driverError(fmt.Sprintf("cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES, %d)", f.name, bytes), r)
	}
	return nil
}
