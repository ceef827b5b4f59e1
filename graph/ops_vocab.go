package graph

import "github.com/flowkit/flowkit/units"

// A vocabulary split over a tensor-parallel group (Megatron-LM's
// vocab-parallel embedding and cross-entropy): each device holds a
// contiguous part of the embedding table's rows and of the head's logits'
// columns. Its ops depend on the device's rank (RankDependent): the model
// is built for rank 0 and the compiler sets each device's part.

// RankDependent is an op whose attributes depend on the device's rank in
// its tensor-parallel group: ForRank returns the op rank r runs.
type RankDependent interface {
	Op
	ForRank(r int) Op
}

// VocabEmbedding looks ids up in a part of an embedding table: rows
// [Lo, Lo+Rows) of the whole, held as table [Rows, D]. An id outside the
// part gives zeros, so that the group's TPSum is the whole lookup.
type VocabEmbedding struct{ Rows, Lo int }

func (VocabEmbedding) Type() string { return "vocab_embedding" }

func (op VocabEmbedding) Infer(in []Spec) ([]Spec, error) {
	out, err := Embedding{}.Infer(in)
	if err == nil && in[0].Shape[0] != op.Rows {
		return nil, shapeErr("vocab_embedding", in, "table has %d rows, the part %d", in[0].Shape[0], op.Rows)
	}
	return out, err
}

func (VocabEmbedding) Cost(in, out []Spec) Cost { return Embedding{}.Cost(in, out) }

func (VocabEmbedding) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, P, S(0), B)} }

func (op VocabEmbedding) ForRank(r int) Op { op.Lo = r * op.Rows; return op }

func (op VocabEmbedding) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	if !need[0] {
		return []*Tensor{nil, nil}
	}
	return []*Tensor{g.apply1(VocabEmbeddingGrad{Table: n.Inputs[0].Spec.Shape.Clone(), Lo: op.Lo}, n.Inputs[1], dy[0]), nil}
}

// VocabEmbedding adds a lookup of ids in the part of a table a device
// holds (rank 0's rows; see RankDependent).
func (g *Graph) VocabEmbedding(table, ids *Tensor) *Tensor {
	if table == nil {
		return g.apply1(VocabEmbedding{}, table, ids)
	}
	return g.apply1(VocabEmbedding{Rows: table.Spec.Shape[0]}, table, ids)
}

// VocabEmbeddingGrad scatter-adds dy into a zeroed part of a table:
// (ids, dy) → dtable, for the ids of rows [Lo, Lo+Table[0]).
type VocabEmbeddingGrad struct {
	Table Shape
	Lo    int
}

func (VocabEmbeddingGrad) Type() string { return "vocab_embedding_grad" }

func (op VocabEmbeddingGrad) Infer(in []Spec) ([]Spec, error) {
	return EmbeddingGrad{Table: op.Table}.Infer(in)
}

func (op VocabEmbeddingGrad) Cost(in, out []Spec) Cost { return EmbeddingGrad{}.Cost(in, out) }

func (VocabEmbeddingGrad) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, B, B, B)} }

func (op VocabEmbeddingGrad) ForRank(r int) Op { op.Lo = r * op.Table[0]; return op }

// VocabStats computes a device's part of a vocab-parallel cross-entropy:
// from its logits [T, Width] (columns Lo … of a vocabulary of
// Parts·Width) and the labels [T], the rows' maxima, sums of exponentials
// and label logits, in slot Part of stats [Parts, T, 3] (f32; zero
// elsewhere). The group's TPSum of the stats feeds VocabLoss.
type VocabStats struct{ Width, Lo, Part, Parts int }

func (VocabStats) Type() string { return "vocab_stats" }

func (op VocabStats) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("vocab_stats", in, 2); err != nil {
		return nil, err
	}
	if err := checkFloat("vocab_stats", in, 0); err != nil {
		return nil, err
	}
	l, y := in[0].Shape, in[1].Shape
	if len(l) != 2 || l[1] != op.Width || len(y) != 1 || y[0] != l[0] || in[1].DType != I32 {
		return nil, shapeErr("vocab_stats", in, "want logits [T,%d] and i32 labels [T]", op.Width)
	}
	if op.Parts < 1 || op.Part < 0 || op.Part >= op.Parts {
		return nil, shapeErr("vocab_stats", in, "part %d of %d", op.Part, op.Parts)
	}
	return []Spec{{Shape{op.Parts, l[0], 3}, F32}}, nil
}

