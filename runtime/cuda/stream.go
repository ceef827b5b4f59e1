package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/flowkit/flowkit/units"
)

const (
	streamNonBlocking   = 0x1 // CU_STREAM_NON_BLOCKING (CUstream_flags)
	captureModeRelaxed  = 2   // CU_STREAM_CAPTURE_MODE_RELAXED (CUstreamCaptureMode)
	eventWaitDefault    = 0x0 // CU_EVENT_WAIT_DEFAULT (CUevent_wait_flags)
	graphInstantiateDef = 0   // no CUgraphInstantiate_flags
)

// Stream is an in-order queue of device work (CUstream). It does not
// synchronize with the legacy default stream. Its methods may be called
// from any goroutine; work enqueued concurrently from several goroutines
// runs in the order the calls reach the driver.
type Stream struct {
	ctx *Context
	h   uintptr // CUstream
}

// NewStream creates a non-blocking stream.
func (c *Context) NewStream() (*Stream, error) {
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.exit()
	s := &Stream{ctx: c}
	if r := cuStreamCreate(&s.h, streamNonBlocking); r != cudaSuccess {
		return nil, driverError("cuStreamCreate", r)
	}
	return s, nil
}

// enter checks s and makes its context current; see Context.enter.
func (s *Stream) enter() error {
	if s == nil || s.h == 0 {
		return errors.New("cuda: nil or destroyed stream")
	}
	return s.ctx.enter()
}

// Destroy releases the stream once its pending work is done; it is a
// no-op the second time.
func (s *Stream) Destroy() error {
	if s == nil || s.h == 0 {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuStreamDestroy(s.h); r != cudaSuccess {
		return driverError("cuStreamDestroy_v2", r)
	}
	s.h = 0
	return nil
}

// Synchronize waits for all work enqueued on s.
func (s *Stream) Synchronize() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuStreamSynchronize(s.h); r != cudaSuccess {
		return driverError("cuStreamSynchronize", r)
	}
	return nil
}

// checkCopy validates a copy's size and pointers; it reports whether there
// is anything to copy.
func checkCopy(call string, dstNil, srcNil bool, n units.Bytes) (bool, error) {
	switch {
	case n < 0:
		return false, argError(call, "negative size %d", n)
	case n == 0:
		return false, nil
	case dstNil:
		return false, argError(call, "nil destination")
	case srcNil:
		return false, argError(call, "nil source")
	}
	return true, nil
}

// CopyHtoD enqueues a copy of n bytes from host memory to the device. src
// should be a HostBuffer: from page-locked memory the copy is truly
// asynchronous and src must stay valid until it completes. From pageable
// (Go) memory the driver stages the data before returning, so Go memory
// without Go pointers may be passed, but not while s is being captured.
func (s *Stream) CopyHtoD(dst DevicePtr, src unsafe.Pointer, n units.Bytes) error {
	ok, err := checkCopy("CopyHtoD", dst == 0, src == nil, n)
	if !ok {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuMemcpyHtoDAsync(dst, src, uint64(n), s.h); r != cudaSuccess {
		return driverError(fmt.Sprintf("cuMemcpyHtoDAsync_v2(%v)", n), r)
	}
	return nil
}

// CopyDtoH enqueues a copy of n bytes from the device to host memory. Into
// a HostBuffer the copy is asynchronous; into pageable (Go) memory the
// driver returns only when the copy is done.
func (s *Stream) CopyDtoH(dst unsafe.Pointer, src DevicePtr, n units.Bytes) error {
	ok, err := checkCopy("CopyDtoH", dst == nil, src == 0, n)
	if !ok {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuMemcpyDtoHAsync(dst, src, uint64(n), s.h); r != cudaSuccess {
		return driverError(fmt.Sprintf("cuMemcpyDtoHAsync_v2(%v)", n), r)
	}
	return nil
}

// CopyDtoD enqueues a device-to-device copy of n bytes.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n units.Bytes) error {
	ok, err := checkCopy("CopyDtoD", dst == 0, src == 0, n)
	if !ok {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuMemcpyDtoDAsync(dst, src, uint64(n), s.h); r != cudaSuccess {
		return driverError(fmt.Sprintf("cuMemcpyDtoDAsync_v2(%v)", n), r)
	}
	return nil
}

// Memset32 enqueues setting count 32-bit words at dst to value; dst must be
// 4-byte aligned. For float32 data pass math.Float32bits(x).
func (s *Stream) Memset32(dst DevicePtr, value uint32, count int) error {
	switch {
	case count < 0:
		return argError("Memset32", "negative count %d", count)
	case count == 0:
		return nil
	case dst == 0:
		return argError("Memset32", "nil destination")
	case dst%4 != 0:
		return argError("Memset32", "destination %#x is not 4-byte aligned", uintptr(dst))
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuMemsetD32Async(dst, value, uint64(count), s.h); r != cudaSuccess {
		return driverError(fmt.Sprintf("cuMemsetD32Async(%d words)", count), r)
	}
	return nil
}

// Wait makes work enqueued on s after this call wait for e's last record.
func (s *Stream) Wait(e *Event) error {
	if e == nil || e.h == 0 {
		return argError("Wait", "nil or destroyed event")
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuStreamWaitEvent(s.h, e.h, eventWaitDefault); r != cudaSuccess {
		return driverError("cuStreamWaitEvent", r)
	}
	return nil
}

// BeginCapture starts capturing the work enqueued on s (and on streams that
// wait on events recorded in it) into a graph instead of running it. The
// capture is relaxed (CU_STREAM_CAPTURE_MODE_RELAXED) because work is
// enqueued from several goroutines, hence OS threads.
func (s *Stream) BeginCapture() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.ctx.exit()
	if r := cuStreamBeginCapture(s.h, captureModeRelaxed); r != cudaSuccess {
		return driverError("cuStreamBeginCapture_v2", r)
	}
	return nil
}

// EndCapture ends the capture begun by BeginCapture and returns the graph.
// Every stream that joined the capture must have rejoined s (s waits on an
// event recorded last in each) before the call.
func (s *Stream) EndCapture() (*Graph, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.ctx.exit()
	g := &Graph{ctx: s.ctx}
	if r := cuStreamEndCapture(s.h, &g.h); r != cudaSuccess {
		return nil, driverError("cuStreamEndCapture", r)
	}
	return g, nil
}
