package search

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
)

func autoConfig(t testing.TB, model, cluster, strategy string, batch int, oversubscribe bool) plans.Config {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	c, err := topology.Resolve(cluster)
	require.NoError(t, err)
	devs, err := plans.DevicesFromCluster(c, st.Devices(), oversubscribe)
	require.NoError(t, err)
	return plans.Config{Model: model, Batch: batch, Strategy: st, Optimizer: graph.SGD{LR: 0.01},
		Cluster: c.Name, Devices: devs}
}

func catalogModel(t testing.TB, cluster string) sim.CostModel {
	c, err := topology.Resolve(cluster)
	require.NoError(t, err)
	return sim.CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
}

// A GPU and the host's CPU: the GPU's replica gets most of the batch, the
// split beats the even one by the simulator's own account, and the same
// search gives the same answer.
func TestSharesFavourTheFasterDevice(t *testing.T) {
	cfg := autoConfig(t, "mnist-cnn", "h200-host", "dp=2,mbs=8,mb=auto", 64, false)
	var done []int
	res, err := Shares(cfg, catalogModel(t, "h200-host"), Options{Progress: func(n, total int) {
		require.Equal(t, 7, total)
		done = append(done, n)
	}})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, done, "progress after each split")
	require.True(t, res.Exhaustive)
	require.Len(t, res.Candidates, 7, "every split of 8 micro-batches over 2 replicas, each at least 1")
	best := res.Best()
	require.Equal(t, "mb", res.Key)
	require.Greater(t, best.Counts[0], best.Counts[1], "the GPU (replica 0) takes more: %v", best.Counts)
	require.Equal(t, best.Counts, res.Plan.Shares, "one replica per group: the counts are the shares")
	require.Equal(t, best.Strategy.String(), res.Plan.Strategy)
	for _, c := range res.Candidates {
		require.NoError(t, c.Err)
		require.GreaterOrEqual(t, c.Step, best.Step)
		if c.Counts[0] == 4 {
			require.Less(t, best.Step, c.Step, "the even split is slower")
		}
	}
	again, err := Shares(cfg, catalogModel(t, "h200-host"), Options{})
	require.NoError(t, err)
	require.Equal(t, res.Candidates, again.Candidates)
}

// typed returns n devices of the given catalog types, in turn.
func typed(n int, types ...string) []plans.Device {
	devs := make([]plans.Device, n)
	for i := range devs {
		devs[i] = plans.Device{Name: fmt.Sprintf("d%d", i), Type: types[i%len(types)], Workers: 1, Memory: 1 << 40}
	}
	return devs
}

// perDevice prices a micro-batch's firing on device d at slow[d] µs, and
// every other firing at 1 µs.
func perDevice(slow ...time.Duration) sim.Durations {
	return sim.DurationFunc(func(p *plans.Plan, task int) (time.Duration, error) {
		t := &p.Tasks[task]
		if !t.PerMicro {
			return time.Microsecond, nil
		}
		return slow[p.Streams[t.Streams[0]].Device] * time.Microsecond, nil
	})
}

// Equal devices: one group, one candidate, the even split, compiled as
// the uniform plan.
func TestSharesEvenOnEqualDevices(t *testing.T) {
	cfg := autoConfig(t, "mlp", "local", "dp=2,mbs=4,mb=auto", 36, true)
	res, err := Shares(cfg, perDevice(1, 1), Options{})
	require.NoError(t, err)
	require.Equal(t, []Group{{Devices: "cpu", Replicas: []int{0, 1}}}, res.Groups)
	require.Len(t, res.Candidates, 1)
	require.Equal(t, []int{9}, res.Best().Counts)
	require.Equal(t, []int{5, 4}, res.Best().Strategy.Shares, "9 micro-batches: the first replica takes the remainder")
	require.Equal(t, []int{5, 4}, res.Plan.Shares)

	cfg = autoConfig(t, "mlp", "local", "dp=2,mbs=4,mb=auto", 32, true)
	res, err = Shares(cfg, perDevice(1, 1), Options{})
	require.NoError(t, err)
	require.Nil(t, res.Plan.Shares, "an even split compiles to the uniform plan")
	require.Equal(t, 4, res.Plan.MB)
}

