package remote

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/remote/wirepb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func TestFrameRoundTrip(t *testing.T) {
	m := &runtime.Message{Run: 3, From: 2, Kind: runtime.MsgPart, Firing: 17, Iter: 5, Reg: -1, Chunk: 3,
		F: []float32{1.5, float32(math.Inf(-1)), -0, math.MaxFloat32}, I: []int32{math.MinInt32, -1, 0, 7}}
	b, err := proto.Marshal(encodeFrame(m))
	require.NoError(t, err)
	var f wirepb.Frame
	require.NoError(t, proto.Unmarshal(b, &f))
	got, err := decodeFrame(2, &f)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

// The wire is little-endian whatever the host: the portable loops, which
// big-endian hosts use, agree with the memory copies.
func TestWordsPortable(t *testing.T) {
	f := []float32{1, -2.5, float32(math.NaN()), 3e38}
	i := []int32{1, -2, math.MaxInt32, 0x01020304}
	require.Equal(t, encodeWordsPortable(f), encodeWords(f))
	require.Equal(t, encodeWordsPortable(i), encodeWords(i))
	require.Equal(t, []byte{4, 3, 2, 1}, encodeWords([]int32{0x01020304}))
	require.Equal(t, i, decodeWordsPortable[int32](encodeWords(i)))
	require.Equal(t, math.Float32bits(f[2]), math.Float32bits(decodeWordsPortable[float32](encodeWords(f))[2]))

	// A payload at an odd address is read by the portable loop.
	b := append([]byte{0}, encodeWords(i)...)[1:]
	got, err := decodeWords[int32](b)
	require.NoError(t, err)
	require.Equal(t, i, got)
}

func TestDecodeFrameMalformed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame *wirepb.Frame
		want  string
	}{
		{"odd float bytes", &wirepb.Frame{F: make([]byte, 5)}, "remote: frame from rank 1: float32 payload: 5 bytes is not a whole number of 4-byte values"},
		{"odd int bytes", &wirepb.Frame{I: make([]byte, 3)}, "remote: frame from rank 1: int32 payload: 3 bytes is not a whole number of 4-byte values"},
		{"negative run", &wirepb.Frame{Run: -1}, "remote: frame from rank 1: run -1 out of range"},
		{"kind too large", &wirepb.Frame{Kind: 256}, "remote: frame from rank 1: message kind 256 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeFrame(1, tc.frame)
			require.EqualError(t, err, tc.want)
		})
	}
}

// Whatever bytes arrive, decoding gives a message or an error, never a
// panic, and a message re-encodes to the same frame.
func FuzzDecodeFrame(f *testing.F) {
	for _, m := range []*runtime.Message{
		{Run: 1, Kind: runtime.MsgDone, Firing: 3},
		{Run: 2, Kind: runtime.MsgData, Reg: 4, F: []float32{1, 2}},
		{Run: 0, Kind: runtime.MsgPart, I: []int32{-1}},
		{Run: 3, Kind: runtime.MsgReduced, Chunk: 2, F: []float32{0.5}},
	} {
		b, err := proto.Marshal(encodeFrame(m))
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0x32, 0x03, 1, 2, 3}) // f with 3 bytes
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr, mine wirepb.Frame
		err := proto.Unmarshal(b, &fr)
		// The server's decoder reads what protobuf-go reads.
		if errMine := unmarshalFrame(slices.Clone(b), &mine); (err == nil) != (errMine == nil) {
			t.Fatalf("proto.Unmarshal: %v; unmarshalFrame: %v", err, errMine)
		}
		if err != nil {
			return
		}
		fr.ProtoReflect().SetUnknown(nil) // fields a Frame does not have
		require.True(t, proto.Equal(&fr, &mine), "unmarshalFrame %v, proto.Unmarshal %v", &mine, &fr)
		m, err := decodeFrame(1, &fr)
		if err != nil {
			return
		}
		again := encodeFrame(m)
		again.Total = fr.Total // the frame's, not the message's: see assembly
		require.True(t, proto.Equal(&fr, again), "got %v, want %v", again, &fr)
	})
}

// unmarshalFrame knows the Frame's fields by number and wire type: the
// message and the decoder change together.
func TestFrameFields(t *testing.T) {
	fields := (&wirepb.Frame{}).ProtoReflect().Descriptor().Fields()
	var got []string
	for i := range fields.Len() {
		fd := fields.Get(i)
		got = append(got, fmt.Sprintf("%d %s %s", fd.Number(), fd.Name(), fd.Kind()))
	}
	require.Equal(t, []string{"1 run int64", "2 kind uint32", "3 firing int64", "4 iter int64", "5 reg int64",
		"6 f bytes", "7 i bytes", "8 chunk int64", "9 total int64"}, got)
}

// The server's decoder gives a Frame whose payload shares the received
// bytes, and the sender's frame shares the message's payload: no copies
// beyond marshalling's and the receiver's one.
func TestFramePayloadShared(t *testing.T) {
	m := &runtime.Message{Run: 1, Kind: runtime.MsgData, F: []float32{1, 2, 3}, I: []int32{4}}
	f := encodeFrame(m)
	m.F[0] = 7
	require.Equal(t, encodeWordsPortable(m.F), f.F, "on this (little-endian) host the frame is the message's memory")
	b, err := proto.Marshal(f)
	require.NoError(t, err)
	for skew := range 4 { // wherever the transport's buffer lies
		in := append(make([]byte, skew), b...)[skew:]
		buf := alignedCopy(mem.BufferSlice{mem.SliceBuffer(in)})
		var got wirepb.Frame
		require.NoError(t, unmarshalFrame(buf, &got))
		require.True(t, proto.Equal(f, &got))
		msg, err := decodeFrame(0, &got)
		require.NoError(t, err)
		require.Equal(t, []float32{7, 2, 3}, msg.F)
		clear(buf)
		require.Equal(t, []float32{0, 0, 0}, msg.F, "the message shares the received copy")
	}
	// Split anywhere over the transport's buffers, a frame still decodes.
	for cut := range len(b) {
		var got wirepb.Frame
		require.NoError(t, unmarshalFrame(alignedCopy(mem.BufferSlice{mem.SliceBuffer(b[:cut]), mem.SliceBuffer(b[cut:])}), &got))
		require.True(t, proto.Equal(f, &got), "cut at %d", cut)
	}
}
