package cuda

import (
	"errors"
	"testing"
)

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{
			"driver",
			&Error{Library: Driver, Call: "cuMemAlloc_v2(1.00 GiB)", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Text: "out of memory"},
			"cuda: cuMemAlloc_v2(1.00 GiB): CUDA_ERROR_OUT_OF_MEMORY (2): out of memory",
		},
		{
			"with log",
			&Error{Library: Driver, Call: "cuModuleLoadDataEx", Code: 218, Name: "CUDA_ERROR_INVALID_PTX", Log: "ptxas: line 3: error\n"},
			"cuda: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218)\nptxas: line 3: error",
		},
		{
			"table fallback",
			driverError("cuStreamEndCapture", 901),
			"cuda: cuStreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)",
		},
		{
			"unknown driver code",
			driverError("cuX", 12345),
			"cuda: cuX: CUDA_ERROR (12345)",
		},
		{
			"cublas",
			blasError("cublasGemmEx", 7),
			"cuda: cublasGemmEx: CUBLAS_STATUS_INVALID_VALUE (7)",
		},
		{
			"not available",
			&notAvailable{reason: driverError("cuInit", 100)},
			"cuda: not available: cuInit: CUDA_ERROR_NO_DEVICE (100)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if drv.loaded {
				t.Skip("a driver is loaded; it names the codes itself")
			}
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNotAvailableWraps(t *testing.T) {
	reason := driverError("cuInit", 100)
	err := error(&notAvailable{reason: reason})
	if !errors.Is(err, ErrNotAvailable) {
		t.Error("errors.Is(err, ErrNotAvailable) = false")
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != 100 {
		t.Errorf("errors.As found %v, want the cuInit error", e)
	}
	if !errors.Is(err, &Error{Library: Driver, Code: 100}) {
		t.Error("errors.Is by code = false")
	}
	if errors.Is(err, &Error{Library: CuBLAS, Code: 100}) {
		t.Error("a cuBLAS code matched a driver error")
	}
}
