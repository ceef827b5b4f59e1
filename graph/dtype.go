package graph

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/flowkit/flowkit/units"
)

// DType is a tensor's element type. F32 is computed everywhere; BF16 and F16
// are declared so that cost and memory can be planned for them.
type DType uint8

const (
	F32 DType = iota + 1
	BF16
	F16
	I32
)

var dtypeNames = [...]string{F32: "f32", BF16: "bf16", F16: "f16", I32: "i32"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) && dtypeNames[d] != "" {
		return dtypeNames[d]
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}

// Size is the size of one element.
func (d DType) Size() units.Bytes {
	switch d {
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F32 || d == BF16 || d == F16 }

// ParseDType returns the DType named s ("f32", "bf16", "f16", "i32").
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if n != "" && n == s {
			return DType(i), nil
		}
	}
	return 0, fmt.Errorf("graph: unknown dtype %q (want f32, bf16, f16 or i32)", s)
}

// Shape is a static tensor shape. A scalar has the empty shape.
type Shape []int

// NumElements is the product of the dimensions (1 for a scalar).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether s and t have the same dimensions.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy of s that shares no memory with it.
func (s Shape) Clone() Shape { return append(Shape{}, s...) }

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Split3 views s as [outer, s[axis], inner] around axis.
func (s Shape) Split3(axis int) (outer, mid, inner int) {
	outer, inner = 1, 1
	for i, d := range s {
		switch {
		case i < axis:
			outer *= d
		case i > axis:
			inner *= d
		}
	}
	return outer, s[axis], inner
}

// valid reports whether every dimension is positive.
func (s Shape) valid() bool {
	for _, d := range s {
		if d <= 0 {
			return false
		}
	}
	return true
}
