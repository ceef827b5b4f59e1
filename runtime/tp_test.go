package runtime

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
	"github.com/stretchr/testify/require"
)

// trainPlan compiles model under strategy on n one-core CPU devices and
// runs it for iters iterations from seed 5, with SGD and momentum. (Adam
// would make rounding noise a full step where a gradient is zero in exact
// arithmetic, as an attention's key bias's is: its updates would differ
// by more than rounding between two ways of summing.)
func trainPlan(t *testing.T, model, strategy string, batch, n, iters int) (*plans.Plan, *PlanRunner, *RunResult) {
	t.Helper()
	return trainPlanWith(t, model, strategy, sgdMomentum, batch, n, iters)
}

// sgdMomentum is trainPlan's optimizer.
var sgdMomentum = graph.SGD{LR: 0.05, Momentum: 0.9}

// trainPlanWith is trainPlan with optimizer opt.
func trainPlanWith(t *testing.T, model, strategy string, opt graph.Optimizer, batch, n, iters int) (*plans.Plan, *PlanRunner, *RunResult) {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 5,
		Optimizer: opt, Devices: cpuDevices(n)})
	require.NoError(t, err)
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	res, err := r.Run(context.Background(), iters, NewSyntheticFeeder(p.Images, 10, 64, 9))
	require.NoError(t, err)
	require.NoError(t, p.CheckTrace(res.Trace), "the measured trace obeys the plan")
	return p, r, res
}

// Tensor parallelism computes what one device computes: the same losses
// and, assembled from the parts, the same weights after training — for
// every model with a tensor-parallel layout, alone and combined with data
// and pipeline parallelism, micro-batches and recompute.
func TestTensorParallelMatchesOneDevice(t *testing.T) {
	const iters = 3
	for _, model := range []string{"mlp", "mlp3x4096:depth=4,width=64", "gpt2s-blocks:layers=2,hidden=32,heads=4,seq=8",
		"gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64", "llama:layers=2,hidden=32,heads=8,kv_heads=4,ffn=48,seq=8,vocab=64",
		"bert:layers=2,hidden=32,heads=4,seq=8,vocab=64"} {
		batch := 8
		_, ref, want := trainPlan(t, model, "single", batch, 1, iters)
		refStore, err := ref.Store()
		require.NoError(t, err)
		strategies := []string{"tp=2", "tp=4", "dp=2,tp=2", "tp=2,pp=2,mb=2", "tp=2,pp=2,mb=4,sched=gpipe",
			"dp=2,tp=2,pp=2,mb=2", "tp=2,mb=2,recompute=full"}
		if zoo.KeepsAttentionProbs(model) { // what selective recomputation recomputes
			strategies = append(strategies, "tp=2,recompute=selective")
		}
		if zoo.HasSP(model) { // sequence parallelism: the same losses and weights again
			strategies = append(strategies, "tp=2,sp=on", "tp=4,sp=on", "dp=2,tp=2,sp=on", "tp=2,sp=on,pp=2,mb=2",
				"tp=2,sp=on,mb=2,recompute=full", "tp=2,sp=on,recompute=selective")
		}
		for _, s := range strategies {
			t.Run(fmt.Sprintf("%s/%s", model, s), func(t *testing.T) {
				p, r, got := trainPlan(t, model, s, batch, 8, iters)
				for it := range iters {
					if d := math.Abs(got.Loss[it] - want.Loss[it]); d > 1e-5*math.Abs(want.Loss[it]) {
						t.Errorf("iteration %d: loss %g, one device %g", it, got.Loss[it], want.Loss[it])
					}
				}
				store, err := r.Store()
				require.NoError(t, err)
				shards := 0
				for _, reg := range p.Registers {
					if reg.Init.Shard != nil {
						shards++
					}
				}
				require.Positive(t, shards, "the plan splits some weights")
				for _, name := range refStore.Names() {
					w, _ := refStore.Get(name)
					g, ok := store.Get(name)
					if !ok {
						t.Errorf("%s: not in the tensor-parallel store", name)
						continue
					}
					if e := relDiff(g, w); e > 1e-4 {
						t.Errorf("%s: relative difference %.3g from one device", name, e)
					}
				}
			})
		}
	}
}

