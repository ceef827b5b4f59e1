package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// OpJSON is an op in serialized form: its type and its attributes (the
// op struct's exported fields) as JSON.
type OpJSON struct {
	Type  string          `json:"type"`
	Attrs json.RawMessage `json:"attrs,omitempty"`
}

// decoders maps each op type to a function decoding its attributes.
var decoders = map[string]func([]byte) (Op, error){}

// register adds T's decoder. An attribute T does not have is refused, not
// dropped: a plan written by a newer flowkit (a learning-rate schedule on
// an update, say) must not run here as something else.
func register[T Op]() {
	var zero T
	decoders[zero.Type()] = func(b []byte) (Op, error) {
		var op T
		if len(b) > 0 {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&op); err != nil {
				return nil, err
			}
			if dec.More() {
				return nil, fmt.Errorf("more than one JSON value")
			}
		}
		return op, nil
	}
}

func init() {
	register[MatMul]()
	register[BiasAdd]()
	register[BiasGrad]()
	register[BiasAct]()
	register[Dense]()
	register[DenseGrad]()
	register[BiasActGrad]()
	register[Conv2D]()
	register[Conv2DGradData]()
	register[Conv2DGradFilter]()
	register[MaxPool2D]()
	register[MaxPool2DGrad]()
	register[ReLU]()
	register[ReLUGrad]()
	register[GELU]()
	register[GELUGrad]()
	register[SwiGLU]()
	register[SwiGLUGrad]()
	register[Add]()
	register[Mul]()
	register[Scale]()
	register[Fill]()
	register[Dropout]()
	register[DropoutGrad]()
	register[Reshape]()
	register[ReduceSum]()
	register[BroadcastAxis]()
	register[SoftmaxCrossEntropy]()
	register[SoftmaxCrossEntropyGrad]()
	register[Softmax]()
	register[SoftmaxGrad]()
	register[LayerNorm]()
	register[LayerNormGrad]()
	register[RMSNorm]()
	register[RMSNormGrad]()
	register[BatchNorm]()
	register[BatchNormGrad]()
	register[Attention]()
	register[AttentionGrad]()
	register[RoPE]()
	register[RoPEGrad]()
	register[MeanSquare]()
	register[MeanSquareGrad]()
	register[Embedding]()
	register[EmbeddingGrad]()
	register[VocabEmbedding]()
	register[VocabEmbeddingGrad]()
	register[VocabStats]()
	register[VocabStatsGrad]()
	register[VocabLoss]()
	register[VocabLossGrad]()
	register[SGDUpdate]()
	register[MomentumUpdate]()
	register[AdamUpdate]()
}

// EncodeOp serializes op.
func EncodeOp(op Op) (OpJSON, error) {
	if _, ok := decoders[op.Type()]; !ok {
		return OpJSON{}, fmt.Errorf("graph: op type %q is not registered for encoding", op.Type())
	}
	b, err := json.Marshal(op)
	if err != nil {
		return OpJSON{}, fmt.Errorf("graph: encoding %s: %w", op.Type(), err)
	}
	if string(b) == "{}" {
		b = nil
	}
	return OpJSON{Type: op.Type(), Attrs: b}, nil
}

// DecodeOp rebuilds an op from its serialized form.
func DecodeOp(j OpJSON) (Op, error) {
	dec, ok := decoders[j.Type]
	if !ok {
		return nil, fmt.Errorf("graph: unknown op type %q", j.Type)
	}
	op, err := dec(j.Attrs)
	if err != nil {
		return nil, fmt.Errorf("graph: op %s: bad attributes %s: %w", j.Type, j.Attrs, err)
	}
	return op, nil
}

// OpTypes lists the op types that can be encoded, sorted.
func OpTypes() []string {
	ts := make([]string, 0, len(decoders))
	for t := range decoders {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}
