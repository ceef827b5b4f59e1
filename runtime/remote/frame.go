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

// frameValues is the most float32 values a frame carries (1 MiB): a larger
// payload goes in several frames. One frame of a whole register would be
// one allocation and one copy of its size at each end, on the heap and
// not preemptible: over 16 MiB, the garbage collector's attempts to stop
// such a copy cost more than the copy (BenchmarkSend_100MiB).
var frameValues = 1 << 18

// maxTotal bounds the values a message in several frames may announce,
// which the receiver allocates before they arrive.
const maxTotal = math.MaxInt32

// encodeFrames calls send with the frames that carry m: one, or, for a
// float32 payload above frameValues, as many as its pieces (Frame.Total).
// On a little-endian host they share m's payload: each must be marshalled
// before send returns.
func encodeFrames(m *runtime.Message, send func(*wirepb.Frame) error) error {
	n := len(m.F)
	if n <= frameValues || len(m.I) > 0 {
		return send(encodeFrame(m))
	}
	part := *m
	for lo := 0; lo < n; lo += frameValues {
		part.F = m.F[lo:min(lo+frameValues, n)]
		f := encodeFrame(&part)
		f.Total = int64(n)
		if err := send(f); err != nil {
			return err
		}
	}
	return nil
}

// assembly puts together the messages of one stream from its frames, in
// order: a message in several frames (Frame.Total) is returned once its
// last frame has come.
type assembly struct {
	m   *runtime.Message // the message being put together; nil between messages
	got int              // its values received
}

// add takes the next frame of the stream from rank from and returns the
// message it completes, if any.
func (a *assembly) add(from int, f *wirepb.Frame) (*runtime.Message, error) {
	m, err := decodeFrame(from, f)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("remote: frame from rank %d: "+format, append([]any{from}, args...)...)
	}
	if a.m == nil {
		switch {
		case f.Total == 0:
			return m, nil
		case f.Total < 0 || f.Total > maxTotal:
			return nil, bad("total %d out of range", f.Total)
		case len(m.I) > 0:
			return nil, bad("a message in several frames with an int32 payload")
		case int64(len(m.F)) >= f.Total || len(m.F) == 0:
			return nil, bad("first piece of %d values of a message of %d in several frames", len(m.F), f.Total)
		}
		whole := make([]float32, f.Total)
		a.got = copy(whole, m.F)
		m.F = whole
		a.m = m
		return nil, nil
	}
	w := a.m
	switch {
	case f.Total != int64(len(w.F)):
		return nil, bad("total %d within a message of %d values", f.Total, len(w.F))
	case m.Run != w.Run || m.Kind != w.Kind || m.Firing != w.Firing || m.Iter != w.Iter || m.Reg != w.Reg || m.Chunk != w.Chunk:
		return nil, bad("a piece of another message within a message in several frames")
	case len(m.I) > 0 || len(m.F) == 0 || a.got+len(m.F) > len(w.F):
		return nil, bad("piece of %d values at value %d of a message of %d", len(m.F), a.got, len(w.F))
	}
	a.got += copy(w.F[a.got:], m.F)
	if a.got < len(w.F) {
		return nil, nil
	}
	a.m = nil
	return w, nil
}

// pending says, at the end of a stream, whether a message is unfinished.
func (a *assembly) pending() error {
	if a.m == nil {
		return nil
	}
	return fmt.Errorf("remote: stream from rank %d ended after %d of a message's %d values", a.m.From, a.got, len(a.m.F))
}