// A language model whose head is its token embedding (tie=on) trains as on
// one device under data, tensor and sequence parallelism, ZeRO and
// recompute; one weight read on two stages refuses pipelines.
func TestTiedHeadMatchesOneDevice(t *testing.T) {
	const iters, batch = 3, 8
	for _, model := range []string{"gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64,tie=on", "llama:layers=2,hidden=32,heads=8,kv_heads=4,ffn=48,seq=8,vocab=64,tie=on",
		"bert:layers=2,hidden=32,heads=4,seq=8,vocab=64,tie=on"} {
		_, ref, want := trainPlan(t, model, "single", batch, 1, iters)
		refStore, err := ref.Store()
		require.NoError(t, err)
		names := refStore.Names()
		require.NotContains(t, names, "lm_head.weight", "tied: no head of its own")
		require.NotContains(t, names, "cls.predictions.decoder.weight", "tied: no decoder of its own")
		for _, s := range []string{"dp=2", "tp=2", "dp=2,tp=2", "tp=2,sp=on", "dp=2,zero=1", "dp=2,tp=2,zero=3", "dp=2,mb=2,zero=3,prefetch=1", "tp=2,mb=2,recompute=full"} {
			t.Run(fmt.Sprintf("%s/%s", model, s), func(t *testing.T) {
				_, r, got := trainPlan(t, model, s, batch, 8, iters)
				require.InDeltaSlice(t, want.Loss, got.Loss, 1e-5*math.Abs(want.Loss[0]))
				store, err := r.Store()
				require.NoError(t, err)
				for _, name := range names {
					w, _ := refStore.Get(name)
					g, ok := store.Get(name)
					require.True(t, ok, name)
					require.Less(t, relDiff(g, w), 1e-4, name)
				}
			})
		}
		st, err := plans.ParseStrategy("pp=2,mb=2", batch)
		require.NoError(t, err)
		_, err = plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: cpuDevices(2)})
		require.ErrorContains(t, err, "is read on stages 0 and 1; a weight must live on one stage")
	}
}

// A model without a tensor-parallel layout, or a group that does not
// divide its layers, is refused at compile time with the reason.
func TestTensorParallelRefused(t *testing.T) {
	for _, tt := range []struct{ model, strategy, err string }{
		{"mnist-cnn", "tp=2", "has no tensor-parallel layout"},
		{"gpt2s-blocks:layers=1,hidden=32,heads=4,seq=8", "tp=3", "does not divide heads"},
		{"mlp", "tp=2", "needs 2 devices"},
	} {
		st, err := plans.ParseStrategy(tt.strategy, 8)
		require.NoError(t, err)
		n := 8
		if tt.err == "needs 2 devices" {
			n = 1
		}
		_, err = plans.Compile(plans.Config{Model: tt.model, Batch: 8, Strategy: st, Seed: 5, Optimizer: graph.SGD{LR: 0.1}, Devices: cpuDevices(n)})
		require.ErrorContains(t, err, tt.err, tt.model+" "+tt.strategy)
	}
}

