package plans

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// Schedule is a pipeline schedule.
type Schedule string

const (
	GPipe    Schedule = "gpipe" // all forwards, then all backwards
	OneFOneB Schedule = "1f1b"  // warm-up forwards, then one forward one backward, then cool-down
)

// Strategy says how a training iteration is parallelized: DP data-parallel
// replicas, PP pipeline stages, MB micro-batches per replica per iteration,
// and the pipeline schedule.
type Strategy struct {
	DP, PP, MB int
	// TP is the tensor-parallel degree (Megatron-LM's layout, see
	// graph.TPSum): each replica's stage runs on a group of TP devices that
	// split its layers' weights. 0 means 1.
	TP int
	// SP adds sequence parallelism to tensor parallelism (sp=on;
	// Korthikanti et al., 2022, see graph.TPGather): the activations
	// between a group's tensor-parallel layers are split along the
	// sequence, each sum becoming a reduce-scatter and an all-gather.
	SP bool
	// VPP is the number of model stages each pipeline rank runs under
	// Megatron-LM's interleaved 1F1B schedule (vpp=V; Narayanan et al.,
	// 2021): the model is cut into PP·VPP stages, rank s running stages
	// s, s+PP, …, which shrinks the pipeline's bubble by VPP for VPP times
	// the transfers. 0 means 1, no interleaving.
	VPP int
	// Zero is the ZeRO stage (Rajbhandari et al., 2020): with 1, each of
	// the DP replicas keeps the optimizer state of 1/DP of every weight
	// (split along its first axis, where DP divides it), reduce-scatters
	// the gradients instead of all-reducing them, updates its part and
	// all-gathers the updated weight. With 2 it also keeps only its part
	// of the gradient: every micro-batch's gradient is reduce-scattered as
	// it is produced and accumulated in parts. With 3 it keeps only its
	// part of the weight too, all-gathered into a temporary before each
	// micro-batch's forward and again before its backward use (as FSDP),
	// with no all-gather after the update. Stages 2 and 3 run these
	// collectives once per round (Task.Rounds), as many as the most
	// micro-batches of a replica: with uneven micro-batches (mb=7:1,
	// mb=auto) a replica that runs fewer joins the last rounds without
	// computing. Under tensor parallelism
	// (tp=T) a device's tensors are its rank's parts, which it splits
	// with the replicas holding the same parts: the devices of the same
	// stage and tensor-parallel rank (Megatron-LM's distributed
	// optimizer). 0: none.
	Zero int
	// Prefetch, under zero=3, gathers each layer's weights Prefetch
	// layers ahead of their use, as FSDP's forward and backward prefetch
	// (prefetch=N; 1 is FSDP's, whose limit_all_gathers keeps two layers
	// gathered): the gathers run on the device's communication stream
	// ("gather"), beside the compute, and a layer's wait until the
	// layer N+1 before it in the device's order has released its gathered
	// weights, so that at most N+1 layers are whole at once; the compiler
	// refuses N beyond the model's layers less one. 0: each gather in
	// line on the compute stream, just before its first reader.
	Prefetch int
	// Place, when set (one device type per pipeline stage; pp=1: one;
	// written place=v100:a100, a run of stages as v100*2:a100*6), says
	// where each stage runs: replica r's stage s takes the next
	// dp·tp… devices of type Place[s] from the pool the compiler is given
	// (Config.Devices), in the pool's order. An entry names a type
	// exactly or by a part of its name that only one of the pool's types
	// contains, case aside (a100, v100, cpu). Unset, the plan takes the
	// pool's first devices in order (see PlaceDevices).
	Place []string
	// DeviceNames, when set, names the plan's devices one by one, in the
	// plan's order (device (replica·pp + stage)·tp + rank), from the pool
	// the compiler is given: a stage's group, replica by replica, where
	// Place only gives its device type (written devices=A+B+…; a strategy
	// file lists them stage by stage, see ParseStrategyFile). Unset, Place
	// or the pool's order decides.
	DeviceNames []string
	Sched       Schedule
	// Shares, when set (one count per replica), splits the iteration's
	// micro-batches unevenly: replica r runs Shares[r] of them, all of one
	// size, and MB is the largest share; mb=auto (AutoShares) has
	// plans/search choose them for unequal devices.
	Shares []int
	// AutoShares asks for Shares to be chosen by the simulator (mb=auto):
	// such a strategy is resolved by plans/search before it is compiled;
	// Shares (or MB) holds the even split it starts from.
	AutoShares bool
	// Layers, when set (one count per stage), cuts the pipeline by hand:
	// stage s takes the next Layers[s] layers of the model: its
	// transformer blocks, or for the other models each op that reads a
	// weight matrix or filter (see graph.StartLayer). Unset,
	// stages are cut to balance their forward FLOPs, which suits equal
	// devices only.
	Layers []int
	// AutoLayers asks for Layers to be chosen by the simulator
	// (layers=auto), as AutoShares does for Shares.
	AutoLayers bool
	// Recompute trades time for memory: with RecomputeFull each layer's
	// forward ops run again just before its backward ops, micro-batch by
	// micro-batch, so that only the layers' inputs are kept (at the cost
	// of a second forward pass); with RecomputeSelective only the
	// attention ops do, whose probabilities are the largest activations
	// for the least arithmetic (Korthikanti et al., 2022).
	Recompute Recompute
	// MaxSlots, when > 0, caps every register's slot count; a cap too small
	// for the schedule is rejected at compile time.
	MaxSlots int
	// Bucket, when > 0, packs the gradients all-reduced over the
	// data-parallel replicas into buckets of up to Bucket bytes each
	// (bucket=25MiB; PyTorch DDP's bucket_cap_mb, Horovod's tensor
	// fusion): in the order they become ready, a stage's gradients of one
	// dtype fill a bucket until the next would not fit, and each replica
	// copies them into a flat register (a Pack task), all-reduces that
	// once and copies the result out into the reduced gradients the
	// updates read (Unpack). A gradient larger than Bucket is a bucket of
	// its own, all-reduced in place. One all-reduce for many small ones
	// pays one collective's latency and synchronization instead of many,
	// for two copies of the bucket and a wait until its last gradient is
	// ready. Under ZeRO stage 1 the gradients it reduce-scatters fill
	// buckets of their own, packed part by part (Task.Parts; DeepSpeed's
	// reduce_bucket_size); stages 2 and 3 scatter each micro-batch's
	// gradient as it is produced, unbucketed. 0: each gradient alone.
	Bucket units.Bytes
}

