package cpu

import (
	"errors"
	"fmt"
)

// ErrIndex reports an id or label outside its table or class range. Unlike a
// shape mismatch it comes from the data, so kernels return it.
var ErrIndex = errors.New("cpu: index out of range")

// checkIndices reports, wrapping ErrIndex, the first of ids outside [0, n),
// naming its position (a "row", a "position").
func checkIndices(kernel, what string, ids []int32, n int) error {
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("%w: %s: %s %d: %d not in [0, %d)", ErrIndex, kernel, what, i, id, n)
		}
	}
	return nil
}

// IgnoreLabel is the label of a row that a cross-entropy does not score
// (PyTorch's ignore_index): a masked language model's unmasked positions.
const IgnoreLabel = -100

// checkLabels is checkIndices for labels, which may also be IgnoreLabel;
// it returns the number of the others.
func checkLabels(kernel string, labels []int32, n int) (scored int, err error) {
	for i, l := range labels {
		switch {
		case l == IgnoreLabel:
			continue
		case l < 0 || int(l) >= n:
			return 0, fmt.Errorf("%w: %s: row %d: label %d not in [0, %d) nor %d (ignored)", ErrIndex, kernel, i, l, n, IgnoreLabel)
		}
		scored++
	}
	return scored, nil
}

// Embedding sets row i of y [n, d] to row ids[i] of table [v, d]. An id
// outside [0, v) is an error wrapping ErrIndex that names its position;
// y is then left untouched.
func Embedding(p *Pool, table []float32, ids []int32, y []float32, v, d int) error {
	checkLen("Embedding", "table", len(table), v*d)
	checkLen("Embedding", "y", len(y), len(ids)*d)
	if err := checkIndices("Embedding", "position", ids, v); err != nil {
		return err
	}
	p.For(len(ids), rowGrain(d), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			id := int(ids[i])
			copy(y[i*d:(i+1)*d], table[id*d:(id+1)*d])
		}
	})
	return nil
}

// EmbeddingBackward sets dtable [v, d] to the gradient of Embedding: zero,
// plus row i of dy for every position i with ids[i] equal to the row, added
// in order of i. Each worker owns a range of columns, so repeated ids sum in
// the same order whatever the number of workers. An id outside [0, v) is an
// error as in Embedding, and dtable is then left untouched.
func EmbeddingBackward(p *Pool, ids []int32, dy, dtable []float32, v, d int) error {
	checkLen("EmbeddingBackward", "dy", len(dy), len(ids)*d)
	checkLen("EmbeddingBackward", "dtable", len(dtable), v*d)
	if err := checkIndices("EmbeddingBackward", "position", ids, v); err != nil {
		return err
	}
	Fill(p, 0, dtable)
	p.For(d, rowGrain(len(ids)), func(lo, hi int) {
		for i, id := range ids {
			src := dy[i*d+lo : i*d+hi]
			dst := dtable[int(id)*d+lo : int(id)*d+hi]
			dst = dst[:len(src)]
			for j, g := range src {
				dst[j] += g
			}
		}
	})
	return nil
}
