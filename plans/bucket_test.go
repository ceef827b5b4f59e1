package plans

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/units"
)

// Buckets follow the gradients in the order they become ready, closing
// before a gradient that would overflow them; one larger than a bucket is
// all-reduced alone, in place; the updates read the unpacked gradients,
// which, with the buckets, are gradients in the memory plan.
func TestBuckets(t *testing.T) {
	p := mustCompile(t, "mnist-cnn", "dp=2,bucket=1MiB", 8)
	require.Equal(t, "dp=2,bucket=1MiB", p.Strategy)
	weightOf := map[int]string{} // the gradient register an update reads → its weight
	for _, task := range p.Tasks {
		if task.Phase == "update" {
			weightOf[task.Reads[1].Reg] = p.Registers[task.Reads[0].Reg].Name
		}
	}
	var allreduces []string
	var buckets [][]string // the weights of each bucket's gradients, on replica 0
	for _, task := range p.Tasks {
		switch {
		case task.Kind == AllReduce:
			allreduces = append(allreduces, task.Name)
		case task.Kind == Pack && task.Replica == 0:
			b := &p.Registers[task.Writes[0]]
			require.LessOrEqual(t, b.Spec.Bytes(), units.MiB, "%s", b.Name)
			require.Equal(t, 2*b.Spec.Bytes(), task.Bytes, "a copy reads and writes the bucket's bytes")
			for _, u := range task.Reads {
				require.Equal(t, ReadFinal, u.Mode)
			}
		case task.Kind == Unpack && task.Replica == 0:
			var ws []string
			for _, r := range task.Writes {
				ws = append(ws, weightOf[r])
			}
			buckets = append(buckets, ws)
		}
	}
	// Last layer first: fc2's and fc1.bias fill bucket 0; fc1.weight (1.6
	// MB) goes alone; the convolutions' fill bucket 1.
	require.Equal(t, []string{"allreduce/grad-bucket-0", "allreduce/fc1.weight", "allreduce/grad-bucket-1"}, allreduces)
	require.Equal(t, [][]string{
		{"fc2.bias", "fc2.weight", "fc1.bias"},
		{"conv2.bias", "conv2.weight", "conv1.bias", "conv1.weight"},
	}, buckets)
	// Each replica's compute stream (CPU devices communicate on it) runs a
	// bucket's pack, all-reduce and unpack in a row, after the backward
	// pass and before the updates.
	for _, s := range p.Streams {
		var kinds []TaskKind
		for _, f := range s.Order {
			if k := p.Tasks[p.Firings[f].Task].Kind; k != Compute && k != Input {
				kinds = append(kinds, k)
			}
		}
		require.Equal(t, []TaskKind{Pack, AllReduce, Unpack, AllReduce, Pack, AllReduce, Unpack}, kinds, p.streamName(s))
	}
	cats := p.Categories()
	for _, task := range p.Tasks {
		if task.Phase == "update" {
			g := task.Reads[1].Reg
			if p.Registers[task.Reads[0].Reg].Name != "fc1.weight" { // reduced in place
				require.Len(t, p.Registers[g].Writers, 1)
				require.Equal(t, Unpack, p.Tasks[p.Registers[g].Writers[0]].Kind, "%s reads %s", task.Name, p.Registers[g].Name)
			}
		}
		if task.Kind == Pack || task.Kind == Unpack {
			for _, r := range slices.Concat(task.Writes, []int{task.Reads[0].Reg}) {
				require.Equal(t, Gradients, cats[r], p.Registers[r].Name)
			}
		}
	}
	// No bucket holds more than one gradient when none fits with another;
	// without bucket, every gradient is all-reduced alone.
	for _, st := range []string{"dp=2,bucket=4B", "dp=2"} {
		p := mustCompile(t, "mnist-cnn", st, 8)
		n := 0
		for _, task := range p.Tasks {
			require.NotEqual(t, Pack, task.Kind, st)
			if task.Kind == AllReduce {
				n++
			}
		}
		require.Equal(t, 8, n, st)
	}
}

// Under ZeRO stage 1 the gradients reduce-scattered fill buckets too: each
// replica packs them part by part (Task.Parts), one reduce-scatter gives
// it its part of the bucket, which it unpacks into its parts of the
// gradients, which its updates read. Stages 2 and 3 scatter each
// micro-batch's gradient as it is produced, unbucketed.
func TestZeroBuckets(t *testing.T) {
	p := mustCompile(t, "mnist-cnn", "dp=2,zero=1,bucket=1GiB", 8)
	var packs, unpacks, scatters []Task
	for _, task := range p.Tasks {
		switch task.Kind {
		case Pack:
			packs = append(packs, task)
		case Unpack:
			unpacks = append(unpacks, task)
		case ReduceScatter:
			scatters = append(scatters, task)
		case AllReduce:
			t.Fatalf("%s: ZeRO splits every weight of mnist-cnn over 2 replicas", task.Name)
		}
	}
	require.Len(t, packs, 2)
	require.Len(t, scatters, 1)
	require.Equal(t, "reducescatter/grad-bucket-0", scatters[0].Name)
	for r, pack := range packs {
		require.Equal(t, 2, pack.Parts)
		whole := p.Registers[pack.Writes[0]].Spec.Shape.NumElements()
		require.Equal(t, 421642, whole, "every gradient")
		require.Equal(t, pack.Writes[0], scatters[0].Reads[r].Reg)
		mine := scatters[0].Writes[r]
		require.Equal(t, whole/2, p.Registers[mine].Spec.Shape.NumElements())
		require.Equal(t, mine, unpacks[r].Reads[0].Reg)
		require.Zero(t, unpacks[r].Parts)
		require.Len(t, unpacks[r].Writes, 8, "the replica's part of each gradient")
	}
	unpacked := map[int]bool{}
	for _, u := range unpacks {
		for _, r := range u.Writes {
			unpacked[r] = true
		}
	}
	updates := 0
	for _, task := range p.Tasks {
		if task.Phase == "update" {
			require.True(t, unpacked[task.Reads[1].Reg], "%s reads %s", task.Name, p.Registers[task.Reads[1].Reg].Name)
			updates++
		}
	}
	require.Equal(t, 16, updates)
	for _, st := range []string{"dp=2,zero=2,bucket=1GiB", "dp=2,mb=2,zero=3,bucket=1GiB"} {
		p := mustCompile(t, "mnist-cnn", st, 8)
		require.Equal(t, -1, slices.IndexFunc(p.Tasks, func(t Task) bool { return t.Kind == Pack }), st)
	}
}
