package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuBLAS and cuBLASLt entry points (cublas_api.h, cublasLt.h). Handles and
// descriptors are opaque pointers, held as uintptr; cublasStatus_t and the
// enums are 32-bit; int is 32-bit, long long and size_t 64-bit.
var blas struct {
	loaded bool

	cublasCreate               uintptr // cublasCreate_v2(cublasHandle_t *handle)
	cublasDestroy              uintptr // cublasDestroy_v2(cublasHandle_t handle)
	cublasSetStream            uintptr // cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
	cublasSetWorkspace         uintptr // cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes)
	cublasSetPointerMode       uintptr // cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
	cublasGemmEx               uintptr // see cublasGemmEx below
	cublasGemmStridedBatchedEx uintptr // see cublasGemmStridedBatchedEx below
	cublasGetStatusName        uintptr // const char *cublasGetStatusName(cublasStatus_t status); optional
	cublasGetStatusString      uintptr // const char *cublasGetStatusString(cublasStatus_t status); optional

	cublasLtCreate                       uintptr // cublasLtCreate(cublasLtHandle_t *lightHandle)
	cublasLtDestroy                      uintptr // cublasLtDestroy(cublasLtHandle_t lightHandle)
	cublasLtMatmulDescCreate             uintptr // cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType)
	cublasLtMatmulDescDestroy            uintptr // cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
	cublasLtMatmulDescSetAttribute       uintptr // cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t sizeInBytes)
	cublasLtMatrixLayoutCreate           uintptr // cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld)
	cublasLtMatrixLayoutDestroy          uintptr // cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
	cublasLtMatmulPreferenceCreate       uintptr // cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
	cublasLtMatmulPreferenceDestroy      uintptr // cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
	cublasLtMatmulPreferenceSetAttribute uintptr // cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t sizeInBytes)
	cublasLtMatmulAlgoGetHeuristic       uintptr // see cublasLtMatmulAlgoGetHeuristic below
	cublasLtMatmul                       uintptr // see cublasLtMatmul below
}

func blasSymbols() []symbol {
	return []symbol{
		{name: "cublasCreate_v2", addr: &blas.cublasCreate},
		{name: "cublasDestroy_v2", addr: &blas.cublasDestroy},
		{name: "cublasSetStream_v2", addr: &blas.cublasSetStream},
		{name: "cublasSetWorkspace_v2", addr: &blas.cublasSetWorkspace},
		{name: "cublasSetPointerMode_v2", addr: &blas.cublasSetPointerMode},
		{name: "cublasGemmEx", addr: &blas.cublasGemmEx},
		{name: "cublasGemmStridedBatchedEx", addr: &blas.cublasGemmStridedBatchedEx},
		{name: "cublasGetStatusName", addr: &blas.cublasGetStatusName, optional: true},
		{name: "cublasGetStatusString", addr: &blas.cublasGetStatusString, optional: true},
	}
}

func blasLtSymbols() []symbol {
	return []symbol{
		{name: "cublasLtCreate", addr: &blas.cublasLtCreate},
		{name: "cublasLtDestroy", addr: &blas.cublasLtDestroy},
		{name: "cublasLtMatmulDescCreate", addr: &blas.cublasLtMatmulDescCreate},
		{name: "cublasLtMatmulDescDestroy", addr: &blas.cublasLtMatmulDescDestroy},
		{name: "cublasLtMatmulDescSetAttribute", addr: &blas.cublasLtMatmulDescSetAttribute},
		{name: "cublasLtMatrixLayoutCreate", addr: &blas.cublasLtMatrixLayoutCreate},
		{name: "cublasLtMatrixLayoutDestroy", addr: &blas.cublasLtMatrixLayoutDestroy},
		{name: "cublasLtMatmulPreferenceCreate", addr: &blas.cublasLtMatmulPreferenceCreate},
		{name: "cublasLtMatmulPreferenceDestroy", addr: &blas.cublasLtMatmulPreferenceDestroy},
		{name: "cublasLtMatmulPreferenceSetAttribute", addr: &blas.cublasLtMatmulPreferenceSetAttribute},
		{name: "cublasLtMatmulAlgoGetHeuristic", addr: &blas.cublasLtMatmulAlgoGetHeuristic},
		{name: "cublasLtMatmul", addr: &blas.cublasLtMatmul},
	}
}

var (
	blasOnce sync.Once
	blasErr  error
)

// loadBLAS loads a matching libcublasLt and libcublas pair, once per
// process; its error wraps ErrNotAvailable.
func loadBLAS() error {
	blasOnce.Do(func() { blasErr = openBLAS() })
	return blasErr
}

