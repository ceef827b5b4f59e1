package runtime

import (
	"fmt"
	"math/rand/v2"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
)

// SyntheticFeeder feeds random samples drawn from a fixed pool, so that
// feeding costs a copy, and sample g of iteration i is the same however the
// batch is split over devices.
type SyntheticFeeder struct {
	batch   int
	sample  int // floats per image
	images  []float32
	labels  []int32
	classes int
}

// NewSyntheticFeeder returns a feeder of the plan's input shapes with a
// pool of poolSize samples generated from seed.
func NewSyntheticFeeder(images graph.Spec, classes, poolSize int, seed uint64) *SyntheticFeeder {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &SyntheticFeeder{batch: images.Shape[0], sample: images.Shape.NumElements() / images.Shape[0], classes: classes}
	s.images = make([]float32, poolSize*s.sample)
	for i := range s.images {
		s.images[i] = float32(rng.NormFloat64())
	}
	s.labels = make([]int32, poolSize)
	for i := range s.labels {
		s.labels[i] = int32(rng.IntN(classes))
	}
	return s
}

// Feed implements Feeder.
func (s *SyntheticFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	pool := len(s.labels)
	for k := range n {
		g := (iter*s.batch + from + k) % pool
		if images != nil {
			copy(images[k*s.sample:(k+1)*s.sample], s.images[g*s.sample:(g+1)*s.sample])
		}
		if labels != nil {
			labels[k] = s.labels[g]
		}
	}
	return nil
}

// MNISTFeeder feeds a data set in shuffled epochs: iteration i takes
// samples [i·batch, (i+1)·batch) of the order of its epoch, the order a
// data.Loader with the same seed visits.
type MNISTFeeder struct {
	ds      *data.Dataset
	batch   int
	perm    [][]int32 // by epoch, filled on demand
	steps   int
	seed    uint64
	norm    [256]float32
	permsMu chan struct{}
}

// NewMNISTFeeder returns a feeder of ds in global batches of batch samples.
func NewMNISTFeeder(ds *data.Dataset, batch int, seed uint64) (*MNISTFeeder, error) {
	if batch < 1 || batch > ds.N {
		return nil, fmt.Errorf("runtime: batch must be between 1 and the %d samples, got %d", ds.N, batch)
	}
	f := &MNISTFeeder{ds: ds, batch: batch, steps: ds.N / batch, seed: seed, permsMu: make(chan struct{}, 1)}
	for v := range f.norm {
		f.norm[v] = (float32(v)/255 - data.MNISTMean) / data.MNISTStd
	}
	return f, nil
}

// Steps is the number of full batches per epoch.
func (f *MNISTFeeder) Steps() int { return f.steps }

// order returns the shuffled order of an epoch.
func (f *MNISTFeeder) order(epoch int) []int32 {
	f.permsMu <- struct{}{}
	defer func() { <-f.permsMu }()
	for len(f.perm) <= epoch {
		e := len(f.perm)
		rng := rand.New(rand.NewPCG(f.seed, uint64(e)))
		p := make([]int32, f.ds.N)
		for i := range p {
			p[i] = int32(i)
		}
		rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		f.perm = append(f.perm, p)
	}
	return f.perm[epoch]
}

// Feed implements Feeder.
func (f *MNISTFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	epoch, step := iter/f.steps, iter%f.steps
	order := f.order(epoch)
	size := f.ds.Rows * f.ds.Cols
	for k := range n {
		idx := int(order[step*f.batch+from+k])
		if images != nil {
			dst := images[k*size : (k+1)*size]
			for j, v := range f.ds.Image(idx) {
				dst[j] = f.norm[v]
			}
		}
		if labels != nil {
			labels[k] = int32(f.ds.Labels[idx])
		}
	}
	return nil
}
