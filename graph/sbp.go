package graph

import (
	"strconv"
	"strings"
)

// SBPKind is how a logical tensor is laid out over the devices of a
// placement: split along an axis, broadcast (a full copy on each), or
// partial sums (each device holds a summand of the full value).
type SBPKind uint8

const (
	Split SBPKind = iota + 1
	Broadcast
	PartialSum
)

// SBP is one tensor's parallel layout.
type SBP struct {
	Kind SBPKind
	Axis int // for Split
}

// S returns the split layout along axis.
func S(axis int) SBP { return SBP{Kind: Split, Axis: axis} }

// B is the broadcast layout; P the partial-sum layout.
var (
	B = SBP{Kind: Broadcast}
	P = SBP{Kind: PartialSum}
)

func (s SBP) String() string {
	switch s.Kind {
	case Split:
		return "S(" + strconv.Itoa(s.Axis) + ")"
	case Broadcast:
		return "B"
	case PartialSum:
		return "P"
	}
	return "?"
}

// Signature is one valid assignment of layouts to an op's inputs and
// outputs: computing each device's share from inputs laid out as In yields
// outputs laid out as Out, with no communication.
type Signature struct {
	In, Out []SBP
}

func (s Signature) String() string {
	f := func(l []SBP) string {
		p := make([]string, len(l))
		for i, x := range l {
			p[i] = x.String()
		}
		return strings.Join(p, ",")
	}
	return f(s.Out) + "←" + f(s.In)
}

// sig builds a Signature from layouts; the first nOut are outputs.
func sig(nOut int, l ...SBP) Signature {
	return Signature{Out: l[:nOut], In: l[nOut:]}
}

// elementwiseSignatures are the layouts of an op whose every input and
// output has the given rank and is combined element by element: any common
// split, broadcast, and — when the op is linear in its inputs — partial sum.
func elementwiseSignatures(rank, nIn, nOut int, linear bool) []Signature {
	same := func(s SBP) Signature {
		in, out := make([]SBP, nIn), make([]SBP, nOut)
		for i := range in {
			in[i] = s
		}
		for i := range out {
			out[i] = s
		}
		return Signature{In: in, Out: out}
	}
	var sigs []Signature
	for a := range rank {
		sigs = append(sigs, same(S(a)))
	}
	sigs = append(sigs, same(B))
	if linear {
		sigs = append(sigs, same(P))
	}
	return sigs
}
