// Package experiments holds published tables for flowsim reproduce to
// simulate, row by row, on the paper's hardware model (DESIGN §4.8). Each
// experiment is a folder with an experiment.yaml: the paper, its cluster,
// and for each row the model, batch and strategy with the published
// figures.
package experiments

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

//go:embed */experiment.yaml
var files embed.FS

// ErrUnknown is returned for a name that is no experiment.
var ErrUnknown = errors.New("experiments: unknown experiment")

// Experiment is one published table.
type Experiment struct {
	Name      string   `yaml:"-"` // the folder
	Title     string   `yaml:"title"`
	Source    string   `yaml:"source"` // the paper, and where in it the figures are
	Notes     string   `yaml:"notes"`
	Metric    string   `yaml:"metric"`    // what the figures are; so far "iteration time (s)"
	DType     string   `yaml:"dtype"`     // of the models' float tensors: f32 (the default) or bf16
	Optimizer string   `yaml:"optimizer"` // sgd, adam or adamw
	Cluster   string   `yaml:"cluster"`   // a preset, sized to each row's devices as NAMExK
	Columns   []Column `yaml:"columns"`
	Rows      []Row    `yaml:"rows"`
}

// Column is one published variant of every row: its strategy options are
// appended to the row's.
type Column struct {
	Name     string `yaml:"name"`
	Strategy string `yaml:"strategy"`
}

// Row is one configuration of the table.
type Row struct {
	Name     string               `yaml:"name"`
	Model    string               `yaml:"model"`    // a zoo name with size options
	Batch    int                  `yaml:"batch"`    // global
	Strategy string               `yaml:"strategy"` // the degrees; a column adds the rest
	Params   float64              `yaml:"params"`   // the model's parameters in billions, as printed, if the paper gives them
	Paper    map[string]Published `yaml:"paper"`    // by column name
	Line     int                  `yaml:"-"`        // in the experiment file, for messages
}

// Published is a row's figure in one column.
type Published struct {
	Seconds float64 `yaml:"seconds"`
	MFU     float64 `yaml:"mfu"` // model FLOPs utilization, if the paper gives it
	// What a paper that counts the FLOPs of recomputation too prints, if
	// it does: the teraFLOP/s achieved per device, their share of the
	// device's peak (hardware FLOPs utilization), and the petaFLOP/s of
	// all devices. They check the transcription; the time is what is
	// compared.
	TFLOPs float64 `yaml:"tflops"`
	HFU    float64 `yaml:"hfu"`
	PFLOPs float64 `yaml:"pflops"`
}

// OptimizerSpec is the optimizer every cell of the experiment is compiled
// with: its Optimizer, at a learning rate and momentum that change its
// state's memory and its update's cost not at all.
func (e *Experiment) OptimizerSpec() graph.OptimizerSpec {
	return graph.OptimizerSpec{Name: e.Optimizer, LR: 1e-4, Momentum: 0.9}
}

// StrategyIn is the strategy string of a row in a column.
func (r Row) StrategyIn(c Column) string {
	if c.Strategy == "" {
		return r.Strategy
	}
	return r.Strategy + "," + c.Strategy
}

