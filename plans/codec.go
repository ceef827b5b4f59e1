package plans

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/jsonerr"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// Encode writes p as indented JSON, in the compact form of file.go. It
// fails for a plan whose firings are not those its tasks imply.
func Encode(w io.Writer, p *Plan) error {
	f, err := p.toFile()
	if err != nil {
		return err
	}
	// Marshaled compact, and indented (one space a level) as it is
	// written out: see indenter.
	x := newIndenter(w)
	enc := json.NewEncoder(x)
	// Ops' attributes are written as they are, to be read back the same
	// (escaping would rewrite an & in them as \u0026).
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return err
	}
	return x.Flush()
}

// Decode reads a plan written by Encode and checks that it is
// self-consistent: every index in range, every op known, no deadlock.
func Decode(r io.Reader) (*Plan, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("plans: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	f := file{header: new(header)}
	if err := dec.Decode(&f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("plans: %w", jsonerr.Locate(data, err))
		}
		// JSON of another form: a plan file of another version, which
		// need not parse as this one's (say which version it is), or
		// no plan file at all (a calibration has a version too).
		if !hasKey(data, "tasks") {
			return nil, fmt.Errorf("plans: not a plan file, which lists its tasks: %w", jsonerr.Locate(data, err))
		}
		if v, ok := peekVersion(data); ok && v != Version {
			return nil, versionError(v)
		}
		return nil, fmt.Errorf("plans: %w", jsonerr.Locate(data, err))
	}
	p, err := f.plan()
	if err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	if _, err := p.Deps(); err != nil {
		return nil, err
	}
	return p, nil
}

// peekVersion reads the version of the plan in data, if the JSON object
// has one among its top-level keys (Encode writes it first).
func peekVersion(data []byte) (int, bool) {
	raw, ok := topLevel(data, "version")
	var v int
	if !ok || json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	return v, true
}

// hasKey says whether the JSON object in data has key among its
// top-level keys: a plan file of any version has "tasks", which a
// calibration or a sweep shard, that have a version too, do not.
func hasKey(data []byte, key string) bool {
	_, ok := topLevel(data, key)
	return ok
}

// topLevel returns the value of key among the top-level keys of the JSON
// object in data, reading no further than it.
func topLevel(data []byte, key string) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if k == key {
			return v, true
		}
	}
	return nil, false
}

// versionError refuses a plan file of version v.
func versionError(v int) error {
	return fmt.Errorf("plans: version %d, this build reads version %d: compile the plan again with this build", v, Version)
}

// ReadFile decodes the plan in a file; errors name the file.
func ReadFile(path string) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// check validates the plan's structure.
func (p *Plan) check() error {
	if err := p.checkHeader(); err != nil {
		return err
	}
	bad := func(what string, i int, format string, args ...any) error {
		return fmt.Errorf("plans: %s[%d]: %s", what, i, fmt.Sprintf(format, args...))
	}
	for i, s := range p.Streams {
		if s.Device < 0 || s.Device >= len(p.Devices) {
			return bad("streams", i, "device %d out of range", s.Device)
		}
		for _, f := range s.Order {
			if f < 0 || f >= len(p.Firings) {
				return bad("streams", i, "firing %d out of range", f)
			}
		}
	}
	if p.MB > len(p.Firings) {
		return fmt.Errorf("plans: %d micro-batches but only %d firings", p.MB, len(p.Firings))
	}
	if err := p.checkReplicas(); err != nil {
		return err
	}
	return p.checkRest()
}

