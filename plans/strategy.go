package plans

import (
	"fmt"
	"strconv"
	"strings"
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
	Sched      Schedule
	// MaxSlots, when > 0, caps every register's slot count; a cap too small
	// for the schedule is rejected at compile time.
	MaxSlots int
}

// Devices is the number of devices the strategy uses.
func (s Strategy) Devices() int { return s.DP * s.PP }

func (s Strategy) String() string {
	if s.DP == 1 && s.PP == 1 && s.MB == 1 && s.MaxSlots == 0 {
		return "single"
	}
	var parts []string
	if s.DP > 1 {
		parts = append(parts, "dp="+strconv.Itoa(s.DP))
	}
	if s.PP > 1 {
		parts = append(parts, "pp="+strconv.Itoa(s.PP))
	}
	if s.MB > 1 {
		parts = append(parts, "mb="+strconv.Itoa(s.MB))
	}
	if s.PP > 1 || s.MB > 1 {
		parts = append(parts, "sched="+string(s.Sched))
	}
	if s.MaxSlots > 0 {
		parts = append(parts, "slots="+strconv.Itoa(s.MaxSlots))
	}
	return strings.Join(parts, ",")
}

// unsupported are strategy keys of DESIGN §5 that the compiler does not
// implement yet; they are rejected by name rather than as unknown.
var unsupported = map[string]bool{"tp": true, "vpp": true, "recompute": true, "zero": true, "sp": true}

// maxCount bounds every count of a strategy, so that their products (the
// devices, the firings) fit in an int.
const maxCount = 1 << 20

// ParseStrategy parses the strategy grammar of DESIGN §5 for the uniform
// cases this compiler supports: "single", or comma-separated keys
// dp=D, pp=P, mb=M or mbs=S (micro-batch size; needs the global batch),
// sched=gpipe|1f1b (default 1f1b), and slots=N (cap register slots).
func ParseStrategy(str string, batch int) (Strategy, error) {
	s := Strategy{DP: 1, PP: 1, MB: 1, Sched: OneFOneB}
	str = strings.TrimSpace(str)
	if str == "" || str == "single" {
		return s, nil
	}
	seen := map[string]bool{}
	mbs := 0
	for _, kv := range strings.Split(str, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return s, fmt.Errorf("plans: strategy %q: %q is not key=value", str, kv)
		}
		if seen[k] {
			return s, fmt.Errorf("plans: strategy %q: %s given twice", str, k)
		}
		seen[k] = true
		if unsupported[k] {
			return s, fmt.Errorf("plans: strategy %q: %s is not supported by this compiler yet (supported: dp, pp, mb, mbs, sched, slots)", str, k)
		}
		if k == "sched" {
			switch Schedule(v) {
			case GPipe, OneFOneB:
				s.Sched = Schedule(v)
			default:
				return s, fmt.Errorf("plans: strategy %q: sched=%s: want gpipe or 1f1b", str, v)
			}
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCount {
			return s, fmt.Errorf("plans: strategy %q: %s=%s: want a positive integer up to %d", str, k, v, maxCount)
		}
		switch k {
		case "dp":
			s.DP = n
		case "pp":
			s.PP = n
		case "mb":
			s.MB = n
		case "mbs":
			mbs = n
		case "slots":
			s.MaxSlots = n
		default:
			return s, fmt.Errorf("plans: strategy %q: unknown key %q (known: dp, pp, mb, mbs, sched, slots)", str, k)
		}
	}
	if seen["mb"] && seen["mbs"] {
		return s, fmt.Errorf("plans: strategy %q: give mb or mbs, not both", str)
	}
	if mbs > 0 {
		if batch < 1 {
			return s, fmt.Errorf("plans: strategy %q: mbs=%d needs a global batch ≥ 1, got %d", str, mbs, batch)
		}
		if batch%s.DP != 0 || batch/s.DP%mbs != 0 {
			return s, fmt.Errorf("plans: strategy %q: batch %d does not split into dp=%d replicas of micro-batches of %d", str, batch, s.DP, mbs)
		}
		s.MB = batch / (s.DP * mbs)
	}
	return s, nil
}
