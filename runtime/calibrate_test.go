package runtime

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
	"github.com/stretchr/testify/require"
)

// waking wakes streams of device d after lat[d].
type waking struct {
	sim.DurationFunc
	lat []time.Duration
}

func (w waking) Dispatch(_ *plans.Plan, dev int) time.Duration { return w.lat[dev] }

// distinct prices task t at a duration of its own, so that no two firings
// a firing waits for end at once.
func distinct(_ *plans.Plan, t int) (time.Duration, error) {
	return time.Duration(1000+7919*(t+1)%1009) * time.Nanosecond, nil
}

// Wakes and DispatchLatency measure what the simulator applies: in a
// simulated trace, every woken firing waited its device's latency or until
// its waker's stream went idle, if sooner, and the latency estimated from
// them is the simulator's.
func TestWakesOfSimulatedTrace(t *testing.T) {
	for _, strategy := range []string{"dp=2", "pp=2,mb=2", "tp=2,mb=2"} {
		t.Run(strategy, func(t *testing.T) {
			p := compile(t, "mlp", strategy, 16)
			for _, lat := range [][]time.Duration{{300 * time.Nanosecond, 700 * time.Nanosecond}, {1200 * time.Nanosecond, 5 * time.Microsecond}} {
				tr, err := sim.Simulate(p, waking{distinct, lat}, 5)
				require.NoError(t, err)
				wakes, err := Wakes(p, tr, 1)
				require.NoError(t, err)
				for dev, ws := range wakes {
					longer := false
					for _, w := range ws {
						require.Equal(t, min(lat[dev], w.Busy), w.Wait, "device %d", dev)
						longer = longer || w.Busy > lat[dev]
					}
					if longer {
						require.Equal(t, lat[dev], DispatchLatency(ws), "device %d", dev)
					}
				}
				require.Positive(t, len(slices.Concat(wakes...)))
			}
		})
	}
}

// DispatchLatency: the L under which min(L, Busy) adds up to the waits.
func TestDispatchLatency(t *testing.T) {
	us := time.Microsecond
	for _, tt := range []struct {
		name  string
		wakes []Wake
		want  time.Duration
	}{
		{"none", nil, 0},
		{"uncut", []Wake{{Wait: 10 * us, Busy: 100 * us}, {Wait: 30 * us, Busy: 100 * us}}, 20 * us},
		// 20 µs would make the waits 10 + 20 = 30 µs; the cut one says
		// only "longer than 10", so L = 25 gives 10 + 25 = 35.
		{"cut", []Wake{{Wait: 11 * us, Busy: 10 * us}, {Wait: 25 * us, Busy: 100 * us}}, 25 * us},
		{"all cut", []Wake{{Wait: 11 * us, Busy: 10 * us}, {Wait: 40 * us, Busy: 30 * us}}, 30 * us},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, DispatchLatency(tt.wakes))
		})
	}
}

// The microbenchmark returns every task's time and, by device, the firings
// woken by another stream (how many, the run decides).
func TestMicrobenchWakes(t *testing.T) {
	p := compile(t, "mlp", "dp=2", 8)
	got, err := Microbench{Iters: 4}.Measure(context.Background(), p)
	require.NoError(t, err)
	require.Len(t, got.Tasks, len(p.Tasks))
	require.Len(t, got.Wakes, len(p.Devices))
	for _, ws := range got.Wakes {
		for _, w := range ws {
			require.GreaterOrEqual(t, w.Wait, time.Duration(0))
			require.Positive(t, w.Busy)
		}
	}
}
