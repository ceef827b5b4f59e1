package cudafake_test

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/internal/cudafake"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// TestStreamModes runs TestStreamsOrder against the fake driver in each of
// its stream modes, in child processes.
func TestStreamModes(t *testing.T) {
	for _, mode := range []string{"sync", "async", "async-oldest"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("FLOWKIT_FAKE_CUDA_STREAMS", mode)
			cudafake.RunTests(t, "TestStreamsOrder$", 1)
		})
	}
}

// TestStreamsOrder: work ordered by an event comes out right in every
// mode, and the async modes (streams run their work only when the host
// waits for it) break what a GPU may break and the sync mode hides:
// page-locked memory overwritten before the copy that reads it ran, and,
// running the newest work first (async), a consumer without a wait on its
// producer's stream, in a stream or in a captured graph. Pageable memory
// is staged when the copy is enqueued, as CUDA does.
func TestStreamsOrder(t *testing.T) {
	mode := os.Getenv("FLOWKIT_FAKE_CUDA_STREAMS")
	if os.Getenv("FLOWKIT_FAKE_CUDA") == "" {
		t.Skip("runs against the fake driver: see TestStreamModes")
	}
	// What each mode shows: work runs only when the host waits (both async
	// modes), and the newest work first (async).
	lazy, newest := mode == "async" || mode == "async-oldest", mode == "async"
	require.NoError(t, cu.Init())
	ctx, err := cu.Open(0)
	require.NoError(t, err)
	stream := func() *cu.Stream {
		s, err := ctx.NewStream()
		require.NoError(t, err)
		t.Cleanup(func() { s.Destroy() })
		return s
	}
	a, b := stream(), stream()
	const n = 64
	buf := func() cu.DevicePtr {
		p, err := ctx.Malloc(4 * n)
		require.NoError(t, err)
		return p
	}
	x, y := buf(), buf()
	read := func(p cu.DevicePtr) uint32 { // through pageable memory: the copy completes before it returns
		v := make([]uint32, n)
		require.NoError(t, a.CopyDtoH(unsafe.Pointer(&v[0]), p, 4*n))
		for _, e := range v[1:] {
			require.Equal(t, v[0], e, "a copy or memset half done")
		}
		return v[0]
	}
	require.NoError(t, a.Memset32(x, 1, n))
	require.NoError(t, ctx.Synchronize())

	// An event orders a producer on a and a consumer on b.
	e, err := ctx.NewEvent(false)
	require.NoError(t, err)
	require.NoError(t, a.Memset32(x, 2, n))
	require.NoError(t, e.Record(a))
	require.NoError(t, b.Wait(e))
	require.NoError(t, b.CopyDtoD(y, x, 4*n))
	require.NoError(t, b.Synchronize())
	require.Equal(t, uint32(2), read(y), "the consumer waited for the producer")

	// Without the wait the consumer may run first.
	require.NoError(t, a.Memset32(x, 3, n))
	require.NoError(t, b.CopyDtoD(y, x, 4*n))
	require.NoError(t, ctx.Synchronize())
	if newest {
		require.Equal(t, uint32(2), read(y), "the consumer ran before the producer it did not wait for")
	} else {
		require.Equal(t, uint32(3), read(y))
	}

	// Page-locked memory is read when the copy runs; pageable memory when
	// the copy is enqueued.
	h, err := ctx.MallocHost(4 * n)
	require.NoError(t, err)
	defer ctx.FreeHost(h)
	pinned := unsafe.Slice((*uint32)(h.Ptr), n)
	for i := range pinned {
		pinned[i] = 4
	}
	require.NoError(t, a.CopyHtoD(x, h.Ptr, units.Bytes(4*n)))
	for i := range pinned {
		pinned[i] = 5 // too early: the copy may not have run
	}
	require.NoError(t, a.Synchronize())
	if lazy {
		require.Equal(t, uint32(5), read(x), "the copy read the page-locked buffer when it ran")
	} else {
		require.Equal(t, uint32(4), read(x))
	}
	pageable := make([]uint32, n)
	for i := range pageable {
		pageable[i] = 6
	}
	require.NoError(t, a.CopyHtoD(x, unsafe.Pointer(&pageable[0]), units.Bytes(4*n)))
	pageable[0], pageable[n-1] = 7, 7
	require.NoError(t, a.Synchronize())
	require.Equal(t, uint32(6), read(x), "a pageable source is staged when the copy is enqueued")

	// In a captured graph, only the captured dependencies order the ops of
	// two streams: b forks from a before a's memset and copies without
	// waiting for it.
	require.NoError(t, a.Memset32(x, 9, n))
	require.NoError(t, a.Synchronize())
	require.NoError(t, a.BeginCapture())
	fork, err := ctx.NewEvent(false)
	require.NoError(t, err)
	join, err := ctx.NewEvent(false)
	require.NoError(t, err)
	require.NoError(t, fork.Record(a))
	require.NoError(t, b.Wait(fork))
	require.NoError(t, a.Memset32(x, 10, n))
	require.NoError(t, b.CopyDtoD(y, x, 4*n)) // lacks a wait for the memset
	require.NoError(t, join.Record(b))
	require.NoError(t, a.Wait(join))
	require.NoError(t, a.Memset32(x, 11, n)) // after the join: after the copy
	g, err := a.EndCapture()
	require.NoError(t, err)
	exec, err := g.Instantiate()
	require.NoError(t, err)
	require.NoError(t, exec.Launch(a))
	require.NoError(t, a.Synchronize())
	if newest {
		require.Equal(t, uint32(9), read(y), "the graph's copy ran before the memset it did not depend on")
	} else {
		require.Equal(t, uint32(10), read(y))
	}
	require.Equal(t, uint32(11), read(x), "the join orders the last memset after the copy")
	require.NoError(t, exec.Destroy())
	require.NoError(t, g.Destroy())

	// Query and Synchronize of an event run the work before its record.
	require.NoError(t, b.Memset32(y, 8, n))
	require.NoError(t, e.Record(b))
	done, err := e.Query()
	require.NoError(t, err)
	require.True(t, done, "a query waits for queued work in the fake")
	require.Equal(t, uint32(8), read(y))
}
