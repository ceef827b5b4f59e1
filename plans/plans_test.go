package plans

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
	"github.com/stretchr/testify/require"
)

func devs(n int, mem units.Bytes) []Device {
	d := make([]Device, n)
	for i := range d {
		d[i] = Device{Name: "cpu" + string(rune('0'+i)), Type: "cpu", Workers: 1, Memory: mem}
	}
	return d
}

func mustCompile(t testing.TB, model, strategy string, batch int) *Plan {
	t.Helper()
	st, err := ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := Compile(Config{Model: model, Batch: batch, Strategy: st, Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs(4, 0)})
	require.NoError(t, err)
	return p
}

func TestParseStrategy(t *testing.T) {
	tests := []struct {
		in   string
		want Strategy
		err  string
	}{
		{"dp=2,mb=3:1", Strategy{DP: 2, PP: 1, MB: 3, Sched: OneFOneB, Shares: []int{3, 1}}, ""},
		{"tp=2,sp=on", Strategy{DP: 1, PP: 1, MB: 1, TP: 2, SP: true, Sched: OneFOneB}, ""},
		{"tp=2,sp=off", Strategy{DP: 1, PP: 1, MB: 1, TP: 2, Sched: OneFOneB}, ""},
		{"sp=on", Strategy{}, "it needs tp ≥ 2"},
		{"tp=2,sp=yes", Strategy{}, "sp=yes: want on or off"},
		{"pp=2,vpp=2,mb=4", Strategy{DP: 1, PP: 2, VPP: 2, MB: 4, Sched: OneFOneB}, ""},
		{"dp=2,zero=1", Strategy{DP: 2, PP: 1, MB: 1, Zero: 1, Sched: OneFOneB}, ""},
		{"dp=2,zero=2", Strategy{DP: 2, PP: 1, MB: 1, Zero: 2, Sched: OneFOneB}, ""},
		{"dp=4,pp=2,mb=2,zero=3", Strategy{DP: 4, PP: 2, MB: 2, Zero: 3, Sched: OneFOneB}, ""},
		{"dp=2,zero=0", Strategy{DP: 2, PP: 1, MB: 1, Sched: OneFOneB}, ""},
		{"dp=2,zero=4", Strategy{}, "zero=4: want 0, 1, 2 or 3"},
		{"dp=2,zero=-1", Strategy{}, "zero=-1: want 0, 1, 2 or 3"},
		{"dp=2,mb=3:1,zero=2", Strategy{DP: 2, PP: 1, MB: 3, Zero: 2, Sched: OneFOneB, Shares: []int{3, 1}}, ""}, // rounds (Task.Rounds)
		{"dp=2,mb=auto:4,zero=3,prefetch=1", Strategy{DP: 2, PP: 1, MB: 2, Zero: 3, Prefetch: 1, Sched: OneFOneB, AutoShares: true}, ""},
		{"dp=2,mb=2:2,zero=3", Strategy{DP: 2, PP: 1, MB: 2, Zero: 3, Sched: OneFOneB}, ""}, // even shares are uniform
		{"dp=2,mb=3:1,zero=1", Strategy{DP: 2, PP: 1, MB: 3, Zero: 1, Sched: OneFOneB, Shares: []int{3, 1}}, ""},
		{"zero=1", Strategy{}, "it needs dp ≥ 2"},
		{"zero=3", Strategy{}, "zero=3 splits optimizer state over data-parallel replicas: it needs dp ≥ 2"},
		{"dp=2,tp=2,zero=2", Strategy{DP: 2, PP: 1, MB: 1, TP: 2, Zero: 2, Sched: OneFOneB}, ""},
		{"dp=4,tp=2,sp=on,pp=2,mb=2,zero=3", Strategy{DP: 4, PP: 2, MB: 2, TP: 2, SP: true, Zero: 3, Sched: OneFOneB}, ""},
		{"tp=2,zero=1", Strategy{}, "zero=1 splits optimizer state over data-parallel replicas: it needs dp ≥ 2"},
		{"dp=2,mb=2,zero=3,prefetch=1", Strategy{DP: 2, PP: 1, MB: 2, Zero: 3, Prefetch: 1, Sched: OneFOneB}, ""},
		{"dp=2,tp=2,pp=2,mb=4,zero=3,prefetch=2", Strategy{DP: 2, TP: 2, PP: 2, MB: 4, Zero: 3, Prefetch: 2, Sched: OneFOneB}, ""},
		{"dp=2,zero=3,prefetch=0", Strategy{DP: 2, PP: 1, MB: 1, Zero: 3, Sched: OneFOneB}, ""},
		{"dp=2,zero=2,prefetch=1", Strategy{}, "prefetch=1 gathers ZeRO stage 3's weights ahead of their use: it needs zero=3"},
		{"dp=2,prefetch=1", Strategy{}, "it needs zero=3"},
		{"dp=2,zero=3,prefetch=-1", Strategy{}, "prefetch=-1: want the layers gathered ahead"},
		{"dp=2,zero=3,prefetch=on", Strategy{}, "prefetch=on: want the layers gathered ahead"},
		{"pp=2,vpp=1,mb=4", Strategy{DP: 1, PP: 2, MB: 4, Sched: OneFOneB}, ""},
		{"dp=3,pp=2,mb=1:2:1,sched=gpipe", Strategy{DP: 3, PP: 2, MB: 2, Sched: GPipe, Shares: []int{1, 2, 1}}, ""},
		{"dp=2,mb=2:2", Strategy{DP: 2, PP: 1, MB: 2, Sched: OneFOneB}, ""}, // even shares are uniform
		{"dp=2,mb=3:1:1", Strategy{}, "3 counts for dp=2"},
		{"dp=2,mb=3:0", Strategy{}, "one positive count per replica"},
		{"dp=2,mb=3:x", Strategy{}, "one positive count per replica"},
		{"dp=2,mb=3:1,mbs=8", Strategy{}, "not both"},
		{"dp=2,mb=auto", Strategy{}, "needs mbs"},
		{"dp=4,mbs=32,mb=auto", Strategy{}, "at least dp=4 micro-batches of 32"},
		{"dp=2,mbs=7,mb=auto", Strategy{}, "does not split"},
		{"dp=2,mb=auto:8,mbs=8", Strategy{}, "mb=auto:N or mbs, not both"},
		{"dp=4,mb=auto:2", Strategy{}, "at least one per replica of dp=4"},
		{"dp=2,mb=auto:7", Strategy{}, "does not split into 7 micro-batches"},
		{"dp=2,mb=auto:x", Strategy{}, "want auto:N"},
		{"pp=2,layers=3:1,mb=2", Strategy{DP: 1, PP: 2, MB: 2, Sched: OneFOneB, Layers: []int{3, 1}}, ""},
		{"dp=2,pp=3,layers=1:2:1", Strategy{DP: 2, PP: 3, MB: 1, Sched: OneFOneB, Layers: []int{1, 2, 1}}, ""},
		{"layers=3:1", Strategy{}, "needs pp ≥ 2"},
		{"pp=2,layers=4", Strategy{}, "1 counts for pp=2"},
		{"pp=2,layers=1:1:1", Strategy{}, "3 counts for pp=2"},
		{"pp=2,layers=0:1", Strategy{}, "one positive count per stage"},
		{"pp=2,layers=auto,mbs=8,mb=auto", Strategy{}, "one at a time"},
		{"recompute=full", Strategy{DP: 1, PP: 1, MB: 1, Sched: OneFOneB, Recompute: RecomputeFull}, ""},
		{"pp=2,mb=4,sched=gpipe,recompute=full", Strategy{DP: 1, PP: 2, MB: 4, Sched: GPipe, Recompute: RecomputeFull}, ""},
		{"pp=2,recompute=selective", Strategy{DP: 1, PP: 2, MB: 1, Sched: OneFOneB, Recompute: RecomputeSelective}, ""},
		{"recompute=some", Strategy{}, "want none, selective or full"},
		{"single", Strategy{DP: 1, PP: 1, MB: 1, Sched: OneFOneB}, ""},
		{"dp=2", Strategy{DP: 2, PP: 1, MB: 1, Sched: OneFOneB}, ""},
		{"pp=2,mb=4,sched=gpipe", Strategy{DP: 1, PP: 2, MB: 4, Sched: GPipe}, ""},
		{"dp=2, pp=2", Strategy{DP: 2, PP: 2, MB: 1, Sched: OneFOneB}, ""},
		{"pp=2,mbs=8", Strategy{DP: 1, PP: 2, MB: 8, Sched: OneFOneB}, ""},
		{"dp=0", Strategy{}, "positive integer"},
		{"dp=2,dp=4", Strategy{}, "given twice"},
		{"tp=2", Strategy{DP: 1, TP: 2, PP: 1, MB: 1, Sched: OneFOneB}, ""},
		{"dp=2,tp=4,pp=2,mb=4", Strategy{DP: 2, TP: 4, PP: 2, MB: 4, Sched: OneFOneB}, ""},
		{"tp=1", Strategy{DP: 1, PP: 1, MB: 1, Sched: OneFOneB}, ""},
		{"sched=interleaved", Strategy{}, "gpipe or 1f1b"},
		{"warp=9", Strategy{}, `unknown key "warp"`},
		{"pp2", Strategy{}, "not key=value"},
		{"mb=2,mbs=4", Strategy{}, "not both"},
		{"dp=3,mbs=5", Strategy{}, "does not split"},
		{"dp=2,bucket=25MiB", Strategy{DP: 2, PP: 1, MB: 1, Sched: OneFOneB, Bucket: 25 * units.MiB}, ""},
		{"dp=2,bucket=1500000B", Strategy{DP: 2, PP: 1, MB: 1, Sched: OneFOneB, Bucket: 1500000}, ""},
		{"dp=2,bucket=1.5KiB", Strategy{DP: 2, PP: 1, MB: 1, Sched: OneFOneB, Bucket: 1536}, ""},
		{"dp=2,bucket=0", Strategy{DP: 2, PP: 1, MB: 1, Sched: OneFOneB}, ""},
		{"dp=2,bucket=off", Strategy{DP: 2, PP: 1, MB: 1, Sched: OneFOneB}, ""},
		{"bucket=25MiB", Strategy{}, "bucket=25MiB packs the gradients all-reduced over data-parallel replicas: it needs dp ≥ 2"},
		{"dp=2,bucket=-1MiB", Strategy{}, "bucket=-1MiB: want a size of gradients all-reduced at once"},
		{"dp=2,bucket=2TiB", Strategy{}, "up to 1024.00 GiB"},
		{"dp=2,bucket=big", Strategy{}, "bucket=big: want a size"},
		{"dp=2,bucket=25", Strategy{}, "bucket=25: want a size of gradients all-reduced at once, as 25MiB"}, // not 25 bytes
		{"dp=2,bucket=1.5B", Strategy{}, "bucket=1.5B: want a size"},
		{"sched=gpipe", Strategy{}, "sched orders a pipeline's or a replica's micro-batches: it needs pp ≥ 2 or mb ≥ 2"},
		{"dp=2,sched=1f1b", Strategy{}, "it needs pp ≥ 2 or mb ≥ 2"},
		{"dp=2,mb=2,sched=gpipe", Strategy{DP: 2, PP: 1, MB: 2, Sched: GPipe}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseStrategy(tt.in, 64)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, 64/got.TotalMicros()*got.TotalMicros(), 64, "the batch splits")
			again, err := ParseStrategy(got.String(), 64)
			require.NoError(t, err)
			require.Equal(t, got, again, "String round-trips")
		})
	}
}