// A store assembles a tensor from its tensor-parallel parts, in any order
// and from any process, and offers it only once every part is there.
func TestStoreAssemblesParts(t *testing.T) {
	full := graph.Shape{4, 2}
	part := func(k int, v ...float32) Tensor {
		sh := &graph.Shard{Of: "w", Full: full, Axis: 0, Blocks: 2, Parts: 2, Part: k}
		return Tensor{Name: "w" + sh.Suffix(), Spec: graph.Spec{Shape: sh.Shape(), DType: graph.F32}, F: v, Shard: sh}
	}
	s := NewStore(1)
	require.NoError(t, s.Put(part(1, 3, 4, 7, 8)))
	_, ok := s.Get("w")
	require.False(t, ok, "half of w")
	_, err := s.bind(&graph.Tensor{Name: "w", Spec: graph.Spec{Shape: full, DType: graph.F32}})
	require.ErrorContains(t, err, "1 of its 2 tensor-parallel parts")
	require.NoError(t, s.Put(part(0, 1, 2, 5, 6)))
	w, ok := s.Get("w")
	require.True(t, ok)
	require.Equal(t, []float32{1, 2, 3, 4, 5, 6, 7, 8}, w, "blocks of rows: part 0 takes the first half of each")
	moved := NewStore(1)
	require.NoError(t, moved.Put(s.Tensors()...))
	w2, ok := moved.Get("w")
	require.True(t, ok)
	require.Equal(t, w, w2, "the parts travel, the whole is assembled again")
	bad := part(0, 1, 2, 5, 6)
	bad.Spec.Shape = graph.Shape{4, 2}
	bad.F = make([]float32, 8)
	require.ErrorContains(t, moved.Put(bad), "part 0 of 2")
}

// Under ZeRO with tensor parallelism a replica holds a part of a rank's
// part (graph.Shard.Within): it is initialized as that piece of the whole
// tensor, and a store assembles the rank's part from the replicas' parts
// and the whole from the ranks' parts, in any order and after moving.
func TestStoreAssemblesPartsOfParts(t *testing.T) {
	full := graph.Shape{4, 2}
	init := graph.Init{Kind: graph.Uniform, Scale: 1}
	whole := make([]float32, 8)
	initialize(7, "w", init, whole)
	var parts []Tensor
	for rank := range 2 { // columns
		tp := &graph.Shard{Of: "w", Full: full, Axis: 1, Parts: 2, Part: rank, Blocks: 1}
		for replica := range 2 { // rows of the rank's column
			sh := &graph.Shard{Of: "w" + tp.Suffix(), Full: tp.Shape(), Axis: 0, Parts: 2, Part: replica, Blocks: 1, Within: tp}
			require.NoError(t, sh.Check())
			name, v := fmt.Sprintf("w%s [zero %d/2]", tp.Suffix(), replica), make([]float32, 2)
			initialize(7, name, graph.Init{Kind: init.Kind, Scale: init.Scale, Shard: sh}, v)
			require.Equal(t, []float32{whole[4*replica+rank], whole[4*replica+2+rank]}, v, "rank %d, replica %d: seeded by w's name", rank, replica)
			parts = append(parts, Tensor{Name: name, Spec: graph.Spec{Shape: sh.Shape(), DType: graph.F32}, F: v, Shard: sh})
		}
	}
	s := NewStore(7)
	for _, i := range []int{3, 0, 2} {
		require.NoError(t, s.Put(parts[i]))
	}
	_, ok := s.Get("w")
	require.False(t, ok, "rank 0's part lacks replica 1's")
	col, ok := s.Get("w [tp 1/2]")
	require.True(t, ok, "rank 1's part is whole")
	require.Equal(t, []float32{whole[1], whole[3], whole[5], whole[7]}, col)
	require.NoError(t, s.Put(parts[1]))
	w, ok := s.Get("w")
	require.True(t, ok)
	require.Equal(t, whole, w)
	moved := NewStore(7)
	require.NoError(t, moved.Put(s.Tensors()...))
	w2, ok := moved.Get("w")
	require.True(t, ok)
	require.Equal(t, whole, w2, "the parts of the parts travel; the rest is assembled again")
	bad := parts[0]
	bad.Shard = &graph.Shard{Of: bad.Shard.Of, Full: graph.Shape{4, 1}, Axis: 0, Parts: 2, Blocks: 1, Within: bad.Shard.Within.Named("w")}
	bad.Shard.Within.Within = bad.Shard.Within.Named("w")
	require.ErrorContains(t, moved.Put(bad), "a part of a part of a part")
}

