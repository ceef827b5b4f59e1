// Package cuda binds the CUDA driver API, cuBLAS and cuBLASLt, loaded at run
// time with purego: no cgo and no CUDA headers at build time, so the
// ordinary CGO_ENABLED=0 build is the GPU build, and the same binary runs
// on machines without a GPU, where Init reports ErrNotAvailable.
//
// # Loading
//
// Init loads the driver library, libcuda.so.1 (then libcuda.so) through the
// dynamic loader's path (LD_LIBRARY_PATH, the ld.so cache), then from
// /usr/local/nvidia/lib64, /usr/lib/x86_64-linux-gnu, /usr/lib64 and
// /usr/lib/wsl/lib; it resolves every entry point and calls cuInit once.
// The first NewBLAS or NewBLASLt loads libcublasLt and then libcublas of the
// same major version from the first directory that has them, in this order:
// $CUDA_HOME/lib64, /usr/local/cuda/lib64, the loader's path, then the
// folders pip wheels (PyTorch's dependencies, say) put cuBLAS in,
// nvidia/cublas/lib and nvidia/cu13/lib under the site-packages and
// dist-packages folders of /usr/lib/python3*, /usr/local/lib/python3*,
// ~/.local/lib/python3*, $VIRTUAL_ENV/lib/python3* and X/lib/python3* for
// every X/bin on PATH; in each it tries sonames .13, .12 and .11. When
// nothing loads, the error wraps ErrNotAvailable and says what was tried.
// Libraries lists what was loaded.
//
// Only entry points that exist from CUDA 11.4 through 13 are used, by their
// exported (often _v2) names, and devices are used through their primary
// context (cuDevicePrimaryCtxRetain), the one the CUDA runtime and so
// cuBLAS use too. Enum values and signatures are written next to each use
// with the header name they come from (cuda.h, cublas_api.h, cublasLt.h,
// library_types.h).
//
// # Threads
//
// The driver keeps a current context per OS thread, and goroutines move
// between threads. Every method therefore pins its goroutine to its thread
// (runtime.LockOSThread), makes the object's context current
// (cuCtxSetCurrent, a thread-local store in the driver) and unpins it after
// the call, so that all methods may be called from any goroutine. A thread
// is left with the context current afterwards; code in the same process
// that uses another context on its own threads must set it itself. BLAS and
// BLASLt serialize their calls on a mutex (a call only enqueues work; the
// BLASLt.Tune* calls, made once per shape, wait for their timings) and give
// each stream its own workspace, so one handle serves many streams.
//
// # Memory and arguments
//
// Pointers to Go memory passed to C are converted in the argument list of
// purego.SyscallN, whose //go:uintptrescapes keeps them alive and unmoved
// for the call. Kernel parameters and JIT log buffers, whose addresses are
// stored in arrays handed to the driver, are pinned with runtime.Pinner.
// Arguments are validated before any call (sizes, leading dimensions,
// alignment, nil pointers), so bad input is an error, not a crash.
//
// # Errors
//
// A failed call returns an *Error with the entry point, a summary of its
// arguments, and the status name, number and description, e.g.
//
//	cuda: cuMemAlloc_v2(1.00 GiB): CUDA_ERROR_OUT_OF_MEMORY (2): out of memory
//
// A failed PTX load carries the JIT compiler's log in Error.Log.
//
// # Graphs
//
// Stream.BeginCapture records the work enqueued on a stream, and on other
// streams that wait on its events, into a Graph instead of running it; the
// capture mode is relaxed because work arrives from several goroutines.
// Stream.EndCapture returns the Graph, Graph.Instantiate makes a GraphExec,
// and GraphExec.Launch replays all of it with one call. cuBLAS calls are
// capturable because each stream's workspace is set explicitly (see
// BLAS.Prepare to allocate it before a capture); Event.RecordExternal puts
// event records into the graph, for timing its parts. Copies from pageable
// Go memory cannot be captured; use HostBuffer.
package cuda