// mb=auto starts from the even split of the batch's micro-batches of mbs
// samples, to be resolved by plans/search; the compiler refuses it as is.
func TestParseAutoShares(t *testing.T) {
	for _, tt := range []struct {
		in     string
		shares []int
		mb     int
	}{
		{"dp=2,mbs=8,mb=auto", nil, 4},
		{"dp=2,mb=auto,mbs=16,sched=gpipe", nil, 2},
		{"dp=3,mbs=8,mb=auto", []int{3, 3, 2}, 3},
		{"dp=3,mb=auto:8", []int{3, 3, 2}, 3},
	} {
		st, err := ParseStrategy(tt.in, 64)
		require.NoError(t, err, tt.in)
		require.True(t, st.AutoShares, tt.in)
		require.Equal(t, tt.shares, st.Shares, tt.in)
		require.Equal(t, tt.mb, st.MB, tt.in)
		require.Equal(t, 64, st.TotalMicros()*64/st.TotalMicros())
		require.Contains(t, st.String(), "mb=auto:")
		back, err := ParseStrategy(st.String(), 64)
		require.NoError(t, err)
		require.Equal(t, st, back, "%s round-trips as %s", tt.in, st)
		_, err = Compile(Config{Model: "mlp", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(4, 0)})
		require.ErrorContains(t, err, "plans/search", tt.in)
		resolved := st.WithShares([]int{5, 3, 1}[:st.DP])
		require.False(t, resolved.AutoShares)
	}
}

// A pipeline cut by hand: stage s takes the next layers[s] layers (in a
// CNN, a layer starts at each op reading a weight matrix or filter), whatever their
// FLOPs; layers=auto is left to plans/search.
func TestCompileLayers(t *testing.T) {
	n, err := Layers("mnist-cnn")
	require.NoError(t, err)
	require.Equal(t, 4, n, "conv1, conv2, fc1, fc2")
	stageOf := func(p *Plan, name string) int {
		for _, task := range p.Tasks {
			if strings.HasSuffix(task.Name, "/"+name) || task.Name == name {
				return task.Stage
			}
		}
		t.Fatalf("no task %s", name)
		return -1
	}
	p := mustCompile(t, "mnist-cnn", "pp=2,layers=3:1,mb=2", 64)
	require.Equal(t, "pp=2,layers=3:1,mb=2,sched=1f1b", p.Strategy)
	require.Equal(t, 0, stageOf(p, "update/fc1.weight"))
	require.Equal(t, 1, stageOf(p, "update/fc2.weight"))
	p = mustCompile(t, "mnist-cnn", "pp=2,layers=1:3,mb=2", 64)
	require.Equal(t, 0, stageOf(p, "update/conv1.weight"))
	require.Equal(t, 1, stageOf(p, "update/conv2.weight"))

	for _, s := range []string{"pp=2,layers=3:2", "pp=3,layers=2:1:2"} {
		st, err := ParseStrategy(s, 64)
		require.NoError(t, err)
		_, err = Compile(Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(4, 0)})
		require.True(t, errors.Is(err, ErrInfeasible), "%s: %v", s, err)
		require.ErrorContains(t, err, "the model has 4 layers")
	}
	st, err := ParseStrategy("pp=2,layers=auto", 64)
	require.NoError(t, err)
	_, err = Compile(Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(4, 0)})
	require.ErrorContains(t, err, "plans/search")
}

// A transformer block is one layer, as its builder declares: stages hold
// whole blocks, each block's weights on one stage.
func TestCompileLayersBlocks(t *testing.T) {
	const model = "gpt2s-blocks:layers=3,hidden=16,heads=2,seq=4"
	n, err := Layers(model)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = Layers("gpt:layers=3,hidden=16,heads=2,seq=4,vocab=8")
	require.NoError(t, err)
	require.Equal(t, 3, n, "the embeddings go with the first block, the head with the last")
	p := mustCompile(t, model, "pp=3,layers=1:1:1,mb=3", 6)
	for _, task := range p.Tasks {
		if task.Phase == "update" {
			block := strings.TrimPrefix(task.Name[strings.Index(task.Name, "update/"):], "update/layers.")
			require.Equal(t, string(rune('0'+task.Stage)), block[:1], task.Name)
		}
	}
}

// Recomputation: each layer's forward ops run again, into registers of
// their own, before the backward ops of that layer, which read them; the
// forward pass's activations inside layers are then held by no backward
// op, and a pipeline stage under GPipe needs about half the memory.
func TestCompileRecompute(t *testing.T) {
	plain := mustCompile(t, "mnist-cnn", "pp=2,mb=4,sched=gpipe", 64)
	p := mustCompile(t, "mnist-cnn", "pp=2,mb=4,sched=gpipe,recompute=full", 64)
	require.Equal(t, "pp=2,mb=4,sched=gpipe,recompute=full", p.Strategy)
	require.Less(t, float64(p.Memory[0].Peak), 0.6*float64(plain.Memory[0].Peak), "stage 0: %v against %v", p.Memory[0].Peak, plain.Memory[0].Peak)

	recomputed := map[int]bool{} // registers written by recomputations
	var re int
	for _, task := range p.Tasks {
		if strings.Contains(task.Name, "recompute/") {
			re++
			require.Equal(t, "backward", task.Phase)
			for _, w := range task.Writes {
				recomputed[w] = true
				require.True(t, strings.HasSuffix(p.Registers[w].Name, "@recompute"))
			}
		}
	}
	require.Equal(t, 9, re, "every forward op but the loss: conv, bias+act and pooling twice, the reshape, two dense layers")
	// A second forward pass, less the loss: DESIGN's 96·… FLOPs per
	// iteration with full recompute against 72·… without.
	var fwd, again units.FLOPs
	for _, task := range p.Tasks {
		switch {
		case strings.Contains(task.Name, "recompute/"):
			again += task.FLOPs
		case task.Phase == "forward" && task.Kind == Compute && !strings.Contains(task.Key, "softmax_cross_entropy"):
			fwd += task.FLOPs
		}
	}
	require.Equal(t, fwd, again)
	reads := 0
	for _, task := range p.Tasks {
		if task.Phase == "backward" && !strings.Contains(task.Name, "recompute/") {
			for _, u := range task.Reads {
				if recomputed[u.Reg] {
					reads++
				}
			}
		}
	}
	require.Positive(t, reads, "the backward pass reads recomputed activations")

	var b bytes.Buffer
	require.NoError(t, Encode(&b, p))
	_, err := Decode(&b)
	require.NoError(t, err)

	// Selective: the attention ops alone, whose probabilities are the
	// transformer's largest activations; memory between none and full.
	const gpt = "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=64"
	var peaks []units.Bytes
	for _, r := range []string{"none", "selective", "full"} {
		p := mustCompile(t, gpt, "recompute="+r, 8)
		peaks = append(peaks, p.Memory[0].Peak)
		if r != "selective" {
			continue
		}
		var names []string
		for _, task := range p.Tasks {
			if strings.HasPrefix(task.Name, "recompute/") {
				names = append(names, task.Name)
			}
		}
		require.Equal(t, []string{"recompute/attention_1", "recompute/attention"}, names, "the second block's first: the backward pass runs from the last layer")
	}
	require.Greater(t, peaks[0], peaks[1])
	require.Greater(t, peaks[1], peaks[2])
}

