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

// colPool recycles scratch buffers (*[]float32) across calls: column
// matrices of convolutions, score matrices of attention.
var colPool sync.Pool

// getCol returns a scratch buffer of n floats with undefined contents; give
// it back with colPool.Put.
func getCol(n int) *[]float32 {
	if b, ok := colPool.Get().(*[]float32); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]float32, n)
	return &b
}

// eachItem calls body(q, n, col) for every item n of a batch (an image, a
// sequence's attention head). When the items can keep the workers evenly
// busy they run in parallel, each with a serial q; otherwise they run one
// after another and q is p, so that the GEMMs inside body parallelize
// instead. col is scratch of colLen floats private to the calling
// goroutine.
func eachItem(p *Pool, items, colLen int, body func(q *Pool, n int, col []float32)) {
	if w := p.Workers(); w > 1 && (items >= 4*w || items%w == 0) {
		p.For(items, 1, func(lo, hi int) {
			buf := getCol(colLen)
			defer colPool.Put(buf)
			for n := lo; n < hi; n++ {
				body(nil, n, *buf)
			}
		})
		return
	}
	buf := getCol(colLen)
	defer colPool.Put(buf)
	for n := range items {
		body(p, n, *buf)
	}
}
