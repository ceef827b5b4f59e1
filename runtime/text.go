package runtime

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
)

// TextFeeder feeds a byte-level language model windows of a text in
// shuffled epochs: iteration i takes windows [i·batch, (i+1)·batch) of its
// epoch's order (data.EpochOrder over the text's windows), each window seq
// bytes and, as labels, the bytes that follow them. Epochs drop the last
// windows that do not fill a batch.
type TextFeeder struct {
	text       *data.Text
	seq, batch int
	steps      int
	seed       uint64

	mu    sync.Mutex
	perms map[int][]int32 // by epoch
}

var _ TokenFeeder = (*TextFeeder)(nil)

// NewTextFeeder returns a feeder of windows of seq bytes of text, batch a
// step.
func NewTextFeeder(text *data.Text, seq, batch int, seed uint64) (*TextFeeder, error) {
	w := text.Windows(seq)
	if batch < 1 || w < batch {
		return nil, fmt.Errorf("runtime: %s has %d windows of %d bytes, fewer than a batch of %d", text.Name, w, seq, batch)
	}
	return &TextFeeder{text: text, seq: seq, batch: batch, steps: w / batch, seed: seed, perms: map[int][]int32{}}, nil
}

// Steps is the number of steps of an epoch.
func (f *TextFeeder) Steps() int { return f.steps }

// window returns the window of sample k of iteration iter's batch.
func (f *TextFeeder) window(iter, k int) int {
	epoch := iter / f.steps
	f.mu.Lock()
	perm, ok := f.perms[epoch]
	if !ok {
		perm = data.EpochOrder(f.text.Windows(f.seq), f.seed, epoch)
		f.perms = map[int][]int32{epoch: perm} // one epoch at a time: a window's order is 4 bytes
	}
	f.mu.Unlock()
	return int(perm[iter%f.steps*f.batch+k])
}

// FeedTokens implements TokenFeeder.
func (f *TextFeeder) FeedTokens(iter, from, n int, tokens []int32) error {
	if len(tokens) != n*f.seq {
		return fmt.Errorf("runtime: %d token slots for %d sequences of %d", len(tokens), n, f.seq)
	}
	for k := range n {
		f.text.Window(f.window(iter, from+k), f.seq, tokens[k*f.seq:(k+1)*f.seq], nil)
	}
	return nil
}

// Feed implements Feeder: the labels, each position's next byte.
func (f *TextFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	if images != nil {
		return fmt.Errorf("runtime: a text feeds token ids, not float inputs")
	}
	if len(labels) != n*f.seq {
		return fmt.Errorf("runtime: %d label slots for %d sequences of %d", len(labels), n, f.seq)
	}
	for k := range n {
		f.text.Window(f.window(iter, from+k), f.seq, nil, labels[k*f.seq:(k+1)*f.seq])
	}
	return nil
}

// TextVocab is the vocabulary of a byte-level language model.
const TextVocab = 256

// checkText refuses a model that is not a byte-level language model.
func checkText(model string) (seq int, err error) {
	if !zoo.IsLanguageModel(model) {
		return 0, fmt.Errorf("runtime: model %s is not a language model: a text feeds token ids", model)
	}
	if v, _ := zoo.Classes(model); v != TextVocab {
		return 0, fmt.Errorf("runtime: model %s has a vocabulary of %d; a text is fed byte by byte: give it vocab=%d", model, v, TextVocab)
	}
	in, err := zoo.InputShape(model)
	if err != nil {
		return 0, err
	}
	return in[0], nil
}

// TrainTextOn trains language model p.Model through x on train for
// loop's steps (MaxSteps > 0: at most that many, else Epochs passes),
// then evaluates the weights on evalWindows windows of test
// (EvaluateText). TrainResult.TestLoss is the test loss in nats a byte,
// TestBits in bits.
func TrainTextOn(ctx context.Context, x PlanExecutor, p *plans.Plan, loop Loop, train, test *data.Text, evalWindows int) (*TrainResult, error) {
	seq, err := checkText(p.Model)
	if err != nil {
		return nil, err
	}
	feed, err := NewTextFeeder(train, seq, p.Batch, p.Seed)
	if err != nil {
		return nil, err
	}
	res, store, err := trainOn(ctx, x, p, loop, feed)
	if err != nil {
		return nil, err
	}
	if res.TestLoss, err = EvaluateText(p.Model, store, NewCPU(0), test, evalWindows, 0); err != nil {
		return nil, err
	}
	res.TestBits = res.TestLoss / math.Ln2
	return res, nil
}

// EvaluateText runs language model model's forward pass with the weights
// in store over windows windows of text, spread evenly over it, and
// returns the mean loss a byte in nats. batch ≤ 0 means 32. store must
// hold every weight of the model, as for Evaluate.
func EvaluateText(model string, store *Store, dev *CPU, text *data.Text, windows, batch int) (float64, error) {
	seq, err := checkText(model)
	if err != nil {
		return 0, err
	}
	all := text.Windows(seq)
	if windows < 1 || windows > all {
		return 0, fmt.Errorf("runtime: evaluating on %d windows of %d bytes, %s has %d", windows, seq, text.Name, all)
	}
	if batch <= 0 {
		batch = 32
	}
	execs := map[int]*evalExec{} // by batch size: the last batch may be smaller
	var sum float64
	for first := 0; first < windows; first += batch {
		n := min(batch, windows-first)
		e, ok := execs[n]
		if !ok {
			if e, err = newEvalExec(model, n, store, dev); err != nil {
				return 0, err
			}
			execs[n] = e
		}
		tokens, labels := e.ex.Buffer(e.m.Images).I, e.ex.Buffer(e.m.Labels).I
		for k := range n {
			text.Window((first+k)*all/windows, seq, tokens[k*seq:(k+1)*seq], labels[k*seq:(k+1)*seq])
		}
		if err := e.ex.Run(0); err != nil {
			return 0, err
		}
		sum += float64(e.ex.Buffer(e.m.Loss).F[0]) * float64(n)
	}
	return sum / float64(windows), nil
}