// Replicas on the same device types share their group's micro-batches
// evenly; the search is over the groups' totals.
func TestSharesByGroup(t *testing.T) {
	cfg := autoConfig(t, "mlp", "local", "dp=4,mbs=2,mb=auto", 32, true)
	cfg.Devices = typed(4, "A100-SXM4-40GB", "V100-SXM2-16GB")
	res, err := Shares(cfg, perDevice(1, 3, 1, 3), Options{})
	require.NoError(t, err)
	require.Equal(t, []Group{{"A100-SXM4-40GB", []int{0, 2}}, {"V100-SXM2-16GB", []int{1, 3}}}, res.Groups)
	require.True(t, res.Exhaustive)
	require.Len(t, res.Candidates, 13, "totals of 16 micro-batches over two groups of 2 replicas, each replica at least 1")
	best := res.Best()
	require.Equal(t, []int{12, 4}, best.Counts, "3× faster, 3× the micro-batches")
	require.Equal(t, []int{6, 2, 6, 2}, best.Strategy.Shares)
}

// Too many splits to simulate each: the local search still lands near the
// split that balances replicas whose per-micro-batch times are 1, 2 and 4
// (shares in proportion 4 : 2 : 1 of 56 micro-batches: 32, 16, 8).
func TestSharesLocalSearch(t *testing.T) {
	cfg := autoConfig(t, "mlp", "local", "dp=3,mbs=1,mb=auto", 56, true)
	cfg.Devices = typed(3, "H200", "A100-SXM4-40GB", "T4")
	calls := 0
	res, err := Shares(cfg, perDevice(1, 2, 4), Options{Progress: func(n, total int) {
		require.Equal(t, -1, total, "a local search's length is not known ahead")
		calls++
	}})
	require.NoError(t, err)
	require.False(t, res.Exhaustive)
	require.Equal(t, len(res.Candidates), calls)
	require.Less(t, len(res.Candidates), 200, "a local search, not all %d splits", compositions(56, 3, 1<<30))
	got := res.Best().Strategy.Shares
	for r, want := range []int{32, 16, 8} {
		require.InDelta(t, want, got[r], 2, "replica %d of %v", r, got)
	}
}

// Splits that do not fit are reported, and a search where none fits says
// why.
func TestSharesInfeasible(t *testing.T) {
	cfg := autoConfig(t, "mnist-cnn", "local", "dp=2,mbs=8,mb=auto", 64, true)
	cfg.Devices = typed(2, "cpu", "T4")
	for i := range cfg.Devices {
		cfg.Devices[i].Memory = 1 << 20
	}
	_, err := Shares(cfg, catalogModel(t, "local"), Options{})
	require.ErrorContains(t, err, "no split of 8 micro-batches over dp=2 replicas is feasible (7 tried)")
	require.ErrorContains(t, err, "mb=1:7")
	require.ErrorContains(t, err, "over by")

	cfg.Strategy.AutoShares = false
	_, err = Shares(cfg, catalogModel(t, "local"), Options{})
	require.ErrorContains(t, err, "no mb=auto")
	_, err = Resolve(cfg, catalogModel(t, "local"), Options{})
	require.ErrorContains(t, err, "no mb=auto or layers=auto")
}

