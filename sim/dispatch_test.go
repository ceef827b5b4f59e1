package sim

import (
	"testing"
	"time"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/trace"
	"github.com/stretchr/testify/require"
)

// dispatching prices task t at a duration of its own (no two sums of them
// tie in the plans below) and wakes streams of device d after lat[d].
type dispatching struct{ lat []time.Duration }

func (dispatching) Duration(p *plans.Plan, t int) (time.Duration, error) {
	return time.Duration(1000+7919*(t+1)%1009) * time.Nanosecond, nil
}

func (d dispatching) Dispatch(_ *plans.Plan, dev int) time.Duration { return d.lat[dev] }

// A firing starts when the last firing it waits for ends, except when that
// firing is of another stream and also released the next firing of its own
// stream: then it starts the device's dispatch latency later, or when that
// stream first has nothing to run, if sooner.
func TestDispatchLatency(t *testing.T) {
	for _, strategy := range []string{"dp=2", "pp=2,mb=2", "tp=2,mb=2"} {
		t.Run(strategy, func(t *testing.T) {
			p := compile(t, "mlp", strategy, 16)
			// Short latencies delay firings; long ones (tasks take 1–2 µs)
			// leave them to take the waking stream's thread.
			woken, handed := checkDispatch(t, p, []time.Duration{700 * time.Nanosecond, 1500 * time.Nanosecond})
			require.Less(t, handed, woken, "every woken firing took its waker's thread")
			_, handed = checkDispatch(t, p, []time.Duration{50 * time.Microsecond, 50 * time.Microsecond})
			require.Positive(t, handed, "no woken firing took its waker's thread")

			// Without latencies, the trace is the one of a cost model that
			// has none.
			none, err := Simulate(p, dispatching{[]time.Duration{0, 0}}, 4)
			require.NoError(t, err)
			plain, err := Simulate(p, DurationFunc(dispatching{}.Duration), 4)
			require.NoError(t, err)
			require.Equal(t, plain.Events, none.Events)
		})
	}
}

// checkDispatch simulates p with latencies lat, checks every firing's
// start, and returns how many firings were woken by another stream and how
// many of them took its thread.
func checkDispatch(t *testing.T, p *plans.Plan, lat []time.Duration) (woken, handed int) {
	tr, err := Simulate(p, dispatching{lat}, 4)
	require.NoError(t, err)
	require.NoError(t, p.CheckTrace(tr))
	deps, err := p.TraceDeps()
	require.NoError(t, err)
	released := releases(t, tr, deps)
	home := func(i int) int { return p.Tasks[tr.Events[i].Task].Streams[0] }
	next := map[int]int{} // the firing of its own stream an event released
	for i, r := range released {
		if r >= 0 && home(r) == home(i) {
			next[r] = i
		}
	}
	busyUntil := func(j int) trace.Time {
		for k, ok := next[j]; ok; k, ok = next[j] {
			j = k
		}
		return tr.Events[j].End
	}
	for i, e := range tr.Events {
		r := released[i]
		if r < 0 {
			continue
		}
		want := tr.Events[r].End
		if _, goesOn := next[r]; goesOn && home(r) != home(i) {
			want += trace.Time(lat[p.Streams[home(i)].Device])
			if b := busyUntil(r); b < want {
				want = b
				handed++
			}
			woken++
		}
		require.Equal(t, want, e.Start, "%s of iteration %d, released by %s", p.Tasks[e.Task].Name, e.Iter, p.Tasks[tr.Events[r].Task].Name)
	}
	require.Positive(t, woken, "no firing was woken by another stream")
	return woken, handed
}

// releases returns, for every event of tr, the event whose end released
// it (the last to end of those its edges name; −1: none), failing on ties,
// which would leave it ambiguous.
func releases(t *testing.T, tr *trace.Trace, deps []trace.Dep) []int {
	index := map[[3]int32]int{}
	for i, e := range tr.Events {
		index[[3]int32{e.Task, e.Micro, e.Iter}] = i
	}
	in := map[trace.Firing][]trace.Dep{}
	for _, d := range deps {
		in[d.To] = append(in[d.To], d)
	}
	out := make([]int, len(tr.Events))
	for i, e := range tr.Events {
		out[i] = -1
		tie := false
		for _, d := range in[trace.Firing{Task: e.Task, Micro: e.Micro}] {
			k, ok := index[[3]int32{d.From.Task, d.From.Micro, e.Iter - d.Delta}]
			if !ok || k == out[i] {
				continue
			}
			switch {
			case out[i] < 0 || tr.Events[k].End > tr.Events[out[i]].End:
				out[i], tie = k, false
			case tr.Events[k].End == tr.Events[out[i]].End:
				tie = true
			}
		}
		require.False(t, tie, "event %d: two firings it waits for end at once", i)
	}
	return out
}