// Uneven data parallelism: each replica runs its share of the micro-batches
// (all of one size), reads its own slice of the batch, accumulates only if
// it runs several, and the all-reduce weighs each replica by its share.
func TestCompileUnevenShares(t *testing.T) {
	p := mustCompile(t, "mnist-cnn", "dp=2,mb=3:1", 64)
	require.Equal(t, 16, p.MicroBatch)
	require.Equal(t, []int{3, 1}, p.Shares)
	require.Equal(t, 3, p.MB)
	require.Equal(t, 4, p.TotalMicros())
	require.Equal(t, []int{0, 3}, []int{p.FirstMicro(0), p.FirstMicro(1)})
	fires := map[int]int{}
	for _, f := range p.Firings {
		fires[f.Task]++
	}
	var accs [2]int
	for _, task := range p.Tasks {
		switch {
		case task.Kind == Input:
			require.Equal(t, 48*task.Replica, task.Offset, task.Name)
		case task.Kind == Accumulate:
			accs[task.Replica]++
		case task.Kind == AllReduce:
			require.Equal(t, []float64{0.75, 0.25}, p.AllReduceWeights(&task), task.Name)
		}
		if task.PerMicro {
			require.Equal(t, p.Shares[task.Replica], fires[task.ID], task.Name)
		}
	}
	require.Equal(t, [2]int{8, 0}, accs, "replica 0 accumulates its 3 micro-batches; replica 1 has one")
	require.Nil(t, mustCompile(t, "mnist-cnn", "dp=2", 64).AllReduceWeights(&p.Tasks[0]), "even replicas take the plain mean")

	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, p))
	q, err := Decode(&buf)
	require.NoError(t, err)
	require.Equal(t, p.Shares, q.Shares)
	require.Len(t, q.Firings, len(p.Firings))

	for _, tt := range []struct {
		shares []int
		want   string
	}{
		{[]int{3}, "one count in [1, 1048576] per replica (2)"},
		{[]int{2, 1}, "the largest micro_batches (3)"},
		{[]int{3, 0}, "one count in [1"},
		{[]int{3, 2}, "batch 64 is not micro_batch × the replicas' micro-batches = 16 × 5"},
	} {
		requireFileRejects(t, p, func(f *file) { f.Shares = tt.shares }, tt.want)
	}
}

// The compute stream of each stage follows the schedule's pattern of
// forward (F) and backward (B) micro-batch blocks.
func TestSchedules(t *testing.T) {
	tests := []struct {
		strategy string
		stages   []string
	}{
		{"pp=2,mb=4,sched=1f1b", []string{"F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"}},
		{"pp=2,mb=4,sched=gpipe", []string{"F0 F1 F2 F3 B0 B1 B2 B3", "F0 F1 F2 F3 B0 B1 B2 B3"}},
		{"pp=3,mb=2,sched=1f1b", []string{"F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"}},
		// Uneven replicas: each runs its own schedule over its share.
		{"dp=2,pp=2,mb=3:1", []string{"F0 F1 B0 F2 B1 B2", "F0 B0 F1 B1 F2 B2", "F0 B0", "F0 B0"}},
	}
	for _, tt := range tests {
		t.Run(tt.strategy, func(t *testing.T) {
			p := mustCompile(t, "mlp", tt.strategy, 8)
			for s, want := range tt.stages {
				var blocks []string
				for _, f := range p.Streams[s].Order { // stream s is device s's compute stream
					fi := p.Firings[f]
					task := p.Tasks[fi.Task]
					b := map[string]string{"forward": "F", "input": "F", "backward": "B"}[task.Phase]
					if b == "" {
						continue
					}
					tag := b + string(rune('0'+fi.Micro))
					if len(blocks) == 0 || blocks[len(blocks)-1] != tag {
						blocks = append(blocks, tag)
					}
				}
				require.Equal(t, want, strings.Join(blocks, " "), "stage %d", s)
			}
		})
	}
}

func TestCompileStructure(t *testing.T) {
	p := mustCompile(t, "mnist-cnn", "dp=2", 64)
	require.Len(t, p.Devices, 2)
	require.Equal(t, 32, p.MicroBatch)
	var allreduces int
	for _, task := range p.Tasks {
		if task.Kind == AllReduce {
			allreduces++
			require.Len(t, task.Streams, 2, "an all-reduce occupies both replicas' coll streams")
		}
	}
	require.Equal(t, 8, allreduces, "one per weight and bias")
	// Parameters plus momentum, never shared.
	params := (32*9 + 32 + 64*32*9 + 64 + 3136*128 + 128 + 1280 + 10) * 4
	for _, m := range p.Memory {
		require.GreaterOrEqual(t, int(m.Persistent), 2*params)
		require.LessOrEqual(t, m.Peak, m.Unshared)
	}

	pp := mustCompile(t, "mnist-cnn", "pp=2,mb=4", 64)
	var sends int
	for _, task := range pp.Tasks {
		if task.Kind == Transfer {
			sends++
		}
	}
	// The cut falls before fc1: its input goes forward, its gradient back,
	// and the labels are loaded on the last stage directly.
	require.Equal(t, 2, sends)
}

// A register slot count too small for the schedule is rejected at compile
// time, with the firings of the cycle named.
func TestTooFewSlotsRejected(t *testing.T) {
	st, err := ParseStrategy("pp=2,mb=4,sched=gpipe,slots=1", 64)
	require.NoError(t, err)
	_, err = Compile(Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(2, 0)})
	require.True(t, errors.Is(err, ErrDeadlock), "got %v, want ErrDeadlock", err)
	require.ErrorContains(t, err, "cpu0/")
	require.ErrorContains(t, err, "frees a slot")
}

// An optimizer whose attributes a plan cannot hold (a NaN learning rate,
// which JSON cannot encode) is an error naming the update and the
// setting, not an inconsistent plan blamed on the compiler.
func TestUnencodableUpdateRejected(t *testing.T) {
	for _, tt := range []struct {
		opt  graph.Optimizer
		want string
	}{
		{graph.SGD{LR: float32(math.NaN())}, "sgd_update: learning rate NaN"},
		{graph.SGD{LR: 0.1, Momentum: float32(math.Inf(1))}, "momentum_update: momentum +Inf"},
		{graph.Adam{LR: float32(math.NaN()), Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, "adam_update: learning rate NaN"},
	} {
		st, _ := ParseStrategy("single", 64)
		_, err := Compile(Config{Model: "mlp", Batch: 64, Strategy: st, Optimizer: tt.opt, Devices: devs(1, 0)})
		require.ErrorContains(t, err, tt.want, tt.opt.Name())
		require.NotContains(t, err.Error(), "compiler bug", tt.opt.Name())
	}
}

func TestOutOfMemoryRejected(t *testing.T) {
	st, _ := ParseStrategy("single", 64)
	_, err := Compile(Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(1, 8*units.MiB)})
	require.True(t, errors.Is(err, ErrOutOfMemory), "got %v", err)
	require.ErrorContains(t, err, "cpu0 needs")
	require.ErrorContains(t, err, "over by")
}