// Recompute is what a strategy recomputes in the backward pass.
type Recompute string

const (
	RecomputeNone      Recompute = ""
	RecomputeSelective Recompute = "selective"
	RecomputeFull      Recompute = "full"
)

// Devices is the number of devices the strategy uses.
func (s Strategy) Devices() int { return s.DP * s.PP * s.TPDegree() }

// VirtualStages is the model stages per pipeline rank, at least 1.
func (s Strategy) VirtualStages() int { return max(s.VPP, 1) }

// ModelStages is the number of stages the model is cut into: PP·VPP.
func (s Strategy) ModelStages() int { return s.PP * s.VirtualStages() }

// TPDegree is the tensor-parallel degree, at least 1.
func (s Strategy) TPDegree() int { return max(s.TP, 1) }

// Micros is the number of micro-batches replica r runs per iteration.
func (s Strategy) Micros(r int) int {
	if s.Shares != nil {
		return s.Shares[r]
	}
	return s.MB
}

// TotalMicros is the number of micro-batches of an iteration, over all
// replicas.
func (s Strategy) TotalMicros() int {
	if s.Shares != nil {
		return sum(s.Shares)
	}
	return s.DP * s.MB
}

// WithShares returns s with the replicas' micro-batch counts set to
// shares (one per replica, each ≥ 1), resolved (AutoShares cleared): MB is the
// largest share, and equal shares are the uniform strategy (no Shares).
func (s Strategy) WithShares(shares []int) Strategy {
	s.AutoShares = false
	s.MB = slices.Max(shares)
	s.Shares = nil
	if slices.Min(shares) != s.MB {
		s.Shares = slices.Clone(shares)
	}
	return s
}

// WithLayers returns s with the stages' layer counts set to layers (one per
// stage, each ≥ 1), resolved (AutoLayers cleared).
func (s Strategy) WithLayers(layers []int) Strategy {
	s.AutoLayers = false
	s.Layers = slices.Clone(layers)
	return s
}

// EvenShares splits n micro-batches over dp replicas as evenly as
// possible, the first replicas taking the remainder.
func EvenShares(n, dp int) []int {
	shares := make([]int, dp)
	for r := range shares {
		shares[r] = n / dp
		if r < n%dp {
			shares[r]++
		}
	}
	return shares
}

