package runtime

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

const sampleModel = "gpt:layers=2,hidden=32,heads=2,seq=16,vocab=256"

// The logits of position i do not depend on the tokens after it (causal
// attention), so a context shorter than the window may sit at its start
// whatever follows it.
func TestSampleContextAtWindowStart(t *testing.T) {
	for _, model := range []string{sampleModel, "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,vocab=256"} {
		w, err := InitWeights(model, 4)
		require.NoError(t, err)
		e, err := newEvalExec(model, 1, w, NewCPU(1))
		require.NoError(t, err)
		tokens := e.ex.Buffer(e.m.Images).I
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range tokens {
			tokens[i] = rng.Int32N(256)
		}
		require.NoError(t, e.ex.Run(0))
		before := append([]float32(nil), e.ex.Buffer(e.m.Logits).F...)
		const n = 5
		for i := n; i < len(tokens); i++ {
			tokens[i] = rng.Int32N(256)
		}
		require.NoError(t, e.ex.Run(0))
		after := e.ex.Buffer(e.m.Logits).F
		require.Equal(t, before[:n*TextVocab], after[:n*TextVocab], "%s: positions before the change", model)
		require.NotEqual(t, before[n*TextVocab:], after[n*TextVocab:], "%s: positions from the change on", model)
		text, err := Sample(t.Context(), model, w, NewCPU(1), []byte("x"), 20, SampleConfig{Temperature: 1, Seed: 2})
		require.NoError(t, err)
		require.Len(t, text, 20, model)
	}
}

// Sampling repeats with its seed and differs with another; greedy takes
// the most likely byte, which top-k 1 does too.
func TestSample(t *testing.T) {
	w, err := InitWeights(sampleModel, 4)
	require.NoError(t, err)
	cpu := NewCPU(1)
	prompt := []byte("package main\n\nfunc main() {") // longer than the window
	a, err := Sample(t.Context(), sampleModel, w, cpu, prompt, 40, SampleConfig{Temperature: 1, Seed: 1})
	require.NoError(t, err)
	require.Len(t, a, 40)
	var emitted []byte // as they were drawn
	b, err := Sample(t.Context(), sampleModel, w, cpu, prompt, 40, SampleConfig{Temperature: 1, Seed: 1, Emit: func(c byte) error { emitted = append(emitted, c); return nil }})
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, a, emitted)
	c, err := Sample(t.Context(), sampleModel, w, cpu, prompt, 40, SampleConfig{Temperature: 1, Seed: 2})
	require.NoError(t, err)
	require.NotEqual(t, a, c)

	greedy, err := Sample(t.Context(), sampleModel, w, cpu, prompt, 3, SampleConfig{})
	require.NoError(t, err)
	top1, err := Sample(t.Context(), sampleModel, w, cpu, prompt, 3, SampleConfig{Temperature: 1, TopK: 1, Seed: 9})
	require.NoError(t, err)
	require.Equal(t, greedy, top1)
	// The first greedy byte is the argmax of the last position's logits,
	// computed here by the evaluation graph.
	e, err := newEvalExec(sampleModel, 1, w, cpu)
	require.NoError(t, err)
	ctx := prompt[len(prompt)-16:]
	for i, v := range ctx {
		e.ex.Buffer(e.m.Images).I[i] = int32(v)
	}
	require.NoError(t, e.ex.Run(0))
	require.Equal(t, argmax(e.ex.Buffer(e.m.Logits).F[15*TextVocab:]), int(greedy[0]))

	empty, err := Sample(t.Context(), sampleModel, w, cpu, nil, 4, SampleConfig{Temperature: 0.8, Seed: 1})
	require.NoError(t, err)
	require.Len(t, empty, 4, "an empty prompt starts from a newline, not returned")

	for _, tt := range []struct {
		model string
		n     int
		cfg   SampleConfig
		want  string
	}{
		{"mlp", 1, SampleConfig{}, "not a language model"},
		{sampleModel, -1, SampleConfig{}, "sampling -1 bytes"},
		{sampleModel, 1, SampleConfig{Temperature: -1}, "temperature -1"},
		{sampleModel, 1, SampleConfig{Temperature: math.Inf(1)}, "temperature +Inf"},
		{sampleModel, 1, SampleConfig{TopK: 257}, "top-k 257"},
	} {
		_, err := Sample(t.Context(), tt.model, w, cpu, prompt, tt.n, tt.cfg)
		require.ErrorContains(t, err, tt.want)
	}
	_, err = Sample(t.Context(), sampleModel, NewStore(1), cpu, prompt, 1, SampleConfig{})
	require.ErrorContains(t, err, "have no tensor")

	// A cancelled context, or an error from Emit, stops the sampling with
	// the bytes drawn so far.
	stop, cancel := context.WithCancel(t.Context())
	drawn := 0
	stopped, err := Sample(stop, sampleModel, w, cpu, prompt, 1<<40, SampleConfig{Temperature: 1, Seed: 1, Emit: func(byte) error {
		if drawn++; drawn == 40 {
			cancel()
		}
		return nil
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, a, stopped)
	full := errors.New("disk full")
	stopped, err = Sample(t.Context(), sampleModel, w, cpu, prompt, 1<<40, SampleConfig{Temperature: 1, Seed: 1, Emit: func(byte) error { return full }})
	require.ErrorIs(t, err, full)
	require.Equal(t, a[:1], stopped)
}

// Draws follow softmax(logits/T), over the top k if k is set: the
// frequencies of 40,000 draws are within a few standard errors of the
// probabilities, computed here in float64 on their own.
func TestDrawDistribution(t *testing.T) {
	logits := make([]float32, TextVocab)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	for _, cfg := range []SampleConfig{{Temperature: 1}, {Temperature: 0.5}, {Temperature: 2, TopK: 5}} {
		want := make([]float64, len(logits))
		order := make([]int, len(logits))
		for i := range order {
			order[i] = i
		}
		// The k likeliest: by logit, descending.
		for i := range order {
			for j := i + 1; j < len(order); j++ {
				if logits[order[j]] > logits[order[i]] {
					order[i], order[j] = order[j], order[i]
				}
			}
		}
		keep := len(logits)
		if cfg.TopK > 0 {
			keep = cfg.TopK
		}
		var sum float64
		for _, i := range order[:keep] {
			want[i] = math.Exp(float64(logits[i]) / cfg.Temperature)
			sum += want[i]
		}
		for i := range want {
			want[i] /= sum
		}
		const draws = 40000
		got := make([]float64, len(logits))
		probs := make([]float64, len(logits))
		r := rand.New(rand.NewPCG(5, 6))
		for range draws {
			got[draw(logits, probs, cfg, r)] += 1.0 / draws
		}
		for i := range want {
			se := math.Sqrt(want[i]*(1-want[i])/draws) + 1e-9
			require.InDelta(t, want[i], got[i], 5*se+1e-4, "%+v: byte %d", cfg, i)
			if want[i] == 0 {
				require.Zero(t, got[i], "%+v: byte %d is outside the top k", cfg, i)
			}
		}
	}
}
