package sim

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/units"
)

// liveMemory simulates p for 3 iterations at unit costs and returns what
// it held, every register live at each peak listed.
func liveMemory(t *testing.T, p *plans.Plan) *plans.LiveMemory {
	t.Helper()
	tr, err := Simulate(p, unit, 3)
	require.NoError(t, err)
	m, err := p.LiveMemory(tr, 0)
	require.NoError(t, err)
	require.Len(t, m.Devices, len(p.Devices))
	return m
}

// mostSlots is the most live slots of one activation register at a
// device's peak: the micro-batches whose activations it holds.
func mostSlots(d plans.DeviceLive) int {
	n := 0
	for _, r := range d.Largest {
		if r.Category == plans.Activations {
			n = max(n, r.Slots)
		}
	}
	return n
}

// A pipeline's stages hold the activations of the micro-batches in flight
// on them at their peak: under 1F1B two on the first stage of two, one on
// the last, which runs each micro-batch's backward pass right after its
// forward pass; under GPipe, which runs every forward pass first, all four
// on the first stage and more than one on the last too.
func TestLiveMemoryPipelineActivations(t *testing.T) {
	oneF := liveMemory(t, compile(t, "mnist-cnn", "pp=2,mb=4,sched=1f1b", 64))
	gpipe := liveMemory(t, compile(t, "mnist-cnn", "pp=2,mb=4,sched=gpipe", 64))
	require.Equal(t, 2, mostSlots(oneF.Devices[0]), "1f1b: first stage")
	require.Equal(t, 1, mostSlots(oneF.Devices[1]), "1f1b: last stage")
	require.Equal(t, 4, mostSlots(gpipe.Devices[0]), "gpipe: first stage")
	require.Greater(t, mostSlots(gpipe.Devices[1]), 1, "gpipe: last stage")
	require.Less(t, oneF.Devices[0].ByCategory[plans.Activations], gpipe.Devices[0].ByCategory[plans.Activations])
	require.Less(t, oneF.Devices[1].ByCategory[plans.Activations], gpipe.Devices[1].ByCategory[plans.Activations])
}

// Full recompute keeps only each stage's input across the forward and
// backward passes: on mnist-cnn's first stage, its convolutions, under a
// half of the activations at the peak; on the last, whose input is most
// of its activations, no more than without.
func TestLiveMemoryRecompute(t *testing.T) {
	plain := liveMemory(t, compile(t, "mnist-cnn", "pp=2,mb=4,sched=gpipe", 64))
	re := liveMemory(t, compile(t, "mnist-cnn", "pp=2,mb=4,sched=gpipe,recompute=full", 64))
	first, firstRe := plain.Devices[0], re.Devices[0]
	require.Less(t, firstRe.ByCategory[plans.Activations], first.ByCategory[plans.Activations]/2)
	require.Less(t, firstRe.Peak, first.Peak)
	require.LessOrEqual(t, re.Devices[1].ByCategory[plans.Activations], plain.Devices[1].ByCategory[plans.Activations])
	for d := range plain.Devices {
		a, b := plain.Devices[d], re.Devices[d]
		require.Equal(t, a.ByCategory[plans.Weights], b.ByCategory[plans.Weights], a.Device)
		require.Equal(t, a.ByCategory[plans.Optimizer], b.ByCategory[plans.Optimizer], a.Device)
	}
}

// The persistent categories at the peak are the plan's: on one device
// the mlp's weights, with Adam twice as much state, and ZeRO stage 1 over
// two replicas halves Adam's m and v (and adds the master half of the
// weights).
func TestLiveMemoryOptimizerState(t *testing.T) {
	w := units.Bytes(4 * ((784*256 + 256) + (256*256 + 256) + (256*10 + 10)))
	adam := graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	for _, tt := range []struct {
		strategy           string
		opt                graph.Optimizer
		weights, optimizer units.Bytes
	}{
		{"single", graph.SGD{LR: 0.1}, w, 0},
		{"single", adam, w, 2 * w},
		{"dp=2,mb=2", adam, w, 2 * w},
		{"dp=2,mb=2,zero=1", adam, w, w + w/2},
		{"dp=2,mb=2,zero=3", adam, w / 2, w},
	} {
		st, err := plans.ParseStrategy(tt.strategy, 8)
		require.NoError(t, err)
		p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: tt.opt, Devices: devices(st.Devices())})
		require.NoError(t, err)
		for _, d := range liveMemory(t, p).Devices {
			require.Equal(t, tt.weights, d.ByCategory[plans.Weights], "%s %s", tt.strategy, d.Device)
			require.Equal(t, tt.optimizer, d.ByCategory[plans.Optimizer], "%s %s", tt.strategy, d.Device)
			require.Positive(t, d.ByCategory[plans.Gradients], "%s %s", tt.strategy, d.Device)
		}
	}
}