// checkHeader checks the plan's counts: its version, replicas, stages,
// micro-batches and batch, and the devices they make.
func (p *Plan) checkHeader() error {
	if p.Version != Version {
		return versionError(p.Version)
	}
	// The model names what reports print and what feeders build inputs
	// for (a language model's text, a classifier's images).
	if err := zoo.Check(p.Model); err != nil {
		return fmt.Errorf("plans: model: %w", err)
	}
	if p.MB < 1 || p.MicroBatch < 1 || p.DP < 1 || p.PP < 1 || p.TP < 0 || max(p.DP, p.PP, p.TP) > maxCount ||
		len(p.Devices) != p.DP*p.PP*p.TPDegree() {
		return fmt.Errorf("plans: want positive micro_batches, micro_batch, replicas and stages, tensor_parallel ≥ 0, and replicas×stages×tensor_parallel devices; got %d, %d, %d, %d, %d and %d",
			p.MB, p.MicroBatch, p.DP, p.PP, p.TP, len(p.Devices))
	}
	if p.SharedTP && p.TPDegree() < 2 {
		return fmt.Errorf("plans: tp_shared lists tensor-parallel rank 0 for all ranks: it needs tensor_parallel ≥ 2, got %d", p.TP)
	}
	if p.SharedDP && (p.DP < 2 || p.Shares != nil) {
		return fmt.Errorf("plans: dp_shared lists replica 0 for all replicas: it needs replicas ≥ 2 with even micro-batches, got %d and %v", p.DP, p.Shares)
	}
	if p.Zero < 0 || p.Zero > 3 || (p.Zero > 0 && p.DP < 2) || p.VPP < 0 || p.VPP > maxCount {
		return fmt.Errorf("plans: zero %d and virtual_stages %d: want zero 0, or 1 to 3 with replicas ≥ 2, and virtual_stages ≥ 0", p.Zero, p.VPP)
	}
	// The strategy is what reports print and checkpoints record: it must
	// be the one whose counts the plan has.
	st, err := ParseStrategy(p.Strategy, p.Batch)
	if err != nil {
		return fmt.Errorf("plans: strategy: %w", err)
	}
	if st.DP != p.DP || st.TPDegree() != p.TPDegree() || st.PP != p.PP || st.VirtualStages() != max(p.VPP, 1) || st.Zero != p.Zero {
		return fmt.Errorf("plans: strategy %q is not the plan's: replicas %d, tensor_parallel %d, stages %d, virtual_stages %d, zero %d",
			p.Strategy, p.DP, p.TPDegree(), p.PP, max(p.VPP, 1), p.Zero)
	}
	if p.Shares != nil {
		if len(p.Shares) != p.DP || slices.Min(p.Shares) < 1 || slices.Max(p.Shares) > maxCount || slices.Max(p.Shares) != p.MB {
			return fmt.Errorf("plans: replica_micro_batches %v: want one count in [1, %d] per replica (%d), the largest micro_batches (%d)",
				p.Shares, maxCount, p.DP, p.MB)
		}
		if p.Batch != p.MicroBatch*p.TotalMicros() {
			return fmt.Errorf("plans: batch %d is not micro_batch × the replicas' micro-batches = %d × %d", p.Batch, p.MicroBatch, p.TotalMicros())
		}
	} else if p.Batch != p.MicroBatch*p.MB*p.DP {
		return fmt.Errorf("plans: batch %d is not micro_batch × micro_batches × replicas = %d × %d × %d", p.Batch, p.MicroBatch, p.MB, p.DP)
	}
	if len(p.Images.Shape) == 0 || p.Images.Shape[0] != p.Batch || p.Images.Shape.NumElements() < p.Batch {
		return fmt.Errorf("plans: images %v: want the global batch's shape, [%d, …]", p.Images, p.Batch)
	}
	return p.checkDevices()
}

// checkDevices checks each CPU device's workers: the runtime starts that
// many worker goroutines and the simulator prices a CPU of that many
// cores, so a count no machine has (10^9) would simulate a CPU that does
// not exist, or start goroutines without end. The bound is the cores a
// cluster file's CPU device may have (topology.MaxCores), which is what
// DevicesFromCluster divides among a plan's devices.
func (p *Plan) checkDevices() error {
	seen := make(map[string]int, len(p.Devices))
	for i, d := range p.Devices {
		if d.Name == "" {
			return fmt.Errorf("plans: devices[%d] (%s) has no name", i, d.Type)
		}
		if j, ok := seen[d.Name]; ok {
			return fmt.Errorf("plans: devices[%d] and devices[%d] are both named %s: a trace and a cluster tell devices by name", j, i, d.Name)
		}
		seen[d.Name] = i
		if d.IsCPU() && (d.Workers < 1 || d.Workers > topology.MaxCores) {
			return fmt.Errorf("plans: devices[%d]: CPU device %s (%s) has %d workers: want 1 to %d (its cores; a CPU device has at most %d)",
				i, d.Name, d.Type, d.Workers, topology.MaxCores, topology.MaxCores)
		}
	}
	return nil
}

