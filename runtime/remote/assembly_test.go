package remote

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// withFrameValues sets frameValues for the test.
func withFrameValues(t testing.TB, n int) {
	old := frameValues
	frameValues = n
	t.Cleanup(func() { frameValues = old })
}

// wireFrames returns the frames that carry m as the server decodes them.
func wireFrames(t require.TestingT, m *runtime.Message) []*wirepb.Frame {
	var fs []*wirepb.Frame
	require.NoError(t, encodeFrames(m, func(f *wirepb.Frame) error {
		b, err := proto.Marshal(f)
		if err != nil {
			return err
		}
		var got wirepb.Frame
		if err := unmarshalFrame(alignedCopy(mem.BufferSlice{mem.SliceBuffer(b)}), &got); err != nil {
			return err
		}
		fs = append(fs, &got)
		return nil
	}))
	return fs
}

// Messages of any size cross in frames of at most frameValues values and
// come out whole, in order, between messages in one frame.
func TestAssemblyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		per := rapid.IntRange(1, 8).Draw(t, "frameValues")
		old := frameValues
		frameValues = per
		defer func() { frameValues = old }()
		var a assembly
		for i := range rapid.IntRange(1, 6).Draw(t, "messages") {
			m := &runtime.Message{Run: i, From: 2, Kind: runtime.MsgPart, Firing: 3 * i, Iter: i, Reg: -1, Chunk: i % 2,
				F: rapid.SliceOf(rapid.Float32()).Draw(t, "f")}
			if len(m.F) == 0 {
				m.F = nil
				m.I = rapid.SliceOf(rapid.Int32()).Draw(t, "i")
				if len(m.I) == 0 {
					m.I = nil
				}
			}
			fs := wireFrames(t, m)
			want := max(1, (len(m.F)+per-1)/per)
			if len(m.I) > 0 {
				want = 1
			}
			require.Len(t, fs, want)
			for k, f := range fs {
				got, err := a.add(2, f)
				require.NoError(t, err)
				if k < len(fs)-1 {
					require.Nil(t, got, "frame %d of %d", k, len(fs))
					continue
				}
				require.Equal(t, m, got)
			}
			require.NoError(t, a.pending())
		}
	})
}

// Frames that do not make a message are refused, naming the rank.
func TestAssemblyMalformed(t *testing.T) {
	withFrameValues(t, 2)
	m := &runtime.Message{Run: 1, Kind: runtime.MsgData, Reg: 4, F: []float32{1, 2, 3, 4, 5}}
	frames := func() []*wirepb.Frame { return wireFrames(t, m) }
	for _, tc := range []struct {
		name  string
		mess  func(fs []*wirepb.Frame) []*wirepb.Frame
		want  string
		atEnd bool // the error comes from pending
	}{
		{"total too large", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[0].Total = maxTotal + 1; return fs }, "total 2147483648 out of range", false},
		{"negative total", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[0].Total = -1; return fs }, "total -1 out of range", false},
		{"first piece whole", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[0].Total = 2; return fs }, "first piece of 2 values of a message of 2", false},
		{"int32 payload", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[0].I = []byte{1, 0, 0, 0}; return fs }, "int32 payload", false},
		{"total changes", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[1].Total = 6; return fs }, "total 6 within a message of 5 values", false},
		{"another message", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[1].Reg = 5; return fs }, "a piece of another message", false},
		{"too many values", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[2].F = make([]byte, 8); return fs }, "piece of 2 values at value 4 of a message of 5", false},
		{"empty piece", func(fs []*wirepb.Frame) []*wirepb.Frame { fs[1].F = nil; return fs }, "piece of 0 values at value 2", false},
		{"stream ends within", func(fs []*wirepb.Frame) []*wirepb.Frame { return fs[:2] }, "stream from rank 3 ended after 4 of a message's 5 values", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a assembly
			var err error
			for _, f := range tc.mess(frames()) {
				if _, err = a.add(3, f); err != nil {
					break
				}
			}
			if tc.atEnd {
				require.NoError(t, err)
				err = a.pending()
			}
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "rank 3")
		})
	}
}

// Over the real transport, messages of several frames sent at once to one
// rank from several goroutines arrive whole: a message's frames are not
// interleaved with another's.
func TestLargeMessagesConcurrently(t *testing.T) {
	withFrameValues(t, 1000)
	gs := groups(t, 2)
	const senders, each = 4, 5
	inbox := gs[0].Link().Inbox(0)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for k := range each {
				f := make([]float32, 3500+k)
				for i := range f {
					f[i] = float32(s*1e6 + k*1e4 + i)
				}
				if err := gs[1].Link().Send(0, &runtime.Message{Kind: runtime.MsgData, Firing: s, Iter: k, F: f}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	seen := map[string]bool{}
	for range senders * each {
		select {
		case m := <-inbox:
			require.Len(t, m.F, 3500+m.Iter)
			for i, v := range m.F {
				if v != float32(m.Firing*1e6+m.Iter*1e4+i) {
					t.Fatalf("message %d/%d: value %d is %g", m.Firing, m.Iter, i, v)
				}
			}
			seen[fmt.Sprint(m.Firing, m.Iter)] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d messages arrived", len(seen), senders*each)
		}
	}
	wg.Wait()
	require.Len(t, seen, senders*each)
}