// FormatCounts writes counts per replica or per stage (Shares, Layers) as
// the strategy grammar does: 3:1.
func FormatCounts(shares []int) string {
	parts := make([]string, len(shares))
	for i, x := range shares {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ":")
}

func (s Strategy) String() string {
	if s.DP == 1 && s.TPDegree() == 1 && s.PP == 1 && s.MB == 1 && s.MaxSlots == 0 && s.Bucket == 0 && !s.AutoShares && s.Recompute == RecomputeNone && s.Place == nil && s.DeviceNames == nil {
		return "single"
	}
	var parts []string
	if s.DP > 1 {
		parts = append(parts, "dp="+strconv.Itoa(s.DP))
	}
	if s.TP > 1 {
		parts = append(parts, "tp="+strconv.Itoa(s.TP))
	}
	if s.SP {
		parts = append(parts, "sp=on")
	}
	if s.PP > 1 {
		parts = append(parts, "pp="+strconv.Itoa(s.PP))
	}
	if s.VPP > 1 {
		parts = append(parts, "vpp="+strconv.Itoa(s.VPP))
	}
	if s.Zero > 0 {
		parts = append(parts, "zero="+strconv.Itoa(s.Zero))
	}
	if s.Prefetch > 0 {
		parts = append(parts, "prefetch="+strconv.Itoa(s.Prefetch))
	}
	switch {
	case s.AutoLayers:
		parts = append(parts, "layers=auto")
	case s.Layers != nil:
		parts = append(parts, "layers="+FormatCounts(s.Layers))
	}
	if s.Place != nil {
		parts = append(parts, "place="+formatPlace(s.Place))
	}
	if s.DeviceNames != nil {
		parts = append(parts, "devices="+strings.Join(s.DeviceNames, "+"))
	}
	switch {
	case s.AutoShares:
		parts = append(parts, "mb=auto:"+strconv.Itoa(s.TotalMicros()))
	case s.Shares != nil:
		parts = append(parts, "mb="+FormatCounts(s.Shares))
	case s.MB > 1:
		parts = append(parts, "mb="+strconv.Itoa(s.MB))
	}
	if s.PP > 1 || s.MB > 1 {
		parts = append(parts, "sched="+string(s.Sched))
	}
	if s.Recompute != RecomputeNone {
		parts = append(parts, "recompute="+string(s.Recompute))
	}
	if s.MaxSlots > 0 {
		parts = append(parts, "slots="+strconv.Itoa(s.MaxSlots))
	}
	if s.Bucket > 0 {
		parts = append(parts, "bucket="+formatBytes(s.Bucket))
	}
	return strings.Join(parts, ",")
}

