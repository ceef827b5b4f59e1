package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SampleConfig says how Sample draws each byte.
type SampleConfig struct {
	// Temperature divides the logits before the softmax: below 1 the
	// likely bytes gain, above 1 the unlikely ones; 0 takes the most
	// likely byte every time (greedy).
	Temperature float64
	// TopK > 0 draws from the K likeliest bytes only.
	TopK int
	// Seed seeds the draws: the same seed, weights and prompt give the
	// same text.
	Seed uint64
	// Emit, if set, is given each byte as it is drawn, for a caller that
	// writes the text as it comes; an error from it stops the sampling
	// and is returned.
	Emit func(b byte) error
}

// Sample continues prompt by n bytes that byte-level language model
// model, with the weights in w, draws one at a time, each from its
// distribution over the next byte given the last seq bytes (the model's
// window; a shorter context sits at the window's start, where causal
// attention keeps the positions after it from mattering). It returns the
// n bytes. An empty prompt starts from a newline, which is not returned.
// Cancelling ctx stops it between two bytes; it returns the bytes drawn
// so far with ctx's error.
func Sample(ctx context.Context, model string, w *Store, dev *CPU, prompt []byte, n int, cfg SampleConfig) ([]byte, error) {
	seq, masked, err := checkText(model)
	if err != nil {
		return nil, err
	}
	if masked {
		return nil, fmt.Errorf("runtime: model %s is a masked language model: it fills in masked bytes, it does not continue a text", model)
	}
	switch {
	case n < 0:
		return nil, fmt.Errorf("runtime: sampling %d bytes", n)
	case cfg.Temperature < 0 || math.IsNaN(cfg.Temperature) || math.IsInf(cfg.Temperature, 0):
		return nil, fmt.Errorf("runtime: temperature %g: want a finite number ≥ 0", cfg.Temperature)
	case cfg.TopK < 0 || cfg.TopK > TextVocab:
		return nil, fmt.Errorf("runtime: top-k %d: want 0 (all) to %d", cfg.TopK, TextVocab)
	}
	e, err := newEvalExec(model, 1, w, dev)
	if err != nil {
		return nil, err
	}
	if e.m.Logits == nil || !e.m.Logits.Spec.Shape.Equal([]int{seq, TextVocab}) {
		return nil, errors.New("runtime: " + model + " has no logits of a byte for each position")
	}
	text := slices.Clip(prompt)
	if len(text) == 0 {
		text = []byte{'\n'}
	}
	start := len(text)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5a3d1e))
	tokens := e.ex.Buffer(e.m.Images).I
	probs := make([]float64, TextVocab)
	for range n {
		if err := ctx.Err(); err != nil {
			return text[start:], err
		}
		window := text[max(0, len(text)-seq):]
		clear(tokens)
		for i, b := range window {
			tokens[i] = int32(b)
		}
		if err := e.ex.Run(0); err != nil {
			return nil, err
		}
		row := e.ex.Buffer(e.m.Logits).F[(len(window)-1)*TextVocab : len(window)*TextVocab]
		b := byte(draw(row, probs, cfg, rng))
		text = append(text, b)
		if cfg.Emit != nil {
			if err := cfg.Emit(b); err != nil {
				return text[start:], err
			}
		}
	}
	return text[start:], nil
}

// draw picks a byte from logits as cfg says, with probs as scratch.
func draw(logits []float32, probs []float64, cfg SampleConfig, rng *rand.Rand) int {
	if cfg.Temperature == 0 || cfg.TopK == 1 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	// Softmax of logits/T in float64, relative to the largest.
	top := float64(slices.Max(logits))
	for i, v := range logits {
		probs[i] = math.Exp((float64(v) - top) / cfg.Temperature)
	}
	if k := cfg.TopK; k > 0 && k < len(probs) {
		// The k-th largest; ties with it stay in.
		sorted := slices.Clone(probs)
		slices.Sort(sorted)
		kth := sorted[len(sorted)-k]
		for i, p := range probs {
			if p < kth {
				probs[i] = 0
			}
		}
	}
	var sum float64
	for _, p := range probs {
		sum += p
	}
	u := rng.Float64() * sum
	last := 0
	for i, p := range probs {
		if p == 0 {
			continue
		}
		if u < p {
			return i
		}
		u -= p
		last = i
	}
	return last // rounding left u ≥ the last probability
}
