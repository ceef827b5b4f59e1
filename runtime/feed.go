package runtime

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
)

// SyntheticFeeder feeds random samples drawn from a fixed pool, so that
// feeding costs a copy, and sample g of iteration i is the same however the
// batch is split over devices. Inputs are standard normal (as torch.randn
// draws them), labels uniform over the classes; a model without labels
// just never asks for them. A language model's samples are token ids
// uniform over the vocabulary (classes), its labels each position's next
// token (the last position's drawn too).
type SyntheticFeeder struct {
	batch  int
	sample int // values per input sample
	images []float32
	tokens []int32 // for a language model, instead of images
	labels []int32 // per sample of the pool: one, or a language model's sample values
}

// TokenFeeder is a Feeder that also feeds a language model's token ids
// (an i32 input), n samples from sample from of iteration iter's batch.
type TokenFeeder interface {
	Feeder
	FeedTokens(iter, from, n int, tokens []int32) error
}

var (
	_ TokenFeeder = (*SyntheticFeeder)(nil)
	_ Feeder      = (*MNISTFeeder)(nil)
)

// feedInput feeds n samples from sample from of iteration iter's batch:
// token ids into ints when tokens, else inputs into images (nil when the
// task feeds labels) and labels into ints.
func feedInput(feed Feeder, tokens bool, iter, from, n int, images []float32, ints []int32) error {
	if !tokens {
		return feed.Feed(iter, from, n, images, ints)
	}
	tf, ok := feed.(TokenFeeder)
	if !ok {
		return fmt.Errorf("the plan's input is token ids; feeder %T feeds images", feed)
	}
	return tf.FeedTokens(iter, from, n, ints)
}

// syntheticPoolMax caps a synthetic feeder's pool, in floats (256 MiB): a
// pool of a thousand samples of a transformer's activations would take
// gigabytes. The pool still holds at least one global batch.
const syntheticPoolMax = 64 << 20

// NewSyntheticFeeder returns a feeder of the plan's input shapes (images is
// the global batch's input) with a pool of poolSize samples generated from
// seed, fewer if they would take more than 256 MiB.
func NewSyntheticFeeder(images graph.Spec, classes, poolSize int, seed uint64) *SyntheticFeeder {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &SyntheticFeeder{batch: images.Shape[0], sample: images.Shape.NumElements() / images.Shape[0]}
	poolSize = min(poolSize, max(s.batch, syntheticPoolMax/s.sample))
	if images.DType == graph.I32 {
		s.tokens = make([]int32, poolSize*s.sample)
		s.labels = make([]int32, poolSize*s.sample)
		for i := range s.tokens {
			s.tokens[i] = int32(rng.IntN(classes))
		}
		for i := range s.labels {
			if (i+1)%s.sample != 0 {
				s.labels[i] = s.tokens[i+1]
			} else {
				s.labels[i] = int32(rng.IntN(classes))
			}
		}
		return s
	}
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

// FeedTokens implements TokenFeeder.
func (s *SyntheticFeeder) FeedTokens(iter, from, n int, tokens []int32) error {
	if s.tokens == nil {
		return fmt.Errorf("runtime: the synthetic feeder was made for %d float values per sample, not token ids", s.sample)
	}
	pool := len(s.tokens) / s.sample
	for k := range n {
		g := (iter*s.batch + from + k) % pool
		copy(tokens[k*s.sample:(k+1)*s.sample], s.tokens[g*s.sample:(g+1)*s.sample])
	}
	return nil
}

// Feed implements Feeder.
func (s *SyntheticFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	if images != nil && s.images == nil {
		return fmt.Errorf("runtime: the synthetic feeder was made for token ids, not float inputs")
	}
	per := 1 // labels per sample
	if s.tokens != nil {
		per = s.sample
	}
	pool := len(s.labels) / per
	for k := range n {
		g := (iter*s.batch + from + k) % pool
		if images != nil {
			copy(images[k*s.sample:(k+1)*s.sample], s.images[g*s.sample:(g+1)*s.sample])
		}
		if labels != nil {
			copy(labels[k*per:(k+1)*per], s.labels[g*per:(g+1)*per])
		}
	}
	return nil
}

// MNISTFeeder feeds a data set in shuffled epochs: iteration i takes
// samples [i·batch, (i+1)·batch) of its epoch's order — the batches a
// data.Loader with the same seed gives, normalized the same way.
type MNISTFeeder struct {
	ds    *data.Dataset
	batch int
	steps int
	seed  uint64
	norm  [256]float32

	mu    sync.Mutex
	perms map[int][]int32 // by epoch
}

// NewMNISTFeeder returns a feeder of ds in global batches of batch samples.
func NewMNISTFeeder(ds *data.Dataset, batch int, seed uint64) (*MNISTFeeder, error) {
	if batch < 1 || batch > ds.N {
		return nil, fmt.Errorf("runtime: batch must be between 1 and the %d samples, got %d", ds.N, batch)
	}
	return &MNISTFeeder{ds: ds, batch: batch, steps: ds.N / batch, seed: seed, norm: data.NormTable(), perms: map[int][]int32{}}, nil
}

// Steps is the number of full batches per epoch.
func (f *MNISTFeeder) Steps() int { return f.steps }

// order returns the shuffled order of an epoch, keeping the two latest.
func (f *MNISTFeeder) order(epoch int) []int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.perms[epoch]
	if !ok {
		p = data.EpochOrder(f.ds.N, f.seed, epoch)
		f.perms[epoch] = p
		delete(f.perms, epoch-2)
	}
	return p
}

// Feed implements Feeder.
func (f *MNISTFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	size := f.ds.Rows * f.ds.Cols
	if images != nil && len(images) != n*size {
		return fmt.Errorf("runtime: MNIST feeds %d×%d images, the model's input takes %d floats a sample", f.ds.Rows, f.ds.Cols, len(images)/max(n, 1))
	}
	epoch, step := iter/f.steps, iter%f.steps
	order := f.order(epoch)
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