// The live peak of a simulated run never exceeds the arena the planner
// gave the device (which holds every execution the edges allow), its
// categories add up to it, and it is the timeline's highest step; for
// random plans and task durations.
func TestLivePeakWithinArena(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p, tr := randomRun(rt)
		st := p.Strategy
		m, err := p.LiveMemory(tr, 0)
		if err != nil {
			rt.Fatal(err)
		}
		for _, d := range m.Devices {
			if d.Peak > d.Arena {
				rt.Fatalf("%v: %s: live peak %d B at %d ns over the arena's %d B (%v)", st, d.Device, d.Peak, d.At, d.Arena, d.ByCategory)
			}
			if d.ByCategory.Total() != d.Peak {
				rt.Fatalf("%v: %s: categories %v add up to %d B, not the peak %d B", st, d.Device, d.ByCategory, d.ByCategory.Total(), d.Peak)
			}
			var most units.Bytes
			for _, s := range d.Steps {
				most = max(most, s.Bytes)
			}
			if most != d.Peak || d.Steps[0].At != 0 {
				rt.Fatalf("%v: %s: timeline's highest step %d B, peak %d B", st, d.Device, most, d.Peak)
			}
		}
	})
}

// The same trace gives the same answer, and so does the same simulation.
func TestLiveMemoryDeterministic(t *testing.T) {
	p := compile(t, "mnist-cnn", "dp=2,pp=2,mb=4,zero=1", 64)
	tr, err := Simulate(p, unit, 3)
	require.NoError(t, err)
	a, err := p.LiveMemory(tr, 5)
	require.NoError(t, err)
	for range 3 {
		tr2, err := Simulate(p, unit, 3)
		require.NoError(t, err)
		b, err := p.LiveMemory(tr2, 5)
		require.NoError(t, err)
		require.Equal(t, a, b)
	}
	for _, d := range a.Devices {
		require.Len(t, d.Largest, 5)
	}
}

// A trace of another plan, or one lacking firings, is refused.
func TestLiveMemoryErrors(t *testing.T) {
	p := compile(t, "mlp", "pp=2,mb=2", 8)
	tr, err := Simulate(p, unit, 2)
	require.NoError(t, err)
	other := compile(t, "mlp", "single", 8)
	_, err = other.LiveMemory(tr, 0)
	require.ErrorContains(t, err, "trace has 2 devices, the plan 1")
	tr.Events = tr.Events[:len(tr.Events)-1]
	_, err = p.LiveMemory(tr, 0)
	require.Error(t, err)
}

// A simulated trace written for Perfetto carries each device's live
// memory as a counter track whose highest point is the live peak, on the
// device's own process.
func TestWriteChromeLiveMemory(t *testing.T) {
	p := compile(t, "mnist-cnn", "pp=2,mb=4,sched=1f1b", 64)
	tr, err := Simulate(p, unit, 3)
	require.NoError(t, err)
	m, err := p.LiveMemory(tr, 0)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, p.WriteChrome(&buf, tr))
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Pid  int            `json:"pid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	highest := map[int]float64{}
	points := 0
	for _, e := range doc.TraceEvents {
		if e.Ph == "C" {
			require.Equal(t, "live memory (MiB)", e.Name)
			v, ok := e.Args["value"].(float64)
			require.True(t, ok, "a counter's value: %v", e.Args)
			highest[e.Pid] = max(highest[e.Pid], v)
			points++
		}
	}
	require.Len(t, highest, len(m.Devices))
	for _, d := range m.Devices {
		dev := slices.Index(tr.Devices, d.Device)
		require.InDelta(t, float64(d.Peak)/(1<<20), highest[dev], 1e-9, d.Device)
		points -= len(d.Steps)
	}
	require.Zero(t, points, "one counter event per step of the timeline")
}
