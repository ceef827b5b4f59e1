package remote

import (
	"fmt"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// serverCodec is the codec of a Group's server: gRPC's protobuf codec,
// except that a Frame is decoded by unmarshalFrame from one copy of the
// bytes received. protobuf-go copies a bytes field out of its input, and
// gRPC's codec copies its input out of the transport's buffers first: two
// copies of every payload, where one serves (the payload then shares the
// copy, which nothing else holds). The bytes on the wire are the same.
type serverCodec struct{ proto encoding.CodecV2 }

func newServerCodec() serverCodec { return serverCodec{encoding.GetCodecV2("proto")} }

// Name implements encoding.CodecV2.
func (c serverCodec) Name() string { return c.proto.Name() }

// Marshal implements encoding.CodecV2.
func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal implements encoding.CodecV2.
func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*wirepb.Frame); ok {
		return unmarshalFrame(alignedCopy(data), f)
	}
	return c.proto.Unmarshal(data, v)
}

// alignedCopy returns a copy of an encoded Frame placed so that its
// payload starts at an address that is a multiple of 4: decodeWords then
// reads the values where they are (elsewhere it copies them again, value
// by value). Where the payload starts is read off the first buffer, which
// holds the frame's few bytes before it; where it does not, the copy lies
// as it falls.
func alignedCopy(data mem.BufferSlice) []byte {
	n := data.Len()
	if n == 0 {
		return nil
	}
	at := payloadAt(data[0].ReadOnlyData()) // n > 0: data has a buffer
	buf := make([]byte, n+3)
	shift := (4 - (uintptr(unsafe.Pointer(&buf[0]))+uintptr(at))%4) % 4
	buf = buf[shift : int(shift)+n]
	data.CopyTo(buf)
	return buf
}

// payloadAt returns the offset of the first payload (field f or i) in the
// encoded Frame that b starts, 0 where b does not reach it.
func payloadAt(b []byte) int {
	for o := 0; o < len(b); {
		num, typ, n := protowire.ConsumeTag(b[o:])
		if n < 0 {
			return 0
		}
		o += n
		if typ == protowire.BytesType && (num == 6 || num == 7) {
			if _, m := protowire.ConsumeVarint(b[o:]); m > 0 {
				return o + m
			}
			return 0
		}
		m := protowire.ConsumeFieldValue(num, typ, b[o:])
		if m < 0 {
			return 0
		}
		o += m
	}
	return 0
}

// unmarshalFrame sets f to the Frame that b encodes, as proto.Unmarshal
// does (the last of a repeated field wins; a field of another wire type
// than the Frame's, or of a number it does not have, is skipped, where
// proto.Unmarshal would keep it as an unknown field), except that f's
// payload fields share b's memory.
func unmarshalFrame(b []byte, f *wirepb.Frame) error {
	f.Reset()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("remote: frame: %w", protowire.ParseError(n))
		}
		if !num.IsValid() {
			return fmt.Errorf("remote: frame: field number %d out of range", num)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num >= 1 && num <= 5 || num == 8 || num == 9):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("remote: frame: field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case 1:
				f.Run = int64(v)
			case 2:
				f.Kind = uint32(v)
			case 3:
				f.Firing = int64(v)
			case 4:
				f.Iter = int64(v)
			case 5:
				f.Reg = int64(v)
			case 8:
				f.Chunk = int64(v)
			case 9:
				f.Total = int64(v)
			}
		case typ == protowire.BytesType && (num == 6 || num == 7):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("remote: frame: field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			if len(v) == 0 {
				v = nil // as proto3 leaves an empty bytes field
			}
			if num == 6 {
				f.F = v[:len(v):len(v)]
			} else {
				f.I = v[:len(v):len(v)]
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("remote: frame: field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}
