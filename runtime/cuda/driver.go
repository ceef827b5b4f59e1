package cuda

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The driver API entry points, resolved from libcuda at Init. Each wrapper
// below calls purego.SyscallN directly so that the uintptr(unsafe.Pointer(…))
// conversions happen in the call expression of a //go:uintptrescapes
// function: the pointed-to Go values are heap-allocated and kept alive for
// the duration of the C call (rule 4 of package unsafe).
//
// Types, from cuda.h: CUresult is a 32-bit enum, read from the low half of
// the return register; CUdevice is int; CUdeviceptr is unsigned long long on
// 64-bit hosts; CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUgraph
// and CUgraphExec are opaque pointers, held here as uintptr; size_t is
// 64-bit. Names with _v2 are the symbols cuda.h's #defines map the plain
// names to; all of them exist in CUDA 11.4 through 13.
var drv struct {
	loaded bool

	cuInit                      uintptr // CUresult cuInit(unsigned int Flags)
	cuDriverGetVersion          uintptr // CUresult cuDriverGetVersion(int *driverVersion)
	cuGetErrorName              uintptr // CUresult cuGetErrorName(CUresult error, const char **pStr)
	cuGetErrorString            uintptr // CUresult cuGetErrorString(CUresult error, const char **pStr)
	cuDeviceGetCount            uintptr // CUresult cuDeviceGetCount(int *count)
	cuDeviceGet                 uintptr // CUresult cuDeviceGet(CUdevice *device, int ordinal)
	cuDeviceGetName             uintptr // CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
	cuDeviceGetAttribute        uintptr // CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
	cuDeviceTotalMem            uintptr // cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
	cuDevicePrimaryCtxRetain    uintptr // CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
	cuDevicePrimaryCtxRelease   uintptr // cuDevicePrimaryCtxRelease_v2(CUdevice dev)
	cuCtxSetCurrent             uintptr // CUresult cuCtxSetCurrent(CUcontext ctx)
	cuCtxSynchronize            uintptr // CUresult cuCtxSynchronize(void)
	cuMemGetInfo                uintptr // cuMemGetInfo_v2(size_t *free, size_t *total)
	cuMemAlloc                  uintptr // cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
	cuMemFree                   uintptr // cuMemFree_v2(CUdeviceptr dptr)
	cuMemAllocHost              uintptr // cuMemAllocHost_v2(void **pp, size_t bytesize)
	cuMemFreeHost               uintptr // CUresult cuMemFreeHost(void *p)
	cuMemcpyHtoDAsync           uintptr // cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
	cuMemcpyDtoHAsync           uintptr // cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
	cuMemcpyDtoDAsync           uintptr // cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
	cuMemsetD32Async            uintptr // CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
	cuStreamCreate              uintptr // CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
	cuStreamDestroy             uintptr // cuStreamDestroy_v2(CUstream hStream)
	cuStreamSynchronize         uintptr // CUresult cuStreamSynchronize(CUstream hStream)
	cuStreamWaitEvent           uintptr // CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
	cuStreamBeginCapture        uintptr // cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
	cuStreamEndCapture          uintptr // CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
	cuEventCreate               uintptr // CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
	cuEventDestroy              uintptr // cuEventDestroy_v2(CUevent hEvent)
	cuEventRecord               uintptr // CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
	cuEventRecordWithFlags      uintptr // CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
	cuEventSynchronize          uintptr // CUresult cuEventSynchronize(CUevent hEvent)
	cuEventQuery                uintptr // CUresult cuEventQuery(CUevent hEvent)
	cuEventElapsedTime          uintptr // CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
	cuModuleLoadDataEx          uintptr // CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues)
	cuModuleGetFunction         uintptr // CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
	cuModuleUnload              uintptr // CUresult cuModuleUnload(CUmodule hmod)
	cuFuncSetAttribute          uintptr // CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
	cuLaunchKernel              uintptr // CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, unsigned sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
	cuGraphGetNodes             uintptr // CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
	cuGraphDestroy              uintptr // CUresult cuGraphDestroy(CUgraph hGraph)
	cuGraphInstantiateWithFlags uintptr // CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
	cuGraphLaunch               uintptr // CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
	cuGraphExecDestroy          uintptr // CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
}

