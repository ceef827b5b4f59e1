package cuda

import (
	"errors"
	"time"
)

const (
	eventDefault        = 0x0 // CU_EVENT_DEFAULT (CUevent_flags)
	eventDisableTiming  = 0x2 // CU_EVENT_DISABLE_TIMING
	eventRecordExternal = 0x1 // CU_EVENT_RECORD_EXTERNAL (CUevent_record_flags)
)

// Event marks a point in a stream (CUevent): other streams can wait for it,
// the host can wait for or poll it, and two timing events measure the device
// time between them.
type Event struct {
	ctx *Context
	h   uintptr // CUevent
}

// NewEvent creates an event; timing=false creates a lighter event that
// cannot be passed to Elapsed.
func (c *Context) NewEvent(timing bool) (*Event, error) {
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.exit()
	flags := uint32(eventDefault)
	if !timing {
		flags = eventDisableTiming
	}
	e := &Event{ctx: c}
	if r := cuEventCreate(&e.h, flags); r != cudaSuccess {
		return nil, driverError("cuEventCreate", r)
	}
	return e, nil
}

func (e *Event) enter() error {
	if e == nil || e.h == 0 {
		return errors.New("cuda: nil or destroyed event")
	}
	return e.ctx.enter()
}

// Destroy releases the event; it is a no-op the second time.
func (e *Event) Destroy() error {
	if e == nil || e.h == 0 {
		return nil
	}
	if err := e.enter(); err != nil {
		return err
	}
	defer e.ctx.exit()
	if r := cuEventDestroy(e.h); r != cudaSuccess {
		return driverError("cuEventDestroy_v2", r)
	}
	e.h = 0
	return nil
}

// Record enqueues the event on s. While s is being captured this becomes a
// dependency edge inside the graph, not a node; see RecordExternal.
func (e *Event) Record(s *Stream) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.ctx.exit()
	if s == nil || s.h == 0 {
		return argError("Record", "nil or destroyed stream")
	}
	if r := cuEventRecord(e.h, s.h); r != cudaSuccess {
		return driverError("cuEventRecord", r)
	}
	return nil
}

// RecordExternal records the event with CU_EVENT_RECORD_EXTERNAL. While s
// is being captured this adds an event record node to the graph, so every
// launch of the graph records the event: the way to time tasks inside a
// graph. cuda.h calls the flag invalid outside capture: use Record there.
func (e *Event) RecordExternal(s *Stream) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.ctx.exit()
	if s == nil || s.h == 0 {
		return argError("RecordExternal", "nil or destroyed stream")
	}
	if r := cuEventRecordWithFlags(e.h, s.h, eventRecordExternal); r != cudaSuccess {
		return driverError("cuEventRecordWithFlags", r)
	}
	return nil
}

// Synchronize waits until the work before the event's last record is done.
func (e *Event) Synchronize() error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.ctx.exit()
	if r := cuEventSynchronize(e.h); r != cudaSuccess {
		return driverError("cuEventSynchronize", r)
	}
	return nil
}

// Query reports whether the work before the event's last record is done,
// without waiting.
func (e *Event) Query() (done bool, err error) {
	if err := e.enter(); err != nil {
		return false, err
	}
	defer e.ctx.exit()
	switch r := cuEventQuery(e.h); r {
	case cudaSuccess:
		return true, nil
	case cudaErrorNotReady:
		return false, nil
	default:
		return false, driverError("cuEventQuery", r)
	}
}

// Elapsed returns the device time between two completed records of timing
// events (resolution about half a microsecond).
func Elapsed(start, end *Event) (time.Duration, error) {
	if err := start.enter(); err != nil {
		return 0, err
	}
	defer start.ctx.exit()
	if end == nil || end.h == 0 {
		return 0, argError("Elapsed", "nil or destroyed end event")
	}
	var ms float32
	if r := cuEventElapsedTime(&ms, start.h, end.h); r != cudaSuccess {
		return 0, driverError("cuEventElapsedTime", r)
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
