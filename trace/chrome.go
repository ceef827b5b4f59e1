package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/flowkit/flowkit/units"
)

// Counter is a value over time on one of a trace's devices, which
// WriteChrome draws as a counter track under the device's streams (the
// live memory of plans.LiveMemory, say).
type Counter struct {
	Device int    // index into Trace.Devices
	Name   string // the track's name, with its unit
	Points []CounterPoint
}

// CounterPoint is a counter's value from At until the next point.
type CounterPoint struct {
	At    Time
	Value float64
}

// check says what is wrong with c as a counter of t, if anything.
func (c *Counter) check(t *Trace) error {
	if c.Device < 0 || c.Device >= len(t.Devices) {
		return fmt.Errorf("%w: counter %q on device %d, the trace has %d", ErrInvalid, c.Name, c.Device, len(t.Devices))
	}
	for i := 1; i < len(c.Points); i++ {
		if c.Points[i].At < c.Points[i-1].At {
			return fmt.Errorf("%w: counter %q on %s goes back in time at point %d (%d ns after %d ns)",
				ErrInvalid, c.Name, t.Devices[c.Device], i, c.Points[i].At, c.Points[i-1].At)
		}
	}
	return nil
}

// WriteChrome writes t in the Chrome trace event format (JSON), which
// Perfetto and chrome://tracing open: one process per device, one thread
// per stream, one complete ("X") event per event and stream it occupies, so
// a transfer shows on both ends; and a counter ("C") event per point of
// each counter, on its device. Timestamps are microseconds with three
// decimals, which keeps nanosecond precision. The output depends only on
// t and the counters.
func WriteChrome(w io.Writer, t *Trace, counters ...Counter) error {
	if err := t.Validate(); err != nil {
		return err
	}
	return writeChrome(w, t, counters...)
}

// writeChrome is WriteChrome of a trace that Validate passed.
func writeChrome(w io.Writer, t *Trace, counters ...Counter) error {
	for i := range counters {
		if err := counters[i].check(t); err != nil {
			return err
		}
	}
	bw := bufio.NewWriter(w)
	other, err := json.Marshal(map[string]string{"source": t.Source, "plan": t.Plan})
	if err != nil {
		return err
	}
	fmt.Fprintf(bw, `{"displayTimeUnit":"ns","otherData":%s,"traceEvents":[`, other)
	sep := "\n" // one event per line
	emit := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		bw.WriteString(sep)
		sep = ",\n"
		_, err = bw.Write(b) // a write error sticks, so checking the last suffices
		return err
	}
	for d, dev := range t.Devices {
		if err := emit(chromeMeta{Name: "process_name", Ph: "M", Pid: d, Args: chromeName{Name: dev}}); err != nil {
			return err
		}
		for s, stream := range t.Streams[d] {
			if err := emit(chromeMeta{Name: "thread_name", Ph: "M", Pid: d, Tid: s, Args: chromeName{Name: stream}}); err != nil {
				return err
			}
			if err := emit(chromeMeta{Name: "thread_sort_index", Ph: "M", Pid: d, Tid: s, Args: chromeSort{SortIndex: s}}); err != nil {
				return err
			}
		}
	}
	for _, e := range t.Events {
		task := &t.Tasks[e.Task]
		args := chromeArgs{Iter: e.Iter, Micro: e.Micro, Kind: task.Kind, Op: task.Op, Phase: task.Phase, FLOPs: task.FLOPs, Bytes: task.Bytes}
		for _, s := range task.Streams {
			ev := chromeEvent{
				Name: task.Name, Cat: task.Kind, Ph: "X",
				Ts: micros(e.Start), Dur: micros(e.End - e.Start),
				Pid: s.Device, Tid: s.Stream, Args: &args,
			}
			if err := emit(ev); err != nil {
				return err
			}
		}
	}
	for _, c := range counters {
		for _, pt := range c.Points {
			ev := chromeCounter{Name: c.Name, Ph: "C", Ts: micros(pt.At), Pid: c.Device, Args: map[string]float64{"value": pt.Value}}
			if err := emit(ev); err != nil {
				return err
			}
		}
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}

type chromeCounter struct {
	Name string             `json:"name"`
	Ph   string             `json:"ph"`
	Ts   micros             `json:"ts"`
	Pid  int                `json:"pid"`
	Args map[string]float64 `json:"args"`
}

type chromeEvent struct {
	Name string      `json:"name"`
	Cat  string      `json:"cat"`
	Ph   string      `json:"ph"`
	Ts   micros      `json:"ts"`
	Dur  micros      `json:"dur"`
	Pid  int32       `json:"pid"`
	Tid  int32       `json:"tid"`
	Args *chromeArgs `json:"args"`
}

type chromeArgs struct {
	Iter  int32       `json:"iter"`
	Micro int32       `json:"micro"`
	Kind  string      `json:"kind,omitempty"`
	Op    string      `json:"op,omitempty"`
	Phase string      `json:"phase,omitempty"`
	FLOPs units.FLOPs `json:"flops,omitempty"`
	Bytes units.Bytes `json:"bytes,omitempty"`
}

type chromeMeta struct {
	Name string `json:"name"`
	Ph   string `json:"ph"`
	Pid  int    `json:"pid"`
	Tid  int    `json:"tid"`
	Args any    `json:"args"`
}

type chromeName struct {
	Name string `json:"name"`
}

type chromeSort struct {
	SortIndex int `json:"sort_index"`
}

// micros is a nanosecond count that marshals as microseconds with exactly
// three decimals, so no precision is lost to float formatting.
type micros int64

func (m micros) MarshalJSON() ([]byte, error) {
	ns := int64(m)
	var b []byte
	if ns < 0 {
		b = append(b, '-')
	}
	u := uint64(ns)
	if ns < 0 {
		u = -u
	}
	b = strconv.AppendUint(b, u/1000, 10)
	b = append(b, '.')
	frac := u % 1000
	b = append(b, byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b, nil
}
