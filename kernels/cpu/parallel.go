package cpu

import (
	"runtime"
	"sync"
)

// Pool is a budget of workers for data-parallel loops. A device of the
// runtime owns one Pool; kernels called with it use at most Workers()
// goroutines at a time. The zero value and nil both run serially.
type Pool struct {
	workers int
}

// NewPool returns a pool of the given number of workers; workers <= 0 means
// runtime.GOMAXPROCS(0).
func NewPool(workers int) *Pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Pool{workers: workers}
}

// Workers reports the pool's worker count (1 for a nil pool).
func (p *Pool) Workers() int {
	if p == nil || p.workers < 1 {
		return 1
	}
	return p.workers
}

// For calls body over [0, n) split into at most Workers() contiguous ranges
// of at least grain items each, and returns when all have finished. The
// calling goroutine runs the first range itself.
func (p *Pool) For(n, grain int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	parts := min(p.Workers(), (n+grain-1)/grain)
	if parts <= 1 {
		body(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk, extra := n/parts, n%parts
	lo := 0
	first := 0
	for i := range parts {
		size := chunk
		if i < extra {
			size++
		}
		if i == 0 {
			first = size
		} else {
			wg.Add(1)
			go func(lo, hi int) {
				defer wg.Done()
				body(lo, hi)
			}(lo, lo+size)
		}
		lo += size
	}
	body(0, first)
	wg.Wait()
}