// reference is what one device computes: its losses, and its weights and
// optimizer state.
type reference struct {
	store *Store
	loss  []float64
}

// references holds the one-device runs of a test, by model, optimizer and
// batch.
type references map[string]reference

// of trains model on one device with opt (once per test) for iters
// iterations.
func (refs references) of(t *testing.T, model string, opt graph.Optimizer, batch, iters int) reference {
	t.Helper()
	key := fmt.Sprintf("%s/%s/%d", model, opt.Name(), batch)
	if want, ok := refs[key]; ok {
		return want
	}
	_, r, res := trainPlanWith(t, model, "single", opt, batch, 1, iters)
	store, err := r.Store()
	require.NoError(t, err)
	refs[key] = reference{store, res.Loss}
	return refs[key]
}

// requireMatched checks that a run (r, got) computed what one device did:
// its losses, and its store's tensors assembled from the replicas' parts.
func (want reference) requireMatched(t *testing.T, r *PlanRunner, got *RunResult) {
	t.Helper()
	for it := range want.loss {
		require.InDelta(t, want.loss[it], got.Loss[it], 1e-5*want.loss[it], "iteration %d", it)
	}
	store, err := r.Store()
	require.NoError(t, err)
	for _, name := range want.store.Names() {
		w, _ := want.store.Get(name)
		g, ok := store.Get(name)
		require.True(t, ok, "%s: in the store, assembled from the replicas' parts", name)
		require.Less(t, relDiff(g, w), 1e-5, name)
	}
}

// ZeRO computes what one device computes: the same losses and, assembled
// from the replicas' parts, the same weights and optimizer state — at
// every stage, where the replicas divide a weight's first axis (mlp's
// 10-way output layer stays whole under dp=4), with several micro-batches
// (stages 2 and 3 reduce-scatter each), uneven replicas (stage 1; stages
// 2 and 3 in TestZeroUnevenMatchesOneDevice),
// pipelines and three replicas.
func TestZeroMatchesOneDevice(t *testing.T) {
	const iters = 3
	refs := references{}
	for _, c := range []struct {
		model, strategy string
		batch           int
	}{
		{"mlp", "dp=2,zero=1", 8}, {"mlp", "dp=4,zero=1", 8}, {"mlp", "dp=2,mb=3:1,zero=1", 8}, {"mlp", "dp=2,pp=2,mb=2,zero=1", 8},
		{"mlp", "dp=2,zero=2", 8}, {"mlp", "dp=2,mb=2,zero=2", 8}, {"mlp", "dp=4,mb=2,zero=2", 8}, {"mlp", "dp=2,pp=2,mb=2,zero=2", 8},
		{"mlp", "dp=2,zero=3", 8}, {"mlp", "dp=2,mb=2,zero=3", 8}, {"mlp", "dp=4,mb=2,zero=3", 8}, {"mlp", "dp=2,pp=2,mb=2,zero=3", 8},
		{"mlp", "dp=2,pp=2,mb=4,sched=gpipe,zero=3", 8}, {"mlp", "dp=2,mb=2,recompute=full,zero=3", 8},
		{"mlp3x4096:depth=3,width=12", "dp=3,mb=2,zero=1", 12}, {"mlp3x4096:depth=3,width=12", "dp=3,mb=2,zero=2", 12},
		{"mlp3x4096:depth=3,width=12", "dp=3,zero=3", 12}, {"mlp3x4096:depth=3,width=12", "dp=3,mb=2,zero=3", 12},
		{"mlp3x4096:depth=3,width=12", "dp=3,pp=2,mb=2,zero=2", 12}, {"mlp3x4096:depth=3,width=12", "dp=3,pp=2,mb=4,sched=gpipe,zero=3", 12},
		// Gathers a layer or two ahead of their use (prefetch).
		{"mlp", "dp=2,mb=2,zero=3,prefetch=1", 8}, {"mlp", "dp=2,pp=2,mb=4,sched=gpipe,zero=3,prefetch=1", 8},
		{"mlp3x4096:depth=3,width=12", "dp=3,mb=2,recompute=full,zero=3,prefetch=1", 12}, {"mlp3x4096:depth=3,width=12", "dp=3,pp=2,mb=2,zero=3,prefetch=2", 12},
	} {
		t.Run(c.model+"/"+c.strategy, func(t *testing.T) {
			want := refs.of(t, c.model, sgdMomentum, c.batch, iters)
			p, r, got := trainPlan(t, c.model, c.strategy, c.batch, 8, iters)
			want.requireMatched(t, r, got)
			parts, masters := 0, 0
			for _, reg := range p.Registers {
				if reg.Init.Shard != nil {
					parts++
				}
				if reg.Master {
					masters++
				}
			}
			if p.Zero < 3 {
				require.Positive(t, masters, "some weights are updated in parts")
				require.Greater(t, parts, masters, "and their momentum is split")
			} else {
				require.Zero(t, masters, "a part is a weight's only copy")
				require.Positive(t, parts)
			}
			if c.model != "mlp" {
				return
			}
			for _, name := range []string{"fc1.weight", "fc3.bias"} {
				w0, ok0 := r.Param(name, 0)
				w1, ok1 := r.Param(name, 1)
				// Under zero=3 a weight is kept whole only where the
				// replicas do not divide it (fc3.bias's 10 under dp=4).
				if whole := p.Zero < 3 || name == "fc3.bias" && p.DP == 4; !whole {
					require.False(t, ok0 || ok1, "%s: under zero=3 no replica keeps it whole", name)
					continue
				}
				require.True(t, ok0 && ok1, name)
				require.Equal(t, w0, w1, "%s: every replica holds the gathered weight", name)
			}
		})
	}
}