func driverSymbols() []symbol {
	return []symbol{
		{name: "cuInit", addr: &drv.cuInit},
		{name: "cuDriverGetVersion", addr: &drv.cuDriverGetVersion},
		{name: "cuGetErrorName", addr: &drv.cuGetErrorName},
		{name: "cuGetErrorString", addr: &drv.cuGetErrorString},
		{name: "cuDeviceGetCount", addr: &drv.cuDeviceGetCount},
		{name: "cuDeviceGet", addr: &drv.cuDeviceGet},
		{name: "cuDeviceGetName", addr: &drv.cuDeviceGetName},
		{name: "cuDeviceGetAttribute", addr: &drv.cuDeviceGetAttribute},
		{name: "cuDeviceTotalMem_v2", addr: &drv.cuDeviceTotalMem},
		{name: "cuDevicePrimaryCtxRetain", addr: &drv.cuDevicePrimaryCtxRetain},
		{name: "cuDevicePrimaryCtxRelease_v2", addr: &drv.cuDevicePrimaryCtxRelease},
		{name: "cuCtxSetCurrent", addr: &drv.cuCtxSetCurrent},
		{name: "cuCtxSynchronize", addr: &drv.cuCtxSynchronize},
		{name: "cuMemGetInfo_v2", addr: &drv.cuMemGetInfo},
		{name: "cuMemAlloc_v2", addr: &drv.cuMemAlloc},
		{name: "cuMemFree_v2", addr: &drv.cuMemFree},
		{name: "cuMemAllocHost_v2", addr: &drv.cuMemAllocHost},
		{name: "cuMemFreeHost", addr: &drv.cuMemFreeHost},
		{name: "cuMemcpyHtoDAsync_v2", addr: &drv.cuMemcpyHtoDAsync},
		{name: "cuMemcpyDtoHAsync_v2", addr: &drv.cuMemcpyDtoHAsync},
		{name: "cuMemcpyDtoDAsync_v2", addr: &drv.cuMemcpyDtoDAsync},
		{name: "cuMemsetD32Async", addr: &drv.cuMemsetD32Async},
		{name: "cuStreamCreate", addr: &drv.cuStreamCreate},
		{name: "cuStreamDestroy_v2", addr: &drv.cuStreamDestroy},
		{name: "cuStreamSynchronize", addr: &drv.cuStreamSynchronize},
		{name: "cuStreamWaitEvent", addr: &drv.cuStreamWaitEvent},
		{name: "cuStreamBeginCapture_v2", addr: &drv.cuStreamBeginCapture},
		{name: "cuStreamEndCapture", addr: &drv.cuStreamEndCapture},
		{name: "cuEventCreate", addr: &drv.cuEventCreate},
		{name: "cuEventDestroy_v2", addr: &drv.cuEventDestroy},
		{name: "cuEventRecord", addr: &drv.cuEventRecord},
		{name: "cuEventRecordWithFlags", addr: &drv.cuEventRecordWithFlags},
		{name: "cuEventSynchronize", addr: &drv.cuEventSynchronize},
		{name: "cuEventQuery", addr: &drv.cuEventQuery},
		{name: "cuEventElapsedTime", addr: &drv.cuEventElapsedTime},
		{name: "cuModuleLoadDataEx", addr: &drv.cuModuleLoadDataEx},
		{name: "cuModuleGetFunction", addr: &drv.cuModuleGetFunction},
		{name: "cuModuleUnload", addr: &drv.cuModuleUnload},
		{name: "cuFuncSetAttribute", addr: &drv.cuFuncSetAttribute},
		{name: "cuLaunchKernel", addr: &drv.cuLaunchKernel},
		{name: "cuGraphGetNodes", addr: &drv.cuGraphGetNodes},
		{name: "cuGraphDestroy", addr: &drv.cuGraphDestroy},
		{name: "cuGraphInstantiateWithFlags", addr: &drv.cuGraphInstantiateWithFlags},
		{name: "cuGraphLaunch", addr: &drv.cuGraphLaunch},
		{name: "cuGraphExecDestroy", addr: &drv.cuGraphExecDestroy},
	}
}

var (
	initOnce sync.Once
	initErr  error
)

// Init loads libcuda and initializes the driver, once per process. Its error
// wraps ErrNotAvailable and says why: which libraries were tried, a missing
// symbol, or cuInit's status.
func Init() error {
	initOnce.Do(func() { initErr = initDriver() })
	return initErr
}