func TestInfeasible(t *testing.T) {
	for _, s := range []string{"dp=8", "pp=9", "dp=3"} {
		st, err := ParseStrategy(s, 64)
		require.NoError(t, err)
		_, err = Compile(Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(4, 0)})
		require.True(t, errors.Is(err, ErrInfeasible), "%s: got %v", s, err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	p := mustCompile(t, "mnist-cnn", "dp=2,pp=2,mb=2", 32)
	var b bytes.Buffer
	require.NoError(t, Encode(&b, p))
	q, err := Decode(bytes.NewReader(b.Bytes()))
	require.NoError(t, err)
	var b2 bytes.Buffer
	require.NoError(t, Encode(&b2, q))
	require.Equal(t, b.String(), b2.String())
	e1, _ := p.Deps()
	e2, _ := q.Deps()
	require.Equal(t, e1, e2)

	bad := []struct{ edit, want string }{
		{strings.Replace(b.String(), fmt.Sprintf(`"version": %d`, Version), `"version": 7`, 1), "version 7"},
		{strings.Replace(b.String(), fmt.Sprintf(`"version": %d`, Version), `"version": 2`, 1), "version 2, this build reads version 3"},
		{strings.Replace(b.String(), `"micro_batches": 2`, `"micro_batches": 0`, 1), "micro_batches"},
		{strings.Replace(b.String(), `"type": "conv2d"`, `"type": "conv9d"`, 1), "conv9d"},
		{b.String()[:len(b.String())/2], "plans:"},
		{strings.Replace(b.String(), `"replicas": 2`, `"replicas": 3`, 1), "replicas×stages"},
		{fmt.Sprintf(`{"version": %d, "bogus": 3}`, Version), "bogus"},
	}
	for _, tt := range bad {
		_, err := Decode(strings.NewReader(tt.edit))
		require.ErrorContains(t, err, tt.want)
	}
}

// CheckTrace catches a firing that starts too early and a memory plan that
// puts two live registers in the same bytes.
func TestCheckTraceCatchesViolations(t *testing.T) {
	p := mustCompile(t, "mlp", "pp=2,mb=2", 8)
	tr := p.NewTrace("test")
	// A sequential schedule in firing-dependency order is valid: emit each
	// iteration's firings in a topological order, one after another.
	edges, err := p.Deps()
	require.NoError(t, err)
	order := topo(len(p.Firings), edges)
	now := trace.Time(0)
	for it := range 2 {
		for _, f := range order {
			fi := p.Firings[f]
			tr.Events = append(tr.Events, trace.Event{Task: int32(fi.Task), Iter: int32(it), Micro: int32(fi.Micro), Start: now, End: now.Add(time.Microsecond)})
			now = now.Add(time.Microsecond)
		}
	}
	require.NoError(t, p.CheckTrace(tr))

	early := *tr
	early.Events = append([]trace.Event(nil), tr.Events...)
	last := &early.Events[len(early.Events)-1]
	last.Start, last.End = 0, 1 // runs before everything it depends on
	require.ErrorContains(t, p.CheckTrace(&early), "before")

	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, p))
	shared, err := Decode(&buf)
	require.NoError(t, err)
	for i := range shared.Registers {
		if !shared.Registers[i].Persistent {
			shared.Registers[i].Offset = shared.Memory[shared.Registers[i].Device].Persistent
		}
	}
	require.ErrorContains(t, shared.CheckTrace(tr), "memory plan")

	// CheckedTrace checks the same, once, and returns the trace checked
	// for the analyses that would validate it again: written as Chrome
	// JSON as WriteChrome writes it, live memory and all.
	c, err := p.CheckedTrace(tr)
	require.NoError(t, err)
	require.Same(t, tr, c.Trace())
	_, err = p.CheckedTrace(&early)
	require.ErrorContains(t, err, "before")
	_, err = shared.CheckedTrace(tr)
	require.ErrorContains(t, err, "memory plan")
	var want, got bytes.Buffer
	require.NoError(t, p.WriteChrome(&want, tr))
	require.NoError(t, p.WriteChromeChecked(&got, c))
	require.Equal(t, want.String(), got.String())
	require.Contains(t, got.String(), "live memory (MiB)")
	require.ErrorIs(t, p.WriteChromeChecked(&got, trace.Checked{}), trace.ErrInvalid, "no trace was checked")
	_, err = p.LiveMemoryChecked(trace.Checked{}, 1)
	require.ErrorIs(t, err, trace.ErrInvalid, "no trace was checked")
	require.NoError(t, c.Err())
}

// topo orders firings so that every same-iteration edge points forward.
func topo(n int, edges []Edge) []int {
	succ := make([][]int, n)
	for _, e := range edges {
		if e.Delta == 0 {
			succ[e.From] = append(succ[e.From], e.To)
		}
	}
	return topoOrder(succ)
}

// A plan file whose batch, micro-batch, inputs or ops' shapes disagree is
// rejected when read, saying which; a feeder or kernel would otherwise
// write past a register.
func TestDecodeRejectsInconsistentInputs(t *testing.T) {
	st, err := ParseStrategy("pp=2,mb=2", 8)
	require.NoError(t, err)
	good, err := Compile(Config{Model: "mnist-cnn", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(2, 0)})
	require.NoError(t, err)
	input := -1
	for i, tk := range good.Tasks {
		if tk.Kind == Input && input < 0 {
			input = i
		}
	}
	require.GreaterOrEqual(t, input, 0)
	requireDecodeRejectsAll(t, good, []rejection{
		{"micro_batch", "batch 8 is not micro_batch × micro_batches × replicas = 1000 × 2 × 1", func(p *Plan) { p.MicroBatch = 1000 }},
		{"batch", "batch 9 is not", func(p *Plan) { p.Batch = 9 }},
		{"images", "images", func(p *Plan) { p.Images.Shape = nil }},
		{"offset", "offset 2: its 2 micro-batches of 4 run past the batch of 8", func(p *Plan) { p.Tasks[input].Offset = 2 }},
		{"register", "not a micro-batch of 4 samples", func(p *Plan) { p.Tasks[input].Writes = []int{p.Tasks[len(p.Tasks)-1].Writes[0]} }},
		{"compute", "conv2d: writes f32[4,32,28,28] into register images, which holds f32[4,1,28,28]", func(p *Plan) { p.Tasks[input+2].Writes = p.Tasks[input].Writes }},
		{"writers", "writes register 0 (conv1.weight), whose writers do not list it", func(p *Plan) { p.Registers[0].Writers = nil }},
		{"writer", "lists writer 1", func(p *Plan) { p.Registers[0].Writers = append(p.Registers[0].Writers, 1) }},
	})
}

// A plan's labels, which reports print and checkpoints record, are the
// strategy and optimizer it runs: a file whose strategy or optimizer
// says otherwise is refused when read.
func TestDecodeRejectsWrongLabels(t *testing.T) {
	st, err := ParseStrategy("dp=2,pp=2,mb=2", 8)
	require.NoError(t, err)
	good, err := Compile(Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1, Momentum: 0.9}, Devices: devs(4, 0)})
	require.NoError(t, err)
	requireDecodeRejectsAll(t, good, []rejection{
		{"unparsable", `plans: strategy: plans: strategy "dp=banana"`, func(p *Plan) { p.Strategy = "dp=banana" }},
		{"other degrees", `plans: strategy "dp=4,mb=2" is not the plan's: replicas 2, tensor_parallel 1, stages 2, virtual_stages 1, zero 0`, func(p *Plan) { p.Strategy = "dp=4,mb=2" }},
		{"single", `plans: strategy "single" is not the plan's`, func(p *Plan) { p.Strategy = "single" }},
		{"zero", `plans: strategy "dp=2,pp=2,zero=1,mb=2" is not the plan's`, func(p *Plan) { p.Strategy = "dp=2,pp=2,zero=1,mb=2" }},
		{"optimizer", "its update is sgd(lr=0.1, momentum=0.9, weight_decay=0)'s, not the plan's optimizer adam(lr=0.1", func(p *Plan) {
			p.Optimizer = graph.Adam{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}.Name()
		}},
		{"learning rate", "not the plan's optimizer sgd(lr=0.5, momentum=0.9", func(p *Plan) { p.Optimizer = graph.SGD{LR: 0.5, Momentum: 0.9}.Name() }},
	})
}

// A plan whose registers do not fit its arenas, or whose arenas do not
// fit its devices, is rejected when read: the runtime would slice past an
// arena (a panic), or allocate what the device does not have.
func TestDecodeRejectsBadArenas(t *testing.T) {
	st, err := ParseStrategy("pp=2,mb=2", 8)
	require.NoError(t, err)
	good, err := Compile(Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(2, 64*units.MiB)})
	require.NoError(t, err)
	requireDecodeRejectsAll(t, good, []rejection{
		{"no arenas", "plans: memory lists 0 devices' arenas, the plan has 2 devices", func(p *Plan) { p.Memory = nil }},
		{"arena's device", "plans: memory[1]: device 0, an arena of", func(p *Plan) { p.Memory[1].Device = 0 }},
		{"negative arena", "plans: memory[0]: device 0, an arena of -1 bytes on cpu0", func(p *Plan) { p.Memory[0].Peak = -1 }},
		{"arena over capacity", "plans: memory[0]: device 0, an arena of 67108865 bytes on cpu0 (capacity 67108864 bytes)", func(p *Plan) { p.Memory[0].Peak = 64*units.MiB + 1 }},
		{"negative capacity", "(capacity -1 bytes)", func(p *Plan) { p.Devices[0].Memory = -1 }},
		{"offset", "runs past the", func(p *Plan) { p.Registers[0].Offset = 1 << 60 }},
		{"slots", "runs past the", func(p *Plan) { p.Registers[0].Slots = 1 << 20 }},
		{"too many slots", "is inconsistent (device 0, 1000000000000 slots", func(p *Plan) { p.Registers[0].Slots = 1e12 }},
	})
}

