package search

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/units"
)

func TestStrategies(t *testing.T) {
	even, err := Strategies(64, Space{Devices: 4, MaxMB: 4})
	require.NoError(t, err)
	var names []string
	for _, st := range even {
		names = append(names, st.String())
		require.Equal(t, 4, st.Devices())
		back, err := plans.ParseStrategy(st.String(), 64)
		require.NoError(t, err)
		require.Equal(t, st, back, "%s round-trips", st)
	}
	require.Equal(t, []string{
		"pp=4,sched=1f1b",
		"pp=4,mb=2,sched=1f1b", "pp=4,mb=2,sched=gpipe",
		"pp=4,mb=4,sched=1f1b", "pp=4,mb=4,sched=gpipe",
		"dp=2,pp=2,sched=1f1b",
		"dp=2,pp=2,mb=2,sched=1f1b", "dp=2,pp=2,mb=2,sched=gpipe",
		"dp=2,pp=2,mb=4,sched=1f1b", "dp=2,pp=2,mb=4,sched=gpipe",
		"dp=4", "dp=4,mb=2,sched=1f1b", "dp=4,mb=4,sched=1f1b",
	}, names)

	uneven, err := Strategies(64, Space{Devices: 4, MaxMB: 4, Uneven: true})
	require.NoError(t, err)
	autos := 0
	for _, st := range uneven {
		if st.AutoShares || st.AutoLayers {
			autos++
			require.False(t, st.AutoShares && st.AutoLayers)
			require.Equal(t, plans.OneFOneB, st.Sched)
		}
	}
	require.Equal(t, 12, autos, "mb=auto for the 6 data-parallel 1F1B strategies, layers=auto for the 6 pipelined")
	require.Len(t, uneven, len(even)+autos)

	// With ZeRO, mb=auto at each stage too (stages 2 and 3 run uneven
	// splits in rounds).
	zeroUneven, err := Strategies(64, Space{Devices: 4, MaxMB: 4, Uneven: true, Zero: true})
	require.NoError(t, err)
	zeroAutos := map[string]bool{}
	for _, st := range zeroUneven {
		if st.AutoShares && st.Zero > 0 {
			zeroAutos[st.String()] = true
			back, err := plans.ParseStrategy(st.String(), 64)
			require.NoError(t, err)
			require.Equal(t, st, back, "%s round-trips", st)
		}
	}
	require.Len(t, zeroAutos, 4*6, "zero=1, 2, 3 and 3 with prefetch for each mb=auto")
	for _, want := range []string{"dp=4,zero=2,mb=auto:4", "dp=2,pp=2,zero=3,prefetch=1,mb=auto:8,sched=1f1b"} {
		require.True(t, zeroAutos[want], want)
	}

	re, err := Strategies(64, Space{Devices: 4, MaxMB: 4, Recompute: []plans.Recompute{plans.RecomputeSelective, plans.RecomputeFull}})
	require.NoError(t, err)
	require.Len(t, re, 3*len(even), "each strategy also with each recompute mode")
	require.Equal(t, re[0].String()+",recompute=selective", re[1].String())
	require.Equal(t, re[0].String()+",recompute=full", re[2].String())

	// Sequence parallelism for each tp, interleaving where the pipeline's
	// micro-batches and the model's layers allow it, ZeRO for data
	// parallelism with and without tp; every variant round-trips.
	more, err := Strategies(64, Space{Devices: 4, MaxMB: 4, MaxTP: 2, SP: true, Layers: 8, Zero: true})
	require.NoError(t, err)
	has := map[string]bool{}
	for _, st := range more {
		has[st.String()] = true
		back, err := plans.ParseStrategy(st.String(), 64)
		require.NoError(t, err)
		require.Equal(t, st, back, "%s round-trips", st)
	}
	for _, want := range []string{"pp=4,vpp=2,mb=4,sched=1f1b", "dp=2,pp=2,vpp=2,mb=2,sched=1f1b", "dp=2,pp=2,vpp=2,zero=1,mb=2,sched=1f1b",
		"tp=2,sp=on,pp=2,vpp=2,mb=2,sched=1f1b", "dp=4,zero=1", "dp=2,tp=2,sp=on", "dp=4,zero=2", "dp=4,zero=3,mb=4,sched=1f1b",
		"dp=2,pp=2,vpp=2,zero=3,mb=2,sched=1f1b", "dp=2,pp=2,zero=2,mb=4,sched=gpipe", "dp=2,tp=2,zero=1", "dp=2,tp=2,sp=on,zero=3,mb=4,sched=1f1b",
		"dp=4,zero=3,prefetch=1,mb=4,sched=1f1b", "dp=2,pp=2,vpp=2,zero=3,prefetch=1,mb=2,sched=1f1b", "dp=2,tp=2,sp=on,zero=3,prefetch=1"} {
		require.True(t, has[want], want)
	}
	zeros, prefetched := map[int]int{}, 0
	for _, st := range more {
		zeros[st.Zero]++
		if st.Prefetch > 0 {
			prefetched++
		}
	}
	require.Equal(t, zeros[1], zeros[2], "every stage where stage 1 is tried")
	require.Equal(t, 2*zeros[1], zeros[3], "stage 3 also with prefetch")
	require.Equal(t, zeros[1], prefetched)
	for _, not := range []string{"pp=4,vpp=2,mb=2,sched=1f1b", "tp=2,zero=1", "tp=4,zero=3", "pp=4,vpp=2,mb=4,sched=gpipe"} {
		require.False(t, has[not], not)
	}
	// Gradient buckets for data parallelism without ZeRO or with its stage
	// 1, each variant once per size.
	bucketed, err := Strategies(64, Space{Devices: 4, MaxMB: 4, MaxTP: 2, SP: true, Zero: true, Buckets: []units.Bytes{units.MiB, 25 * units.MiB}})
	require.NoError(t, err)
	plain, err := Strategies(64, Space{Devices: 4, MaxMB: 4, MaxTP: 2, SP: true, Zero: true})
	require.NoError(t, err)
	sizes := map[string]int{}
	dpPlain := 0
	for _, st := range plain {
		if st.DP > 1 && st.Zero <= 1 {
			dpPlain++
		}
	}
	for _, st := range bucketed {
		if st.Bucket > 0 {
			require.True(t, st.DP > 1 && st.Zero <= 1, "%s", st)
			sizes[st.Bucket.String()]++
			back, err := plans.ParseStrategy(st.String(), 64)
			require.NoError(t, err)
			require.Equal(t, st, back, "%s round-trips", st)
		}
	}
	require.Equal(t, map[string]int{"1.00 MiB": dpPlain, "25.00 MiB": dpPlain}, sizes)
	require.Len(t, bucketed, len(plain)+2*dpPlain)

	shallow, err := Strategies(64, Space{Devices: 4, MaxMB: 4, Layers: 4})
	require.NoError(t, err)
	for _, st := range shallow {
		require.False(t, st.PP == 4 && st.VPP > 1, "%s: 4 layers do not interleave over 4 stages", st)
	}

	odd, err := Strategies(6, Space{Devices: 2, MaxMB: 8})
	require.NoError(t, err)
	for _, st := range odd {
		require.Zero(t, 6%(st.DP*st.MB), "%s divides the batch", st)
	}
	_, err = Strategies(64, Space{Devices: 0, MaxMB: 4})
	require.ErrorContains(t, err, "devices")
}