// A pipeline over the GPU and the host's CPU: the cut leaves the CPU one
// layer (FLOP-balanced, it would get half the arithmetic), and beats the
// FLOP-balanced cut by the simulator's own account.
func TestLayersFavourTheFasterDevice(t *testing.T) {
	cfg := autoConfig(t, "mnist-cnn", "h200-host", "pp=2,mb=2,layers=auto", 64, false)
	res, err := Resolve(cfg, catalogModel(t, "h200-host"), Options{})
	require.NoError(t, err)
	require.Equal(t, "layers", res.Key)
	require.True(t, res.Exhaustive)
	require.Len(t, res.Candidates, 3, "4 layers into 2 stages")
	best := res.Best()
	require.Equal(t, []int{3, 1}, best.Counts)
	require.Equal(t, "pp=2,layers=3:1,mb=2,sched=1f1b", res.Plan.Strategy)

	balanced := cfg
	balanced.Strategy.AutoLayers = false
	p, err := plans.Compile(balanced)
	require.NoError(t, err)
	flops, err := step(p, catalogModel(t, "h200-host"))
	require.NoError(t, err)
	require.Less(t, best.Step, flops, "the searched cut beats the FLOP-balanced one")
}

// Too many cuts to simulate each (12 layers into 4 stages: 165): the local
// search from the even cut lands within 10% of the best cut, found here by
// simulating them all, on stages whose firings cost 1, 2, 4 and 4.
func TestLayersLocalSearch(t *testing.T) {
	const model = "mlp3x4096:depth=12,width=8"
	n, err := plans.Layers(model)
	require.NoError(t, err)
	require.Equal(t, 12, n)
	cfg := autoConfig(t, model, "local", "pp=4,mb=8,layers=auto", 8, true)
	cfg.Devices = typed(4, "H200", "A100-SXM4-40GB", "T4")
	d := perDevice(1, 2, 4, 4)
	res, err := Layers(cfg, d, Options{})
	require.NoError(t, err)
	require.False(t, res.Exhaustive)
	require.Less(t, len(res.Candidates), 165)

	best := time.Duration(1 << 62)
	eachComposition(12, 4, func(layers []int) {
		c := cfg
		c.Strategy = cfg.Strategy.WithLayers(layers)
		p, err := plans.Compile(c)
		require.NoError(t, err)
		st, err := step(p, d)
		require.NoError(t, err)
		best = min(best, st)
	})
	t.Logf("local search: %v in %d simulations; best of all 165 cuts: %v", res.Best().Step, len(res.Candidates), best)
	require.LessOrEqual(t, float64(res.Best().Step), 1.1*float64(best), "local %v (%v) vs the best of all cuts %v",
		res.Best().Step, res.Best().Counts, best)
}

func TestCompositions(t *testing.T) {
	for _, tt := range []struct{ n, k, want int }{{8, 2, 7}, {5, 3, 6}, {4, 4, 1}, {10, 1, 1}} {
		require.Equal(t, tt.want, compositions(tt.n, tt.k, 1<<30), "%d into %d", tt.n, tt.k)
		count := 0
		eachComposition(tt.n, tt.k, func(parts []int) {
			sum := 0
			for _, p := range parts {
				require.GreaterOrEqual(t, p, 1)
				sum += p
			}
			require.Equal(t, tt.n, sum)
			count++
		})
		require.Equal(t, tt.want, count)
	}
	require.Equal(t, 100, compositions(64, 3, 100), "capped")
}

