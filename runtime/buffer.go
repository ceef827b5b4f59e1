package runtime

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
)

// Buffer holds one tensor's elements on the host: F for float tensors
// (computed in f32 whatever their declared dtype), I for i32.
type Buffer struct {
	F []float32
	I []int32
}

func newBuffer(s graph.Spec) Buffer {
	if s.DType == graph.I32 {
		return Buffer{I: make([]int32, s.Shape.NumElements())}
	}
	return Buffer{F: make([]float32, s.Shape.NumElements())}
}

// Len is the number of elements.
func (b Buffer) Len() int { return max(len(b.F), len(b.I)) }

// Scalar returns the single element of a float scalar buffer.
func (b Buffer) Scalar() (float32, error) {
	if len(b.F) != 1 {
		return 0, fmt.Errorf("runtime: want a float scalar, got %d floats", len(b.F))
	}
	return b.F[0], nil
}