func initDriver() error {
	if errLoader != nil {
		return unavailable("%w", errLoader)
	}
	h, path, err := openFirst(driverCandidates())
	if err != nil {
		return unavailable("%w", err)
	}
	if err := resolve(h, path, driverSymbols()); err != nil {
		return unavailable("%w", err)
	}
	drv.loaded = true
	addLibrary(path)
	if r := cuInit(0); r != cudaSuccess {
		return &notAvailable{reason: driverError("cuInit", r)}
	}
	return nil
}

// Libraries returns the paths (or sonames, when found through the loader's
// path) of the native libraries loaded so far: libcuda after Init, then
// libcublas after the first NewBLAS or NewBLASLt.
func Libraries() []string {
	libs.mu.Lock()
	defer libs.mu.Unlock()
	return slices.Clone(libs.paths)
}

var libs struct {
	mu    sync.Mutex
	paths []string
}

func addLibrary(path string) {
	libs.mu.Lock()
	defer libs.mu.Unlock()
	libs.paths = append(libs.paths, path)
}

// DriverVersion returns the CUDA version the driver supports, as
// 1000·major + 10·minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v int32
	if r := cuDriverGetVersion(&v); r != cudaSuccess {
		return 0, driverError("cuDriverGetVersion", r)
	}
	return int(v), nil
}

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n int32
	if r := cuDeviceGetCount(&n); r != cudaSuccess {
		return 0, driverError("cuDeviceGetCount", r)
	}
	return int(n), nil
}

// result reads a 32-bit enum return value from the full return register,
// whose upper half the C ABI leaves undefined.
func result(r uintptr) cuResult { return cuResult(int32(uint32(r))) }

func cuInit(flags uint32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuInit, uintptr(flags))
	return result(r)
}

func cuDriverGetVersion(v *int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDriverGetVersion, uintptr(unsafe.Pointer(v)))
	return result(r)
}

func cuErrorName(code cuResult) string {
	var s uintptr
	r, _, _ := purego.SyscallN(drv.cuGetErrorName, uintptr(code), uintptr(unsafe.Pointer(&s)))
	if result(r) != cudaSuccess {
		return ""
	}
	return goString(s)
}

func cuErrorString(code cuResult) string {
	var s uintptr
	r, _, _ := purego.SyscallN(drv.cuGetErrorString, uintptr(code), uintptr(unsafe.Pointer(&s)))
	if result(r) != cudaSuccess {
		return ""
	}
	return goString(s)
}

func cuDeviceGetCount(n *int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(n)))
	return result(r)
}

func cuDeviceGet(dev *int32, ordinal int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDeviceGet, uintptr(unsafe.Pointer(dev)), uintptr(ordinal))
	return result(r)
}

func cuDeviceGetName(buf []byte, dev int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev))
	return result(r)
}

func cuDeviceGetAttribute(v *int32, attr deviceAttribute, dev int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(v)), uintptr(attr), uintptr(dev))
	return result(r)
}

func cuDeviceTotalMem(n *uint64, dev int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDeviceTotalMem, uintptr(unsafe.Pointer(n)), uintptr(dev))
	return result(r)
}

func cuDevicePrimaryCtxRetain(ctx *uintptr, dev int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(ctx)), uintptr(dev))
	return result(r)
}

func cuDevicePrimaryCtxRelease(dev int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuDevicePrimaryCtxRelease, uintptr(dev))
	return result(r)
}

func cuCtxSetCurrent(ctx uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuCtxSetCurrent, ctx)
	return result(r)
}

func cuCtxSynchronize() cuResult {
	r, _, _ := purego.SyscallN(drv.cuCtxSynchronize)
	return result(r)
}

func cuMemGetInfo(free, total *uint64) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemGetInfo, uintptr(unsafe.Pointer(free)), uintptr(unsafe.Pointer(total)))
	return result(r)
}

func cuMemAlloc(p *DevicePtr, n uint64) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemAlloc, uintptr(unsafe.Pointer(p)), uintptr(n))
	return result(r)
}

func cuMemFree(p DevicePtr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemFree, uintptr(p))
	return result(r)
}

// cuMemAllocHost stores the C pointer as a uintptr: it is not Go memory.
func cuMemAllocHost(p *uintptr, n uint64) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemAllocHost, uintptr(unsafe.Pointer(p)), uintptr(n))
	return result(r)
}