// A sweep ranks by simulated step time, the feasible first; shards of it
// merge into the same ranking; the same sweep gives the same entries.
func TestSweep(t *testing.T) {
	cfg := autoConfig(t, "mnist-cnn", "mixed-t4-cpu", "dp=2", 32, false)
	strategies, err := Strategies(32, Space{Devices: 2, MaxMB: 4, Uneven: true})
	require.NoError(t, err)
	d := catalogModel(t, "mixed-t4-cpu")
	entries, err := Sweep(cfg, d, strategies, Options{})
	require.NoError(t, err)
	require.Len(t, entries, len(strategies))
	for i, e := range entries {
		require.NoError(t, e.Err, e.Asked.String())
		require.Positive(t, e.Peak)
		if i > 0 {
			require.GreaterOrEqual(t, e.Step, entries[i-1].Step)
		}
		require.False(t, e.Strategy.AutoShares || e.Strategy.AutoLayers, "resolved: %s", e.Strategy)
	}
	best := entries[0]
	c := cfg
	c.Strategy = best.Strategy
	p, err := plans.Compile(c)
	require.NoError(t, err)
	got, err := step(p, d)
	require.NoError(t, err)
	require.Equal(t, best.Step, got, "the best entry's step is its plan's")

	var merged []Entry
	for shard := range 3 {
		part, err := Sweep(cfg, d, strategies, Options{Shard: shard, Shards: 3})
		require.NoError(t, err)
		for _, e := range part {
			require.Equal(t, shard, e.Index%3)
		}
		merged = append(merged, part...)
	}
	Rank(merged)
	require.Equal(t, entries, merged, "three shards merge into the whole sweep")
	again, err := Sweep(cfg, d, strategies, Options{})
	require.NoError(t, err)
	require.Equal(t, entries, again)

	_, err = Sweep(cfg, d, strategies, Options{Shard: 3, Shards: 3})
	require.ErrorContains(t, err, "shard 3 of 3")
}