// checkReplicas checks that every per-micro-batch task fires for one of
// the replicas, whose micro-batches say how often it fires, or once per
// round.
func (p *Plan) checkReplicas() error {
	for i, t := range p.Tasks {
		if t.PerMicro && (t.Replica < 0 || t.Replica >= p.DP) {
			return fmt.Errorf("plans: tasks[%d]: %s fires per micro-batch of replica %d, not one of the %d", i, t.Name, t.Replica, p.DP)
		}
		if t.Rounds && !t.PerMicro {
			return fmt.Errorf("plans: tasks[%d]: %s fires once per round: it needs per_micro", i, t.Name)
		}
	}
	return nil
}

// checkRest validates the plan's tasks, firings and registers, once
// checkHeader and checkReplicas passed.
func (p *Plan) checkRest() error {
	bad := func(what string, i int, format string, args ...any) error {
		return fmt.Errorf("plans: %s[%d]: %s", what, i, fmt.Sprintf(format, args...))
	}
	// fired[first[t]+max(m, 0)] marks firing (t, m) seen. A firing of an
	// invalid micro-batch fails below on its first occurrence, so only
	// valid ones, which this numbering covers, are ever marked: a map of
	// millions of firings would take seconds. (Both callers have bounded
	// the firings the tasks make, checkPlannable and file.plan.)
	first, _ := p.firstFirings()
	fired := make([]bool, p.firingCount())
	for i, f := range p.Firings {
		if f.Task < 0 || f.Task >= len(p.Tasks) {
			return bad("firings", i, "task %d out of range", f.Task)
		}
		per := p.Tasks[f.Task].PerMicro
		valid := (per && f.Micro >= 0 && f.Micro < p.Fires(f.Task)) || (!per && f.Micro == -1)
		if valid && fired[first[f.Task]+max(f.Micro, 0)] {
			return bad("firings", i, "task %d micro-batch %d fires twice", f.Task, f.Micro)
		}
		if !valid {
			return bad("firings", i, "micro-batch %d invalid for task %s", f.Micro, p.Tasks[f.Task].Name)
		}
		fired[first[f.Task]+max(f.Micro, 0)] = true
		for _, a := range f.After {
			if a < 0 || a >= len(p.Firings) || a == i {
				return bad("firings", i, "after %d: want another firing, 0 to %d", a, len(p.Firings)-1)
			}
		}
	}
	if want := p.firingCount(); want != len(p.Firings) {
		return fmt.Errorf("plans: the tasks fire %d times per iteration, the plan lists %d firings", want, len(p.Firings))
	}
	inRange := func(r int) bool { return r >= 0 && r < len(p.Registers) }
	for i, t := range p.Tasks {
		if t.ID != i {
			return bad("tasks", i, "id %d", t.ID)
		}
		// The cost model's inputs: a task's work, bounded where a step of
		// the largest model is far within (10^24 FLOPs, a petabyte).
		if !(t.FLOPs >= 0 && t.FLOPs <= maxWorkFLOPs) || t.Bytes < 0 || t.Bytes > maxWorkBytes {
			return bad("tasks", i, "%s: work of %g FLOPs and %d bytes: want 0 to %g FLOPs and 0 to %d bytes", t.Name, float64(t.FLOPs), t.Bytes, float64(maxWorkFLOPs), maxWorkBytes)
		}
		if stages := p.PP * max(p.VPP, 1); t.Stage < 0 || t.Stage >= stages {
			return bad("tasks", i, "%s: stage %d: want 0 to %d (stages × virtual stages − 1)", t.Name, t.Stage, stages-1)
		}
		if len(t.Streams) == 0 {
			return bad("tasks", i, "%s occupies no stream", t.Name)
		}
		for _, s := range t.Streams {
			if s < 0 || s >= len(p.Streams) {
				return bad("tasks", i, "stream %d out of range", s)
			}
		}
		for _, u := range t.Reads {
			if !inRange(u.Reg) {
				return bad("tasks", i, "reads register %d out of range", u.Reg)
			}
		}
		for _, r := range t.Writes {
			if !inRange(r) {
				return bad("tasks", i, "writes register %d out of range", r)
			}
		}
		if !slices.Contains(kinds, t.Kind) {
			return bad("tasks", i, "%s: unknown kind %q (known: %s)", t.Name, t.Kind, joinKinds(kinds))
		}
		if t.Kind == Pack || t.Kind == Unpack {
			if err := p.checkPack(&t); err != nil {
				return bad("tasks", i, "%s: %v", t.Name, err)
			}
		}
		if t.Kind == Input {
			if err := p.checkInput(&t); err != nil {
				return bad("tasks", i, "%s: %v", t.Name, err)
			}
		}
		if t.Kind == AllReduce {
			if err := p.checkAllReduce(&t); err != nil {
				return bad("tasks", i, "%s: %v", t.Name, err)
			}
		}
		if t.Kind == AllGather || t.Kind == ReduceScatter {
			if err := p.checkSplit(&t); err != nil {
				return bad("tasks", i, "%s: %v", t.Name, err)
			}
		}
		if t.Kind == Compute {
			if t.Op == nil {
				return bad("tasks", i, "compute task %s has no op", t.Name)
			}
			op, err := p.checkCompute(&t)
			if err != nil {
				return bad("tasks", i, "%s: %v", t.Name, err)
			}
			if o, ok := graph.OptimizerOf(op); ok && o.Name() != p.Optimizer {
				return bad("tasks", i, "%s: its update is %s's, not the plan's optimizer %s", t.Name, o.Name(), p.Optimizer)
			}
		}
	}
	// Every firing is once on each stream its task occupies, and on no
	// other: an engine would otherwise wait for it forever, or run it
	// twice.
	want := make([]int, len(p.Streams))
	for t, task := range p.Tasks {
		for _, s := range task.Streams {
			want[s] += p.Fires(t)
		}
	}
	listed := make([]int, len(p.Firings)) // the last stream listing each firing, plus 1
	for i, s := range p.Streams {
		if len(s.Order) != want[i] {
			return bad("streams", i, "%s lists %d firings, its tasks fire %d times on it", p.streamName(s), len(s.Order), want[i])
		}
		for _, f := range s.Order {
			if !slices.Contains(p.Tasks[p.Firings[f].Task].Streams, i) {
				return bad("streams", i, "%s lists %s, whose task does not occupy it", p.streamName(s), p.FiringName(f))
			}
			if listed[f] == i+1 {
				return bad("streams", i, "%s lists %s twice", p.streamName(s), p.FiringName(f))
			}
			listed[f] = i + 1
		}
	}
	// Every device has an arena, within its capacity where it has one; the
	// runtime allocates it and places the registers at their offsets in it.
	if len(p.Memory) != len(p.Devices) {
		return fmt.Errorf("plans: memory lists %d devices' arenas, the plan has %d devices", len(p.Memory), len(p.Devices))
	}
	for i, m := range p.Memory {
		if c := p.Devices[i].Memory; m.Device != i || m.Peak < 0 || c < 0 || (c > 0 && m.Peak > c) {
			return bad("memory", i, "device %d, an arena of %d bytes on %s (capacity %d bytes): want device %d, an arena of 0 to its capacity (0: unknown)",
				m.Device, m.Peak, p.Devices[i].Name, c, i)
		}
	}
	for i, r := range p.Registers {
		if r.ID != i || r.Device < 0 || r.Device >= len(p.Devices) || r.Slots < 1 || r.Slots > maxCount || r.SlotBytes != r.Spec.Bytes() || r.Offset < 0 {
			return bad("registers", i, "%s is inconsistent (device %d, %d slots of %d bytes for %v, offset %d)", r.Name, r.Device, r.Slots, r.SlotBytes, r.Spec, r.Offset)
		}
		if arena := p.Memory[r.Device].Peak; r.Offset > arena || r.SlotBytes > arena || (r.SlotBytes > 0 && units.Bytes(r.Slots) > (arena-r.Offset)/r.SlotBytes) {
			return bad("registers", i, "%s (%d slots of %d bytes at offset %d) runs past the %d-byte arena of %s",
				r.Name, r.Slots, r.SlotBytes, r.Offset, arena, p.Devices[r.Device].Name)
		}
		for _, w := range r.Writers {
			if w < 0 || w >= len(p.Tasks) {
				return bad("registers", i, "writer %d out of range", w)
			}
		}
		if in := r.Init; in.Kind > graph.Normal || in.Scale < 0 || math.IsNaN(in.Scale) || math.IsInf(in.Scale, 0) {
			return bad("registers", i, "%s: initializer kind %d, scale %g: want kind 0 (zeros), 1 (ones), 2 (uniform) or 3 (normal) and a finite scale ≥ 0", r.Name, in.Kind, in.Scale)
		}
		if sh := r.Init.Shard; sh != nil {
			if err := sh.Check(); err != nil {
				return bad("registers", i, "%s: %v", r.Name, err)
			}
			ofRank := func(sh *graph.Shard) bool { return sh.Parts == p.TPDegree() && sh.Part == p.TPRank(r.Device) }
			tp := sh.Within == nil && ofRank(sh)
			// Under ZeRO with tensor parallelism, a part of the rank's part.
			zero := p.Zero > 0 && sh.Parts == p.DP && sh.Part == p.Replica(r.Device) && sh.Axis == 0 && (sh.Within == nil || ofRank(sh.Within))
			if !r.Persistent || !(tp || zero) || !sh.Shape().Equal(r.Spec.Shape) {
				return bad("registers", i, "%s (%v on device %d) is not part %d of %d of %s %v: a persistent part of the tensor-parallel rank (or, under ZeRO, the replica, of the rank's part) of its device",
					r.Name, r.Spec, r.Device, sh.Part, sh.Parts, sh.Of, sh.Full)
			}
		}
		if r.Master && (r.Init.Shard == nil || p.Zero == 0 || p.Zero == 3) {
			return bad("registers", i, "%s is a ZeRO master part without a shard or a zero stage of 1 or 2 (under 3 a part is a weight's only copy)", r.Name)
		}
	}
	// Each register's writers are the tasks that write it: the edges
	// follow the one, the runners the other.
	for i, t := range p.Tasks {
		for _, r := range t.Writes {
			if !slices.Contains(p.Registers[r].Writers, i) {
				return bad("tasks", i, "%s writes register %d (%s), whose writers do not list it", t.Name, r, p.Registers[r].Name)
			}
		}
	}
	for i, r := range p.Registers {
		for _, w := range r.Writers {
			if !slices.Contains(p.Tasks[w].Writes, i) {
				return bad("registers", i, "%s lists writer %d (%s), which does not write it", r.Name, w, p.Tasks[w].Name)
			}
		}
	}
	return nil
}

