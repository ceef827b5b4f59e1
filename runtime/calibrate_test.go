package runtime

import (
	"context"
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

// DispatchWaits measures what the simulator applies: in a simulated trace,
// the waits it finds are exactly the latencies of the devices woken (zero
// without latencies).
func TestDispatchWaitsOfSimulatedTrace(t *testing.T) {
	for _, strategy := range []string{"dp=2", "pp=2,mb=2", "tp=2,mb=2"} {
		t.Run(strategy, func(t *testing.T) {
			p := compile(t, "mlp", strategy, 16)
			count := func(lat []time.Duration) int {
				tr, err := sim.Simulate(p, waking{distinct, lat}, 5)
				require.NoError(t, err)
				waits, err := DispatchWaits(p, tr, 1)
				require.NoError(t, err)
				n := 0
				for dev, ws := range waits {
					for _, w := range ws {
						require.Equal(t, lat[dev], w, "device %d", dev)
						n++
					}
				}
				return n
			}
			require.Positive(t, count([]time.Duration{300 * time.Nanosecond, 700 * time.Nanosecond}))
			require.Positive(t, count([]time.Duration{0, 0}))
		})
	}
}

// The microbenchmark returns every task's time and, by device, the times
// firings took to be woken by another stream (how many, the run decides).
func TestMicrobenchDispatch(t *testing.T) {
	p := compile(t, "mlp", "dp=2", 8)
	got, err := Microbench{Iters: 4}.Measure(context.Background(), p)
	require.NoError(t, err)
	require.Len(t, got.Tasks, len(p.Tasks))
	require.Len(t, got.Dispatch, len(p.Devices))
	for _, ws := range got.Dispatch {
		for _, w := range ws {
			require.GreaterOrEqual(t, w, time.Duration(0))
		}
	}
}