// A plan whose gradient buckets disagree with their gradients is
// rejected when read: a copy would run past a register, or mix dtypes.
func TestDecodeRejectsBadBuckets(t *testing.T) {
	good := mustCompile(t, "mnist-cnn", "dp=2,bucket=1GiB", 8)
	pack, unpack := firstTask(good, Pack), firstTask(good, Unpack)
	require.True(t, pack >= 0 && unpack >= 0)
	bucket := good.Tasks[pack].Writes[0]
	requireDecodeRejectsAll(t, good, []rejection{
		{"kind", `unknown kind "bucket" (known: compute, input, transfer, accumulate, allreduce, allgather, reducescatter, pack, unpack)`, func(p *Plan) { p.Tasks[pack].Kind = "bucket" }},
		{"short bucket", "holds 421633 values, its gradients 421642", func(p *Plan) { p.Registers[bucket].Spec.Shape[0] -= 9 }},
		{"missing gradient", "holds 421642 values, its gradients", func(p *Plan) { p.Tasks[pack].Reads = p.Tasks[pack].Reads[1:] }},
		{"bucket shape", "want a flat float register on its home device", func(p *Plan) { p.Registers[bucket].Spec.Shape = graph.Shape{2, 210821} }},
		{"two buckets", "a pack writes one bucket, got 2 writes", func(p *Plan) { p.Tasks[pack].Writes = append(p.Tasks[pack].Writes, bucket) }},
		{"unpack reads", "an unpack reads one bucket, got 2 reads", func(p *Plan) { p.Tasks[unpack].Reads = append(p.Tasks[unpack].Reads, p.Tasks[unpack].Reads[0]) }},
		{"nothing", "an unpack copies no gradient", func(p *Plan) {
			for _, r := range p.Tasks[unpack].Writes {
				p.Registers[r].Writers = nil
			}
			p.Tasks[unpack].Writes = nil
		}},
		{"other device", "on device 1: want f32 on device 0, as its bucket", func(p *Plan) { p.Tasks[pack].Reads[0] = p.Tasks[pack+2].Reads[0] }},
		{"negative parts", "parts -1: a bucket is laid out in 1 or more parts", func(p *Plan) { p.Tasks[pack].Parts = -1 }},
		{"uneven parts", "does not split into 7 equal parts", func(p *Plan) { p.Tasks[pack].Parts = 7 }},
		{"uneven unpack", "does not split into 7 equal parts", func(p *Plan) { p.Tasks[unpack].Parts = 7 }},
	})
}

// firstTask is the index of p's first task of kind k, −1 if none.
func firstTask(p *Plan, k TaskKind) int {
	return slices.IndexFunc(p.Tasks, func(t Task) bool { return t.Kind == k })
}

// A CPU device's workers are bounded when a plan is read: the runtime
// would start that many goroutines, the simulator price a CPU of that many
// cores (10^9 of them).
func TestDecodeRejectsBadWorkers(t *testing.T) {
	good := mustCompile(t, "mlp", "dp=2", 8)
	requireDecodeRejectsAll(t, good, []rejection{
		{"absurd", "plans: devices[1]: CPU device cpu1 (cpu) has 1000000000 workers: want 1 to 65536", func(p *Plan) { p.Devices[1].Workers = 1e9 }},
		{"one over", "plans: devices[0]: CPU device cpu0 (cpu) has 65537 workers: want 1 to 65536", func(p *Plan) { p.Devices[0].Workers = topology.MaxCores + 1 }},
		{"zero", "plans: devices[0]: CPU device cpu0 (cpu) has 0 workers", func(p *Plan) { p.Devices[0].Workers = 0 }},
		{"negative", "plans: devices[1]: CPU device cpu1 (cpu) has -4 workers", func(p *Plan) { p.Devices[1].Workers = -4 }},
	})
	// The bound itself is a plan's to have.
	var b bytes.Buffer
	require.NoError(t, Encode(&b, good))
	p, err := Decode(&b)
	require.NoError(t, err)
	p.Devices[0].Workers = topology.MaxCores
	b.Reset()
	require.NoError(t, Encode(&b, p))
	_, err = Decode(&b)
	require.NoError(t, err)
}

// A plan whose devices share a name, whose task lies outside the
// pipeline's stages or runs on another device than its registers', or
// whose initializer is not one the runtime knows is rejected when read: a trace or cluster would mistake one device for
// another, and an unknown initializer would leave a weight as the
// allocator left it.
func TestDecodeRejectsBadLabels(t *testing.T) {
	good := mustCompile(t, "mlp", "pp=2,vpp=2,mb=2", 8)
	w := slices.IndexFunc(good.Registers, func(r Register) bool { return r.Persistent })
	require.GreaterOrEqual(t, w, 0)
	compute := slices.IndexFunc(good.Streams, func(s Stream) bool { return s.Device == 0 && s.Name == "compute" })
	require.GreaterOrEqual(t, compute, 0)
	requireDecodeRejectsAll(t, good, []rejection{
		{"model", `plans: model: zoo: unknown model "resnet-9000"`, func(p *Plan) { p.Model = "resnet-9000" }},
		{"same name", "plans: devices[0] and devices[1] are both named cpu0", func(p *Plan) { p.Devices[1].Name = "cpu0" }},
		{"no name", "plans: devices[1] (cpu) has no name", func(p *Plan) { p.Devices[1].Name = "" }},
		{"stage", "stage 99: want 0 to 3 (stages × virtual stages − 1)", func(p *Plan) { p.Tasks[0].Stage = 99 }},
		{"negative stage", "stage -1: want 0 to 3", func(p *Plan) { p.Tasks[0].Stage = -1 }},
		{"init kind", "initializer kind 7, scale", func(p *Plan) { p.Registers[w].Init.Kind = 7 }},
		{"negative scale", "scale -1: want", func(p *Plan) { p.Registers[w].Init.Scale = -1 }},
		{"stream's device", "on device cpu0, but runs on cpu1 (its stream's)", func(p *Plan) { p.Streams[compute].Device = 1 }},
		{"flops", "work of 1e+300 FLOPs and", func(p *Plan) { p.Tasks[0].FLOPs = 1e300 }},
		{"bytes", "FLOPs and -1 bytes: want", func(p *Plan) { p.Tasks[0].Bytes = -1 }},
	})
	// The last virtual stage is a task's to have.
	require.Equal(t, 3, slices.MaxFunc(good.Tasks, func(a, b Task) int { return a.Stage - b.Stage }).Stage)
}

// A tensor-parallel plan whose sums or parts disagree with its devices is
// rejected when read: a kernel would run past a register, or a device
// initialize another's part.
func TestDecodeRejectsBadTensorParallel(t *testing.T) {
	st, err := ParseStrategy("tp=2", 4)
	require.NoError(t, err)
	good, err := Compile(Config{Model: "mlp", Batch: 4, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(2, 0)})
	require.NoError(t, err)
	sum, shard := -1, -1
	for i, tk := range good.Tasks {
		if tk.Sum && sum < 0 {
			sum = i
		}
	}
	for i, r := range good.Registers {
		if r.Init.Shard != nil && shard < 0 {
			shard = i
		}
	}
	require.True(t, sum >= 0 && shard >= 0)
	requireDecodeRejectsAll(t, good, []rejection{
		{"sum reads", "member 0 reads", func(p *Plan) { p.Tasks[sum].Reads[0] = p.Tasks[sum].Reads[1] }},
		{"sum arity", "one register per member", func(p *Plan) { p.Tasks[sum].Reads = p.Tasks[sum].Reads[:1] }},
		{"sum writes", "writes two registers on device", func(p *Plan) { p.Tasks[sum].Writes[1] = p.Tasks[sum].Writes[0] }},
		{"part", "is not part 1 of 2", func(p *Plan) { p.Registers[shard].Init.Shard.Part = 1 }},
		{"parts", "does not divide", func(p *Plan) { p.Registers[shard].Init.Shard.Parts = 1 << 19 }},
		{"degree", "tensor_parallel", func(p *Plan) { p.TP = 4 }},
	})
}