// ZeRO stages 2 and 3 over replicas with uneven micro-batches compute
// what one device computes, with SGD and with Adam: the same losses and,
// assembled from the parts, the same weights and optimizer state. The
// replicas run max(mb) rounds of collectives, one with fewer micro-batches
// joining the last ones without computing (contributing zeros to the
// reduce-scatters, and getting its part of the others' gradients): it
// may be the first replica or the last, one of three, in a pipeline, with
// gathers ahead (prefetch) and with recompute.
func TestZeroUnevenMatchesOneDevice(t *testing.T) {
	const iters = 3
	const (
		mlp3 = "mlp3x4096:depth=3,width=12"
		gpt  = "gpt:layers=2,hidden=32,heads=4,seq=8,vocab=64"
	)
	adam := graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	refs := references{}
	for _, c := range []struct {
		model, strategy string
		batch           int
		adam            bool // also with Adam (not for an attention's key bias: see trainPlan)
	}{
		{"mlp", "dp=2,mb=3:1,zero=2", 8, true}, {"mlp", "dp=2,mb=3:1,zero=3", 8, true}, {"mlp", "dp=2,mb=1:3,zero=2", 8, true},
		{"mlp", "dp=2,mb=3:1,zero=3,prefetch=1", 8, true}, {"mlp", "dp=2,mb=1:3,zero=3,prefetch=1", 8, true},
		{"mlp", "dp=2,pp=2,mb=3:1,zero=2", 8, true}, {"mlp", "dp=2,pp=2,mb=1:3,sched=gpipe,zero=3,prefetch=1", 8, false},
		{"mlp", "dp=2,mb=3:1,recompute=full,zero=3", 8, false},
		{mlp3, "dp=3,mb=2:1:1,zero=2", 12, true}, {mlp3, "dp=3,mb=1:2:1,zero=3,prefetch=1", 12, true},
		{mlp3, "dp=3,pp=2,mb=1:1:2,zero=3", 12, false},
		{gpt, "dp=2,mb=3:1,zero=2", 8, false}, {gpt, "dp=2,mb=1:3,zero=3,prefetch=1", 8, false},
	} {
		opts := []graph.Optimizer{sgdMomentum}
		if c.adam {
			opts = append(opts, adam)
		}
		for _, opt := range opts {
			t.Run(c.model+"/"+c.strategy+"/"+opt.Name(), func(t *testing.T) {
				want := refs.of(t, c.model, opt, c.batch, iters)
				p, r, got := trainPlanWith(t, c.model, c.strategy, opt, c.batch, 8, iters)
				require.NotNil(t, p.Shares)
				want.requireMatched(t, r, got)
			})
		}
	}
}

