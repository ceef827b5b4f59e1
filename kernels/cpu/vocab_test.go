package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// A vocabulary split in parts gives the whole cross-entropy and its
// gradient: the parts' stats summed, the loss and each part's gradient
// match the float64 reference and its central differences — with every
// row scored, and with rows labelled IgnoreLabel, which neither count nor
// get a gradient.
func TestVocabCrossEntropy(t *testing.T) {
	for _, labels := range [][]int32{{0, 11, 5, 6, 3}, {0, IgnoreLabel, 5, IgnoreLabel, 3}} {
		vocabCrossEntropy(t, labels)
	}
}

func vocabCrossEntropy(t *testing.T, labels []int32) {
	const rows, v = 5, 12
	rng := newRNG(3)
	x := randSlice(rng, rows*v)
	for i := range x {
		x[i] *= 4 // spread, for the maxima to matter
	}
	want := crossEntropyRef(to64(x), labels, rows, v)
	grad := centralDiff(func(x []float64) float64 { return crossEntropyRef(x, labels, rows, v) }, to64(x), 1e-6)
	p := NewPool(2)
	for _, parts := range []int{1, 2, 3, 4} {
		w := v / parts
		sum := make([]float32, parts*rows*3)
		logits := make([][]float32, parts)
		for k := range parts {
			logits[k] = make([]float32, rows*w)
			for t := range rows {
				copy(logits[k][t*w:(t+1)*w], x[t*v+k*w:t*v+(k+1)*w])
			}
			stats := make([]float32, parts*rows*3)
			require.NoError(t, VocabStats(p, logits[k], labels, stats, rows, w, k*w, k, parts))
			for i, s := range stats {
				sum[i] += s
			}
		}
		got := VocabLoss(sum, rows, parts)
		require.InDelta(t, want, float64(got), 1e-6*math.Abs(want), "parts=%d", parts)
		dstats := make([]float32, len(sum))
		VocabLossBackward(sum, 1, dstats, rows, parts)
		whole := make([]float32, rows*v)
		for k := range parts {
			dx := make([]float32, rows*w)
			require.NoError(t, VocabStatsBackward(p, logits[k], labels, dstats, dx, rows, w, k*w, k, parts))
			for t := range rows {
				copy(whole[t*v+k*w:t*v+(k+1)*w], dx[t*w:(t+1)*w])
			}
		}
		require.Less(t, relErr(whole, grad), 1e-5, "parts=%d: gradient against central differences", parts)
	}
	stats := make([]float32, rows*3)
	require.ErrorIs(t, VocabStats(p, x[:rows*v], []int32{0, 1, 2, 3, 12}, stats, rows, v, 0, 0, 1), ErrIndex)
}

// The parts of an embedding lookup sum to the whole lookup, and their
// gradients are the whole gradient's rows.
func TestEmbeddingParts(t *testing.T) {
	const v, d = 6, 3
	rng := newRNG(5)
	table := randSlice(rng, v*d)
	ids := []int32{5, 0, 2, 2, 4}
	dy := randSlice(rng, len(ids)*d)
	p := NewPool(2)
	whole := make([]float32, len(ids)*d)
	require.NoError(t, Embedding(p, table, ids, whole, v, d))
	dwhole := make([]float32, v*d)
	require.NoError(t, EmbeddingBackward(p, ids, dy, dwhole, v, d))
	sum := make([]float32, len(ids)*d)
	for k := range 3 {
		y := make([]float32, len(ids)*d)
		EmbeddingPart(p, table[k*2*d:(k+1)*2*d], ids, y, k*2, 2, d)
		for i := range y {
			sum[i] += y[i]
		}
		dt := make([]float32, 2*d)
		EmbeddingPartBackward(p, ids, dy, dt, k*2, 2, d)
		require.Equal(t, dwhole[k*2*d:(k+1)*2*d], dt, "part %d", k)
	}
	require.Equal(t, whole, sum)
}