// A sweep of a GPU and a CPU tries ZeRO stages 2 and 3 with mb=auto: they
// compile and simulate with uneven splits, the GPU's replica taking more.
func TestSweepZeroUneven(t *testing.T) {
	cfg := autoConfig(t, "mnist-cnn", "mixed-t4-cpu", "dp=2", 32, false)
	all, err := Strategies(32, Space{Devices: 2, MaxMB: 4, Uneven: true, Zero: true})
	require.NoError(t, err)
	var autos []plans.Strategy
	for _, st := range all {
		if st.AutoShares && st.Zero >= 2 {
			autos = append(autos, st)
		}
	}
	require.Len(t, autos, 3*3, "mb=1, 2 and 4 to start from; zero=2, 3 and 3 with prefetch")
	entries, err := Sweep(cfg, catalogModel(t, "mixed-t4-cpu"), autos, Options{})
	require.NoError(t, err)
	uneven := map[int]int{}
	for _, e := range entries {
		require.NoError(t, e.Err, e.Asked.String())
		require.Equal(t, e.Asked.Zero, e.Strategy.Zero)
		if sh := e.Strategy.Shares; sh != nil {
			require.Greater(t, sh[0], sh[1], "%s: the GPU (replica 0) takes more", e.Strategy)
			uneven[e.Strategy.Zero]++
		}
	}
	require.Positive(t, uneven[2], "zero=2 over an uneven split")
	require.Positive(t, uneven[3], "zero=3 over an uneven split")
}

// Recomputation makes fit what does not otherwise: a pipeline stage
// holding all its micro-batches' activations (GPipe) does not fit, and
// with recompute=full it does.
func TestSweepRecomputeFits(t *testing.T) {
	cfg := autoConfig(t, "mnist-cnn", "local", "dp=2", 64, true)
	for i := range cfg.Devices {
		cfg.Devices[i].Memory = 20 << 20
	}
	st := []plans.Strategy{
		{DP: 1, PP: 2, MB: 4, Sched: plans.GPipe},
		{DP: 1, PP: 2, MB: 4, Sched: plans.GPipe, Recompute: plans.RecomputeFull},
	}
	entries, err := Sweep(cfg, perDevice(1, 1), st, Options{})
	require.NoError(t, err)
	require.Equal(t, plans.RecomputeFull, entries[0].Strategy.Recompute)
	require.NoError(t, entries[0].Err)
	require.ErrorIs(t, entries[1].Err, plans.ErrOutOfMemory)
}

// Strategies that do not fit rank last, with the reason.
func TestSweepInfeasible(t *testing.T) {
	cfg := autoConfig(t, "mnist-cnn", "local", "dp=2", 64, true)
	for i := range cfg.Devices {
		cfg.Devices[i].Memory = 16 << 20 // a data-parallel replica fits (15.1 MiB); a pipeline stage, holding 32 samples' activations, does not
	}
	strategies, err := Strategies(64, Space{Devices: 2, MaxMB: 2})
	require.NoError(t, err)
	entries, err := Sweep(cfg, perDevice(1, 1), strategies, Options{})
	require.NoError(t, err)
	require.Len(t, entries, 5)
	for i, e := range entries {
		if i < 2 {
			require.NoError(t, e.Err)
			require.Equal(t, 2, e.Asked.DP, "the data-parallel strategies rank first")
			continue
		}
		require.ErrorIs(t, e.Err, plans.ErrOutOfMemory, e.Asked.String())
		require.Zero(t, e.Step)
		require.Equal(t, 2, e.Asked.PP)
	}
}

// Strategies compiled and simulated side by side give the entries of one
// at a time, in the same ranking, with progress reported once per
// strategy: a sweep over tensor, data and pipeline parallelism, ZeRO and
// micro-batches on a DGX A100, with a shared cost model whose caches the
// workers fill at once, and infeasible strategies among them (two
// layers are not cut into four stages).
func TestSweepWorkers(t *testing.T) {
	const model = "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=128"
	cfg := autoConfig(t, model, "dgx-a100", "dp=4", 16, false)
	strategies, err := Strategies(16, Space{Devices: 4, MaxMB: 4, MaxTP: 2, SP: true, Layers: 2, Zero: true})
	require.NoError(t, err)
	one, err := Sweep(cfg, catalogModel(t, "dgx-a100"), strategies, Options{})
	require.NoError(t, err)
	feasible := 0
	for _, e := range one {
		if e.Err == nil {
			feasible++
		}
	}
	require.Positive(t, feasible)
	require.Less(t, feasible, len(one), "some strategies are infeasible")
	for _, workers := range []int{2, 3, 8} {
		var done []int
		many, err := Sweep(cfg, catalogModel(t, "dgx-a100"), strategies, Options{Workers: workers, Progress: func(n, total int) {
			require.Equal(t, len(strategies), total)
			done = append(done, n)
		}})
		require.NoError(t, err)
		require.Equal(t, one, many, "%d workers", workers)
		require.Len(t, done, len(strategies))
		for i, n := range done {
			require.Equal(t, i+1, n)
		}
	}
}
