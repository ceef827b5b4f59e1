package runtime

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	"github.com/flowkit/flowkit/plans"
)

// goText is the text of Go's go/… packages, held-out files apart.
func goText(t *testing.T) (train, test *data.Text) {
	t.Helper()
	src, err := data.LocateText("")
	require.NoError(t, err)
	train, test, err = data.LoadText(filepath.Join(src, "go"), ".go", 1<<20)
	require.NoError(t, err)
	return train, test
}

// A text feeder gives each sample a window and the bytes that follow it,
// visits every window once an epoch, and gives a sample the same window
// however the batch is split.
func TestTextFeeder(t *testing.T) {
	text := &data.Text{Name: "t", Bytes: []byte("0123456789abcdefghijklmnopqrstuvwxyz!")} // 37 bytes
	const seq, batch = 4, 3
	f, err := NewTextFeeder(text, seq, batch, 7)
	require.NoError(t, err)
	require.Equal(t, 3, f.Steps(), "9 windows of 4 (and their next byte), 3 batches of 3")
	for epoch := range 2 {
		var starts []int
		for it := epoch * f.Steps(); it < (epoch+1)*f.Steps(); it++ {
			tokens, labels := make([]int32, batch*seq), make([]int32, batch*seq)
			require.NoError(t, f.FeedTokens(it, 0, batch, tokens))
			require.NoError(t, f.Feed(it, 0, batch, nil, labels))
			for k := range batch {
				start := slices.Index(text.Bytes, byte(tokens[k*seq]))
				require.Zero(t, start%seq, "windows start at multiples of seq")
				for i := range seq {
					require.Equal(t, int32(text.Bytes[start+i]), tokens[k*seq+i])
					require.Equal(t, int32(text.Bytes[start+i+1]), labels[k*seq+i])
				}
				starts = append(starts, start)
			}
			// Split in two feeds: the same samples.
			half := make([]int32, 2*seq)
			require.NoError(t, f.FeedTokens(it, 1, 2, half))
			require.Equal(t, tokens[seq:], half)
		}
		slices.Sort(starts)
		require.Equal(t, []int{0, 4, 8, 12, 16, 20, 24, 28}, starts[:8], "epoch %d: 9 windows, each once", epoch)
	}
	require.ErrorContains(t, f.Feed(0, 0, 1, make([]float32, seq), make([]int32, seq)), "not float inputs")
	require.ErrorContains(t, f.FeedTokens(0, 0, 2, make([]int32, seq)), "4 token slots for 2 sequences")
	_, err = NewTextFeeder(text, seq, 10, 7)
	require.ErrorContains(t, err, "9 windows of 4 bytes, fewer than a batch of 10")
}

// A byte-level GPT trained a hundred steps on Go source predicts held-out
// Go files better than their byte frequencies do; data parallelism trains
// it as one device does (over a few steps: Adam magnifies the differences
// of summation order over many).
func TestTrainTextOnGoSource(t *testing.T) {
	train, test := goText(t)
	runOn := func(strategy string, steps int) *TrainResult {
		return trainText(t, "gpt:layers=2,hidden=64,heads=2,seq=32,vocab=256", strategy, 16, 0.01, steps, train, test)
	}
	one := runOn("single", 100)
	unigram := train.UnigramBits(test)
	require.Less(t, one.TestBits, unigram-0.2, "bits/byte after 100 steps, against byte frequencies'")
	require.InEpsilon(t, one.TestLoss/math.Ln2, one.TestBits, 1e-12)

	one, dp := runOn("single", 5), runOn("dp=2", 5)
	require.InEpsilon(t, one.FinalLoss, dp.FinalLoss, 1e-5)
	require.InEpsilon(t, one.TestBits, dp.TestBits, 1e-5)
}

// Evaluation does not depend on its batch, and refuses more windows than
// the text has and models that are not byte-level language models.
func TestEvaluateText(t *testing.T) {
	_, test := goText(t)
	const model = "gpt:layers=1,hidden=32,heads=2,seq=16,vocab=256"
	store, err := InitWeights(model, 3)
	require.NoError(t, err)
	a, err := EvaluateText(model, store, NewCPU(0), test, 40, 32)
	require.NoError(t, err)
	b, err := EvaluateText(model, store, NewCPU(0), test, 40, 7)
	require.NoError(t, err)
	require.InEpsilon(t, a, b, 1e-6)
	require.InDelta(t, 5.545, a, 0.2, "untrained: about ln 256 nats a byte")

	_, err = EvaluateText(model, store, NewCPU(0), &data.Text{Name: "tiny", Bytes: make([]byte, 40)}, 3, 0)
	require.ErrorContains(t, err, "evaluating on 3 windows of 16 bytes, tiny has 2")
	_, err = EvaluateText("gpt:layers=1,hidden=32,heads=2,seq=16", store, NewCPU(0), test, 4, 0)
	require.ErrorContains(t, err, "vocabulary of 50257")
	_, err = EvaluateText("mlp", store, NewCPU(0), test, 4, 0)
	require.ErrorContains(t, err, "not a language model")
}

