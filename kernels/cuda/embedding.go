package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

var (
	// embedding_T(const T *table, const int *ids, T *y, int n, int v, int d)
	kEmbedding = defTyped("embedding", "embedding", pPtr, pPtr, pPtr, pI32, pI32, pI32)
	// embedding_bwd_T(const int *ids, const T *dy, T *dtable, int n, int v, int d)
	kEmbeddingBwd = defTyped("embedding", "embedding_bwd", pPtr, pPtr, pPtr, pI32, pI32, pI32)
)

// Embedding sets row i of y [n, d] to row ids[i] of table [v, d], for the n
// int32 ids. The ids are not checked on the host: an id outside [0, v)
// gives a row of NaN.
func (k *Kernels) Embedding(s *cu.Stream, dt graph.DType, table, ids, y cu.DevicePtr, v, d, n int) error {
	const op = "Embedding"
	f, err := kEmbedding.of(op, dt)
	if err != nil {
		return err
	}
	if err := fits32(op, "n d", n, d); err != nil {
		return err
	}
	if err := fits32(op, "v d", v, d); err != nil || n == 0 || d == 0 {
		return err
	}
	if err := notNil(op, "table ids y", table, ids, y); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)*int64(d)/vec(dt)+1, table, ids, y, int32(n), int32(v), int32(d))
}

// EmbeddingBackward sets dtable [v, d] to the gradient of Embedding: zero,
// plus row i of dy [n, d] for every position i with ids[i] equal to the row,
// added in order of i in float32 (for f32, kernels/cpu's result bit for
// bit), without atomics. Ids outside [0, v) are skipped. Finding each id's
// positions costs O(n²/256) comparisons: fine for the ids of a batch.
func (k *Kernels) EmbeddingBackward(s *cu.Stream, dt graph.DType, ids, dy, dtable cu.DevicePtr, v, d, n int) error {
	const op = "EmbeddingBackward"
	f, err := kEmbeddingBwd.of(op, dt)
	if err != nil {
		return err
	}
	if err := fits32(op, "n d", n, d); err != nil {
		return err
	}
	if err := fits32(op, "v d", v, d); err != nil {
		return err
	}
	if err := k.Fill(s, dt, 0, dtable, v*d); err != nil || n == 0 || d == 0 {
		return err
	}
	if err := notNil(op, "ids dy", ids, dy); err != nil {
		return err
	}
	return k.launch(s, f, k.grid(int64(n), 1), block1D, ids, dy, dtable, int32(n), int32(v), int32(d))
}