// Names lists the experiments.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// Load returns a built-in experiment.
func Load(name string) (*Experiment, error) {
	data, err := files.ReadFile(path.Join(name, "experiment.yaml"))
	if err != nil || strings.ContainsAny(name, "/\\.") {
		return nil, fmt.Errorf("%w %q (experiments: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return Parse(path.Join("experiments", name, "experiment.yaml"), name, data)
}

// LoadFile reads an experiment from a YAML file of one's own, named by the
// file's name without its extension.
func LoadFile(file string) (*Experiment, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(file, strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), data)
}

// Parse reads an experiment file; errors name the file and line.
func Parse(file, name string, data []byte) (*Experiment, error) {
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, args...))
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty: want a mapping of title, source, cluster, columns and rows", file)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fail(max(doc.Line, 1), "want a mapping of title, source, cluster, columns and rows")
	}
	top := doc.Content[0]
	var e Experiment
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&e); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	e.Name = name
	if e.DType == "" {
		e.DType = "f32"
	}
	for _, f := range []struct{ key, val string }{
		{"title", e.Title}, {"source", e.Source}, {"metric", e.Metric}, {"cluster", e.Cluster}, {"optimizer", e.Optimizer},
	} {
		if strings.TrimSpace(f.val) == "" {
			return nil, fail(top.Line, "%s: missing", f.key)
		}
	}
	if len(e.Columns) == 0 || len(e.Rows) == 0 {
		return nil, fail(top.Line, "want at least one column and one row")
	}
	// What every cell takes from the experiment is checked here, once,
	// rather than by each cell after others compiled (minutes, for the
	// large ones).
	if _, err := graph.NewOptimizer(e.OptimizerSpec()); err != nil {
		return nil, fail(value(top, "optimizer").Line, "optimizer: %v", err)
	}
	if _, err := zoo.ParseDType(e.DType); err != nil {
		return nil, fail(value(top, "dtype").Line, "dtype: %v", err)
	}
	if _, err := topology.Preset(e.Cluster); err != nil {
		return nil, fail(value(top, "cluster").Line, "cluster: %v", err)
	}
	cols := map[string]bool{}
	for i, c := range e.Columns {
		if c.Name == "" || cols[c.Name] {
			return nil, fail(child(top, "columns", i).Line, "columns[%d]: a name, unique, is required", i)
		}
		cols[c.Name] = true
	}
	seen := map[string]bool{}
	for i := range e.Rows {
		r := &e.Rows[i]
		r.Line = child(top, "rows", i).Line
		where := fmt.Sprintf("rows[%d] (%s)", i, r.Name)
		switch {
		case r.Name == "" || seen[r.Name]:
			return nil, fail(r.Line, "rows[%d]: a name, unique, is required", i)
		case r.Model == "":
			return nil, fail(r.Line, "%s: model: missing", where)
		case r.Batch < 1 || r.Batch > zoo.MaxBatch:
			return nil, fail(r.Line, "%s: batch: want 1 to %d, got %d", where, zoo.MaxBatch, r.Batch)
		case r.Strategy == "":
			return nil, fail(r.Line, "%s: strategy: missing", where)
		case len(r.Paper) == 0:
			return nil, fail(r.Line, "%s: paper: no published figure", where)
		case r.Params < 0:
			return nil, fail(r.Line, "%s: params: want ≥ 0 (billions), got %g", where, r.Params)
		}
		seen[r.Name] = true
		if err := e.checkCells(r, where, child(top, "rows", i), top, fail); err != nil {
			return nil, err
		}
		for col, p := range r.Paper {
			if !cols[col] {
				return nil, fail(r.Line, "%s: paper: %q is no column (columns: %s)", where, col, strings.Join(slices.Sorted(maps.Keys(cols)), ", "))
			}
			if !(p.Seconds > 0 && p.Seconds < math.Inf(1)) || !(p.MFU >= 0 && p.MFU <= 1) || !(p.HFU >= 0 && p.HFU <= 1) {
				return nil, fail(r.Line, "%s: paper: %s: want finite seconds > 0 and 0 ≤ mfu, hfu ≤ 1, got %g, %g and %g", where, col, p.Seconds, p.MFU, p.HFU)
			}
			if !(p.TFLOPs >= 0 && p.TFLOPs < math.Inf(1)) || !(p.PFLOPs >= 0 && p.PFLOPs < math.Inf(1)) {
				return nil, fail(r.Line, "%s: paper: %s: want finite tflops, pflops ≥ 0, got %g and %g", where, col, p.TFLOPs, p.PFLOPs)
			}
		}
	}
	return &e, nil
}

// checkCells checks what the cells of row r (node n) take from it, as
// each would when compiled: its model, a zoo name with valid size options,
// its strategy, and its strategy with each column's options that the row
// has a published figure in (the cells reproduce simulates). Errors name
// the field's line.
func (e *Experiment) checkCells(r *Row, where string, n, top *yaml.Node, fail func(int, string, ...any) error) error {
	if _, err := zoo.InputShape(r.Model); err != nil {
		return fail(value(n, "model").Line, "%s: model: %v", where, err)
	}
	line := value(n, "strategy").Line
	if _, err := plans.ParseStrategy(r.Strategy, r.Batch); err != nil {
		return fail(line, "%s: strategy: %v", where, err)
	}
	for j, c := range e.Columns {
		if _, ok := r.Paper[c.Name]; !ok {
			continue
		}
		if _, err := plans.ParseStrategy(r.StrategyIn(c), r.Batch); err != nil {
			return fail(line, "%s: strategy in column %q (line %d, strategy %q): %v",
				where, c.Name, value(child(top, "columns", j), "strategy").Line, c.Strategy, err)
		}
	}
	return nil
}

// value returns the value of key in mapping m (m itself if it has none),
// for line numbers.
func value(m *yaml.Node, key string) *yaml.Node {
	if m.Kind == yaml.MappingNode {
		for k := 0; k+1 < len(m.Content); k += 2 {
			if m.Content[k].Value == key {
				return m.Content[k+1]
			}
		}
	}
	return m
}

// child returns item i of the sequence under key in a mapping node (the
// mapping itself if there is none), for line numbers.
func child(m *yaml.Node, key string, i int) *yaml.Node {
	for k := 0; k+1 < len(m.Content); k += 2 {
		if m.Content[k].Value == key {
			if seq := m.Content[k+1]; seq.Kind == yaml.SequenceNode && i < len(seq.Content) {
				return seq.Content[i]
			}
		}
	}
	return m
}
