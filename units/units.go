// Package units holds the typed quantities shared by flowkit's packages:
// sizes, work, rates. Durations are time.Duration (integer nanoseconds) and
// instants are the trace clock's; nothing here is bare float seconds.
package units

import (
	"fmt"
	"math"
	"time"
)

// Bytes is a size in bytes.
type Bytes int64

// FLOPs counts floating-point operations (a multiply-add is 2). It is a
// float64 because a large model's iteration exceeds 2^63.
type FLOPs float64

// BytesPerSecond is a bandwidth.
type BytesPerSecond float64

// FLOPsPerSecond is an arithmetic rate.
type FLOPsPerSecond float64

// Common sizes and rates.
const (
	KiB Bytes = 1 << 10
	MiB Bytes = 1 << 20
	GiB Bytes = 1 << 30

	GBps BytesPerSecond = 1e9 // bandwidths are quoted in decimal units
	Gbps BytesPerSecond = 1e9 / 8

	GFLOPs FLOPsPerSecond = 1e9
	TFLOPs FLOPsPerSecond = 1e12
)

// seconds converts a float number of seconds to a Duration, rounding to the
// nearest nanosecond and saturating instead of overflowing.
func seconds(s float64) time.Duration {
	ns := math.Round(s * 1e9)
	switch {
	case math.IsNaN(ns):
		return 0
	case ns >= math.MaxInt64:
		return time.Duration(math.MaxInt64)
	case ns <= math.MinInt64:
		return time.Duration(math.MinInt64)
	}
	return time.Duration(ns)
}

// Over returns the time to move b at rate r (0 for a non-positive rate is
// never returned: it saturates to the maximum Duration).
func (b Bytes) Over(r BytesPerSecond) time.Duration {
	if r <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return seconds(float64(b) / float64(r))
}

// Over returns the time to do f at rate r.
func (f FLOPs) Over(r FLOPsPerSecond) time.Duration {
	if r <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return seconds(float64(f) / float64(r))
}

func (b Bytes) String() string {
	v := float64(b)
	switch {
	case math.Abs(v) >= float64(GiB):
		return fmt.Sprintf("%.2f GiB", v/float64(GiB))
	case math.Abs(v) >= float64(MiB):
		return fmt.Sprintf("%.2f MiB", v/float64(MiB))
	case math.Abs(v) >= float64(KiB):
		return fmt.Sprintf("%.2f KiB", v/float64(KiB))
	}
	return fmt.Sprintf("%d B", int64(b))
}

func (f FLOPs) String() string { return siString(float64(f), "FLOP") }

func (r BytesPerSecond) String() string { return siString(float64(r), "B/s") }

func (r FLOPsPerSecond) String() string { return siString(float64(r), "FLOP/s") }

func siString(v float64, unit string) string {
	for _, p := range []struct {
		scale  float64
		prefix string
	}{{1e18, "E"}, {1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= p.scale {
			return fmt.Sprintf("%.3g %s%s", v/p.scale, p.prefix, unit)
		}
	}
	return fmt.Sprintf("%.3g %s", v, unit)
}