func cuMemFreeHost(p unsafe.Pointer) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemFreeHost, uintptr(p))
	return result(r)
}

func cuMemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n uint64, s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), s)
	return result(r)
}

func cuMemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n uint64, s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), s)
	return result(r)
}

func cuMemcpyDtoDAsync(dst, src DevicePtr, n uint64, s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), s)
	return result(r)
}

func cuMemsetD32Async(dst DevicePtr, v uint32, n uint64, s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), s)
	return result(r)
}

func cuStreamCreate(s *uintptr, flags uint32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuStreamCreate, uintptr(unsafe.Pointer(s)), uintptr(flags))
	return result(r)
}

func cuStreamDestroy(s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuStreamDestroy, s)
	return result(r)
}

func cuStreamSynchronize(s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuStreamSynchronize, s)
	return result(r)
}

func cuStreamWaitEvent(s, e uintptr, flags uint32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuStreamWaitEvent, s, e, uintptr(flags))
	return result(r)
}

func cuStreamBeginCapture(s uintptr, mode uint32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuStreamBeginCapture, s, uintptr(mode))
	return result(r)
}

func cuStreamEndCapture(s uintptr, g *uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuStreamEndCapture, s, uintptr(unsafe.Pointer(g)))
	return result(r)
}

func cuEventCreate(e *uintptr, flags uint32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuEventCreate, uintptr(unsafe.Pointer(e)), uintptr(flags))
	return result(r)
}

func cuEventDestroy(e uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuEventDestroy, e)
	return result(r)
}

func cuEventRecord(e, s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuEventRecord, e, s)
	return result(r)
}

func cuEventRecordWithFlags(e, s uintptr, flags uint32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuEventRecordWithFlags, e, s, uintptr(flags))
	return result(r)
}

func cuEventSynchronize(e uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuEventSynchronize, e)
	return result(r)
}

func cuEventQuery(e uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuEventQuery, e)
	return result(r)
}

func cuEventElapsedTime(ms *float32, start, end uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuEventElapsedTime, uintptr(unsafe.Pointer(ms)), start, end)
	return result(r)
}

func cuModuleLoadDataEx(m *uintptr, image *byte, options []jitOption, values []uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuModuleLoadDataEx, uintptr(unsafe.Pointer(m)), uintptr(unsafe.Pointer(image)),
		uintptr(len(options)), uintptr(unsafe.Pointer(&options[0])), uintptr(unsafe.Pointer(&values[0])))
	return result(r)
}

func cuModuleGetFunction(f *uintptr, m uintptr, name *byte) cuResult {
	r, _, _ := purego.SyscallN(drv.cuModuleGetFunction, uintptr(unsafe.Pointer(f)), m, uintptr(unsafe.Pointer(name)))
	return result(r)
}

func cuModuleUnload(m uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuModuleUnload, m)
	return result(r)
}

func cuFuncSetAttribute(f uintptr, attr funcAttribute, v int32) cuResult {
	r, _, _ := purego.SyscallN(drv.cuFuncSetAttribute, f, uintptr(attr), uintptr(v))
	return result(r)
}

// cuLaunchKernel passes extra as NULL.
func cuLaunchKernel(f uintptr, grid, block Dim3, shared uint32, s uintptr, params *unsafe.Pointer) cuResult {
	r, _, _ := purego.SyscallN(drv.cuLaunchKernel, f,
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(shared), s, uintptr(unsafe.Pointer(params)), 0)
	return result(r)
}

// cuGraphGetNodes with nodes NULL returns the count in *n.
func cuGraphNodeCount(g uintptr, n *uint64) cuResult {
	r, _, _ := purego.SyscallN(drv.cuGraphGetNodes, g, 0, uintptr(unsafe.Pointer(n)))
	return result(r)
}

func cuGraphDestroy(g uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuGraphDestroy, g)
	return result(r)
}

func cuGraphInstantiateWithFlags(x *uintptr, g uintptr, flags uint64) cuResult {
	r, _, _ := purego.SyscallN(drv.cuGraphInstantiateWithFlags, uintptr(unsafe.Pointer(x)), g, uintptr(flags))
	return result(r)
}

func cuGraphLaunch(x, s uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuGraphLaunch, x, s)
	return result(r)
}

func cuGraphExecDestroy(x uintptr) cuResult {
	r, _, _ := purego.SyscallN(drv.cuGraphExecDestroy, x)
	return result(r)
}
