package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
)

// oneLink prices compute tasks at compute, and every transfer and
// collective at comm, all of them using one link whole: however many run
// at once share it equally.
type oneLink struct{ compute, comm time.Duration }

func (o oneLink) Duration(p *plans.Plan, t int) (time.Duration, error) {
	if o.uses(p, t) {
		return o.comm, nil
	}
	return o.compute, nil
}

func (o oneLink) uses(p *plans.Plan, t int) bool {
	k := p.Tasks[t].Kind
	return k == plans.Transfer || k.Collective()
}

func (o oneLink) Links(p *plans.Plan, t int) ([]cost.LinkUse, error) {
	if !o.uses(p, t) {
		return nil, nil
	}
	return []cost.LinkUse{{Link: 0, Forward: true, Share: 1}}, nil
}

// The simulator shares a link as a fluid would: a firing of the link,
// while k firings cross it, moves at 1/k of its rate alone, so the
// integral of 1/k over its time is its duration alone. Checked over the
// traces of pipelines of replicas whose transfers and all-reduces overlap,
// for random durations.
func TestLinkSharingIsFluid(t *testing.T) {
	p := compile(t, "mnist-cnn", "dp=2,pp=2,mb=4", 32)
	rapid.Check(t, func(rt *rapid.T) {
		o := oneLink{
			compute: time.Duration(rapid.IntRange(1, 5000).Draw(rt, "compute")),
			comm:    time.Duration(rapid.IntRange(1, 5000).Draw(rt, "comm")),
		}
		flows := linkFlows(rt, p, o, o.uses)
		shared := 0
		for _, e := range flows {
			work, pieces, n := fluidWork(e, flows, nil)
			shared += n
			// Each rescheduling rounds an end up to the nanosecond.
			require.InDelta(rt, float64(o.comm), work, float64(2*pieces), "task %d iter %d micro %d: %v–%v", e.Task, e.Iter, e.Micro, e.Start, e.End)
		}
		require.Positive(rt, shared, "the replicas' transfers overlap")
	})
}

// linkFlows simulates p and returns the checked trace's firings of the
// tasks that use a link.
func linkFlows(rt *rapid.T, p *plans.Plan, d Durations, uses func(*plans.Plan, int) bool) []trace.Event {
	tr, err := Simulate(p, d, 2)
	require.NoError(rt, err)
	require.NoError(rt, p.CheckTrace(tr))
	var flows []trace.Event
	for _, e := range tr.Events {
		if uses(p, int(e.Task)) {
			flows = append(flows, e)
		}
	}
	return flows
}

// fluidWork cuts e's time at every other flow's start and end, and
// returns the integral of 1/k over it, k the flows running in a piece (e
// among them), the pieces, and how many pieces e shared with a flow for
// which other (if not nil) holds.
func fluidWork(e trace.Event, flows []trace.Event, other func(trace.Event) bool) (work float64, pieces, shared int) {
	cuts := []trace.Time{e.Start, e.End}
	for _, f := range flows {
		for _, c := range []trace.Time{f.Start, f.End} {
			if c > e.Start && c < e.End {
				cuts = append(cuts, c)
			}
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		k, with := 0, false
		for _, f := range flows {
			if f.Start <= a && f.End >= b {
				k++
				with = with || f != e && (other == nil || other(f))
			}
		}
		work += float64(b-a) / float64(k)
		if with {
			shared++
		}
	}
	return work, len(cuts), shared
}

// halfLink is oneLink whose link's two directions share its bandwidth
// (topology.Link.Duplex 0): a transfer uses its direction of the link whole
// and both directions together whole.
type halfLink struct{ oneLink }

// forward reports whether transfer t goes to a later stage.
func forward(p *plans.Plan, t int) bool {
	task := &p.Tasks[t]
	return p.Registers[task.Writes[0]].Device > p.Registers[task.Reads[0].Reg].Device
}

func (h halfLink) Links(p *plans.Plan, t int) ([]cost.LinkUse, error) {
	if !h.uses(p, t) {
		return nil, nil
	}
	return []cost.LinkUse{{Link: 0, Forward: forward(p, t), Share: 1}, {Link: 0, Both: true, Share: 1}}, nil
}

// On a link whose directions share its bandwidth, transfers going opposite
// ways slow each other as transfers going the same way do: a pipeline's
// activations forward and gradients backward, at once, share it as a fluid.
func TestHalfDuplexLinkIsShared(t *testing.T) {
	cl, err := topology.Resolve("dgx-a100") // GPUs send on streams of their own
	require.NoError(t, err)
	p := compileOn(t, cl, "mnist-cnn", "pp=2,mb=4", 32, graph.SGD{LR: 0.1}, false, false)
	rapid.Check(t, func(rt *rapid.T) {
		h := halfLink{oneLink{
			compute: time.Duration(rapid.IntRange(1, 200).Draw(rt, "compute")), // stage 1's backward sends while stage 0's forward does
			comm:    time.Duration(rapid.IntRange(1000, 5000).Draw(rt, "comm")),
		}}
		flows := linkFlows(rt, p, h, h.uses)
		opposite := 0
		for _, e := range flows {
			work, pieces, n := fluidWork(e, flows, func(f trace.Event) bool { return forward(p, int(f.Task)) != forward(p, int(e.Task)) })
			opposite += n
			require.InDelta(rt, float64(h.comm), work, float64(2*pieces), "task %d iter %d micro %d: %v–%v", e.Task, e.Iter, e.Micro, e.Start, e.End)
		}
		require.Positive(rt, opposite, "activations and gradients cross at once")
	})
}

// withoutLinks hides a cost model's link sharing.
type withoutLinks struct{ m CostModel }

func (w withoutLinks) Duration(p *plans.Plan, t int) (time.Duration, error) {
	return w.m.Duration(p, t)
}

// On mixed-a100-v100 the eight GPUs of a node share its one NIC: the
// pipeline's transfers between nodes, one per tensor-parallel rank, and the
// replicas' all-reduces slow each other down, which a plan listing one rank
// or one replica for its group must see as the whole plan does.
func TestSharedNICSlowsTransfers(t *testing.T) {
	cl, err := topology.Resolve("mixed-a100-v100")
	require.NoError(t, err)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(cl)}
	model := "gpt:layers=4,hidden=256,heads=8,seq=64,vocab=1024"
	for _, strategy := range []string{"tp=8,pp=2,mb=4", "dp=2,tp=4,pp=2,mb=2", "dp=4,tp=2,pp=2,mb=4,sched=gpipe"} {
		whole := compileOn(t, cl, model, strategy, 16, graph.SGD{LR: 0.1}, false, false)
		shared, alone := stepOf(t, whole, m), stepOf(t, whole, withoutLinks{m})
		require.Greater(t, shared, alone, "%s: transfers through one NIC per node take longer together", strategy)
		t.Logf("%s: step %v with the NICs shared, %v without (+%.1f%%)", strategy, shared, alone, 100*(float64(shared)/float64(alone)-1))
		for _, listed := range [][2]bool{{true, false}, {false, true}, {true, true}} {
			p := compileOn(t, cl, model, strategy, 16, graph.SGD{LR: 0.1}, listed[0], listed[1])
			require.Equal(t, shared, stepOf(t, p, m), "%s, listed tp, dp %v", strategy, listed)
		}
	}
}
