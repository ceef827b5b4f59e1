package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotAvailable is wrapped by every error that means the CUDA driver or
// cuBLAS cannot be used on this machine: the library is missing, a symbol is
// missing, or cuInit fails (no device, driver too old).
var ErrNotAvailable = errors.New("cuda: not available")

// notAvailable wraps ErrNotAvailable and the reason, which may itself be an
// *Error.
type notAvailable struct{ reason error }

func (e *notAvailable) Error() string {
	return ErrNotAvailable.Error() + ": " + strings.TrimPrefix(e.reason.Error(), "cuda: ")
}

func (e *notAvailable) Unwrap() []error { return []error{ErrNotAvailable, e.reason} }

func unavailable(format string, args ...any) error {
	return &notAvailable{reason: fmt.Errorf(format, args...)}
}

// Library names the native library a status code came from.
type Library int

const (
	Driver Library = iota // libcuda: CUresult
	CuBLAS                // libcublas and libcublasLt: cublasStatus_t
)

// Error is a non-success status returned by the driver or cuBLAS.
type Error struct {
	Library Library
	Call    string // the C entry point and a summary of its arguments, e.g. "cuMemAlloc_v2(1.00 GiB)"
	Code    int    // the CUresult or cublasStatus_t
	Name    string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text    string // the driver's description (cuGetErrorString), empty for cuBLAS when unknown
	Log     string // extra detail, such as the JIT error log of a failed PTX load
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Text != "" {
		b.WriteString(": ")
		b.WriteString(e.Text)
	}
	if e.Log != "" {
		b.WriteString("\n")
		b.WriteString(strings.TrimRight(e.Log, "\n"))
	}
	return b.String()
}

// Is reports whether target is an *Error from the same library with the same
// code, so that callers can test errors.Is(err, &cuda.Error{Code: 2}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Library == e.Library && t.Code == e.Code
}

// cuResult is CUresult (cuda.h: typedef enum cudaError_enum).
type cuResult int32

// Driver status codes used by this package's logic (cuda.h).
const (
	cudaSuccess       cuResult = 0   // CUDA_SUCCESS
	cudaErrorNotReady cuResult = 600 // CUDA_ERROR_NOT_READY
)

// driverStatusNames is the fallback when cuGetErrorName is not loaded or does
// not know a code. Values from cuda.h (CUDA 11.8, unchanged since).
var driverStatusNames = map[cuResult]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	214: "CUDA_ERROR_ECC_UNCORRECTABLE",
	218: "CUDA_ERROR_INVALID_PTX",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	300: "CUDA_ERROR_INVALID_SOURCE",
	301: "CUDA_ERROR_FILE_NOT_FOUND",
	304: "CUDA_ERROR_OPERATING_SYSTEM",
	400: "CUDA_ERROR_INVALID_HANDLE",
	401: "CUDA_ERROR_ILLEGAL_STATE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	710: "CUDA_ERROR_ASSERT",
	714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
	715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS",
	717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	718: "CUDA_ERROR_INVALID_PC",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	800: "CUDA_ERROR_NOT_PERMITTED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
	903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
	905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	907: "CUDA_ERROR_CAPTURED_EVENT",
	908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	909: "CUDA_ERROR_TIMEOUT",
	910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
	999: "CUDA_ERROR_UNKNOWN",
}

// driverError builds the error for a failed driver call, asking the driver
// for the name and description when it is loaded.
func driverError(call string, r cuResult) *Error {
	e := &Error{Library: Driver, Call: call, Code: int(r)}
	if drv.loaded {
		e.Name, e.Text = cuErrorName(r), cuErrorString(r)
	}
	if e.Name == "" {
		e.Name = driverStatusNames[r]
	}
	if e.Name == "" {
		e.Name = "CUDA_ERROR"
	}
	return e
}

// cublasStatus is cublasStatus_t (cublas_api.h).
type cublasStatus int32

const (
	cublasSuccess      cublasStatus = 0  // CUBLAS_STATUS_SUCCESS
	cublasNotSupported cublasStatus = 15 // CUBLAS_STATUS_NOT_SUPPORTED
)

// blasStatusNames: cublas_api.h, cublasStatus_t.
var blasStatusNames = map[cublasStatus]string{
	0:  "CUBLAS_STATUS_SUCCESS",
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func blasError(call string, s cublasStatus) *Error {
	e := &Error{Library: CuBLAS, Call: call, Code: int(s), Name: blasStatusNames[s]}
	if blas.loaded {
		e.Text = cublasStatusString(s)
		if e.Name == "" {
			e.Name = cublasStatusName(s)
		}
	}
	if e.Name == "" {
		e.Name = "CUBLAS_STATUS"
	}
	return e
}

// argError reports invalid arguments caught before calling into C.
func argError(call, format string, args ...any) error {
	return fmt.Errorf("cuda: %s: %s", call, fmt.Sprintf(format, args...))
}
