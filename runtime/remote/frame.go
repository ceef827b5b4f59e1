package remote

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// A Frame carries a runtime.Message's payload as little-endian bytes, 4 a
// value. On little-endian hosts (all that flowkit runs on in practice) the
// conversion is none: the bytes are the values' memory (the sender's until
// marshalled, the received copy's after serverCodec); the portable loops
// are the reference and serve the others.

// word is the type of a payload's values.
type word interface{ ~float32 | ~int32 }

// littleEndian is whether this host stores words as the wire does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// encodeFrame returns m as a Frame. On a little-endian host its payload
// is m's: it must be marshalled (sent: a stream's Send marshals before it
// returns) before m's payload changes.
func encodeFrame(m *runtime.Message) *wirepb.Frame {
	return &wirepb.Frame{
		Run:    int64(m.Run),
		Kind:   uint32(m.Kind),
		Firing: int64(m.Firing),
		Iter:   int64(m.Iter),
		Reg:    int64(m.Reg),
		Chunk:  int64(m.Chunk),
		F:      encodeWords(m.F),
		I:      encodeWords(m.I),
	}
}

// decodeFrame returns the Message that f carries from rank from. Its
// payload may share f's memory.
func decodeFrame(from int, f *wirepb.Frame) (*runtime.Message, error) {
	if f.Run < 0 || f.Run > math.MaxInt {
		return nil, fmt.Errorf("remote: frame from rank %d: run %d out of range", from, f.Run)
	}
	if f.Kind > math.MaxUint8 {
		return nil, fmt.Errorf("remote: frame from rank %d: message kind %d out of range", from, f.Kind)
	}
	for _, v := range [...]struct {
		name string
		n    int64
	}{{"firing", f.Firing}, {"iteration", f.Iter}, {"register", f.Reg}, {"chunk", f.Chunk}} {
		if v.n < math.MinInt || v.n > math.MaxInt {
			return nil, fmt.Errorf("remote: frame from rank %d: %s %d out of range", from, v.name, v.n)
		}
	}
	fs, err := decodeWords[float32](f.F)
	if err != nil {
		return nil, fmt.Errorf("remote: frame from rank %d: float32 payload: %w", from, err)
	}
	is, err := decodeWords[int32](f.I)
	if err != nil {
		return nil, fmt.Errorf("remote: frame from rank %d: int32 payload: %w", from, err)
	}
	return &runtime.Message{
		Run:    int(f.Run),
		From:   from,
		Kind:   runtime.MessageKind(f.Kind),
		Firing: int(f.Firing),
		Iter:   int(f.Iter),
		Reg:    int(f.Reg),
		Chunk:  int(f.Chunk),
		F:      fs,
		I:      is,
	}, nil
}

// encodeWords returns s as little-endian bytes, nil when s is empty: on a
// little-endian host s's own memory, else a copy.
func encodeWords[T word](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	if !littleEndian {
		return encodeWordsPortable(s)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

func encodeWordsPortable[T word](s []T) []byte {
	b := make([]byte, 4*len(s))
	for i := range s {
		binary.LittleEndian.PutUint32(b[4*i:], *(*uint32)(unsafe.Pointer(&s[i])))
	}
	return b
}

// decodeWords returns the words that b holds, nil when it is empty. On a
// little-endian host the result shares b's memory when b is aligned for it.
func decodeWords[T word](b []byte) ([]T, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of 4-byte values", len(b))
	}
	if len(b) == 0 {
		return nil, nil
	}
	if !littleEndian || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return decodeWordsPortable[T](b), nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/4), nil
}

func decodeWordsPortable[T word](b []byte) []T {
	s := make([]T, len(b)/4)
	for i := range s {
		*(*uint32)(unsafe.Pointer(&s[i])) = binary.LittleEndian.Uint32(b[4*i:])
	}
	return s
}