// A sequence-parallel plan's all-gathers and reduce-scatters are checked
// on reading: one member per rank, on its own device, parts along the
// axis.
func TestDecodeRejectsBadSequenceParallel(t *testing.T) {
	st, err := ParseStrategy("tp=2,sp=on", 2)
	require.NoError(t, err)
	good, err := Compile(Config{Model: "gpt:layers=1,hidden=8,heads=2,seq=4,vocab=8", Batch: 2, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(2, 0)})
	require.NoError(t, err)
	gather, scatter := firstTask(good, AllGather), firstTask(good, ReduceScatter)
	require.True(t, gather >= 0 && scatter >= 0)
	requireDecodeRejectsAll(t, good, []rejection{
		{"axis", "axis 7", func(p *Plan) { p.Tasks[gather].Axis = 7 }},
		{"other axis", "want float parts", func(p *Plan) { p.Tasks[scatter].Axis = 2 }},
		{"arity", "one read, write and stream per member of tp=2", func(p *Plan) { p.Tasks[gather].Reads = p.Tasks[gather].Reads[:1] }},
		{"member device", "want its own device", func(p *Plan) { p.Tasks[scatter].Reads[0] = p.Tasks[scatter].Reads[1] }},
		{"stream", "want its own device", func(p *Plan) { p.Tasks[gather].Streams[0] = p.Tasks[gather].Streams[1] }},
		{"kind", "want float parts", func(p *Plan) { p.Tasks[gather].Kind = ReduceScatter }},
	})
}

// rejection is an edit that makes a plan unreadable, and what the error
// says.
type rejection struct {
	name, want string
	edit       func(p *Plan)
}

// requireDecodeRejectsAll checks each rejection of good in a subtest.
func requireDecodeRejectsAll(t *testing.T, good *Plan, rs []rejection) {
	t.Helper()
	for _, r := range rs {
		t.Run(r.name, func(t *testing.T) { requireDecodeRejects(t, good, r.edit, r.want) })
	}
}

// requireDecodeRejects edits a copy of good, writes it and checks that
// reading it fails with want.
func requireDecodeRejects(t *testing.T, good *Plan, edit func(*Plan), want string) {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, Encode(&b, good))
	p, err := Decode(&b)
	require.NoError(t, err)
	edit(p)
	b.Reset()
	require.NoError(t, Encode(&b, p))
	_, err = Decode(&b)
	require.ErrorContains(t, err, want)
}

func FuzzDecode(f *testing.F) {
	for _, c := range []struct {
		model, strategy string
		batch           int
	}{
		{"mlp", "single", 4},
		{"mlp", "pp=2,mb=2", 4},
		// Small plans (a few KB) that the fuzz engine mutates quickly: a
		// one-layer model alone and over uneven replicas.
		{"mlp3x4096:depth=1,width=2", "single", 3},
		{"mlp3x4096:depth=1,width=2", "dp=2,mb=1:2", 3},
		{"mlp3x4096:depth=2,width=2", "tp=2", 2},
		{"gpt:layers=1,hidden=4,heads=2,seq=2,vocab=3", "single", 1},
		{"gpt:layers=1,hidden=4,heads=2,seq=2,vocab=4", "tp=2", 1},
		{"gpt:layers=1,hidden=4,heads=2,seq=2,vocab=4", "tp=2,sp=on", 1},
		{"gpt:layers=1,hidden=4,heads=2,seq=2,vocab=4", "tp=2,sp=on,shared", 1},
		{"mlp3x4096:depth=2,width=2", "dp=2,zero=1", 2},
		{"mlp3x4096:depth=2,width=2", "dp=2,zero=2", 2},
		{"mlp3x4096:depth=1,width=2", "dp=2,zero=3", 2},
		{"mlp3x4096:depth=4,width=2", "pp=2,vpp=2,mb=2", 2},
		{"mlp3x4096:depth=2,width=4", "dp=2,tp=2,zero=3", 2},
		{"mlp3x4096:depth=3,width=2", "dp=2,mb=2,zero=3,prefetch=1", 4}, // firings with After
		{"mlp3x4096:depth=2,width=2", "dp=2,bucket=1GiB", 2},            // packs and unpacks
	} {
		strategy, shared := strings.CutSuffix(c.strategy, ",shared")
		st, _ := ParseStrategy(strategy, c.batch)
		p, err := Compile(Config{Model: c.model, Batch: c.batch, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(4, 0), SharedTP: shared})
		if err != nil {
			f.Fatal(err)
		}
		var b bytes.Buffer
		if err := Encode(&b, p); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		// A plan that decodes can be checked against an empty trace
		// without panicking, and reads back from its file as it is.
		_ = p.CheckTrace(p.NewTrace("fuzz"))
		var b bytes.Buffer
		if err := Encode(&b, p); err != nil {
			t.Fatalf("a decoded plan does not encode: %v", err)
		}
		q, err := Decode(&b)
		if err != nil {
			t.Fatalf("a decoded plan, encoded, does not decode: %v", err)
		}
		require.Equal(t, p, q)
	})
}

// A model without labels compiles with one input per replica, on the
// first stage only, and its plan round-trips without a labels spec.
func TestCompileInputOnlyModel(t *testing.T) {
	const model = "gpt2s-blocks:layers=2,hidden=16,heads=2,seq=4"
	for _, strategy := range []string{"single", "dp=2", "pp=2,mb=2"} {
		t.Run(strategy, func(t *testing.T) {
			p := mustCompile(t, model, strategy, 8)
			require.Equal(t, graph.Spec{}, p.Labels)
			require.Equal(t, graph.Shape{8, 4, 16}, p.Images.Shape)
			var inputs []string
			for _, task := range p.Tasks {
				if task.Kind == Input {
					inputs = append(inputs, task.Name)
					require.Equal(t, 0, task.Stage, task.Name)
				}
			}
			want := map[string][]string{"single": {"input/x"}, "dp=2": {"cpu0/input/x", "cpu1/input/x"}, "pp=2,mb=2": {"cpu0/input/x"}}[strategy]
			require.Equal(t, want, inputs)
			var b bytes.Buffer
			require.NoError(t, Encode(&b, p))
			require.NotContains(t, b.String(), `"labels"`)
			q, err := Decode(&b)
			require.NoError(t, err)
			require.Equal(t, p.Labels, q.Labels)
		})
	}
}

// The memory planner counts a bf16 tensor at two bytes an element.
func TestBF16HalvesMemory(t *testing.T) {
	const model = "mlp3x4096:width=256"
	st, err := ParseStrategy("single", 64)
	require.NoError(t, err)
	plan := func(d graph.DType) *Plan {
		p, err := Compile(Config{Model: model, Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, DType: d, Devices: devs(1, 0)})
		require.NoError(t, err)
		return p
	}
	f32, bf16 := plan(0), plan(graph.BF16)
	require.Equal(t, graph.F32, f32.Images.DType)
	require.Equal(t, graph.BF16, bf16.Images.DType)
	require.Len(t, bf16.Registers, len(f32.Registers))
	for i, r := range bf16.Registers {
		want := f32.Registers[i].SlotBytes / 2
		if len(r.Spec.Shape) == 0 { // the f32 loss and gradient seed
			want *= 2
		}
		require.Equal(t, want, r.SlotBytes, r.Name)
	}
	params := units.Bytes(3 * (256*256 + 256))
	require.Equal(t, 2*params*2, bf16.Memory[0].Persistent, "weights and momentum, two bytes each")
	require.InDelta(t, 0.5, float64(bf16.Memory[0].Peak)/float64(f32.Memory[0].Peak), 0.01)
	for i, task := range bf16.Tasks {
		if task.Op != nil && task.Op.Type == "matmul" {
			require.Equal(t, "bf16", bf16.Work(i).DType, "priced at the bf16 rate")
			require.Equal(t, "f32", f32.Work(i).DType)
		}
	}
	cnn := mustCompile(t, "mnist-cnn", "single", 8)
	for i, task := range cnn.Tasks {
		require.Equal(t, "f32", cnn.Work(i).DType, "%s: labels are i32, their input task f32", task.Name)
	}
}

// A plan too large to plan its memory is refused with its size, before
// its edges are derived, not run out of memory.
func TestCompileTooManyFirings(t *testing.T) {
	p := &Plan{MB: MaxFirings / 2, DP: 1, Tasks: []Task{{PerMicro: true}, {PerMicro: true}}}
	require.NoError(t, checkPlannable(p))
	p.Tasks = append(p.Tasks, Task{})
	err := checkPlannable(p)
	require.ErrorIs(t, err, ErrInfeasible)
	require.ErrorContains(t, err, "10000001 firings per iteration")
	var fe *FiringsError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, FiringsError{Firings: MaxFirings + 1, Max: MaxFirings}, *fe)
}