// The options combine: interleaved pipelines with ZeRO, with sequence
// parallelism and recompute, and all of them with data parallelism and
// GPipe, compute what one device computes.
func TestCombinedStrategiesMatchOneDevice(t *testing.T) {
	const iters, batch = 3, 8
	const model = "gpt:layers=4,hidden=32,heads=4,seq=8,vocab=64"
	_, ref, want := trainPlan(t, model, "single", batch, 1, iters)
	refStore, err := ref.Store()
	require.NoError(t, err)
	for _, s := range []string{"dp=2,pp=2,vpp=2,zero=1,mb=2", "dp=2,pp=2,vpp=2,zero=3,mb=2", "dp=2,pp=2,mb=4,zero=2,recompute=selective",
		"dp=2,mb=2,zero=3,recompute=full", "tp=2,sp=on,pp=2,vpp=2,mb=2,recompute=full",
		"dp=2,pp=2,vpp=2,zero=3,prefetch=1,mb=2", "dp=2,mb=2,zero=3,prefetch=2,recompute=full",
		"dp=2,tp=2,sp=on,pp=2,mb=2,sched=gpipe,recompute=selective"} {
		t.Run(s, func(t *testing.T) {
			_, r, got := trainPlan(t, model, s, batch, 8, iters)
			for it := range iters {
				require.InDelta(t, want.Loss[it], got.Loss[it], 1e-5*want.Loss[it], "iteration %d", it)
			}
			store, err := r.Store()
			require.NoError(t, err)
			for _, name := range refStore.Names() {
				w, _ := refStore.Get(name)
				g, ok := store.Get(name)
				require.True(t, ok, name)
				require.Less(t, relDiff(g, w), 1e-4, name)
			}
		})
	}
}

