package plans

import (
	"slices"
	"strings"
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
// gradients, which its updates read. The updated parts fill buckets of
// weights: packed whole, gathered into a bucket laid out part by part,
// unpacked part by part into the weights. Stages 2 and 3 scatter each
// micro-batch's gradient as it is produced, unbucketed.
func TestZeroBuckets(t *testing.T) {
	p := mustCompile(t, "mnist-cnn", "dp=2,zero=1,bucket=1GiB", 8)
	byKind := map[TaskKind][]Task{}
	for _, task := range p.Tasks {
		byKind[task.Kind] = append(byKind[task.Kind], task)
	}
	require.Empty(t, byKind[AllReduce], "ZeRO splits every weight of mnist-cnn over 2 replicas")
	require.Len(t, byKind[ReduceScatter], 1)
	require.Len(t, byKind[AllGather], 1)
	scatter, gather := byKind[ReduceScatter][0], byKind[AllGather][0]
	require.Equal(t, "reducescatter/grad-bucket-0", scatter.Name)
	require.Equal(t, "allgather/weight-bucket-1", gather.Name)
	const whole = 421642 // every gradient, every weight
	packs, unpacks := byKind[Pack], byKind[Unpack]
	require.Len(t, packs, 4)
	require.Len(t, unpacks, 4)
	for r := range 2 {
		// The gradients: packed in parts, scattered, unpacked whole.
		pack, unpack := packs[r], unpacks[r]
		require.Equal(t, 2, pack.Parts)
		require.Equal(t, whole, p.Registers[pack.Writes[0]].Spec.Shape.NumElements())
		require.Equal(t, pack.Writes[0], scatter.Reads[r].Reg)
		require.Equal(t, whole/2, p.Registers[scatter.Writes[r]].Spec.Shape.NumElements())
		require.Equal(t, scatter.Writes[r], unpack.Reads[0].Reg)
		require.Zero(t, unpack.Parts)
		require.Len(t, unpack.Writes, 8, "the replica's part of each gradient")
		// The weights: parts packed whole, gathered, unpacked in parts.
		pack, unpack = packs[2+r], unpacks[2+r]
		require.Zero(t, pack.Parts)
		require.Len(t, pack.Reads, 8, "the replica's part of each weight")
		require.Equal(t, pack.Writes[0], gather.Reads[r].Reg)
		require.Equal(t, whole, p.Registers[gather.Writes[r]].Spec.Shape.NumElements())
		require.Equal(t, gather.Writes[r], unpack.Reads[0].Reg)
		require.Equal(t, 2, unpack.Parts)
		for _, w := range unpack.Writes {
			require.True(t, p.Registers[w].Persistent, "%s: the weights themselves", p.Registers[w].Name)
		}
	}
	unpacked := map[int]bool{}
	for _, r := range slices.Concat(unpacks[0].Writes, unpacks[1].Writes) {
		unpacked[r] = true
	}
	updates := 0
	cats := p.Categories()
	for _, task := range p.Tasks {
		if task.Phase == "update" {
			require.True(t, unpacked[task.Reads[1].Reg], "%s reads %s", task.Name, p.Registers[task.Reads[1].Reg].Name)
			updates++
		}
		if task.Kind == AllGather {
			for _, r := range slices.Concat(task.Writes, []int{task.Reads[0].Reg}) {
				require.Equal(t, Temporaries, cats[r], p.Registers[r].Name)
			}
		}
	}
	require.Equal(t, 16, updates)
	// Stage 2 gathers the updated weights as stage 1 does, in buckets;
	// stage 3 gathers before each use, unbucketed.
	for _, st := range []string{"dp=2,zero=2,bucket=1GiB", "dp=2,mb=2,zero=3,bucket=1GiB"} {
		p := mustCompile(t, "mnist-cnn", st, 8)
		gathers := 0
		for _, task := range p.Tasks {
			require.False(t, strings.Contains(task.Name, "grad-bucket"), "%s: %s", st, task.Name)
			if task.Kind == AllGather && strings.Contains(task.Name, "weight-bucket") {
				gathers++
			}
		}
		require.Equal(t, map[bool]int{true: 1, false: 0}[strings.Contains(st, "zero=2")], gathers, st)
	}
}

// A device's collectives follow the gradients' readiness, whichever kind
// each is: under ZeRO stage 1 of a model whose weights the replicas do not
// all divide, the all-reduces and reduce-scatters interleave in the order
// of the updates, one per gradient, or with buckets, each when its last
// gradient is ready.
func TestCollectivesInReadinessOrder(t *testing.T) {
	const gpt3 = "gpt:layers=2,hidden=36,heads=4,seq=8,vocab=64"
	for _, st := range []string{"dp=3,mb=2,zero=1", "dp=3,mb=2,zero=1,bucket=4KiB"} {
		p := mustCompile(t, gpt3, st, 12)
		cs := p.Streams[0] // device 0's compute stream, where a CPU device communicates
		require.Equal(t, "compute", cs.Name)
		// Each gradient register's readiness: the index, among the
		// stream's updates, of the update that reads it (through its
		// reduced copy or its ZeRO part).
		ready := map[int]int{}
		updates := 0
		var colls []Task
		for _, f := range cs.Order {
			task := p.Tasks[p.Firings[f].Task]
			switch {
			case task.Phase == "update":
				ready[task.Reads[1].Reg] = updates
				updates++
			case task.Kind == AllReduce || task.Kind == ReduceScatter || task.Kind == Pack:
				colls = append(colls, task)
			}
		}
		// Follow each collective to the registers the updates read.
		readers := func(task Task) []int {
			if task.Kind == Pack {
				return nil
			}
			w := task.Writes[0]         // device 0's member
			for _, u := range p.Tasks { // an unpack of the bucket, if it is one
				if u.Kind == Unpack && u.Reads[0].Reg == w {
					return u.Writes
				}
			}
			return []int{w}
		}
		last := -1
		seen := 0
		for _, task := range colls {
			regs := readers(task)
			if regs == nil {
				continue
			}
			latest := -1
			for _, r := range regs {
				at, ok := ready[r]
				require.True(t, ok, "%s: %s: %s is read by no update on the stream", st, task.Name, p.Registers[r].Name)
				latest = max(latest, at)
				seen++
			}
			require.Greater(t, latest, last, "%s: %s comes after a collective of later gradients", st, task.Name)
			last = latest
		}
		require.Equal(t, updates, seen, "%s: every update's gradient through one collective", st)
	}
}

// A bucket's pieces: each gradient whole in turn, or in parts, piece i of
// every gradient in turn, covering the bucket once in order.
func TestBucketPieces(t *testing.T) {
	p := mustCompile(t, "mnist-cnn", "dp=2,zero=1,bucket=1GiB", 8)
	sizes := func(grads []int) []int {
		var n []int
		for _, r := range grads {
			n = append(n, p.Registers[r].Spec.Shape.NumElements())
		}
		return n
	}
	checked := 0
	for i := range p.Tasks {
		task := &p.Tasks[i]
		if task.Kind != Pack && task.Kind != Unpack {
			continue
		}
		grads := task.Writes
		if task.Kind == Pack {
			grads = nil
			for _, u := range task.Reads {
				grads = append(grads, u.Reg)
			}
		}
		n := sizes(grads)
		parts := max(task.Parts, 1)
		pieces := p.BucketPieces(task)
		require.Len(t, pieces, parts*len(grads), task.Name)
		at := 0
		for k, pc := range pieces {
			require.Equal(t, k%len(grads), pc.Grad, task.Name)
			require.Equal(t, n[pc.Grad]/parts, pc.N, task.Name)
			require.Equal(t, k/len(grads)*pc.N, pc.From, task.Name)
			require.Equal(t, at, pc.At, task.Name)
			at += pc.N
		}
		bucket := task.Writes[0]
		if task.Kind == Unpack {
			bucket = task.Reads[0].Reg
		}
		require.Equal(t, p.Registers[bucket].Spec.Shape.NumElements(), at, "%s covers its bucket", task.Name)
		checked++
	}
	require.Equal(t, 8, checked, "each replica's pack and unpack of the gradients and of the weights")
}