// Megatron-LM's interleaved 1F1B schedule, for every pipeline rank: each
// (chunk, micro-batch) runs forward once and backward once, backward after
// forward; a chunk's micro-batches go forward and backward in order; the
// warm-up is 2·(pp−rank−1) + (v−1)·pp forwards; and compiled plans over
// such pipelines cannot deadlock.
func TestInterleavedSchedule(t *testing.T) {
	for pp := 2; pp <= 4; pp++ {
		for v := 2; v <= 3; v++ {
			for mb := pp; mb <= 3*pp; mb += pp {
				for r := range pp {
					s := interleaved(pp, v, r, mb)
					require.Len(t, s, 2*mb*v)
					fwd, bwd := map[[2]int]int{}, map[[2]int]int{}
					next := [2][]int{make([]int, v), make([]int, v)} // next micro-batch per chunk, forward and backward
					warm := 0
					for i, st := range s {
						k := [2]int{st.chunk, st.micro}
						dir := 0
						if !st.forward {
							dir = 1
						}
						require.Equal(t, next[dir][st.chunk], st.micro, "pp=%d v=%d mb=%d rank %d step %d: in order", pp, v, mb, r, i)
						next[dir][st.chunk]++
						if st.forward {
							fwd[k] = i
							if len(bwd) == 0 {
								warm++
							}
						} else {
							f, ok := fwd[k]
							require.True(t, ok && f < i, "backward of %v after its forward", k)
							bwd[k] = i
						}
					}
					require.Len(t, fwd, mb*v)
					require.Len(t, bwd, mb*v)
					want := min(2*(pp-r-1)+(v-1)*pp, mb*v) // the warm-up
					if want < mb*v {
						want++ // and the steady state's first forward
					}
					require.Equal(t, want, warm, "forwards before the first backward: pp=%d v=%d mb=%d rank %d", pp, v, mb, r)
				}
			}
		}
	}
	for _, s := range []string{"pp=2,vpp=2,mb=2", "pp=2,vpp=3,mb=4", "pp=3,vpp=2,mb=6", "pp=4,vpp=3,mb=8", "dp=2,pp=2,vpp=2,mb=4,recompute=full", "tp=2,pp=2,vpp=2,mb=2"} {
		st, err := ParseStrategy(s, 24)
		require.NoError(t, err)
		_, err = Compile(Config{Model: "gpt2s-blocks:layers=12,hidden=16,heads=2,seq=4", Batch: 24, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(8, 0)})
		require.NoError(t, err, s)
	}
	for _, bad := range []struct{ s, err string }{
		{"pp=2,vpp=2,mb=3", "mb=3 is not a multiple of pp"},
		{"vpp=2", "it needs pp ≥ 2"},
		{"pp=2,vpp=2,mb=2,sched=gpipe", "sched=1f1b"},
		{"pp=2,vpp=2,layers=3:1,mb=2", "stages cut evenly"},
	} {
		_, err := ParseStrategy(bad.s, 24)
		require.ErrorContains(t, err, bad.err, bad.s)
	}
	st, err := ParseStrategy("pp=4,vpp=4,mb=4", 24)
	require.NoError(t, err)
	_, err = Compile(Config{Model: "gpt2s-blocks:layers=12,hidden=16,heads=2,seq=4", Batch: 24, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(8, 0)})
	require.ErrorContains(t, err, "pp=4 × vpp=4 (16 stages) needs 15 layer boundaries, the model has")
}

// compileMLPAdam compiles mlp with Adam at batch 8 on four devices.
func compileMLPAdam(t *testing.T, strategy string) *Plan {
	t.Helper()
	st, err := ParseStrategy(strategy, 8)
	require.NoError(t, err)
	p, err := Compile(Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Devices: devs(4, 0)})
	require.NoError(t, err)
	return p
}

// ZeRO stage 1 splits each weight's optimizer state over the replicas
// where they divide its first axis: a reduce-scatter of the gradient, an
// update of the replica's part, an all-gather of the weight, per weight
// and iteration; the others keep their all-reduce. With Adam a device then
// holds W + W/D + 2W/D instead of 3W of the split weights.
func TestZeroSplitsOptimizerState(t *testing.T) {
	compile := func(strategy string) *Plan { return compileMLPAdam(t, strategy) }
	plain, zero, four := compile("dp=2"), compile("dp=2,zero=1"), compile("dp=4,zero=1")
	kinds := func(p *Plan) map[TaskKind]int {
		k := map[TaskKind]int{}
		for _, t := range p.Tasks {
			k[t.Kind]++
		}
		return k
	}
	// mlp has 6 weights; dp=4 does not divide the 10 outputs of the last
	// layer's weight and bias.
	require.Equal(t, 6, kinds(plain)[AllReduce])
	require.Equal(t, map[TaskKind]int{AllReduce: 0, ReduceScatter: 6, AllGather: 6}, map[TaskKind]int{AllReduce: kinds(zero)[AllReduce], ReduceScatter: kinds(zero)[ReduceScatter], AllGather: kinds(zero)[AllGather]})
	require.Equal(t, map[TaskKind]int{AllReduce: 2, ReduceScatter: 4, AllGather: 4}, map[TaskKind]int{AllReduce: kinds(four)[AllReduce], ReduceScatter: kinds(four)[ReduceScatter], AllGather: kinds(four)[AllGather]})
	ratio := float64(zero.Memory[0].Persistent) / float64(plain.Memory[0].Persistent)
	require.InDelta(t, (1+3.0/2)/3, ratio, 0.01, "persistent memory of a replica: %v against %v", zero.Memory[0].Persistent, plain.Memory[0].Persistent)
	var b bytes.Buffer
	require.NoError(t, Encode(&b, zero))
	_, err := Decode(&b)
	require.NoError(t, err, "a ZeRO plan reads back")
	gather := slices.IndexFunc(zero.Tasks, func(t Task) bool { return t.Kind == AllGather })
	master := slices.IndexFunc(zero.Registers, func(r Register) bool { return r.Master })
	requireDecodeRejectsAll(t, zero, []rejection{
		{"stage", "zero 4 and virtual_stages 0: want zero 0, or 1 to 3", func(p *Plan) { p.Zero = 4 }},
		{"no zero", "is ZeRO's: the plan has zero=0", func(p *Plan) { p.Zero, p.Strategy = 0, "dp=2" }},
		{"no zero in the strategy", `strategy "dp=2" is not the plan's`, func(p *Plan) { p.Strategy = "dp=2" }},
		{"members", "one read, write and stream per member of dp=2", func(p *Plan) { p.Tasks[gather].Reads = p.Tasks[gather].Reads[:1] }},
		{"part", "is not part 1 of 2", func(p *Plan) { p.Registers[master].Init.Shard.Part = 1 }},
	})
}

