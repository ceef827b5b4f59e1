package main

import (
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/runtime"
)

type evalFlags struct {
	dataDir  string
	ext      string
	evalWins int
	workers  int
	json     bool
}

func newEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval CHECKPOINT",
		Short: "Evaluate a checkpoint's weights on held-out data",
		Long: `Evaluate the weights of a checkpoint written by 'flowrun train --save' on
held-out data, on this machine's CPU: a classifier's test accuracy and loss
on MNIST's 10,000 test images; a language model's loss in bits a byte on
--eval-windows windows of the held-out tenth of the text (the files and the
split 'flowrun train' uses), beside byte frequencies'. The model is the
checkpoint's; every weight must be in it.`,
		Example: `  flowrun train --model mlp --max-steps 500 --save mlp.safetensors
  flowrun eval mlp.safetensors`,
		Args: cliargs.One("a checkpoint file (from 'flowrun train --save')"),
		RunE: func(cmd *cobra.Command, args []string) error { return runEval(args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data", "", "directory with the MNIST IDX files, or a language model's text files (as for 'flowrun train')")
	fl.StringVar(&f.ext, "ext", ".go", "language models: the suffix of the text files under --data")
	fl.IntVar(&f.evalWins, "eval-windows", 256, "language models: held-out windows to evaluate on")
	fl.IntVar(&f.workers, "workers", 0, "CPU worker goroutines (0: one per core)")
	fl.BoolVar(&f.json, "json", false, "print the result as one JSON object on stdout")
	return cmd
}

func runEval(path string, f evalFlags) error {
	if f.evalWins < 1 {
		return fmt.Errorf("--eval-windows must be ≥ 1, got %d", f.evalWins)
	}
	if f.workers < 0 {
		return fmt.Errorf("--workers must be ≥ 0, got %d", f.workers)
	}
	c, err := runtime.ReadCheckpoint(path)
	if err != nil {
		return err
	}
	if err := runtime.CheckWeights(c.Model, c.Weights); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]any{"checkpoint": path, "model": c.Model, "optimizer": c.Optimizer, "seed": c.Seed, "steps_total": c.Step}
	dev := runtime.NewCPU(f.workers)
	if isTextModel(c.Model) {
		dir, train, test, err := loadText(f.dataDir, f.ext)
		if err != nil {
			return err
		}
		nats, err := runtime.EvaluateText(c.Model, c.Weights, dev, test, f.evalWins, 0)
		if err != nil {
			return err
		}
		bits, unigram := nats/math.Ln2, train.UnigramBits(test)
		if f.json {
			out["text"], out["test_bits_per_byte"], out["test_loss"], out["unigram_bits_per_byte"], out["eval_windows"] = dir, bits, nats, unigram, f.evalWins
			return printJSON(out)
		}
		fmt.Printf("%s after %d steps (%s): %.3f bits/byte (loss %.4f) on %d held-out windows of %s; byte frequencies alone: %.3f bits/byte\n",
			c.Model, c.Step, c.Optimizer, bits, nats, f.evalWins, dir, unigram)
		return nil
	}
	if s, err := zoo.InputShape(c.Model); err != nil || !s.Equal(graph.Shape{1, 28, 28}) {
		return fmt.Errorf("%s: model %s does not take MNIST's images: flowrun eval evaluates MNIST classifiers and byte-level language models", path, c.Model)
	}
	dir, err := data.LocateMNIST(f.dataDir)
	if err != nil {
		return err
	}
	_, test, err := data.LoadMNIST(dir)
	if err != nil {
		return err
	}
	acc, loss, err := runtime.Evaluate(c.Model, c.Weights, dev, test, 0)
	if err != nil {
		return err
	}
	if f.json {
		out["test_accuracy"], out["test_loss"], out["test_images"] = acc, loss, test.N
		return printJSON(out)
	}
	fmt.Printf("%s after %d steps (%s): test accuracy %.2f%% (loss %.4f) on %d images\n", c.Model, c.Step, c.Optimizer, 100*acc, loss, test.N)
	return nil
}
