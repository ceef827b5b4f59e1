package remote

import (
	"context"
	"testing"
	"time"

	"github.com/flowkit/flowkit/runtime"
)

// pair returns a coordinator and a worker in this process, over loopback.
func pair(b *testing.B) (coord, worker *Group) {
	b.Helper()
	master, token := freeAddr(b), "t"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var err error
		worker, err = Join(ctx, Options{Rank: 1, World: 2, Master: master, Token: token})
		done <- err
	}()
	coord, err := Coordinate(ctx, Options{World: 2, Master: master, Token: token})
	if err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		coord.Close()
		worker.Close()
	})
	return coord, worker
}

func benchmarkSend(b *testing.B, floats int) {
	coord, worker := pair(b)
	m := &runtime.Message{Kind: runtime.MsgData, F: make([]float32, floats)}
	inbox := coord.Link().Inbox(0)
	b.SetBytes(int64(4 * floats))
	for b.Loop() {
		if err := worker.Link().Send(0, m); err != nil {
			b.Fatal(err)
		}
		if _, ok := <-inbox; !ok {
			b.Fatal(coord.Err())
		}
	}
}

func BenchmarkSend_4KiB(b *testing.B)   { benchmarkSend(b, 1<<10) }
func BenchmarkSend_16MiB(b *testing.B)  { benchmarkSend(b, 4<<20) }
func BenchmarkSend_100MiB(b *testing.B) { benchmarkSend(b, 25<<20) }
