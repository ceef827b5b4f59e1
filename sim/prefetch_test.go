package sim

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// Under zero=3 with prefetch=N the gathers run on their own stream, ahead
// of the compute, but only so far: whatever the tasks' durations, with
// communication far faster than compute so that nothing but the bound
// holds the gathers back, no device ever holds the gathered weights of
// more than N+1 layers (a layer's weights gathered for one phase of one
// micro-batch) at once — from the start of a gather to the end of the
// last task reading it. Every simulated trace obeys the plan.
func TestZeroPrefetchBoundsGatheredLayers(t *testing.T) {
	const model = "gpt2s-blocks:layers=6,hidden=64,heads=4,seq=16"
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	compiled := map[string]*plans.Plan{}
	rapid.Check(t, func(rt *rapid.T) {
		s := rapid.SampledFrom([]string{"dp=2,mb=2", "dp=2,mb=4,sched=gpipe", "dp=2,pp=2,mb=4", "dp=2,pp=2,vpp=2,mb=2",
			"dp=2,mb=2,recompute=full", "dp=2,tp=2,mb=2", "dp=4,pp=2,mb=2,sched=gpipe,recompute=selective"}).Draw(rt, "strategy")
		n := rapid.IntRange(1, 2).Draw(rt, "prefetch")
		s += ",zero=3,prefetch=" + string(rune('0'+n))
		p, ok := compiled[s]
		if !ok {
			st, err := plans.ParseStrategy(s, 16)
			require.NoError(rt, err)
			devs, err := plans.DevicesFromCluster(c, st.Devices(), false)
			require.NoError(rt, err)
			p, err = plans.Compile(plans.Config{Model: model, Batch: 16, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Cluster: c.Name, Devices: devs})
			require.NoError(rt, err, s)
			compiled[s] = p
		}
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1))
		durs := make([]time.Duration, len(p.Tasks))
		for i, task := range p.Tasks {
			durs[i] = time.Duration(1+r.IntN(100)) * time.Nanosecond
			if task.Kind == plans.Compute {
				durs[i] = time.Duration(1+r.IntN(20)) * time.Microsecond
			}
		}
		tr, err := Simulate(p, DurationFunc(func(_ *plans.Plan, t int) (time.Duration, error) { return durs[t], nil }), 3)
		require.NoError(rt, err)
		require.NoError(rt, p.CheckTrace(tr))
		most := mostGatheredLayers(p, tr)
		require.LessOrEqual(rt, most, n+1, "%s: layers whole at once on a device", s)
	})
}

// layerName finds a gpt2s-blocks layer in a register's name.
var layerName = regexp.MustCompile(`layers\.\d+\.`)

// mostGatheredLayers is the most layers of gathered weights a device of p
// holds at once in trace tr: a layer's weights gathered for one phase of
// one micro-batch of one iteration live from the start of their first
// gather to the end of the last task reading them.
func mostGatheredLayers(p *plans.Plan, tr *trace.Trace) int {
	type unit struct {
		dev, iter, micro int
		layer            string
	}
	type span struct{ start, end trace.Time }
	spans := map[unit]*span{}
	gathered := map[int]string{} // register → its layer and phase
	for r, reg := range p.Registers {
		if len(reg.Writers) == 1 && p.Tasks[reg.Writers[0]].Kind == plans.AllGather && strings.Contains(reg.Name, "@gather") {
			gathered[r] = layerName.FindString(reg.Name) + strings.TrimPrefix(reg.Name[strings.Index(reg.Name, "@gather"):], "@gather")
		}
	}
	for _, e := range tr.Events {
		task := &p.Tasks[e.Task]
		touch := func(r int) {
			layer, ok := gathered[r]
			if !ok {
				return
			}
			u := unit{p.Registers[r].Device, int(e.Iter), int(e.Micro), layer}
			if sp := spans[u]; sp == nil {
				spans[u] = &span{e.Start, e.End}
			} else {
				sp.start, sp.end = min(sp.start, e.Start), max(sp.end, e.End)
			}
		}
		for _, u := range task.Reads {
			touch(u.Reg)
		}
		for _, r := range task.Writes {
			touch(r)
		}
	}
	most := 0
	for u, sp := range spans {
		alive := 0
		for v, other := range spans {
			if v.dev == u.dev && other.start <= sp.start && sp.start < other.end {
				alive++
			}
		}
		most = max(most, alive)
	}
	return most
}
