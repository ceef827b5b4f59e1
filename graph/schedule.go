package graph

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Schedule varies an optimizer's learning rate over the training steps:
// it rises linearly from lr/Warmup to lr over the first Warmup steps, then
// decays over the steps up to Steps, down to MinRatio·lr: along half a
// cosine (Decay "cosine", as SGDR without restarts and most language-model
// recipes) or a line ("linear"); no Decay holds it. After Steps it stays at
// the end of the decay. The zero Schedule holds the rate throughout.
//
// The step is the one being taken, counted from 1 over the whole training,
// resumed runs included (the iteration Adam's bias correction counts), so a
// run resumed from a checkpoint goes on along the same schedule.
type Schedule struct {
	Decay    string  `json:"decay,omitempty"` // "" (none), "cosine" or "linear"
	Warmup   int     `json:"warmup,omitempty"`
	Steps    int     `json:"steps,omitempty"`
	MinRatio float64 `json:"min_ratio,omitempty"`
}

// ScheduleOf is an update op's learning-rate schedule (the zero Schedule
// for any other op).
func ScheduleOf(op Op) Schedule {
	switch op := op.(type) {
	case SGDUpdate:
		return op.Schedule
	case MomentumUpdate:
		return op.Schedule
	case AdamUpdate:
		return op.Schedule
	}
	return Schedule{}
}

// IsZero says whether s holds the rate throughout.
func (s Schedule) IsZero() bool { return s == Schedule{} }

// decays says whether s lowers the rate after its warm-up.
func (s Schedule) decays() bool { return s.Decay == "cosine" || s.Decay == "linear" }

// Factor is the fraction of the base rate at step (≥ 1), in float64.
func (s Schedule) Factor(step int) float64 {
	if s.Warmup > 0 && step <= s.Warmup {
		return float64(max(step, 1)) / float64(s.Warmup)
	}
	if !s.decays() {
		return 1
	}
	span := s.Steps - s.Warmup
	progress := min(float64(step-s.Warmup)/float64(span), 1)
	shape := 1 - progress // linear
	if s.Decay == "cosine" {
		shape = (1 + math.Cos(math.Pi*progress)) / 2
	}
	return s.MinRatio + (1-s.MinRatio)*shape
}

// Rate is lr at step, as the update kernels take it.
func (s Schedule) Rate(lr float32, step int) float32 {
	if s.IsZero() {
		return lr
	}
	return float32(float64(lr) * s.Factor(step))
}

// Validate says what is wrong with s, if anything.
func (s Schedule) Validate() error {
	switch s.Decay {
	case "", "cosine", "linear":
	default:
		return fmt.Errorf("graph: learning-rate schedule: unknown decay %q (want cosine or linear, or none)", s.Decay)
	}
	switch {
	case s.Warmup < 0:
		return fmt.Errorf("graph: learning-rate schedule: warmup=%d steps, want ≥ 0", s.Warmup)
	case s.Steps < 0:
		return fmt.Errorf("graph: learning-rate schedule: steps=%d, want ≥ 0", s.Steps)
	case !(s.MinRatio >= 0 && s.MinRatio <= 1):
		return fmt.Errorf("graph: learning-rate schedule: min=%v, want a fraction of the rate in [0, 1]", s.MinRatio)
	case s.decays() && s.Steps <= s.Warmup:
		return fmt.Errorf("graph: learning-rate schedule %s: steps=%d must exceed warmup=%d: the decay runs from the end of the warm-up to step %d", s.Decay, s.Steps, s.Warmup, s.Steps)
	case !s.decays() && (s.Steps != 0 || s.MinRatio != 0):
		return fmt.Errorf("graph: learning-rate schedule %s: steps= and min= are for a decay (cosine or linear)", s.kind())
	}
	return nil
}

// kind is the decay's name, "constant" for none.
func (s Schedule) kind() string {
	if s.Decay == "" {
		return "constant"
	}
	return s.Decay
}

// String is the schedule as ParseSchedule reads it.
func (s Schedule) String() string {
	if s.IsZero() {
		return "constant"
	}
	var opts []string
	if s.Warmup > 0 {
		opts = append(opts, "warmup="+strconv.Itoa(s.Warmup))
	}
	if s.decays() {
		opts = append(opts, "steps="+strconv.Itoa(s.Steps))
		if s.MinRatio > 0 {
			opts = append(opts, "min="+strconv.FormatFloat(s.MinRatio, 'g', -1, 64))
		}
	}
	if len(opts) == 0 {
		return s.kind()
	}
	return s.kind() + ":" + strings.Join(opts, ",")
}

// ParseSchedule reads a learning-rate schedule: a decay, constant, cosine
// or linear, with options after a colon: warmup=N (steps of linear
// warm-up), steps=N (the step the decay ends at) and min=R (the rate it
// ends at, a fraction of the base rate), e.g. "cosine:warmup=100,steps=2000,min=0.1".
// A decay without steps= takes defaultSteps (0: it must be given).
func ParseSchedule(spec string, defaultSteps int) (Schedule, error) {
	kind, opts, _ := strings.Cut(spec, ":")
	kind = strings.TrimSpace(kind)
	s := Schedule{Decay: kind}
	if kind == "constant" || kind == "" {
		s.Decay = ""
	}
	switch s.Decay {
	case "", "cosine", "linear":
	default:
		return Schedule{}, fmt.Errorf("graph: learning-rate schedule %q: unknown decay (want constant, cosine or linear)", kind)
	}
	seen := map[string]bool{}
	stepsGiven := false
	if opts != "" {
		for kv := range strings.SplitSeq(opts, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return Schedule{}, fmt.Errorf("graph: learning-rate schedule %q: option %q is not key=value", spec, kv)
			}
			if seen[k] {
				return Schedule{}, fmt.Errorf("graph: learning-rate schedule %q: %s given twice", spec, k)
			}
			seen[k] = true
			v = strings.TrimSpace(v)
			var err error
			switch k {
			case "warmup":
				s.Warmup, err = strconv.Atoi(v)
			case "steps":
				s.Steps, err = strconv.Atoi(v)
				stepsGiven = true
			case "min":
				s.MinRatio, err = strconv.ParseFloat(v, 64)
			default:
				return Schedule{}, fmt.Errorf("graph: learning-rate schedule %q: unknown option %q (want warmup, steps or min)", spec, k)
			}
			if err != nil {
				return Schedule{}, fmt.Errorf("graph: learning-rate schedule %q: %s=%q is not a number", spec, k, v)
			}
		}
	}
	if s.decays() && !stepsGiven {
		if defaultSteps <= 0 {
			// A bad value among the options given is said first.
			if probe := (Schedule{Decay: s.Decay, Warmup: s.Warmup, Steps: max(s.Warmup, 0) + 1, MinRatio: s.MinRatio}); probe.Validate() != nil {
				return Schedule{}, probe.Validate()
			}
			return Schedule{}, fmt.Errorf("graph: learning-rate schedule %q: say at which step the decay ends (steps=N)", spec)
		}
		s.Steps = defaultSteps
	}
	if err := s.Validate(); err != nil {
		return Schedule{}, err
	}
	return s, nil
}