// The largest work a task of a plan file may have (Task.FLOPs, Bytes): a
// step of the largest model is far within, and the durations it prices
// stay far from time.Duration's limit.
const (
	maxWorkFLOPs units.FLOPs = 1e24
	maxWorkBytes units.Bytes = 1 << 50
)

// checkPack checks that pack or unpack task t, whose registers are in
// range, copies between registers of one float dtype on its home device,
// the bucket (a pack's write, an unpack's read) flat and as long as the
// gradients (a pack's reads, an unpack's writes) together, each of which
// a bucket in parts (Task.Parts) divides into them.
func (p *Plan) checkPack(t *Task) error {
	var bucket int
	var parts []int
	for _, u := range t.Reads {
		parts = append(parts, u.Reg)
	}
	if t.Kind == Pack {
		if len(t.Writes) != 1 {
			return fmt.Errorf("a pack writes one bucket, got %d writes", len(t.Writes))
		}
		bucket = t.Writes[0]
	} else {
		if len(t.Reads) != 1 {
			return fmt.Errorf("an unpack reads one bucket, got %d reads", len(t.Reads))
		}
		bucket, parts = t.Reads[0].Reg, t.Writes
	}
	if len(parts) == 0 {
		return fmt.Errorf("%s copies no gradient", map[TaskKind]string{Pack: "a pack", Unpack: "an unpack"}[t.Kind])
	}
	if t.Parts < 0 {
		return fmt.Errorf("parts %d: a bucket is laid out in 1 or more parts", t.Parts)
	}
	home := p.Streams[t.Streams[0]].Device
	b := &p.Registers[bucket]
	if len(b.Spec.Shape) != 1 || !b.Spec.DType.IsFloat() || b.Device != home {
		return fmt.Errorf("bucket %s is %v on device %d: want a flat float register on its home device %d", b.Name, b.Spec, b.Device, home)
	}
	n := 0
	for _, r := range parts {
		g := &p.Registers[r]
		if g.Spec.DType != b.Spec.DType || g.Device != home {
			return fmt.Errorf("gradient %s is %v on device %d: want %s on device %d, as its bucket", g.Name, g.Spec, g.Device, b.Spec.DType, home)
		}
		n += g.Spec.Shape.NumElements()
		if t.Parts > 1 && g.Spec.Shape.NumElements()%t.Parts != 0 {
			return fmt.Errorf("gradient %s %v does not split into %d equal parts", g.Name, g.Spec, t.Parts)
		}
	}
	if n != b.Spec.Shape.NumElements() {
		return fmt.Errorf("bucket %s holds %d values, its gradients %d", b.Name, b.Spec.Shape.NumElements(), n)
	}
	return nil
}

