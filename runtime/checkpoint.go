package runtime

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nlpodyssey/safetensors"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
)

// A Checkpoint is a training run's state between two steps: every
// persistent tensor whole (weights and optimizer state, tensor-parallel
// and ZeRO parts assembled), and the steps run, which say Adam's next
// step, dropout's next masks and the data's next batch, so that a run
// resumed from it computes what the run that wrote it would have gone on
// to compute. Its file is safetensors (Hugging Face's format: a JSON
// header of names, dtypes, shapes and offsets, then the raw data), which
// Python reads with safetensors.torch.load_file: a bf16 tensor whose
// values are all bf16's (a GPU's bf16 registers) in bf16, half the bytes,
// the others in f32 (the CPU computes bf16 models in f32); the metadata
// names the model, the optimizer, the seed and the steps.
type Checkpoint struct {
	Model     string
	Optimizer string
	Seed      uint64
	Step      int // steps run
	// Batch is the samples a step of the run took, which with Step says
	// where its data order is (0: not recorded, as in files of before).
	Batch   int
	Weights *Store // whole tensors
}

// CheckFinite says which tensor of the checkpoint, if any, holds a value
// that is not finite: a run that saved it had diverged (or its file was
// damaged), and training on from it would only propagate the NaN.
func (c *Checkpoint) CheckFinite() error {
	for _, name := range c.Weights.Names() {
		v, _ := c.Weights.Get(name)
		if err := finite(name, v); err != nil {
			return fmt.Errorf("%w: the run that saved the checkpoint (%d steps) had diverged; go on from an earlier one", err, c.Step)
		}
	}
	return nil
}

// finite says whether tensor name's values v are all finite.
func finite(name string, v []float32) error {
	for i, x := range v {
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("runtime: tensor %s holds %v at element %d", name, x, i)
		}
	}
	return nil
}

// checkpointFormat is the metadata's "format": what wrote the file.
const checkpointFormat = "flowkit-checkpoint"

// WriteCheckpoint writes c to path, atomically: to a temporary file in
// the same folder, renamed over path once complete, so that an
// interrupted write leaves the previous checkpoint.
func WriteCheckpoint(path string, c Checkpoint) (err error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("runtime: checkpoint %s: is a directory", path)
	}
	views := map[string]safetensors.TensorView{}
	for _, t := range c.Weights.whole() {
		dt, data := tensorData(t)
		shape := make([]uint64, len(t.Spec.Shape))
		for i, d := range t.Spec.Shape {
			shape[i] = uint64(d)
		}
		v, err := safetensors.NewTensorView(dt, shape, data)
		if err != nil {
			return fmt.Errorf("runtime: checkpoint: tensor %s: %w", t.Name, err)
		}
		views[t.Name] = v
	}
	if len(views) == 0 {
		return errors.New("runtime: checkpoint: no weights to write")
	}
	meta := map[string]string{
		"format": checkpointFormat, "model": c.Model, "optimizer": c.Optimizer,
		"seed": strconv.FormatUint(c.Seed, 10), "step": strconv.Itoa(c.Step),
	}
	if c.Batch > 0 {
		meta["batch"] = strconv.Itoa(c.Batch)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("runtime: checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := safetensors.SerializeToWriter(views, meta, f); err != nil {
		return fmt.Errorf("runtime: checkpoint %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("runtime: checkpoint %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("runtime: checkpoint %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("runtime: checkpoint: %w", err)
	}
	return nil
}

// tensorData is t's values as a checkpoint stores them: in bf16 where t
// is a bf16 tensor whose values bf16 holds exactly (their low 16 bits
// zero), else in f32. Either reads back bit for bit.
func tensorData(t Tensor) (safetensors.DType, []byte) {
	bf16 := t.Spec.DType == graph.BF16
	for _, v := range t.F {
		bf16 = bf16 && math.Float32bits(v)&0xffff == 0
	}
	if bf16 {
		data := make([]byte, 2*len(t.F))
		for i, v := range t.F {
			binary.LittleEndian.PutUint16(data[2*i:], uint16(math.Float32bits(v)>>16))
		}
		return safetensors.BF16, data
	}
	data := make([]byte, 4*len(t.F))
	for i, v := range t.F {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return safetensors.F32, data
}

// CheckCheckpointPath says whether WriteCheckpoint can write path: that it
// is not a directory, and that a file can be made in its directory. A run
// checks its --save so before it trains, not when it has trained.
func CheckCheckpointPath(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("runtime: checkpoint %s: is a directory", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("runtime: checkpoint %s: %w", path, err)
	}
	return errors.Join(f.Close(), os.Remove(f.Name()))
}

// ReadCheckpoint reads a checkpoint written by WriteCheckpoint. Tensors
// in bf16 are read too (widened to f32), so that weights saved elsewhere
// in either dtype load.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runtime: checkpoint: %w", err)
	}
	c, err := ParseCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("runtime: checkpoint %s: %w", path, err)
	}
	return c, nil
}