// formatBytes writes a size exactly, in the largest binary unit that
// divides it (25MiB, 1536KiB, 1000B), as ParseStrategy reads it.
func formatBytes(b units.Bytes) string {
	for _, u := range []struct {
		name string
		size units.Bytes
	}{{"GiB", units.GiB}, {"MiB", units.MiB}, {"KiB", units.KiB}} {
		if b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// formatPlace writes a placement with runs of a type as TYPE*N.
func formatPlace(place []string) string {
	var parts []string
	for i := 0; i < len(place); {
		j := i + 1
		for j < len(place) && place[j] == place[i] {
			j++
		}
		if j-i > 1 {
			parts = append(parts, place[i]+"*"+strconv.Itoa(j-i))
		} else {
			parts = append(parts, place[i])
		}
		i = j
	}
	return strings.Join(parts, ":")
}

// maxBucket bounds a gradient bucket (Strategy.Bucket): 1 TiB.
const maxBucket = 1 << 40

// maxCount bounds every count of a strategy, so that their products (the
// devices, the firings) fit in an int.
const maxCount = 1 << 20

// keyError is an error of ParseStrategy about the value of key, or about
// key and others: a strategy file gives the line of that key.
type keyError struct {
	key string
	err error
}

func keyErr(key string, err error) error { return &keyError{key, err} }
func (e *keyError) Error() string        { return e.err.Error() }
func (e *keyError) Unwrap() error        { return e.err }

// ParseStrategy parses the strategy grammar of DESIGN §5 for the cases this
// compiler supports: "single", or comma-separated keys dp=D, tp=T, sp=on|off, pp=P, vpp=V (interleaved stages per pipeline rank), zero=0|1|2|3,
// prefetch=N (layers gathered ahead under zero=3; see Strategy.Prefetch), mb=M or
// mbs=S (micro-batch size; needs the global batch), sched=gpipe|1f1b
// (default 1f1b), recompute=none|selective|full, slots=N (cap register
// slots), bucket=SIZE (gradients all-reduced together; see
// Strategy.Bucket), place=T0:T1:… (the device type of each stage; see
// Strategy.Place) and devices=A+B+… (every device by name, in the plan's
// order; see Strategy.DeviceNames).
// Data parallelism may be
// uneven: mb=M0:M1:… gives each replica's micro-batches (one count per
// replica; the micro-batch size is the batch over their sum), and
// mb=auto with mbs=S (or mb=auto:N, N micro-batches) leaves the split of
// the batch's micro-batches to the simulator (Strategy.AutoShares; see
// plans/search). So may
// pipelines: layers=L0:L1:… gives each stage's layers, layers=auto leaves
// the cut to the simulator.
func ParseStrategy(str string, batch int) (Strategy, error) {
	s := Strategy{DP: 1, PP: 1, MB: 1, Sched: OneFOneB}
	str = strings.TrimSpace(str)
	if str == "" || str == "single" {
		return s, nil
	}
	seen := map[string]bool{}
	mbs := 0
	autoTotal := 0 // of mb=auto:N
	count := func(k, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCount {
			return 0, keyErr(k, fmt.Errorf("plans: strategy %q: %s=%s: want a positive integer up to %d", str, k, v, maxCount))
		}
		return n, nil
	}
	for _, kv := range strings.Split(str, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return s, fmt.Errorf("plans: strategy %q: %q is not key=value", str, kv)
		}
		if seen[k] {
			return s, fmt.Errorf("plans: strategy %q: %s given twice", str, k)
		}
		seen[k] = true
		switch {
		case k == "sched":
			switch Schedule(v) {
			case GPipe, OneFOneB:
				s.Sched = Schedule(v)
			default:
				return s, keyErr("sched", fmt.Errorf("plans: strategy %q: sched=%s: want gpipe or 1f1b", str, v))
			}
			continue
		case k == "recompute":
			switch Recompute(v) {
			case RecomputeFull, RecomputeSelective:
				s.Recompute = Recompute(v)
			case "none":
				s.Recompute = RecomputeNone
			default:
				return s, keyErr("recompute", fmt.Errorf("plans: strategy %q: recompute=%s: want none, selective or full", str, v))
			}
			continue
		case k == "sp":
			switch v {
			case "on":
				s.SP = true
			case "off":
				s.SP = false
			default:
				return s, keyErr("sp", fmt.Errorf("plans: strategy %q: sp=%s: want on or off", str, v))
			}
			continue
		case k == "zero":
			switch v {
			case "0":
				s.Zero = 0
			case "1", "2", "3":
				s.Zero = int(v[0] - '0')
			default:
				return s, keyErr("zero", fmt.Errorf("plans: strategy %q: zero=%s: want 0, 1, 2 or 3", str, v))
			}
			continue
		case k == "prefetch":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxCount {
				return s, keyErr("prefetch", fmt.Errorf("plans: strategy %q: prefetch=%s: want the layers gathered ahead, 0 to %d", str, v, maxCount))
			}
			s.Prefetch = n
			continue
		case k == "bucket":
			if v == "0" || v == "off" {
				s.Bucket = 0
				continue
			}
			b, err := topology.ParseSize(v)
			if err != nil || b < 1 || b > maxBucket {
				return s, keyErr("bucket", fmt.Errorf("plans: strategy %q: bucket=%s: want a size of gradients all-reduced at once, as 25MiB (up to %v), or 0 for none", str, v, units.Bytes(maxBucket)))
			}
			s.Bucket = b
			continue
		case k == "mb" && v == "auto":
			s.AutoShares = true
			continue
		case k == "mb" && strings.HasPrefix(v, "auto:"):
			n, err := count(k, strings.TrimPrefix(v, "auto:"))
			if err != nil {
				return s, keyErr("mb", fmt.Errorf("plans: strategy %q: mb=%s: want auto:N, N micro-batches in all", str, v))
			}
			s.AutoShares, autoTotal = true, n
			continue
		case k == "place":
			for _, t := range strings.Split(v, ":") {
				t, times := strings.TrimSpace(t), 1
				if name, rep, ok := strings.Cut(t, "*"); ok {
					n, err := count(k, rep)
					if err != nil || len(s.Place)+n > maxCount {
						return s, keyErr("place", fmt.Errorf("plans: strategy %q: place=%s: %q: want TYPE*N, N stages in all up to %d", str, v, t, maxCount))
					}
					t, times = strings.TrimSpace(name), n
				}
				if t == "" || strings.Contains(t, "*") {
					return s, keyErr("place", fmt.Errorf("plans: strategy %q: place=%s: want a device type per stage, as v100:a100 or v100*2:a100*6", str, v))
				}
				for range times {
					s.Place = append(s.Place, t)
				}
			}
			continue
		case k == "devices":
			for name := range strings.SplitSeq(v, "+") {
				name = strings.TrimSpace(name)
				if name == "" || len(s.DeviceNames) == maxCount {
					return s, keyErr("devices", fmt.Errorf("plans: strategy %q: devices=%s: want device names joined by +, as dgx0/gpu0+dgx0/gpu1, at most %d", str, v, maxCount))
				}
				s.DeviceNames = append(s.DeviceNames, name)
			}
			continue
		case k == "layers" && v == "auto":
			s.AutoLayers = true
			continue
		case k == "layers":
			for _, c := range strings.Split(v, ":") {
				n, err := count(k, c)
				if err != nil {
					return s, keyErr("layers", fmt.Errorf("plans: strategy %q: layers=%s: want one positive count per stage, as 3:1", str, v))
				}
				s.Layers = append(s.Layers, n)
			}
			continue
		case k == "mb" && strings.Contains(v, ":"):
			total := 0
			for _, c := range strings.Split(v, ":") {
				n, err := count(k, c)
				if err != nil {
					return s, keyErr("mb", fmt.Errorf("plans: strategy %q: mb=%s: want one positive count per replica, as 3:1", str, v))
				}
				if total += n; total > maxCount {
					return s, keyErr("mb", fmt.Errorf("plans: strategy %q: mb=%s: over %d micro-batches", str, v, maxCount))
				}
				s.Shares = append(s.Shares, n)
			}
			continue
		}
		n, err := count(k, v)
		if err != nil {
			return s, err
		}
		switch k {
		case "dp":
			s.DP = n
		case "tp":
			if n > 1 { // tp=1 is the zero value, as an omitted tp
				s.TP = n
			}
		case "pp":
			s.PP = n
		case "vpp":
			if n > 1 { // vpp=1 is no interleaving, as an omitted vpp
				s.VPP = n
			}
		case "mb":
			s.MB = n
		case "mbs":
			mbs = n
		case "slots":
			s.MaxSlots = n
		default:
			return s, fmt.Errorf("plans: strategy %q: unknown key %q (known: dp, tp, sp, pp, vpp, zero, prefetch, mb, mbs, layers, place, devices, sched, recompute, slots, bucket)", str, k)
		}
	}
	switch {
	case s.SP && s.TP < 2:
		return s, keyErr("sp", fmt.Errorf("plans: strategy %q: sp=on splits the sequence over a tensor-parallel group: it needs tp ≥ 2", str))
	case s.Zero > 0 && s.DP < 2:
		return s, keyErr("zero", fmt.Errorf("plans: strategy %q: zero=%d splits optimizer state over data-parallel replicas: it needs dp ≥ 2", str, s.Zero))
	case s.Bucket > 0 && s.DP < 2:
		return s, keyErr("bucket", fmt.Errorf("plans: strategy %q: bucket=%s packs the gradients all-reduced over data-parallel replicas: it needs dp ≥ 2", str, formatBytes(s.Bucket)))
	case s.Prefetch > 0 && s.Zero != 3:
		return s, keyErr("prefetch", fmt.Errorf("plans: strategy %q: prefetch=%d gathers ZeRO stage 3's weights ahead of their use: it needs zero=3", str, s.Prefetch))
	case s.VPP > 1 && (s.PP < 2 || s.Sched != OneFOneB || s.Layers != nil || s.AutoLayers || s.AutoShares || s.Shares != nil):
		return s, keyErr("vpp", fmt.Errorf("plans: strategy %q: vpp interleaves the stages of a pipeline: it needs pp ≥ 2, sched=1f1b, stages cut evenly and the same micro-batches per replica", str))
	case (s.Layers != nil || s.AutoLayers) && s.PP < 2:
		return s, keyErr("layers", fmt.Errorf("plans: strategy %q: layers cuts a pipeline: it needs pp ≥ 2", str))
	case seen["sched"] && s.PP < 2 && !seen["mb"] && !seen["mbs"]:
		return s, keyErr("sched", fmt.Errorf("plans: strategy %q: sched orders a pipeline's or a replica's micro-batches: it needs pp ≥ 2 or mb ≥ 2", str))
	case s.Layers != nil && len(s.Layers) != s.PP:
		return s, keyErr("layers", fmt.Errorf("plans: strategy %q: layers gives %d counts for pp=%d stages", str, len(s.Layers), s.PP))
	case s.Place != nil && len(s.Place) != s.PP:
		return s, keyErr("place", fmt.Errorf("plans: strategy %q: place gives %d device types for pp=%d stages", str, len(s.Place), s.PP))
	case s.Place != nil && s.DeviceNames != nil:
		return s, keyErr("devices", fmt.Errorf("plans: strategy %q: give place (a device type per stage) or devices (every device by name), not both", str))
	case s.DeviceNames != nil && len(s.DeviceNames) != s.Devices():
		return s, keyErr("devices", fmt.Errorf("plans: strategy %q: devices names %d devices; dp×pp×tp = %d×%d×%d needs %d", str, len(s.DeviceNames), s.DP, s.PP, s.TPDegree(), s.Devices()))
	case s.AutoLayers && s.AutoShares:
		return s, keyErr("layers", fmt.Errorf("plans: strategy %q: layers=auto and mb=auto are searched one at a time: fix one (e.g. mb=7:1) and search the other", str))
	}
	switch {
	case s.AutoShares:
		switch {
		case autoTotal > 0 && mbs > 0:
			return s, keyErr("mbs", fmt.Errorf("plans: strategy %q: give mb=auto:N or mbs, not both", str))
		case autoTotal > 0:
			if autoTotal < s.DP || batch < 1 || batch%autoTotal != 0 {
				return s, keyErr("mb", fmt.Errorf("plans: strategy %q: batch %d does not split into %d micro-batches, at least one per replica of dp=%d", str, batch, autoTotal, s.DP))
			}
			return s.WithShares(EvenShares(autoTotal, s.DP)).withAuto(), nil
		case mbs == 0:
			return s, keyErr("mb", fmt.Errorf("plans: strategy %q: mb=auto needs mbs=S, the micro-batch size (or mb=auto:N, N micro-batches), so that there are micro-batches to split", str))
		}
		if batch < 1 || batch%mbs != 0 || batch/mbs < s.DP {
			return s, keyErr("mbs", fmt.Errorf("plans: strategy %q: batch %d does not split into at least dp=%d micro-batches of %d", str, batch, s.DP, mbs))
		}
		return s.WithShares(EvenShares(batch/mbs, s.DP)).withAuto(), nil
	case s.Shares != nil:
		if len(s.Shares) != s.DP {
			return s, keyErr("mb", fmt.Errorf("plans: strategy %q: mb gives %d counts for dp=%d replicas", str, len(s.Shares), s.DP))
		}
		if seen["mbs"] {
			return s, keyErr("mbs", fmt.Errorf("plans: strategy %q: give mb or mbs, not both", str))
		}
		return s.WithShares(s.Shares), nil
	case seen["mb"] && seen["mbs"]:
		return s, keyErr("mbs", fmt.Errorf("plans: strategy %q: give mb or mbs, not both", str))
	}
	if mbs > 0 {
		if batch < 1 {
			return s, keyErr("mbs", fmt.Errorf("plans: strategy %q: mbs=%d needs a global batch ≥ 1, got %d", str, mbs, batch))
		}
		if batch%s.DP != 0 || batch/s.DP%mbs != 0 {
			return s, keyErr("mbs", fmt.Errorf("plans: strategy %q: batch %d does not split into dp=%d replicas of micro-batches of %d", str, batch, s.DP, mbs))
		}
		s.MB = batch / (s.DP * mbs)
	}
	if s.VPP > 1 && s.MB%s.PP != 0 {
		return s, keyErr("vpp", fmt.Errorf("plans: strategy %q: vpp=%d sends micro-batches through the stages pp=%d at a time: mb=%d is not a multiple of pp", str, s.VPP, s.PP, s.MB))
	}
	return s, nil
}

func (s Strategy) withAuto() Strategy { s.AutoShares = true; return s }