func joinKinds(ks []TaskKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// checkAllReduce checks that all-reduce task t, whose registers are in
// range, reduces registers of one float spec on distinct devices, and that
// a tensor-parallel sum reads, on each member, a register of that spec.
func (p *Plan) checkAllReduce(t *Task) error {
	if len(t.Writes) == 0 {
		return fmt.Errorf("an all-reduce writes its members' registers, none given")
	}
	spec := p.Registers[t.Writes[0]].Spec
	seen := map[int]bool{}
	for j, w := range t.Writes {
		reg := &p.Registers[w]
		if !spec.DType.IsFloat() || reg.Spec.DType != spec.DType || !reg.Spec.Shape.Equal(spec.Shape) {
			return fmt.Errorf("reduces %s %v with %v: want one float spec", reg.Name, reg.Spec, spec)
		}
		if seen[reg.Device] {
			return fmt.Errorf("writes two registers on device %d", reg.Device)
		}
		seen[reg.Device] = true
		if t.Sum {
			if len(t.Reads) != len(t.Writes) {
				return fmt.Errorf("a tensor-parallel sum reads one register per member: %d reads, %d writes", len(t.Reads), len(t.Writes))
			}
			in := &p.Registers[t.Reads[j].Reg]
			if in.Device != reg.Device || in.Spec.DType != spec.DType || !in.Spec.Shape.Equal(spec.Shape) {
				return fmt.Errorf("member %d reads %s %v on device %d into %s %v on device %d", j, in.Name, in.Spec, in.Device, reg.Name, reg.Spec, reg.Device)
			}
		}
	}
	if !t.Sum && len(t.Reads) > 0 {
		return fmt.Errorf("a replicas' all-reduce works in place: it reads no other register")
	}
	return nil
}

// checkSplit checks that an all-gather or reduce-scatter task t, whose
// registers are in range, has one member per tensor-parallel rank, each
// reading and writing a register of one float dtype on its own device,
// the writes (gather) or the reads (scatter) being the others along Axis
// times the group.
func (p *Plan) checkSplit(t *Task) error {
	n := len(t.Writes)
	group, what := p.TPDegree(), "tp" // the parts of the whole
	members := group                  // the plan lists
	if p.SharedTP {
		members, what = 1, "tp (rank 0 listed, tp_shared)"
	}
	if !t.Sum { // ZeRO's, over the replicas
		group, members, what = p.DP, p.DP, "dp"
		if p.SharedDP {
			members, what = 1, "dp (replica 0 listed, dp_shared)"
		}
		if p.Zero == 0 {
			return fmt.Errorf("a %s over the replicas (no sum) is ZeRO's: the plan has zero=0", t.Kind)
		}
	}
	if n != members || len(t.Reads) != n || len(t.Streams) != n {
		return fmt.Errorf("a %s has one read, write and stream per member of %s=%d: %d, %d and %d given", t.Kind, what, group, len(t.Reads), n, len(t.Streams))
	}
	in, out := p.Registers[t.Reads[0].Reg].Spec, p.Registers[t.Writes[0]].Spec
	part, whole := in, out
	if t.Kind == ReduceScatter {
		part, whole = out, in
	}
	if t.Axis < 0 || t.Axis >= len(part.Shape) || len(whole.Shape) != len(part.Shape) {
		return fmt.Errorf("axis %d of %v and %v", t.Axis, in.Shape, out.Shape)
	}
	want := part.Shape.Clone()
	want[t.Axis] *= group
	if !in.DType.IsFloat() || in.DType != out.DType || !whole.Shape.Equal(want) {
		return fmt.Errorf("%s %v into %v along axis %d over %d members: want float parts of %v", t.Kind, in, out, t.Axis, group, want)
	}
	seen := map[int]bool{}
	for j := range n {
		r, w := &p.Registers[t.Reads[j].Reg], &p.Registers[t.Writes[j]]
		if r.Device != w.Device || seen[w.Device] || p.Streams[t.Streams[j]].Device != w.Device {
			return fmt.Errorf("member %d reads %s on device %d and writes %s on device %d, on a stream of device %d: want its own device, one per member",
				j, r.Name, r.Device, w.Name, w.Device, p.Streams[t.Streams[j]].Device)
		}
		seen[w.Device] = true
		if d0 := p.Registers[t.Writes[0]].Device; !t.Sum && (p.Stage(w.Device) != p.Stage(d0) || p.TPRank(w.Device) != p.TPRank(d0)) {
			return fmt.Errorf("member %d is on device %d of stage %d and tp rank %d, member 0 on device %d of stage %d and tp rank %d: ZeRO's group is the replicas' devices of one stage and rank",
				j, w.Device, p.Stage(w.Device), p.TPRank(w.Device), d0, p.Stage(d0), p.TPRank(d0))
		}
		if !r.Spec.Shape.Equal(in.Shape) || r.Spec.DType != in.DType || !w.Spec.Shape.Equal(out.Shape) || w.Spec.DType != out.DType {
			return fmt.Errorf("member %d reads %s %v and writes %s %v: want %v and %v like member 0", j, r.Name, r.Spec, w.Name, w.Spec, in, out)
		}
	}
	return nil
}

// checkCompute checks that compute task t's op takes the registers it
// reads and makes those it writes (a kernel would otherwise run past a
// buffer); an update writes the registers it reads, in place. It returns
// the op.
func (p *Plan) checkCompute(t *Task) (graph.Op, error) {
	// A kernel runs on its home stream's device, on registers in that
	// device's arena.
	home := p.Streams[t.Streams[0]].Device
	for _, u := range t.Reads {
		if d := p.Registers[u.Reg].Device; d != home {
			return nil, fmt.Errorf("reads register %s on device %s, but runs on %s (its stream's)", p.Registers[u.Reg].Name, p.Devices[d].Name, p.Devices[home].Name)
		}
	}
	for _, w := range t.Writes {
		if d := p.Registers[w].Device; d != home {
			return nil, fmt.Errorf("writes register %s on device %s, but runs on %s (its stream's)", p.Registers[w].Name, p.Devices[d].Name, p.Devices[home].Name)
		}
	}
	op, err := graph.DecodeOp(*t.Op)
	if err != nil {
		return nil, err
	}
	in := make([]graph.Spec, len(t.Reads))
	for j, u := range t.Reads {
		in[j] = p.Registers[u.Reg].Spec
	}
	out, err := op.Infer(in)
	if err != nil {
		return nil, err
	}
	if _, ok := op.(graph.Mutator); ok {
		return op, nil
	}
	if len(out) != len(t.Writes) {
		return nil, fmt.Errorf("writes %d registers, its op makes %d", len(t.Writes), len(out))
	}
	for j, w := range t.Writes {
		got := p.Registers[w].Spec
		if got.DType != out[j].DType || !slices.Equal(got.Shape, out[j].Shape) {
			return nil, fmt.Errorf("writes %v into register %s, which holds %v", out[j], p.Registers[w].Name, got)
		}
	}
	return op, nil
}

// checkInput checks that input task t, whose registers are in range, writes
// one micro-batch of the global batch's inputs or labels, from within the
// batch: what a feeder fills.
func (p *Plan) checkInput(t *Task) error {
	if len(t.Writes) != 1 {
		return fmt.Errorf("an input writes one register, not %d", len(t.Writes))
	}
	spec := p.Registers[t.Writes[0]].Spec
	images := graph.Spec{Shape: append(graph.Shape{p.MicroBatch}, p.Images.Shape[1:]...), DType: p.Images.DType}
	same := func(a, b graph.Spec) bool { return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) }
	ok := len(p.Images.Shape) > 0 && same(spec, images)
	if len(p.Labels.Shape) == 1 && p.Labels.Shape[0]%p.Batch == 0 {
		ok = ok || same(spec, graph.Spec{Shape: graph.Shape{p.Labels.Shape[0] / p.Batch * p.MicroBatch}, DType: p.Labels.DType})
	}
	if !ok {
		return fmt.Errorf("writes %v, not a micro-batch of %d samples of the inputs %v or labels %v", spec, p.MicroBatch, p.Images, p.Labels)
	}
	if mb := p.Micros(t.Replica); t.Offset < 0 || t.Offset+mb*p.MicroBatch > p.Batch {
		return fmt.Errorf("offset %d: its %d micro-batches of %d run past the batch of %d", t.Offset, mb, p.MicroBatch, p.Batch)
	}
	return nil
}

// firingCount is the number of firings per iteration the tasks imply.
func (p *Plan) firingCount() int {
	n := 0
	for t := range p.Tasks {
		n += p.Fires(t)
	}
	return n
}