// sizeMismatch says by how much a safetensors file whose header reads is
// shorter or longer than its header and tensors, which the safetensors
// package reports only as "metadata incomplete buffer"; nil if it cannot
// tell.
func sizeMismatch(data []byte) error {
	if len(data) < 8 {
		return nil
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		if n > 100_000_000 { // the safetensors package's bound: not a header length at all
			return nil
		}
		return fmt.Errorf("truncated: the file is %d bytes, its header alone %d", len(data), 8+n)
	}
	var header map[string]json.RawMessage
	if json.Unmarshal(data[8:8+n], &header) != nil {
		return nil
	}
	var end uint64
	for name, raw := range header {
		var t struct {
			Offsets []uint64 `json:"data_offsets"`
		}
		if name == "__metadata__" || json.Unmarshal(raw, &t) != nil || len(t.Offsets) != 2 {
			continue
		}
		end = max(end, t.Offsets[1])
	}
	switch want := 8 + n + end; {
	case want > uint64(len(data)):
		return fmt.Errorf("truncated: the file is %d bytes, its header and tensors %d (%d missing)", len(data), want, want-uint64(len(data)))
	case want < uint64(len(data)):
		return fmt.Errorf("not a safetensors file: %d bytes after its tensors, which end at byte %d", uint64(len(data))-want, want)
	}
	return nil
}

