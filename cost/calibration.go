package cost

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowkit/flowkit/internal/jsonerr"
	"github.com/flowkit/flowkit/topology"
)

// CalibrationVersion is the calibration file format this package reads and
// writes.
const CalibrationVersion = 1

// ErrCalibration is wrapped by every error about a calibration file.
var ErrCalibration = errors.New("cost: bad calibration file")

// Calibration is the content of a calibration file: per device type, per
// op kind, a fitted model. It is plain data: a file measured on one machine
// (say, a GPU host) loads on any other. JSON form:
//
//	{
//	  "version": 1,
//	  "devices": {
//	    "cpu": {
//	      "cores": 2,
//	      "ops": {
//	        "matmul": {
//	          "launch_ns": 1800,
//	          "compute": {"max": 0.62, "half": 3.1e6, "gamma": 1.2},
//	          "memory":  {"max": 0.55, "half": 65536, "gamma": 1},
//	          "exact": [{"dtype": "f32", "shape": [256, 256, 256], "time_ns": 412000}],
//	          "fit": {"kind": "matmul", "samples": 40, "held_out": 10, "median_rel_err": 0.04, "max_rel_err": 0.11}
//	        }
//	      }
//	    }
//	  }
//	}
//
// Device keys are catalog device types; op kinds are the graph's op names,
// plus "*" for any kind without its own entry.
type Calibration struct {
	Version int                           `json:"version"`
	Devices map[string]*DeviceCalibration `json:"devices"`
}

// DeviceCalibration is the calibration of one device type.
type DeviceCalibration struct {
	Cores int    `json:"cores,omitempty"` // CPU: cores used while measuring
	Note  string `json:"note,omitempty"`  // e.g. the host and date of the run
	// Contention is how much a kernel slows while other devices of the
	// same host are busy: its time stretches by 1 + Contention per busy
	// device (CPU devices sharing caches and memory bandwidth). The op
	// fits are times of kernels running alone.
	Contention float64 `json:"contention,omitempty"`
	// OpContention is Contention by op kind, where it was measured: a
	// kernel bound by memory bandwidth (pooling, an activation) slows more
	// beside a busy neighbour than one bound by arithmetic (a
	// convolution's GEMM). A kind without an entry slows by Contention.
	OpContention map[string]float64 `json:"op_contention,omitempty"`
	// Dispatch is the time a firing on the device takes to start once
	// released by a firing of another stream: the runtime runs each
	// stream on a goroutine, which one stream's end wakes. Measured from
	// the waits in the traces of multi-device plans; 0 (absent in files
	// of before it was measured): none.
	Dispatch time.Duration `json:"dispatch_ns,omitempty"`
	// Probe is how fast the host ran two reference kernels while it was
	// calibrated; a later run probes again to tell whether the machine
	// still runs at that speed (nil in files of before it was taken, and
	// for GPUs).
	Probe *Probe            `json:"probe,omitempty"`
	Ops   map[string]*OpFit `json:"ops"`
}

// Probe is the time of two reference kernels on a host: a GEMM, bound by
// arithmetic, and a stream over memory, bound by bandwidth; each a low
// quantile of many runs (runtime.ProbeCPU). A shared machine (a cloud VM with noisy neighbours, a laptop
// changing clocks) runs every kernel slower or faster by about the same
// factor for minutes at a time: a calibration prices kernels at the speed of
// its own minutes, and a prediction checked later is off by the factor the
// probes show.
type Probe struct {
	GEMM   time.Duration `json:"gemm_ns"`
	Stream time.Duration `json:"stream_ns"`
	// Spread is, for the probe of a span (Over), how far apart its probes
	// were: per kernel (max − min) / median, the larger of the two. A
	// single probe on a shared machine is a moment's speed; many through
	// the span, their median, are the span's.
	Spread float64 `json:"spread,omitempty"`
}

// Change is how much slower (positive) or faster (negative) now runs than
// p, relative: the mean of the two kernels' changes.
func (p Probe) Change(now Probe) float64 {
	return (rel(now.GEMM, p.GEMM) + rel(now.Stream, p.Stream)) / 2
}

// Over returns the probe of a span probed several times: per kernel the
// median of the probes (the upper one of an even count), and their spread.
// It needs at least one probe.
func Over(probes []Probe) Probe {
	// medianSpread is the median of one kernel's times, and their spread.
	medianSpread := func(of func(Probe) time.Duration) (time.Duration, float64) {
		ts := make([]time.Duration, len(probes))
		for i, p := range probes {
			ts[i] = of(p)
		}
		slices.Sort(ts)
		med := ts[len(ts)/2]
		return med, float64(ts[len(ts)-1]-ts[0]) / float64(med)
	}
	gemm, gs := medianSpread(func(p Probe) time.Duration { return p.GEMM })
	stream, ss := medianSpread(func(p Probe) time.Duration { return p.Stream })
	return Probe{GEMM: gemm, Stream: stream, Spread: max(gs, ss)}
}

// rel is a/b − 1.
func rel(a, b time.Duration) float64 { return float64(a)/float64(b) - 1 }

// NewCalibration returns an empty calibration of the current version.
func NewCalibration() *Calibration {
	return &Calibration{Version: CalibrationVersion, Devices: map[string]*DeviceCalibration{}}
}

// Write writes c as indented JSON. Map keys are sorted, so equal
// calibrations give equal files.
func (c *Calibration) Write(w io.Writer) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("cost: writing calibration: %w", err)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// WriteFile writes c to path.
func (c *Calibration) WriteFile(path string) error {
	var buf bytes.Buffer
	if err := c.Write(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("cost: %w", err)
	}
	return nil
}

