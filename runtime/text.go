package runtime

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
)

// TextFeeder feeds a byte-level language model windows of a text in
// shuffled epochs: iteration i takes windows [i·batch, (i+1)·batch) of its
// epoch's order (data.EpochOrder over the text's windows), each window seq
// bytes and, as labels, the bytes that follow them. Epochs drop the last
// windows that do not fill a batch. A feeder for a masked language model
// (NewMaskedTextFeeder) feeds each window masked as BERT masks its inputs
// instead (see maskWindow), and as labels the original bytes where masked.
type TextFeeder struct {
	text       *data.Text
	seq, batch int
	steps      int
	seed       uint64
	masked     bool

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

// NewMaskedTextFeeder returns a feeder of windows of seq bytes of text,
// batch a step, masked afresh at every step (RoBERTa's dynamic masking),
// for a masked language model.
func NewMaskedTextFeeder(text *data.Text, seq, batch int, seed uint64) (*TextFeeder, error) {
	f, err := NewTextFeeder(text, seq, batch, seed)
	if err == nil {
		f.masked = true
	}
	return f, err
}

// NewTextFeederFor returns the feeder of text for byte-level language model
// model: masked for a masked language model.
func NewTextFeederFor(model string, text *data.Text, batch int, seed uint64) (*TextFeeder, error) {
	seq, masked, err := checkText(model)
	if err != nil {
		return nil, err
	}
	if masked {
		return NewMaskedTextFeeder(text, seq, batch, seed)
	}
	return NewTextFeeder(text, seq, batch, seed)
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
		f.fill(iter, from+k, tokens[k*f.seq:(k+1)*f.seq], nil)
	}
	return nil
}

// fill writes sample k of iteration iter's batch into tokens and labels
// (either may be nil).
func (f *TextFeeder) fill(iter, k int, tokens, labels []int32) {
	w := f.window(iter, k)
	if !f.masked {
		f.text.Window(w, f.seq, tokens, labels)
		return
	}
	// The mask is drawn from the step and the window, so that the tokens
	// and the labels, fed apart, agree.
	maskWindow(f.text.Bytes[w*f.seq:(w+1)*f.seq], f.seed^uint64(iter)*0x9e3779b97f4a7c15, uint64(w), tokens, labels)
}

// Feed implements Feeder: the labels, each position's next byte (for a
// masked language model, the original bytes where masked).
func (f *TextFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	if images != nil {
		return fmt.Errorf("runtime: a text feeds token ids, not float inputs")
	}
	if len(labels) != n*f.seq {
		return fmt.Errorf("runtime: %d label slots for %d sequences of %d", len(labels), n, f.seq)
	}
	for k := range n {
		f.fill(iter, from+k, nil, labels[k*f.seq:(k+1)*f.seq])
	}
	return nil
}

// MaskToken is the input byte of a masked position: NUL, which text files
// do not hold.
const MaskToken = 0

// maskWindow draws BERT's masking of a window b (Devlin et al., 2019),
// from the keys: each position is chosen with probability 15% (at least
// one is); a chosen position's input becomes MaskToken with probability
// 80%, a random byte with 10%, and stays itself with 10%. tokens gets the
// inputs and labels the original bytes where chosen, graph.IgnoreLabel
// elsewhere; either may be nil.
func maskWindow(b []byte, key1, key2 uint64, tokens, labels []int32) {
	rng := rand.New(rand.NewPCG(key1, key2))
	chosen := 0
	for i, c := range b {
		in, label := int32(c), int32(graph.IgnoreLabel)
		if u := rng.Float64(); u < maskRate {
			label = int32(c)
			chosen++
			switch u /= maskRate; {
			case u < 0.8:
				in = MaskToken
			case u < 0.9:
				in = int32(rng.IntN(TextVocab))
			}
		}
		if tokens != nil {
			tokens[i] = in
		}
		if labels != nil {
			labels[i] = label
		}
	}
	if chosen == 0 && len(b) > 0 { // every window is scored
		i := rng.IntN(len(b))
		if tokens != nil {
			tokens[i] = MaskToken
		}
		if labels != nil {
			labels[i] = int32(b[i])
		}
	}
}