// ParseCheckpoint parses a checkpoint file's contents.
func ParseCheckpoint(data []byte) (*Checkpoint, error) {
	_, md, err := safetensors.ReadMetadata(data)
	if err != nil {
		if serr := sizeMismatch(data); serr != nil {
			return nil, serr
		}
		return nil, fmt.Errorf("not a safetensors file: %w", err)
	}
	st, err := safetensors.Deserialize(data)
	if err != nil {
		return nil, fmt.Errorf("not a safetensors file: %w", err)
	}
	meta := md.Metadata()
	if meta["format"] != checkpointFormat {
		return nil, fmt.Errorf("metadata format is %q, not %q: not written by flowkit (a model's weights alone, without its optimizer state and steps, are not a checkpoint)", meta["format"], checkpointFormat)
	}
	c := &Checkpoint{Model: meta["model"], Optimizer: meta["optimizer"]}
	if c.Seed, err = strconv.ParseUint(meta["seed"], 10, 64); err != nil {
		return nil, fmt.Errorf("metadata seed %q: want an unsigned integer", meta["seed"])
	}
	if c.Step, err = strconv.Atoi(meta["step"]); err != nil || c.Step < 0 {
		return nil, fmt.Errorf("metadata step %q: want the steps run, ≥ 0", meta["step"])
	}
	if b, ok := meta["batch"]; ok {
		if c.Batch, err = strconv.Atoi(b); err != nil || c.Batch < 1 {
			return nil, fmt.Errorf("metadata batch %q: want the samples a step took, ≥ 1", b)
		}
	}
	c.Weights = NewStore(c.Seed)
	for _, nt := range st.Tensors() {
		v := nt.TensorView
		shape := make(graph.Shape, len(v.Shape()))
		for i, d := range v.Shape() {
			if d > math.MaxInt32 {
				return nil, fmt.Errorf("tensor %s: dimension %d of %d", nt.Name, i, d)
			}
			shape[i] = int(d)
		}
		raw := v.Data()
		n := shape.NumElements()
		f := make([]float32, n)
		dt := graph.F32
		switch v.DType() {
		case safetensors.F32:
			for i := range f {
				f[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		case safetensors.BF16:
			for i := range f {
				f[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
			}
			dt = graph.BF16
		default:
			return nil, fmt.Errorf("tensor %s is %s; checkpoints hold F32 or BF16", nt.Name, v.DType())
		}
		if err := c.Weights.Put(Tensor{Name: nt.Name, Spec: graph.Spec{Shape: shape, DType: dt}, F: f}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Iteration is the number of iterations the runner has run, over all
// its Run calls (or set by SetIteration).
func (r *PlanRunner) Iteration() int { return r.iteration }

// SetIteration sets the number of iterations run so far: the next Run's
// first iteration is number n (Adam's step n+1, dropout's masks and the
// feeder's batch of iteration n), as when resuming from a checkpoint.
func (r *PlanRunner) SetIteration(n int) error {
	if n < 0 {
		return fmt.Errorf("runtime: iteration %d: want ≥ 0", n)
	}
	r.iteration = n
	return nil
}

// Load sets every persistent register of the plan on this process's
// devices (weights, their ZeRO masters, optimizer state, in every
// replica) from w, which holds each tensor whole: a register that is a
// part takes its part. Every register must be there, of the plan's shape.
func (r *PlanRunner) Load(w *Store) error {
	p := r.p
	for i := range p.Registers {
		reg := &p.Registers[i]
		if !reg.Persistent || !r.rk.local(reg.Device) {
			continue
		}
		b := newBuffer(reg.Spec)
		if err := w.fill(reg.Name, reg.Init, reg.Spec.Shape, b.F); err != nil {
			return err
		}
		if r.devs[reg.Device] != nil {
			copy(r.slot(i, 0).F, b.F)
			continue
		}
		if err := r.upload(i, 0, b); err != nil {
			return fmt.Errorf("runtime: loading %s: %w", reg.Name, err)
		}
	}
	return nil
}

// check says whether c can resume training model, whose graph is g: the
// same model, and every persistent tensor of g there, of its shape.
func (c *Checkpoint) check(model string, batch int, g *graph.Graph) error {
	if c.Model != model {
		return fmt.Errorf("runtime: the checkpoint is of model %s, not %s", c.Model, model)
	}
	if err := c.checkBatch(batch); err != nil {
		return err
	}
	for _, t := range g.Tensors {
		if !t.Persistent() {
			continue
		}
		st, ok := c.Weights.tensors[t.Name]
		switch {
		case !ok || !st.complete():
			return fmt.Errorf("runtime: the checkpoint of %s has no tensor %s (saved with another optimizer?)", c.Model, t.Name)
		case !st.spec.Shape.Equal(t.Spec.Shape):
			return fmt.Errorf("runtime: tensor %s is %v in the checkpoint, %v in model %s", t.Name, st.spec.Shape, t.Spec.Shape, model)
		}
	}
	return nil
}

// checkBatch refuses to go on with batches of another size than the
// checkpoint's run took: the data order would resume elsewhere than where
// that run was.
func (c *Checkpoint) checkBatch(batch int) error {
	if c.Batch > 0 && batch != c.Batch {
		return fmt.Errorf("runtime: the checkpoint's run took batches of %d (%d steps: where its data order is), this run takes %d", c.Batch, c.Step, batch)
	}
	return nil
}

// Resume loads c into r, which runs a plan of the same model: its
// weights and state on every device, and its steps, so that the next
// Run goes on from there.
func (r *PlanRunner) Resume(c *Checkpoint) error {
	if c.Model != r.p.Model {
		return fmt.Errorf("runtime: the checkpoint is of model %s, the plan of %s", c.Model, r.p.Model)
	}
	if err := c.checkBatch(r.p.Batch); err != nil {
		return err
	}
	if err := r.Load(c.Weights); err != nil {
		return fmt.Errorf("%w (the checkpoint of %s, saved with %s)", err, c.Model, c.Optimizer)
	}
	return r.SetIteration(c.Step)
}

// CheckWeights says whether w holds every weight of model (as evaluation
// builds it: without optimizer state), each of its shape. Evaluate and
// EvaluateText check the same before they run.
func CheckWeights(model string, w *Store) error {
	m, err := zoo.Build(model, zoo.Config{Batch: 1})
	if err != nil {
		return err
	}
	return checkWeights(model, m.Graph, w)
}

// InitWeights returns model's weights as seed initializes them, as a
// training run starts: an untrained baseline to evaluate.
func InitWeights(model string, seed uint64) (*Store, error) {
	m, err := zoo.Build(model, zoo.Config{Batch: 1})
	if err != nil {
		return nil, err
	}
	w := NewStore(seed)
	for _, t := range m.Graph.Params() {
		if _, err := w.bind(t); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// checkWeights says whether w holds every weight of g, model's graph,
// each of its shape: an executor would otherwise initialize a missing
// weight from the seed, silently.
func checkWeights(model string, g *graph.Graph, w *Store) error {
	for _, t := range g.Params() {
		st, ok := w.tensors[t.Name]
		switch {
		case !ok || !st.complete():
			return fmt.Errorf("runtime: the weights of %s have no tensor %s", model, t.Name)
		case !st.spec.Shape.Equal(t.Spec.Shape):
			return fmt.Errorf("runtime: tensor %s is %v in the weights, %v in model %s", t.Name, st.spec.Shape, t.Spec.Shape, model)
		}
		if err := finite(t.Name, st.buf.F); err != nil {
			return fmt.Errorf("%w: the run that wrote these weights diverged", err)
		}
	}
	return nil
}