// LoadCalibration reads a calibration file.
func LoadCalibration(path string) (*Calibration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cost: %w", err)
	}
	return ReadCalibration(path, bytes.NewReader(data))
}

// ReadCalibration decodes and checks a calibration; name is used in errors.
func ReadCalibration(name string, r io.Reader) (*Calibration, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("cost: %s: %w", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Calibration
	if err := dec.Decode(&c); err != nil {
		var je *jsonerr.Error
		if err = jsonerr.Locate(data, err); errors.As(err, &je) && je.Line > 0 {
			return nil, fmt.Errorf("%w: %s:%d:%d: %s", ErrCalibration, name, je.Line, je.Column, je.Msg)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrCalibration, name, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCalibration, name, err)
	}
	return &c, nil
}

// maxContention bounds Contention and OpContention: a kernel ten times as
// slow beside each busy neighbour is far beyond any measured (0.1 to 1),
// and larger values price steps of hours.
const maxContention = 10

func (c *Calibration) check() error {
	if c.Version != CalibrationVersion {
		return fmt.Errorf("version: got %d, this flowkit reads version %d", c.Version, CalibrationVersion)
	}
	for _, typ := range sortedKeys(c.Devices) {
		base, cores, hasCores := strings.Cut(typ, "/") // "cpu/2": see CalibrationKey
		spec, ok := topology.Lookup(base)
		if !ok {
			return fmt.Errorf("devices[%q]: unknown device type (known: %s)", typ, strings.Join(topology.DeviceTypes(), ", "))
		}
		if n, err := strconv.Atoi(cores); hasCores && (spec.Class != topology.CPU || err != nil || n < 1) {
			return fmt.Errorf("devices[%q]: a core count applies to CPU types only, as a positive integer", typ)
		}
		dc := c.Devices[typ]
		if dc == nil {
			return fmt.Errorf("devices[%q]: null", typ)
		}
		if c := dc.Contention; !(c >= 0 && c <= maxContention) {
			return fmt.Errorf("devices[%q].contention: must be a number in [0, %g] (the slowdown per busy neighbour), got %g", typ, float64(maxContention), c)
		}
		for _, kind := range sortedKeys(dc.OpContention) {
			if k := dc.OpContention[kind]; kind == "" || !(k >= 0 && k <= maxContention) {
				return fmt.Errorf("devices[%q].op_contention[%q]: must be a number in [0, %g] for an op kind, got %g", typ, kind, float64(maxContention), k)
			}
		}
		if n, err := strconv.Atoi(cores); hasCores && err == nil && dc.Cores != 0 && dc.Cores != n {
			return fmt.Errorf("devices[%q].cores: %d, where the key says %d", typ, dc.Cores, n)
		}
		if dc.Cores < 0 {
			return fmt.Errorf("devices[%q].cores: must not be negative, got %d", typ, dc.Cores)
		}
		if dc.Dispatch < 0 {
			return fmt.Errorf("devices[%q].dispatch_ns: must not be negative, got %d", typ, dc.Dispatch)
		}
		if p := dc.Probe; p != nil {
			switch {
			case p.GEMM <= 0 || p.Stream <= 0:
				return fmt.Errorf("devices[%q].probe: times must be positive, got gemm_ns %d, stream_ns %d", typ, p.GEMM, p.Stream)
			case !(p.Spread >= 0 && p.Spread < 1e6):
				return fmt.Errorf("devices[%q].probe.spread: must be a non-negative number, got %g", typ, p.Spread)
			}
		}
		for _, kind := range sortedKeys(dc.Ops) {
			path := fmt.Sprintf("devices[%q].ops[%q]", typ, kind)
			if err := dc.Ops[kind].check(); err != nil {
				return fmt.Errorf("%s.%w", path, err)
			}
		}
	}
	return nil
}

func (f *OpFit) check() error {
	if f == nil {
		return errors.New("null")
	}
	if f.Launch < 0 {
		return fmt.Errorf("launch_ns: must not be negative, got %d", f.Launch)
	}
	for _, c := range []struct {
		name string
		c    Curve
	}{{"compute", f.Compute}, {"memory", f.Memory}} {
		switch {
		case !(c.c.Max > 0 && c.c.Max <= 2):
			return fmt.Errorf("%s.max: must be in (0, 2], got %g", c.name, c.c.Max)
		case !(c.c.Half > 0 && c.c.Half < 1e30):
			return fmt.Errorf("%s.half: must be positive, got %g", c.name, c.c.Half)
		case !(c.c.Gamma >= 0.1 && c.c.Gamma <= 10):
			return fmt.Errorf("%s.gamma: must be in [0.1, 10], got %g", c.name, c.c.Gamma)
		}
	}
	for _, fam := range sortedKeys(f.Families) {
		prev := 0.0
		for i, p := range f.Families[fam] {
			if !(p.Work > prev) || p.Time <= 0 || math.IsInf(p.Work, 0) {
				return fmt.Errorf("families[%q][%d]: want positive times at increasing work, got work %g, time %d ns", fam, i, p.Work, p.Time)
			}
			prev = p.Work
		}
	}
	for i, e := range f.Exact {
		if _, ok := topology.CanonicalDType(e.DType); !ok {
			return fmt.Errorf("exact[%d].dtype: unknown dtype %q", i, e.DType)
		}
		if e.Time <= 0 {
			return fmt.Errorf("exact[%d].time_ns: must be positive, got %d", i, e.Time)
		}
		for _, d := range e.Shape {
			if d < 0 {
				return fmt.Errorf("exact[%d].shape: negative dimension %d", i, d)
			}
		}
	}
	return nil
}
