package plans

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// handPlan is one device running two micro-batches: an input x (two
// slots), a forward op h = f(w, x, c) (two slots, kept for a backward op
// that reads it), and once per iteration a task writing c, which the next
// iteration's forward ops read (ReadPrev); w is a persistent weight.
func handPlan() *Plan {
	spec := func(n int) graph.Spec { return graph.Spec{Shape: graph.Shape{n / 2}, DType: graph.BF16} }
	p := &Plan{Model: "hand", Strategy: "mb=2", Batch: 2, MicroBatch: 1, MB: 2, DP: 1, PP: 1,
		Devices: []Device{{Name: "cpu0", Type: "cpu", Workers: 1, Memory: 4000}},
		Streams: []Stream{{Device: 0, Name: "compute"}},
		Memory:  []Memory{{Device: 0, Peak: 2000}},
	}
	reg := func(name string, n, slots int, persistent bool, writers ...int) Register {
		return Register{Name: name, Spec: spec(n), SlotBytes: units.Bytes(n), Slots: slots, Persistent: persistent, Writers: writers}
	}
	p.Registers = []Register{reg("w", 100, 1, true), reg("x", 10, 2, false, 0), reg("h", 40, 2, false, 1), reg("c", 1000, 1, false, 3)}
	for i := range p.Registers {
		p.Registers[i].ID = i
	}
	task := func(name string, kind TaskKind, phase string, perMicro bool, reads []Use, writes ...int) Task {
		return Task{Name: name, Kind: kind, Phase: phase, PerMicro: perMicro, Streams: []int{0}, Reads: reads, Writes: writes}
	}
	p.Tasks = []Task{
		task("input", Input, "input", true, nil, 1),
		task("f", Compute, "forward", true, []Use{{0, ReadPrev}, {1, ReadMicro}, {3, ReadPrev}}, 2),
		task("b", Compute, "backward", true, []Use{{2, ReadMicro}}),
		task("carry", Compute, "forward", false, nil, 3),
	}
	for i := range p.Tasks {
		p.Tasks[i].ID = i
	}
	for i, micros := range []int{2, 2, 2, 0} {
		for m := range micros {
			p.Firings = append(p.Firings, Firing{Task: i, Micro: m})
		}
		if micros == 0 {
			p.Firings = append(p.Firings, Firing{Task: i, Micro: -1})
		}
	}
	p.Streams[0].Order = []int{0, 1, 2, 3, 6, 4, 5} // carry between the forward and backward ops
	return p
}

// handTrace runs handPlan's stream order for two iterations, 10 ns a
// firing.
func handTrace(p *Plan) *trace.Trace {
	tr := p.NewTrace("hand")
	var now trace.Time
	for iter := range 2 {
		for _, f := range p.Streams[0].Order {
			fi := p.Firings[f]
			tr.Events = append(tr.Events, trace.Event{Task: int32(fi.Task), Iter: int32(iter), Micro: int32(fi.Micro), Start: now, End: now + 10})
			now += 10
		}
	}
	return tr
}

// Worked by hand: x of a micro-batch lives from its input to f's end, h
// from f to b's end, c from carry to the next iteration's last f, and the
// last iteration's c to the trace's end (a later one would read it).
func TestLiveMemoryByHand(t *testing.T) {
	p := handPlan()
	m, err := p.LiveMemory(handTrace(p), 0)
	require.NoError(t, err)
	require.Len(t, m.Devices, 1)
	d := m.Devices[0]
	require.Equal(t, []LiveStep{{0, 110}, {10, 120}, {20, 160}, {30, 190}, {40, 1180}, {60, 1140}, {70, 1110}, {80, 1120},
		{90, 1160}, {100, 1190}, {110, 1180}, {130, 1140}, {140, 100}}, d.Steps)
	require.Equal(t, units.Bytes(1190), d.Peak)
	require.Equal(t, trace.Time(100), d.At)
	require.Equal(t, 1, d.Iter)
	require.Equal(t, units.Bytes(2000), d.Arena)
	require.Equal(t, ByCategory{Weights: 100, Activations: 1080, Temporaries: 10}, d.ByCategory)
	require.Equal(t, []LiveRegister{{"c", Activations, 1, 1000}, {"w", Weights, 1, 100}, {"h", Activations, 2, 80}, {"x", Temporaries, 1, 10}}, d.Largest)

	var b strings.Builder
	require.NoError(t, m.WriteTable(&b))
	require.Equal(t, `  device     arena  live peak            at  weights  optimizer  gradients  activations  temporaries
    cpu0  1.95 KiB   1.16 KiB  0.000ms it 1    100 B        0 B        0 B     1.05 KiB         10 B
`, b.String())

	m, err = p.LiveMemory(handTrace(p), 2)
	require.NoError(t, err)
	require.Len(t, m.Devices[0].Largest, 2)
}
