package graph

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The parts of a tensor, taken by Take, are disjoint and cover it: placed
// back by Place they rebuild it, whatever the shape, axis, blocks and
// parts.
func TestShardTakePlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		rank := 1 + rng.IntN(3)
		axis := rng.IntN(rank)
		blocks, parts := 1+rng.IntN(3), 1+rng.IntN(4)
		full := make(Shape, rank)
		for i := range full {
			full[i] = 1 + rng.IntN(4)
		}
		full[axis] = blocks * parts * (1 + rng.IntN(3))
		var sizes []int // unequal blocks, every other time
		if rng.IntN(2) == 0 {
			full[axis] = 0
			for range blocks {
				sizes = append(sizes, parts*(1+rng.IntN(3)))
				full[axis] += sizes[len(sizes)-1]
			}
		}
		values := make([]int, full.NumElements())
		for i := range values {
			values[i] = i + 1
		}
		rebuilt := make([]int, len(values))
		for part := range parts {
			s := &Shard{Of: "w", Full: full, Axis: axis, Blocks: blocks, Parts: parts, Part: part, Sizes: sizes}
			require.NoError(t, s.Check())
			got := make([]int, s.Shape().NumElements())
			Take(s, values, got)
			for _, v := range got {
				require.NotZero(t, v, "every value of the part comes from the tensor")
				require.Zero(t, rebuilt[v-1], "%v: value %d taken by two parts", s, v)
				rebuilt[v-1] = v
			}
			back := make([]int, len(values))
			Place(s, got, back)
			for i, v := range back {
				if v != 0 {
					require.Equal(t, values[i], v, "Place puts a value where Take took it")
				}
			}
		}
		require.Equal(t, values, rebuilt, "the parts cover the tensor")
	}
}

// A part of packed q, k and v ([3h, h], three blocks along axis 0) holds
// its rows of each.
func TestShardBlocks(t *testing.T) {
	s := &Shard{Of: "qkv", Full: Shape{6, 1}, Axis: 0, Blocks: 3, Parts: 2, Part: 1}
	got := make([]int, 3)
	Take(s, []int{10, 11, 20, 21, 30, 31}, got)
	require.Equal(t, []int{11, 21, 31}, got)
	require.Equal(t, Shape{3, 1}, s.Shape())
	// Grouped-query attention's: 4 query rows, 2 of keys, 2 of values.
	s = &Shard{Of: "qkv", Full: Shape{8, 1}, Axis: 0, Blocks: 3, Parts: 2, Part: 1, Sizes: []int{4, 2, 2}}
	require.NoError(t, s.Check())
	got = make([]int, 4)
	Take(s, []int{10, 11, 12, 13, 20, 21, 30, 31}, got)
	require.Equal(t, []int{12, 13, 21, 31}, got)
	require.Equal(t, Shape{4, 1}, s.Shape())
	for _, bad := range []*Shard{
		{Of: "w", Full: Shape{8, 1}, Axis: 0, Blocks: 3, Parts: 2, Sizes: []int{4, 4}},
		{Of: "w", Full: Shape{8, 1}, Axis: 0, Blocks: 3, Parts: 2, Sizes: []int{4, 2, 4}},
		{Of: "w", Full: Shape{8, 1}, Axis: 0, Blocks: 3, Parts: 2, Sizes: []int{5, 1, 2}},
		{Of: "w", Full: Shape{6, 1}, Axis: 2, Blocks: 1, Parts: 2},
		{Of: "w", Full: Shape{6, 1}, Axis: 0, Blocks: 1, Parts: 4},
		{Of: "w", Full: Shape{6, 1}, Axis: 0, Blocks: 1, Parts: 2, Part: 2},
		{Of: "w", Full: Shape{6, 1}, Axis: 0, Blocks: 0, Parts: 2},
	} {
		require.Error(t, bad.Check(), "%+v", bad)
	}
}

// TPCopy's gradient is a TPSum, TPSum's the identity: Megatron-LM's f and g.
func TestTPGrads(t *testing.T) {
	g := New()
	x := g.Param("x", Shape{2, 3}, Init{Kind: Ones})
	w := g.Param("w", Shape{4, 3}, Init{Kind: Ones})
	y := g.TPSum(g.MatMul(g.TPCopy(x), w, false, true))
	loss := g.MeanSquare(y)
	grads, err := g.Backward(loss, []*Tensor{x})
	require.NoError(t, err)
	require.NotNil(t, grads[0].Producer)
	_, ok := grads[0].Producer.Op.(TPSum)
	require.True(t, ok, "x's gradient is summed over the group, got %s", grads[0].Producer.Op.Type())
	sums := 0
	for _, n := range g.Nodes {
		if _, ok := n.Op.(TPSum); ok {
			sums++
		}
	}
	require.Equal(t, 2, sums, "one TPSum forward (g), one backward (f's gradient); none for g's gradient")
}