// A search compiles its candidates shared (one rank for each
// tensor-parallel group, one replica for alike ones) and finds the steps
// their whole plans simulate to; it returns the best candidate's plan as
// the config asks, listing every rank and replica unless it asks to share.
func TestSearchSharesCandidates(t *testing.T) {
	const model = "gpt:layers=4,hidden=256,heads=8,seq=64,vocab=1024"
	for _, c := range []struct{ cluster, strategy string }{
		{"dgx-a100x2", "dp=2,tp=2,pp=4,mb=4,layers=auto"},
		{"dgx-a100", "dp=4,tp=2,mbs=2,mb=auto"},
		{"mixed-a100-v100", "dp=2,tp=2,mbs=2,mb=auto"},
	} {
		cfg := autoConfig(t, model, c.cluster, c.strategy, 16, false)
		d := catalogModel(t, c.cluster)
		res, err := Resolve(cfg, d, Options{})
		require.NoError(t, err, c.strategy)
		feasible := 0
		for _, cand := range res.Candidates {
			if cand.Err != nil {
				continue
			}
			feasible++
			whole := cfg
			whole.Strategy = cand.Strategy
			p, err := plans.Compile(whole)
			require.NoError(t, err)
			require.False(t, p.SharedTP || p.SharedDP)
			want, err := step(p, d)
			require.NoError(t, err)
			require.Equal(t, want, cand.Step, "%s on %s", cand.Strategy, c.cluster)
		}
		require.Positive(t, feasible, c.strategy)
		require.Equal(t, res.Best().Strategy.String(), res.Plan.Strategy)
		require.False(t, res.Plan.SharedTP || res.Plan.SharedDP, "listed whole, as the config asks")

		shared := cfg
		shared.SharedTP, shared.SharedDP = true, true
		again, err := Resolve(shared, d, Options{})
		require.NoError(t, err)
		require.Equal(t, res.Candidates, again.Candidates)
		require.True(t, again.Plan.SharedTP, "as simulated: %s", again.Plan.Strategy)
		require.Equal(t, res.Plan.Memory, again.Plan.Memory)
	}
}

// compile shares a plan where that simulates to the whole plan's step, and
// elsewhere compiles it as asked: on an NVSwitch machine it lists one rank
// and one replica; on a DGX-1, whose hybrid cube mesh prices a group's
// ranks' transfers unlike, it lists them all.
func TestCompileSharesExactly(t *testing.T) {
	const model = "gpt:layers=4,hidden=256,heads=8,seq=64,vocab=1024"
	cfg := autoConfig(t, model, "dgx-a100x2", "dp=2,tp=2,pp=2,mb=2", 16, false)
	p, err := compile(cfg, catalogModel(t, "dgx-a100x2"))
	require.NoError(t, err)
	require.True(t, p.SharedTP && p.SharedDP)

	cfg = autoConfig(t, model, "dgx-v100", "tp=4,pp=2,mb=2", 16, false)
	p, err = compile(cfg, catalogModel(t, "dgx-v100"))
	require.NoError(t, err)
	require.False(t, p.SharedTP || p.SharedDP)
}

// Candidates that tie keep the order they were tried in, and the first
// tried of the fastest is the result, its plan the one returned: here
// every split of the micro-batches costs the same (a micro-batch's
// firings cost nothing).
func TestSearchTies(t *testing.T) {
	cfg := autoConfig(t, "mlp", "local", "dp=2,mbs=4,mb=auto", 32, true)
	cfg.Devices = typed(2, "A100-SXM4-40GB", "V100-SXM2-16GB")
	free := sim.DurationFunc(func(p *plans.Plan, task int) (time.Duration, error) {
		if p.Tasks[task].PerMicro {
			return 0, nil
		}
		return time.Microsecond, nil
	})
	var tried [][]int
	eachComposition(8, 2, func(counts []int) { tried = append(tried, slices.Clone(counts)) })
	res, err := Shares(cfg, free, Options{})
	require.NoError(t, err)
	require.True(t, res.Exhaustive)
	require.Len(t, res.Candidates, len(tried))
	for i, c := range res.Candidates {
		require.NoError(t, c.Err)
		require.Equal(t, res.Best().Step, c.Step, "every split ties")
		require.Equal(t, tried[i], c.Counts, "candidate %d: in the order tried", i)
	}
	require.Equal(t, tried[0], res.Best().Counts)
	require.Equal(t, res.Best().Strategy.Shares, res.Plan.Shares, "the plan is the best candidate's")
	require.Equal(t, res.Best().Strategy.String(), res.Plan.Strategy)
}
