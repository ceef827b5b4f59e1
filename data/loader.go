package data

import (
	"fmt"
	"math/rand/v2"
)

// The mean and standard deviation of MNIST's training pixels scaled to [0, 1]; Loader maps a pixel
// v to (v/255 − MNISTMean) / MNISTStd.
const (
	MNISTMean = 0.1307
	MNISTStd  = 0.3081
)

// Loader hands out a Dataset in batches of normalized images, visiting every image once per
// epoch. With shuffling, the order of epoch e is a permutation drawn from a PCG seeded with
// (seed, e), so it depends on nothing else: a run resumed at epoch e sees the same batches.
// Next does not allocate.
type Loader struct {
	// DropLast skips the last batch of an epoch when it is partial, as training wants; evaluation
	// leaves it false to see every image.
	DropLast bool

	ds      *Dataset
	batch   int
	shuffle bool
	seed    uint64
	epoch   int
	pos     int     // next position in perm
	perm    []int32 // this epoch's order of images
	pcg     rand.PCG
	rng     *rand.Rand
	norm    [256]float32 // normalized value of each pixel byte
}

// NewLoader returns a Loader over ds in batches of batch images, positioned at the start of epoch
// 0. It panics if batch is not positive.
func NewLoader(ds *Dataset, batch int, shuffle bool, seed uint64) *Loader {
	if batch <= 0 {
		panic(fmt.Sprintf("data: NewLoader: batch %d, want > 0", batch))
	}
	l := &Loader{ds: ds, batch: batch, shuffle: shuffle, seed: seed, perm: make([]int32, ds.N)}
	l.rng = rand.New(&l.pcg)
	l.norm = NormTable()
	l.Reset(0)
	return l
}

// Reset positions the loader at the start of epoch.
func (l *Loader) Reset(epoch int) {
	l.epoch, l.pos = epoch, 0
	for i := range l.perm {
		l.perm[i] = int32(i)
	}
	if l.shuffle {
		l.pcg.Seed(l.seed, uint64(epoch))
		l.rng.Shuffle(len(l.perm), func(i, j int) { l.perm[i], l.perm[j] = l.perm[j], l.perm[i] })
	}
}

// EpochOrder returns the order in which a shuffling Loader with this seed
// visits n samples in epoch: for other consumers of the same batches (the
// runtime's plan feeder).
func EpochOrder(n int, seed uint64, epoch int) []int32 {
	l := &Loader{ds: &Dataset{N: n}, shuffle: true, seed: seed, perm: make([]int32, n)}
	l.rng = rand.New(&l.pcg)
	l.Reset(epoch)
	return l.perm
}

// NormTable maps each pixel byte to its normalized value, as Loader does.
func NormTable() (t [256]float32) {
	for v := range t {
		t[v] = float32((float64(v)/255 - MNISTMean) / MNISTStd)
	}
	return t
}

// Epoch returns the epoch set by the last Reset.
func (l *Loader) Epoch() int { return l.epoch }

// Skip passes over the epoch's next steps batches without filling
// anything, as that many calls of Next would.
func (l *Loader) Skip(steps int) { l.pos = min(len(l.perm), l.pos+max(steps, 0)*l.batch) }

// Steps returns the number of batches per epoch.
func (l *Loader) Steps() int {
	if l.DropLast {
		return l.ds.N / l.batch
	}
	return (l.ds.N + l.batch - 1) / l.batch
}

// Next fills x with the next batch of n images as NCHW [n, 1, Rows, Cols] and y with their labels,
// and reports false, filling nothing, at the end of the epoch. n is the batch size except perhaps
// for the last batch. It panics if x or y is too short for a full batch.
func (l *Loader) Next(x []float32, y []int32) (n int, ok bool) {
	size := l.ds.Rows * l.ds.Cols
	if len(x) < l.batch*size || len(y) < l.batch {
		panic(fmt.Sprintf("data: Loader.Next: got %d pixels and %d labels, want at least %d and %d",
			len(x), len(y), l.batch*size, l.batch))
	}
	n = min(l.batch, len(l.perm)-l.pos)
	if n == 0 || (l.DropLast && n < l.batch) {
		return 0, false
	}
	for k, i := range l.perm[l.pos : l.pos+n] {
		dst := x[k*size : (k+1)*size]
		for p, v := range l.ds.Images[int(i)*size : (int(i)+1)*size] {
			dst[p] = l.norm[v]
		}
		y[k] = int32(l.ds.Labels[i])
	}
	l.pos += n
	return n, true
}