// maskRate is the share of a window's positions a masked language model
// predicts: BERT's 15%.
const maskRate = 0.15

// TextVocab is the vocabulary of a byte-level language model.
const TextVocab = 256

// checkText refuses a model that is not a byte-level language model,
// causal or masked (masked says which).
func checkText(model string) (seq int, masked bool, err error) {
	if err := zoo.Check(model); err != nil {
		return 0, false, err
	}
	masked = zoo.IsMaskedLanguageModel(model)
	if !zoo.IsLanguageModel(model) && !masked {
		return 0, false, fmt.Errorf("runtime: model %s is not a language model: a text feeds token ids", model)
	}
	if v, _ := zoo.Classes(model); v != TextVocab {
		return 0, false, fmt.Errorf("runtime: model %s has a vocabulary of %d; a text is fed byte by byte: give it vocab=%d", model, v, TextVocab)
	}
	in, err := zoo.InputShape(model)
	if err != nil {
		return 0, false, err
	}
	return in[0], masked, nil
}

// TrainTextOn trains language model p.Model through x on train for
// loop's steps (MaxSteps > 0: at most that many, else Epochs passes),
// then evaluates the weights on evalWindows windows of test
// (EvaluateText). TrainResult.TestLoss is the test loss in nats a byte (a
// masked byte, for a masked language model), TestBits in bits.
func TrainTextOn(ctx context.Context, x PlanExecutor, p *plans.Plan, loop Loop, train, test *data.Text, evalWindows int) (*TrainResult, error) {
	feed, err := NewTextFeederFor(p.Model, train, p.Batch, p.Seed)
	if err != nil {
		return nil, err
	}
	if _, _, _, err := textWindows(p.Model, test, evalWindows); err != nil { // before training, not after
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

// textWindows checks that language model model can be evaluated on
// windows windows of text, and returns its window (seq), whether it is
// masked, and the windows text has.
func textWindows(model string, text *data.Text, windows int) (seq int, masked bool, all int, err error) {
	if seq, masked, err = checkText(model); err != nil {
		return 0, false, 0, err
	}
	if all = text.Windows(seq); windows < 1 || windows > all {
		return 0, false, 0, fmt.Errorf("runtime: evaluating on %d windows of %d bytes, %s has %d", windows, seq, text.Name, all)
	}
	return seq, masked, all, nil
}

// EvaluateText runs language model model's forward pass with the weights
// in store over windows windows of text, spread evenly over it, and
// returns the mean loss a byte in nats: of every byte's prediction from
// the bytes before it, or for a masked language model of the masked
// bytes' from the window around them (each window masked the same way at
// every evaluation). batch ≤ 0 means 32. store must hold every weight of
// the model, as for Evaluate.
func EvaluateText(model string, store *Store, dev *CPU, text *data.Text, windows, batch int) (float64, error) {
	seq, masked, all, err := textWindows(model, text, windows)
	if err != nil {
		return 0, err
	}
	if batch <= 0 {
		batch = 32
	}
	execs := map[int]*evalExec{} // by batch size: the last batch may be smaller
	var sum, scored float64
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
			w := (first + k) * all / windows
			if masked {
				maskWindow(text.Bytes[w*seq:(w+1)*seq], evalMaskKey, uint64(w), tokens[k*seq:(k+1)*seq], labels[k*seq:(k+1)*seq])
			} else {
				text.Window(w, seq, tokens[k*seq:(k+1)*seq], labels[k*seq:(k+1)*seq])
			}
		}
		if err := e.ex.Run(0); err != nil {
			return 0, err
		}
		count := 0 // the bytes scored: every label but IgnoreLabel
		for _, l := range labels {
			if l != graph.IgnoreLabel {
				count++
			}
		}
		sum += float64(e.ex.Buffer(e.m.Loss).F[0]) * float64(count) // the loss is the mean over them
		scored += float64(count)
	}
	return sum / scored, nil
}

// evalMaskKey keys the masks of the windows EvaluateText scores a masked
// language model on.
const evalMaskKey = 0x6576616c // "eval"