func openBLAS() error {
	if err := Init(); err != nil {
		return err
	}
	path, err := findBLAS(blasDirs(os.Getenv, filepath.Glob))
	if err != nil {
		return err
	}
	blas.loaded = true
	addLibrary(path)
	return nil
}

// findBLAS loads the first libcublasLt and libcublas pair found in dirs
// that has every symbol, and resolves them; it returns libcublas's path.
func findBLAS(dirs []string) (string, error) {
	var failures []string
	for _, p := range blasCandidates(dirs) {
		if filepath.IsAbs(p.lt) {
			if _, err := os.Stat(p.lt); err != nil {
				continue
			}
		}
		lt, err := dlopen(p.lt)
		if err != nil {
			if filepath.IsAbs(p.lt) {
				failures = append(failures, err.Error())
			}
			continue
		}
		h, err := dlopen(p.blas)
		if err == nil {
			err = errors.Join(resolve(lt, p.lt, blasLtSymbols()), resolve(h, p.blas, blasSymbols()))
			if err != nil {
				dlclose(h)
			}
		}
		if err != nil {
			dlclose(lt)
			failures = append(failures, err.Error())
			continue
		}
		return p.blas, nil
	}
	shown := make([]string, len(dirs))
	for i, d := range dirs {
		if d == "" {
			d = "the loader's path"
		}
		shown[i] = d
	}
	msg := fmt.Sprintf("cuBLAS: no libcublasLt.so.{%s} in %s", strings.Join(blasSonameVersions, ","), strings.Join(shown, ", "))
	if len(failures) > 0 {
		msg += "; " + strings.Join(failures, "; ")
	}
	return "", unavailable("%s", msg)
}

func status(r uintptr) cublasStatus { return cublasStatus(int32(uint32(r))) }

func cublasStatusName(s cublasStatus) string {
	if blas.cublasGetStatusName == 0 {
		return ""
	}
	r, _, _ := purego.SyscallN(blas.cublasGetStatusName, uintptr(s))
	return goString(r)
}

func cublasStatusString(s cublasStatus) string {
	if blas.cublasGetStatusString == 0 {
		return ""
	}
	r, _, _ := purego.SyscallN(blas.cublasGetStatusString, uintptr(s))
	return goString(r)
}

func cublasCreate(h *uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasCreate, uintptr(unsafe.Pointer(h)))
	return status(r)
}

func cublasDestroy(h uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasDestroy, h)
	return status(r)
}

func cublasSetStream(h, s uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasSetStream, h, s)
	return status(r)
}

func cublasSetWorkspace(h uintptr, ws DevicePtr, size uint64) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasSetWorkspace, h, uintptr(ws), uintptr(size))
	return status(r)
}

const cublasPointerModeHost = 0 // CUBLAS_POINTER_MODE_HOST (cublasPointerMode_t)

// gemmAlgoDefault is CUBLAS_GEMM_DEFAULT (cublasGemmAlgo_t). A variable, so
// that converting it to uintptr sign-extends at run time; the callee reads
// the low 32 bits.
var gemmAlgoDefault int32 = -1

func cublasSetPointerMode(h uintptr, mode int32) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasSetPointerMode, h, uintptr(mode))
	return status(r)
}

// cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
// cublasOperation_t transb, int m, int n, int k, const void *alpha,
// const void *A, cudaDataType Atype, int lda, const void *B,
// cudaDataType Btype, int ldb, const void *beta, void *C,
// cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
// cublasGemmAlgo_t algo)
func cublasGemmEx(h uintptr, g colMajorGemm, alpha *float32, a DevicePtr, b DevicePtr, beta *float32, c DevicePtr,
	dt cudaDataType, ct cublasComputeType) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasGemmEx, h,
		uintptr(g.transa), uintptr(g.transb), uintptr(g.m), uintptr(g.n), uintptr(g.k),
		uintptr(unsafe.Pointer(alpha)),
		uintptr(a), uintptr(dt), uintptr(g.lda),
		uintptr(b), uintptr(dt), uintptr(g.ldb),
		uintptr(unsafe.Pointer(beta)),
		uintptr(c), uintptr(dt), uintptr(g.ldc),
		uintptr(ct), uintptr(gemmAlgoDefault))
	return status(r)
}

// cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t
// transa, cublasOperation_t transb, int m, int n, int k, const void *alpha,
// const void *A, cudaDataType Atype, int lda, long long int strideA,
// const void *B, cudaDataType Btype, int ldb, long long int strideB,
// const void *beta, void *C, cudaDataType Ctype, int ldc,
// long long int strideC, int batchCount, cublasComputeType_t computeType,
// cublasGemmAlgo_t algo)
func cublasGemmStridedBatchedEx(h uintptr, g colMajorGemm, alpha *float32,
	a DevicePtr, strideA int64, b DevicePtr, strideB int64, beta *float32, c DevicePtr, strideC int64, batch int,
	dt cudaDataType, ct cublasComputeType) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasGemmStridedBatchedEx, h,
		uintptr(g.transa), uintptr(g.transb), uintptr(g.m), uintptr(g.n), uintptr(g.k),
		uintptr(unsafe.Pointer(alpha)),
		uintptr(a), uintptr(dt), uintptr(g.lda), uintptr(strideA),
		uintptr(b), uintptr(dt), uintptr(g.ldb), uintptr(strideB),
		uintptr(unsafe.Pointer(beta)),
		uintptr(c), uintptr(dt), uintptr(g.ldc), uintptr(strideC),
		uintptr(batch), uintptr(ct), uintptr(gemmAlgoDefault))
	return status(r)
}

// ltHeuristicResult is cublasLtMatmulHeuristicResult_t (cublasLt.h):
// cublasLtMatmulAlgo_t algo (uint64_t data[8]); size_t workspaceSize;
// cublasStatus_t state; float wavesCount; int reserved[4]. 96 bytes.
type ltHeuristicResult struct {
	algo          [8]uint64
	workspaceSize uint64
	state         int32
	wavesCount    float32
	reserved      [4]int32
}

func cublasLtCreate(h *uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtCreate, uintptr(unsafe.Pointer(h)))
	return status(r)
}

func cublasLtDestroy(h uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtDestroy, h)
	return status(r)
}

func cublasLtMatmulDescCreate(d *uintptr, ct cublasComputeType, scale cudaDataType) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmulDescCreate, uintptr(unsafe.Pointer(d)), uintptr(ct), uintptr(scale))
	return status(r)
}

func cublasLtMatmulDescDestroy(d uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmulDescDestroy, d)
	return status(r)
}

// cublasLtMatmulDescSetAttribute passes a pointer to v and v's size, which
// the library checks against the attribute's type.
func cublasLtMatmulDescSetAttribute[T int32 | uint32 | uint64](d uintptr, attr int32, v T) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmulDescSetAttribute, d, uintptr(attr), uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v))
	return status(r)
}

func cublasLtMatrixLayoutCreate(l *uintptr, dt cudaDataType, rows, cols uint64, ld int64) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatrixLayoutCreate, uintptr(unsafe.Pointer(l)), uintptr(dt), uintptr(rows), uintptr(cols), uintptr(ld))
	return status(r)
}

func cublasLtMatrixLayoutDestroy(l uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatrixLayoutDestroy, l)
	return status(r)
}

func cublasLtMatmulPreferenceCreate(p *uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmulPreferenceCreate, uintptr(unsafe.Pointer(p)))
	return status(r)
}

func cublasLtMatmulPreferenceDestroy(p uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmulPreferenceDestroy, p)
	return status(r)
}

func cublasLtMatmulPreferenceSetAttribute[T uint32 | uint64](p uintptr, attr int32, v T) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmulPreferenceSetAttribute, p, uintptr(attr), uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v))
	return status(r)
}

// cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
// cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc, Bdesc,
// Cdesc, Ddesc, cublasLtMatmulPreference_t preference,
// int requestedAlgoCount, cublasLtMatmulHeuristicResult_t
// heuristicResultsArray[], int *returnAlgoCount), asking for len(res)
// results.
func cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, ld, pref uintptr, res []ltHeuristicResult, count *int32) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmulAlgoGetHeuristic, h, desc, la, lb, lc, ld, pref, uintptr(len(res)),
		uintptr(unsafe.Pointer(unsafe.SliceData(res))), uintptr(unsafe.Pointer(count)))
	return status(r)
}

// cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t
// computeDesc, const void *alpha, const void *A, cublasLtMatrixLayout_t
// Adesc, const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
// const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
// cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
// void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream)
func cublasLtMatmul(h, desc uintptr, alpha *float32, a DevicePtr, la uintptr, b DevicePtr, lb uintptr,
	beta *float32, c DevicePtr, lc uintptr, d DevicePtr, ld uintptr, algo *[8]uint64, ws DevicePtr, wsSize uint64, s uintptr) cublasStatus {
	r, _, _ := purego.SyscallN(blas.cublasLtMatmul, h, desc, uintptr(unsafe.Pointer(alpha)),
		uintptr(a), la, uintptr(b), lb, uintptr(unsafe.Pointer(beta)), uintptr(c), lc, uintptr(d), ld,
		uintptr(unsafe.Pointer(algo)), uintptr(ws), uintptr(wsSize), s)
	return status(r)
}
