// Package cudafake builds a fake CUDA driver (libcuda.so.1), cuBLAS and
// cuBLASLt for tests on machines without a GPU. Build compiles the C
// sources in src against NVIDIA's headers, which checks that every entry
// point has the prototype the headers declare, and returns the environment
// a child process needs to load the fakes instead of the real libraries;
// tests re-run their own binary with it (see runtime/cuda's TestFakeDriver).
//
// # The model
//
// Host memory stands in for device memory: a device pointer is a host
// address, so copies, memsets and GEMMs really run, on the host, and a bad
// pointer crashes or corrupts the process as it would corrupt a GPU. Every
// device allocation is tracked, and the fakes refuse (with an error and a
// line on stderr saying what) a copy, memset or GEMM whose device operand
// is not inside one allocation, a free of an unknown pointer, and, during
// stream capture, a copy from host memory that is not page-locked.
//
// Streams run their work at once, so an event is complete as soon as it
// is recorded. With FLOWKIT_FAKE_CUDA_STREAMS=async they run it only when
// the host must wait for it (a stream, event or context synchronization,
// an event query, a copy into pageable memory, a free of memory that
// queued work may use), one op at a time, always the runnable op enqueued
// last; an op after a cuStreamWaitEvent runs once the record it waits for
// has. A program that lacks a wait then reads what its producer has not
// yet written, and one that refills page-locked memory before the copy
// that reads it has run copies the new contents: the races a GPU may
// show, shown every time (async-oldest runs the oldest op first). A
// replayed graph's ops run the same way, the last captured first among
// those whose captured dependencies (stream order, event waits) have run.
// Pageable sources are staged when the copy is enqueued, as CUDA stages
// them. The tests of runtime/cuda and runtime run in both modes.
//
// Stream capture follows CUDA's rules: a stream that waits on
// an event recorded in a capture joins it, a capturing stream may not wait
// on an event recorded outside its capture, events recorded in a capture
// may not be synchronized or queried while it lasts, and EndCapture fails
// unless every stream that joined has been joined back. Captured work is
// replayed in order by cuGraphLaunch; event records with
// CU_EVENT_RECORD_EXTERNAL are graph nodes that record when replayed.
//
// Kernels: by default the only kernel is "saxpy", which the fake computes,
// and cuBLAS products are computed by reference code. With the NoopKernels
// option every .entry of a loaded PTX module can be resolved, and a launch
// checks its configuration (grid and block sizes, the entry's .maxntid,
// dynamic shared memory, the parameter array) and runs nothing; 64-bit
// arguments that point into the span of the allocations but into none of
// them are refused. Numbers mean nothing then, so products read their
// operands and write their results (β·C, or zeros) without computing:
// a training step of a CNN costs milliseconds, not seconds.
//
// With EmulatedKernels the launches run: the kernels' CUDA sources are
// compiled for the host with the emulator of src/emu (one fiber per CUDA
// thread, barriers and warp exchanges between fibers; see emu.cc), and
// products are computed by the reference code, so a GPU test checks the
// same numbers here as on a GPU, slower. Command fakecuda runs any command
// against the fakes.
//
// Calls run on the caller's thread; the fakes are safe for concurrent use
// from several streams, as the driver is.
package cudafake