// ZeRO over tensor-parallel groups computes what one device computes:
// each rank's parts of the weights, and the weights every rank holds
// whole, split over the replicas of the same stage and rank, at every
// stage, with micro-batches (uneven ones too), pipelines
// (interleaved too), sequence parallelism and recompute. Assembled from the parts of the parts, the
// weights and optimizer state are one device's, and the ranks of a group
// hold the same bits of what they share.
func TestZeroWithTensorParallelMatchesOneDevice(t *testing.T) {
	const iters, batch = 3, 8
	const (
		blocks = "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16"
		gpt    = "gpt:layers=4,hidden=32,heads=4,seq=8,vocab=64"
		llama  = "llama:layers=2,hidden=32,heads=8,kv_heads=4,ffn=48,seq=8,vocab=64"
	)
	cases := map[string][]string{
		"mlp": {"dp=2,tp=2,zero=1", "dp=2,tp=2,zero=2", "dp=2,tp=2,zero=3", "dp=4,tp=2,mb=2,zero=1", "dp=2,tp=2,mb=2,zero=2",
			"dp=2,tp=2,mb=2,zero=3", "dp=2,tp=2,pp=2,mb=2,zero=2", "dp=2,tp=2,pp=2,mb=4,sched=gpipe,zero=3", "dp=2,tp=2,mb=3:1,zero=1",
			"dp=2,tp=2,pp=2,mb=4,sched=gpipe,zero=3,prefetch=1", "dp=2,tp=2,mb=3:1,zero=2", "dp=2,tp=2,mb=1:3,zero=3,prefetch=1"},
		blocks: {"dp=2,tp=2,zero=1", "dp=2,tp=2,mb=2,zero=2", "dp=2,tp=2,mb=2,zero=3", "dp=2,tp=2,pp=2,mb=2,zero=3",
			"dp=2,tp=2,mb=2,recompute=full,zero=3", "dp=2,tp=2,mb=2,recompute=full,zero=3,prefetch=1", "dp=2,tp=2,pp=2,mb=4,zero=3,prefetch=1"},
		gpt: {"dp=2,tp=2,mb=2,zero=1", "dp=2,tp=2,mb=2,zero=2", "dp=2,tp=2,mb=2,zero=3", "dp=2,tp=2,sp=on,mb=2,zero=2",
			"dp=2,tp=2,sp=on,mb=2,zero=3", "dp=2,tp=2,sp=on,pp=2,vpp=2,mb=2,zero=3", "dp=2,tp=2,sp=on,mb=2,recompute=selective,zero=2",
			"dp=2,tp=2,sp=on,pp=2,vpp=2,mb=2,zero=3,prefetch=1", "dp=2,tp=2,sp=on,mb=3:1,zero=3"},
		llama: {"dp=2,tp=2,zero=1", "dp=2,tp=2,mb=2,zero=2", "dp=2,tp=2,sp=on,mb=2,zero=3", "dp=2,tp=2,pp=2,mb=2,zero=3",
			"dp=2,tp=2,sp=on,mb=2,recompute=full,zero=3,prefetch=1"},
	}
	for _, model := range []string{"mlp", blocks, gpt, llama} {
		_, ref, want := trainPlan(t, model, "single", batch, 1, iters)
		refStore, err := ref.Store()
		require.NoError(t, err)
		for _, s := range cases[model] {
			t.Run(model+"/"+s, func(t *testing.T) {
				p, r, got := trainPlan(t, model, s, batch, 8, iters)
				for it := range iters {
					require.InDelta(t, want.Loss[it], got.Loss[it], 1e-5*want.Loss[it], "iteration %d", it)
				}
				nested := 0 // parts of a rank's part
				for _, reg := range p.Registers {
					if sh := reg.Init.Shard; sh != nil && sh.Within != nil {
						require.Equal(t, p.TPRank(reg.Device), sh.Within.Part, reg.Name)
						require.Equal(t, p.Replica(reg.Device), sh.Part, reg.Name)
						nested++
					}
				}
				require.Positive(t, nested, "the replicas split the ranks' parts")
				store, err := r.Store()
				require.NoError(t, err)
				for _, name := range refStore.Names() {
					w, _ := refStore.Get(name)
					g, ok := store.Get(name)
					require.True(t, ok, "%s: in the store, assembled from the parts of the parts", name)
					require.Less(t, relDiff(g, w), 1e-4, name)
				}
				requireRanksAgree(t, p, r)
			})
		}
	}
}

// requireRanksAgree checks that the devices of a replica's
// tensor-parallel group hold the same bits in every persistent register
// they share by name: a weight every rank holds whole, or its ZeRO part.
func requireRanksAgree(t *testing.T, p *plans.Plan, r *PlanRunner) {
	t.Helper()
	type key struct {
		name           string
		replica, stage int
	}
	first := map[key][]float32{}
	shared := 0
	for i, reg := range p.Registers {
		if !reg.Persistent {
			continue
		}
		b, err := r.value(i)
		require.NoError(t, err)
		k := key{reg.Name, p.Replica(reg.Device), p.Stage(reg.Device)}
		if w, ok := first[k]; ok {
			require.Equal(t, w, b.F, "%s on %s: the bits of tp rank 0", reg.Name, p.Devices[reg.Device].Name)
			shared++
			continue
		}
		first[k] = b.F
	}
	require.Positive(t, shared, "some weights every rank holds")
}
