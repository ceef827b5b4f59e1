package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/runtime"
)

type sampleFlags struct {
	prompt      string
	bytes       int
	temperature float64
	topK        int
	seed        uint64
	workers     int
	json        bool
}

func newSampleCmd() *cobra.Command {
	var f sampleFlags
	cmd := &cobra.Command{
		Use:   "sample CHECKPOINT",
		Short: "Write text with a byte-level language model's checkpoint",
		Long: `Continue --prompt with --bytes bytes that the language model of a checkpoint
written by 'flowrun train --save' draws one at a time, on this machine's
CPU: each from the model's distribution over the next byte given the last
bytes of its window (its seq), sharpened by --temperature (0: always the
likeliest byte) and cut to the --top-k likeliest. The same checkpoint,
prompt and --seed write the same text. The prompt and the text are printed
as they are, bytes and all.`,
		Example: `  flowrun train --model gpt:layers=4,hidden=128,heads=4,seq=128,vocab=256 --optimizer adam --lr 0.003 --batch 16 --save lm.safetensors
  flowrun sample lm.safetensors --prompt 'func (s *Server) ' --bytes 300`,
		Args: cliargs.One("a checkpoint file of a language model (from 'flowrun train --save')"),
		RunE: func(cmd *cobra.Command, args []string) error { return runSample(cmd.Context(), args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.prompt, "prompt", "package ", "text to continue (empty: from a newline)")
	fl.IntVar(&f.bytes, "bytes", 256, "bytes to write")
	fl.Float64Var(&f.temperature, "temperature", 0.8, "divides the logits: below 1 favours likely bytes, above 1 unlikely ones; 0 takes the likeliest")
	fl.IntVar(&f.topK, "top-k", 0, "draw from the K likeliest bytes only (0: all)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the draws")
	fl.IntVar(&f.workers, "workers", 0, "CPU worker goroutines (0: one per core)")
	fl.BoolVar(&f.json, "json", false, "print the prompt and the text as one JSON object on stdout (bytes that are not UTF-8 become U+FFFD)")
	return cmd
}

// maxJSONBytes bounds --bytes with --json, which holds the text in memory
// until the end.
const maxJSONBytes = 1 << 24

func runSample(ctx context.Context, path string, f sampleFlags) error {
	if f.bytes < 0 {
		return fmt.Errorf("--bytes must be ≥ 0, got %d", f.bytes)
	}
	if f.json && f.bytes > maxJSONBytes {
		return fmt.Errorf("--bytes %d with --json: at most %d (the text is held in memory; without --json it is written as it comes)", f.bytes, maxJSONBytes)
	}
	if f.workers < 0 {
		return fmt.Errorf("--workers must be ≥ 0, got %d", f.workers)
	}
	if f.temperature == 0 && f.topK > 1 {
		return fmt.Errorf("--top-k %d draws among the likeliest bytes, --temperature 0 always takes the likeliest: give a temperature above 0, or drop --top-k", f.topK)
	}
	c, err := runtime.ReadCheckpoint(path)
	if err != nil {
		return err
	}
	cfg := runtime.SampleConfig{Temperature: f.temperature, TopK: f.topK, Seed: f.seed}
	// Without --json the text is written as it is drawn, after the prompt,
	// which waits for the first byte: a model that cannot sample prints
	// nothing. A failed write (a closed pipe, a full disk) stops the
	// sampling; an interrupt stops it between two bytes.
	var (
		started bool
		werr    error // the first error writing to stdout
	)
	write := func(b []byte) error {
		if werr == nil {
			if _, err := os.Stdout.Write(b); err != nil {
				werr = fmt.Errorf("writing the text: %w", err)
			}
		}
		return werr
	}
	if !f.json {
		cfg.Emit = func(b byte) error {
			if !started {
				started = true
				write([]byte(f.prompt))
			}
			return write([]byte{b})
		}
	}
	text, err := runtime.Sample(ctx, c.Model, c.Weights, runtime.NewCPU(f.workers), []byte(f.prompt), f.bytes, cfg)
	switch {
	case err != nil && werr != nil:
		return werr
	case errors.Is(err, context.Canceled):
		if started {
			write([]byte("\n"))
		}
		return fmt.Errorf("interrupted after %d of %d bytes", len(text), f.bytes)
	case err != nil:
		if started {
			write([]byte("\n"))
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if f.json {
		return printJSON(map[string]any{"checkpoint": path, "model": c.Model, "steps_total": c.Step, "prompt": f.prompt,
			"text": string(text), "temperature": f.temperature, "top_k": f.topK, "seed": f.seed})
	}
	if !started {
		write([]byte(f.prompt))
	}
	write([]byte("\n"))
	return werr
}