// ZeRO stage 2 reduce-scatters each micro-batch's gradient of a split
// weight as soon as its task produces it, into a part that accumulates
// over the micro-batches, so that no whole gradient outlives its
// micro-batch; stage 3 also keeps only the replica's part of the weight
// and all-gathers it into a temporary before the first forward and again
// before the first backward reader of each micro-batch, with no gather
// after the update. Both read back, and a decoder refuses what they
// cannot be.
func TestZeroStages(t *testing.T) {
	compile := func(strategy string) *Plan { return compileMLPAdam(t, strategy) }
	const weights = 6 // mlp's, all split by dp=2
	count := func(p *Plan, f func(t *Task) bool) int {
		n := 0
		for i := range p.Tasks {
			if f(&p.Tasks[i]) {
				n++
			}
		}
		return n
	}
	for _, stage := range []int{2, 3} {
		t.Run(fmt.Sprintf("zero=%d", stage), func(t *testing.T) {
			p := compile(fmt.Sprintf("dp=2,mb=2,zero=%d", stage))
			scatters := count(p, func(t *Task) bool { return t.Kind == ReduceScatter })
			require.Equal(t, weights, scatters)
			require.Zero(t, count(p, func(t *Task) bool { return t.Kind == AllReduce }))
			for _, task := range p.Tasks {
				switch task.Kind {
				case ReduceScatter:
					require.True(t, task.PerMicro, "%s: every micro-batch's gradient", task.Name)
					require.Len(t, task.Writes, 2)
					for _, u := range task.Reads {
						g := p.Registers[u.Reg]
						require.Equal(t, ReadMicro, u.Mode)
						require.Equal(t, 1, g.Slots, "%s: the whole gradient is a one-slot temporary", g.Name)
						require.Equal(t, "backward", p.Tasks[g.Writers[0]].Phase, "%s: read as its producer writes it", g.Name)
					}
				case Accumulate:
					// Only parts accumulate: half the gradient.
					in, out := p.Registers[task.Reads[0].Reg], p.Registers[task.Writes[0]]
					require.Equal(t, ReduceScatter, p.Tasks[in.Writers[0]].Kind, "%s accumulates a reduced part", out.Name)
				case Compute:
					if task.Phase != "update" {
						continue
					}
					part := p.Registers[task.Reads[1].Reg]
					require.Equal(t, Accumulate, p.Tasks[part.Writers[0]].Kind, "%s: the part accumulated over the micro-batches", task.Name)
				}
			}
			require.Equal(t, 2*weights, count(p, func(t *Task) bool { return t.Kind == Accumulate }), "one accumulation of its part per replica and weight")
			gathers := count(p, func(t *Task) bool { return t.Kind == AllGather })
			if stage == 2 {
				require.Equal(t, weights, gathers)
				require.Zero(t, count(p, func(t *Task) bool { return t.Kind == AllGather && t.PerMicro }), "gathered once, after the update")
			} else {
				// The forward pass reads the six weights, the backward pass
				// the matrices of fc2 and fc3 (fc1's input needs no
				// gradient): each through a per-micro-batch gather of its
				// own, of its phase.
				require.Equal(t, weights+2, gathers)
				for _, task := range p.Tasks {
					if task.Kind == AllGather {
						require.True(t, task.PerMicro, task.Name)
						require.Equal(t, ReadPrev, task.Reads[0].Mode, "%s: last iteration's updated part", task.Name)
						continue
					}
					for _, u := range task.Reads {
						reg := p.Registers[u.Reg]
						if len(reg.Writers) == 0 || p.Tasks[reg.Writers[0]].Kind != AllGather {
							continue
						}
						require.Equal(t, task.Phase, p.Tasks[reg.Writers[0]].Phase, "%s reads %s gathered for its own phase", task.Name, reg.Name)
						require.Equal(t, 1, reg.Slots)
					}
				}
				for _, reg := range p.Registers {
					require.False(t, reg.Master, reg.Name)
					if reg.Persistent {
						require.NotNil(t, reg.Init.Shard, "%s: only parts persist", reg.Name)
					}
				}
			}
			var b bytes.Buffer
			require.NoError(t, Encode(&b, p))
			_, err := Decode(&b)
			require.NoError(t, err, "a zero=%d plan reads back", stage)
			part := slices.IndexFunc(p.Registers, func(r Register) bool { return r.Persistent && r.Init.Shard != nil })
			requireDecodeRejectsAll(t, p, []rejection{
				{"master", "under 3 a part is a weight's only copy", func(p *Plan) {
					p.Zero, p.Registers[part].Master = 3, true
					p.Strategy = strings.Replace(p.Strategy, "zero="+strconv.Itoa(stage), "zero=3", 1)
				}},
			})
			// Uneven shares change the firings: the file says them.
			requireFileRejects(t, p, func(f *file) { f.Shares = []int{2, 1} }, "is not micro_batch × the replicas' micro-batches")
		})
	}
	// Persistent memory: stage 2 keeps stage 1's registers; stage 3 keeps
	// a half of the weight besides the halves of Adam's two moments.
	one, two, three := compile("dp=2,mb=2,zero=1"), compile("dp=2,mb=2,zero=2"), compile("dp=2,mb=2,zero=3")
	plain := compile("dp=2,mb=2")
	require.Equal(t, one.Memory[0].Persistent, two.Memory[0].Persistent)
	require.InDelta(t, 0.5, float64(three.Memory[0].Persistent)/float64(plain.Memory[0].Persistent), 0.01)
	require.Less(t, three.Memory[0].Peak, two.Memory[0].Peak)
	require.Less(t, two.Memory[0].Peak, one.Memory[0].Peak)
}

// A plan may list one replica for all (Config.SharedDP) only where they run
// alike: even micro-batches on devices of the same types; such plans read
// back, and their other devices' memory is the listed one's.
func TestSharedDP(t *testing.T) {
	compile := func(strategy string, d []Device) (*Plan, error) {
		st, err := ParseStrategy(strategy, 8)
		require.NoError(t, err)
		return Compile(Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: d, SharedDP: true})
	}
	p, err := compile("dp=4,mb=2", devs(4, 0))
	require.NoError(t, err)
	require.True(t, p.SharedDP)
	for _, s := range p.Streams {
		require.Zero(t, p.Replica(s.Device), "only replica 0's streams")
	}
	for d := range p.Devices {
		require.Equal(t, p.Memory[0].Peak, p.Memory[d].Peak)
	}
	var b bytes.Buffer
	require.NoError(t, Encode(&b, p))
	_, err = Decode(&b)
	require.NoError(t, err)
	requireDecodeRejects(t, p, func(p *Plan) { p.DP = 1; p.Devices = p.Devices[:1]; p.Memory = p.Memory[:1] }, "dp_shared lists replica 0")
	// CompileSharing lists every replica where one cannot stand for the
	// others, and shares where it can.
	sharing := func(strategy string, d []Device) *Plan {
		st, err := ParseStrategy(strategy, 8)
		require.NoError(t, err)
		p, err := CompileSharing(Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: d, SharedDP: true})
		require.NoError(t, err, strategy)
		return p
	}
	require.True(t, sharing("dp=4,mb=2", devs(4, 0)).SharedDP)
	for _, s := range []string{"dp=2,mb=3:1", "dp=2,mb=3:1,zero=2", "dp=2,mb=1:3,zero=3"} { // the replicas' rounds differ
		_, err = compile(s, devs(2, 0))
		require.ErrorContains(t, err, "uneven micro-batches", s)
		require.ErrorIs(t, err, ErrUnlikeReplicas)
		require.ErrorIs(t, err, ErrInfeasible)
		p := sharing(s, devs(2, 0))
		require.False(t, p.SharedDP, s)
		require.Equal(t, 2, p.DP)
	}
	mixed := devs(2, 0)
	mixed[1].Workers = 2
	_, err = compile("dp=2", mixed)
	require.ErrorContains(t, err, "cannot stand for the others: device cpu1 is cpu (2 workers)")
	require.ErrorIs(t, err, ErrUnlikeReplicas)
	require.False(t, sharing("dp=2", mixed).SharedDP)
	small := devs(2, 0)
	small[0].Memory, small[1].Memory = 1<<30, 1<<29
	_, err = compile("dp=2", small)
	require.ErrorIs(t, err, ErrUnlikeReplicas, "a replica with less memory")
	require.ErrorContains(t, err, "cpu0 cannot stand for cpu1")

	// A tensor-parallel group's ranks likewise.
	st, err := ParseStrategy("tp=2", 8)
	require.NoError(t, err)
	cfg := Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: mixed, SharedTP: true}
	_, err = Compile(cfg)
	require.ErrorIs(t, err, ErrUnlikeReplicas)
	p, err = CompileSharing(cfg)
	require.NoError(t, err)
	require.False(t, p.SharedTP)
	cfg.Devices = devs(2, 0)
	p, err = CompileSharing(cfg)
	require.NoError(t, err)
	require.True(t, p.SharedTP)
}

// A ZeRO replica updates its part of a weight and its state: its update
// task is priced (FLOPs, bytes) and keyed for calibration as that part,
// not the whole.
func TestZeroUpdatesArePricedAsParts(t *testing.T) {
	updates := func(p *Plan) map[string]Task {
		out := map[string]Task{}
		for _, task := range p.Tasks {
			if task.Phase == "update" && task.Replica == 0 {
				out[task.Name] = task
			}
		}
		return out
	}
	plain := updates(compileMLPAdam(t, "dp=2"))
	for _, stage := range []string{"1", "2", "3"} {
		zero := updates(compileMLPAdam(t, "dp=2,zero="+stage))
		require.Len(t, zero, len(plain))
		for name, whole := range plain {
			part, ok := zero[name]
			require.True(t, ok, name)
			require.Equal(t, whole.FLOPs/2, part.FLOPs, "zero=%s %s", stage, name)
			require.Equal(t, whole.Bytes/2, part.Bytes, "zero=%s %s", stage, name)
			require.Equal(t, whole.Shape[0]/2, part.Shape[0], "zero=%s %s: keyed by the part's shape", stage, name)
			require.NotEqual(t, whole.Key, part.Key)
		}
	}
}

// recompute=selective recomputes attention: a model without any, or whose
// flash attention keeps no probabilities, is told so, not compiled as if
// nothing were asked.
func TestSelectiveRecomputeNeedsAttention(t *testing.T) {
	st, err := ParseStrategy("recompute=selective", 8)
	require.NoError(t, err)
	_, err = Compile(Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(1, 0)})
	require.ErrorIs(t, err, ErrInfeasible)
	require.ErrorContains(t, err, "recompute=selective recomputes attention, which mlp has none of")
	_, err = Compile(Config{Model: "gpt:layers=1,hidden=16,heads=2,seq=4,vocab=32", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(1, 0)})
	require.NoError(t, err)
	_, err = Compile(Config{Model: "gpt:layers=1,hidden=16,heads=2,seq=4,vocab=32,attention=flash", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(1, 0)})
	require.ErrorIs(t, err, ErrInfeasible)
	require.ErrorContains(t, err, "under flash attention (gpt:layers=1,hidden=16,heads=2,seq=4,vocab=32,attention=flash) none are kept: nothing to drop")
}
