package plans

import (
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/units"

	"github.com/stretchr/testify/require"
)

// What the compiler remembers of a node's work (workOf) is what a fresh
// workKey, workFamily and workShape of the node give once the plan is
// compiled, for every node of the graph (so no node changed after it was
// first priced, and no two nodes share an entry), over plans with
// replicas, pipelines, tensor and sequence parallelism, ZeRO (whose
// updates price a replica's part of a weight) and recompute.
func TestWorkOfIsFresh(t *testing.T) {
	for _, c := range []struct {
		model, strategy string
		batch, devices  int
	}{
		{"mnist-cnn", "dp=2,pp=2,mb=4", 16, 4},
		{"gpt:layers=4,hidden=32,heads=2,seq=8,vocab=64", "pp=2,mb=4,recompute=full", 8, 2},
		{"gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", "dp=2,tp=2,sp=on,mb=2,zero=3,prefetch=1", 8, 4},
		{"gpt2s-blocks:layers=4,hidden=32,heads=2,seq=8", "dp=2,pp=2,mb=2,zero=1,recompute=selective", 8, 4},
	} {
		t.Run(c.model+"/"+c.strategy, func(t *testing.T) {
			st, err := ParseStrategy(c.strategy, c.batch)
			require.NoError(t, err)
			comp, err := newCompiler(Config{Model: c.model, Batch: c.batch, Strategy: st,
				Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs(c.devices, 0)})
			require.NoError(t, err)
			p, err := comp.compile()
			require.NoError(t, err)
			computes := 0
			for _, task := range p.Tasks {
				if task.Kind == Compute {
					computes++
				}
			}
			require.Greater(t, computes, len(comp.works), "tasks share their nodes' work")
			for _, n := range comp.g.Nodes {
				want := work{key: workKey(n), family: workFamily(n), shape: workShape(n)}
				require.Equal(t, want, comp.workOf(n), "node %d (%s)", n.ID, n.Op.Type())
			}
		})
	}
}

// An in-process all-reduce's work carries the memory traffic of the
// runtime's reduction: (5n−3)·b over n members of b bytes in place (the
// gradients' mean over replicas), 2n·b more out of place (a
// tensor-parallel sum, which first copies each member's read to its write).
func TestAllReduceTraffic(t *testing.T) {
	for _, c := range []struct {
		strategy string
		sum      bool
		per      int // traffic per byte of a member
	}{
		{"dp=2", false, 7},
		{"dp=4", false, 17},
		{"tp=2", true, 11},
		{"tp=4", true, 25},
	} {
		t.Run(c.strategy, func(t *testing.T) {
			p := mustCompile(t, "mlp", c.strategy, 16)
			found := 0
			for i, task := range p.Tasks {
				w := p.Work(i)
				if task.Kind != AllReduce {
					require.Zero(t, w.Traffic, task.Name)
					continue
				}
				found++
				require.Equal(t, c.sum, task.Sum, task.Name)
				require.Equal(t, units.Bytes(c.per)*task.Bytes, w.Traffic, task.Name)
			}
			require.Positive(t, found)
		})
	}
}

// A layer is one shape family at every batch size: a task's Family, which
// calibration interpolates over the batch sizes it measured, is the same
// at batch 4 and 8 for every task of every kind of model, alone and under
// tensor, sequence, pipeline and data parallelism with ZeRO and recompute
// (so no attribute names the batch: a convolution's data gradient names
// its input's shape, a reshape its target's; and a vocabulary-parallel
// loss's statistics [parts, T, 3] hold it on their second axis).
func TestFamiliesSpanBatches(t *testing.T) {
	const gpt, llama = "gpt:layers=1,hidden=32,heads=2,seq=8,vocab=64", "llama:layers=1,hidden=32,heads=2,kv_heads=1,ffn=64,seq=8,vocab=64"
	for _, c := range []struct{ model, strategy string }{
		{"mlp", "single"}, {"mnist-cnn", "single"}, {"cifar-cnn", "single"}, {"resnet:depth=18,image=32", "single"},
		{"resnet:depth=50,image=32", "single"}, {"mlp3x4096:width=64", "single"},
		{"bert:layers=1,hidden=32,heads=2,seq=8,vocab=64,tie=on", "single"},
		{gpt, "single"}, {gpt + ",attention=flash", "single"}, {llama, "single"},
		{"llama-blocks:layers=1,hidden=32,heads=2,ffn=64,seq=8", "single"},
		{"gpt2s-blocks:layers=1,hidden=32,heads=2,seq=8,norm=rms", "single"},
		{gpt, "tp=2"}, {gpt, "tp=2,sp=on,pp=2,mb=2,recompute=full"}, {"llama:layers=1,hidden=32,heads=2,ffn=64,seq=8,vocab=64", "dp=2,tp=2,sp=on,zero=3"},
		{"mnist-cnn", "dp=2,pp=2,mb=2,zero=1"},
	} {
		t.Run(c.model+"/"+c.strategy, func(t *testing.T) {
			families := map[string]string{}
			for _, task := range mustCompile(t, c.model, c.strategy, 4).Tasks {
				families[task.Name] = task.Family
			}
			compared := 0
			for _, task := range mustCompile(t, c.model, c.strategy, 8).Tasks {
				if task.Family == "" {
					continue
				}
				want, ok := families[task.Name]
				require.True(t, ok, "%s at batch 8 only", task.Name)
				require.Equal(t, want, task.Family, "%s: batch 4 and 8", task.Name)
				compared++
			}
			require.Positive(t, compared)
		})
	}
}

// batchShape writes an attribute's leading axis relative to the batch, in
// lowest terms.
func TestBatchShape(t *testing.T) {
	for _, c := range []struct {
		s     graph.Shape
		batch int
		want  string
	}{
		{graph.Shape{4, 32, 14, 14}, 4, "[b,32,14,14]"},
		{graph.Shape{32, 32}, 4, "[8b,32]"},
		{graph.Shape{4, 8, 32}, 32, "[b/8,8,32]"},
		{graph.Shape{6, 5}, 4, "[3b/2,5]"},
		{graph.Shape{7}, 7, "[b]"},
		{graph.Shape{}, 4, "[]"},
		{graph.Shape{3, 2}, 0, "[3,2]"},
	} {
		require.Equal(t, c.want, batchShape(c.s, c.batch), "%v at %d", c.s, c.batch)
	}
}