// BERT's masking: about 15% of the positions are chosen (at least one a
// window), of them about 80% read MaskToken, 10% a random byte and 10%
// themselves; the labels are the original bytes where chosen and
// IgnoreLabel (the kernels' and the graph's) elsewhere; the tokens and the
// labels, drawn apart, agree; another step masks a window anew.
func TestMaskedTextFeeder(t *testing.T) {
	require.Equal(t, graph.IgnoreLabel, cpu.IgnoreLabel, "the graph's ignored label is the kernels'")
	train, _ := goText(t)
	const seq, batch = 64, 32
	f, err := NewMaskedTextFeeder(train, seq, batch, 7)
	require.NoError(t, err)
	var chosen, masked, kept, positions int
	for it := range 20 {
		tokens, labels := make([]int32, batch*seq), make([]int32, batch*seq)
		require.NoError(t, f.FeedTokens(it, 0, batch, tokens))
		require.NoError(t, f.Feed(it, 0, batch, nil, labels))
		for k := range batch {
			w := f.window(it, k)
			orig := train.Bytes[w*seq : (w+1)*seq]
			n := 0
			for i, c := range orig {
				tok, label := tokens[k*seq+i], labels[k*seq+i]
				positions++
				if label == graph.IgnoreLabel {
					require.Equal(t, int32(c), tok, "an unchosen position reads its byte")
					continue
				}
				require.Equal(t, int32(c), label, "a chosen position's label is its byte")
				n++
				switch tok {
				case MaskToken:
					masked++
				case int32(c):
					kept++
				}
			}
			require.Positive(t, n, "every window has a chosen position")
			chosen += n
		}
		// Split in two feeds: the same samples, the same masks.
		half := make([]int32, 2*seq)
		require.NoError(t, f.FeedTokens(it, 1, 2, half))
		require.Equal(t, tokens[seq:3*seq], half)
	}
	require.InDelta(t, 0.15, float64(chosen)/float64(positions), 0.01)
	require.InDelta(t, 0.8, float64(masked)/float64(chosen), 0.03)
	require.InDelta(t, 0.1, float64(kept)/float64(chosen), 0.02) // and about as many random bytes, which seldom equal the original

	a, b := make([]int32, seq), make([]int32, seq)
	first := f.window(0, 0)
	maskWindow(train.Bytes[first*seq:(first+1)*seq], 1, uint64(first), a, nil)
	maskWindow(train.Bytes[first*seq:(first+1)*seq], 2, uint64(first), b, nil)
	require.NotEqual(t, a, b, "another step masks the window anew")
}

// A byte-level BERT trained on Go source fills in masked bytes of held-out
// files better than their byte frequencies predict them (it learns slower
// than a GPT, from 15% of the bytes: 200 steps, not 100). Under data
// parallelism each replica's loss is the mean over its own masked bytes,
// and the replicas' gradients are averaged (as PyTorch's DDP and
// Megatron-LM's BERT do), where one device takes the mean over the whole
// batch's: the two differ by how the masked bytes fall between the
// replicas, by parts in ten thousand here. Tensor parallelism splits the
// vocabulary, not the bytes, and trains it as one device does.
func TestTrainMaskedTextOnGoSource(t *testing.T) {
	train, test := goText(t)
	const model = "bert:layers=2,hidden=64,heads=2,seq=64,vocab=256"
	runOn := func(strategy string, steps int) *TrainResult {
		return trainText(t, model, strategy, 32, 0.004, steps, train, test)
	}
	if !raceEnabled { // 200 steps take minutes under the race detector
		one := runOn("single", 200)
		unigram := train.UnigramBits(test)
		require.Less(t, one.TestBits, unigram-0.2, "bits a masked byte after 200 steps, against byte frequencies'")
	}

	one, dp := runOn("single", 5), runOn("dp=2", 5)
	require.InEpsilon(t, one.FinalLoss, dp.FinalLoss, 2e-3)
	require.InEpsilon(t, one.TestBits, dp.TestBits, 2e-3)
	tp := runOn("tp=2", 5)
	require.InEpsilon(t, one.FinalLoss, tp.FinalLoss, 1e-5)
	require.InEpsilon(t, one.TestBits, tp.TestBits, 1e-5)

	store, err := InitWeights(model, 3)
	require.NoError(t, err)
	untrained, err := EvaluateText(model, store, NewCPU(0), test, 40, 0)
	require.NoError(t, err)
	require.InDelta(t, 5.545, untrained, 0.2, "untrained: about ln 256 nats a masked byte")
	_, err = Sample(t.Context(), model, store, NewCPU(0), []byte("func"), 4, SampleConfig{})
	require.ErrorContains(t, err, "is a masked language model: it fills in masked bytes")
}

// trainText trains model on train under strategy, batch a step, for steps
// steps of Adam at lr (seed 1), through a plan on CPU devices, and
// evaluates it on 64 windows of test.
func trainText(t *testing.T, model, strategy string, batch int, lr float32, steps int, train, test *data.Text) *TrainResult {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 1,
		Optimizer: graph.Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Devices: cpuDevices(st.Devices())})
	require.NoError(t, err)
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	defer r.Close()
	res, err := TrainTextOn(context.Background(), r, p, Loop{Epochs: 1, MaxSteps: steps}, train, test, 64)
	require.NoError(t, err)
	return res
}