func (VocabStats) Cost(in, out []Spec) Cost {
	return elementwiseCost(in, out, 0).withFLOPs(4 * in[0].Shape.NumElements())
}

func (VocabStats) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, P, S(1), B)} }

func (op VocabStats) ForRank(r int) Op { op.Part, op.Lo = r, r*op.Width; return op }

func (op VocabStats) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(VocabStatsGrad(op), n.Inputs[0], n.Inputs[1], dy[0]), nil}
}

// VocabStats adds rank 0's part of a vocab-parallel cross-entropy over a
// group of parts devices (see RankDependent).
func (g *Graph) VocabStats(logits, labels *Tensor, parts int) *Tensor {
	if logits == nil || len(logits.Spec.Shape) != 2 {
		return g.apply1(VocabStats{}, logits, labels)
	}
	return g.apply1(VocabStats{Width: logits.Spec.Shape[1], Parts: parts}, logits, labels)
}

// VocabStatsGrad is VocabStats's gradient: (logits, labels, dstats) →
// dlogits.
type VocabStatsGrad VocabStats

func (VocabStatsGrad) Type() string { return "vocab_stats_grad" }

func (op VocabStatsGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("vocab_stats_grad", in, 3); err != nil {
		return nil, err
	}
	stats, err := VocabStats(op).Infer(in[:2])
	if err != nil {
		return nil, err
	}
	if !in[2].Shape.Equal(stats[0].Shape) {
		return nil, shapeErr("vocab_stats_grad", in, "dstats must be %v", stats[0].Shape)
	}
	return []Spec{in[0]}, nil
}

func (VocabStatsGrad) Cost(in, out []Spec) Cost {
	return elementwiseCost(in, out, 0).withFLOPs(4 * in[0].Shape.NumElements())
}

func (VocabStatsGrad) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, S(1), S(1), B, B)}
}

func (op VocabStatsGrad) ForRank(r int) Op {
	return VocabStatsGrad(VocabStats(op).ForRank(r).(VocabStats))
}

// VocabLoss is the mean cross-entropy over the rows of the group's summed
// VocabStats [Parts, T, 3]: an f32 scalar, the same on every device.
type VocabLoss struct{}

func (VocabLoss) Type() string { return "vocab_loss" }

func (VocabLoss) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("vocab_loss", in, 1); err != nil {
		return nil, err
	}
	if s := in[0].Shape; len(s) != 3 || s[2] != 3 || in[0].DType != F32 {
		return nil, shapeErr("vocab_loss", in, "want f32 stats [parts,T,3]")
	}
	return []Spec{{Shape{}, F32}}, nil
}

func (VocabLoss) Cost(in, out []Spec) Cost {
	return elementwiseCost(in, out, 0).withFLOPs(4 * in[0].Shape.NumElements())
}

func (VocabLoss) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, B, B)} }

func (VocabLoss) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(VocabLossGrad{}, n.Inputs[0], dy[0])}
}

// VocabLoss adds the cross-entropy of summed vocab-parallel stats.
func (g *Graph) VocabLoss(stats *Tensor) *Tensor { return g.apply1(VocabLoss{}, stats) }

// VocabLossGrad is VocabLoss's gradient: (stats, dloss) → dstats.
type VocabLossGrad struct{}

func (VocabLossGrad) Type() string { return "vocab_loss_grad" }

func (VocabLossGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("vocab_loss_grad", in, 2); err != nil {
		return nil, err
	}
	if _, err := (VocabLoss{}).Infer(in[:1]); err != nil {
		return nil, err
	}
	if len(in[1].Shape) != 0 {
		return nil, shapeErr("vocab_loss_grad", in, "dloss must be a scalar")
	}
	return []Spec{in[0]}, nil
}

func (VocabLossGrad) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 4) }

func (VocabLossGrad) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, B, B, B)} }

func (c Cost) withFLOPs(n int) Cost { c.FLOPs = units.FLOPs(n); return c }
