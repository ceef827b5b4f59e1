package graph

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The schedule's factor at known steps, against the formulas written out
// in float64: the warm-up's line, the decay's ends and midpoint.
func TestScheduleFactor(t *testing.T) {
	cos := Schedule{Decay: "cosine", Warmup: 10, Steps: 110, MinRatio: 0.1}
	lin := Schedule{Decay: "linear", Warmup: 10, Steps: 110, MinRatio: 0.1}
	cases := []struct {
		s    Schedule
		step int
		want float64
	}{
		{Schedule{}, 1, 1},
		{Schedule{}, 1e6, 1},
		{Schedule{Warmup: 4}, 1, 0.25},
		{Schedule{Warmup: 4}, 3, 0.75},
		{Schedule{Warmup: 4}, 4, 1},
		{Schedule{Warmup: 4}, 5, 1},
		{cos, 1, 0.1},
		{cos, 10, 1},
		{cos, 60, 0.1 + 0.9*0.5},                            // halfway: cos(π/2) = 0
		{cos, 35, 0.1 + 0.9*(1+math.Cos(math.Pi*25/100))/2}, // a quarter of the way
		{cos, 110, 0.1},
		{cos, 500, 0.1},
		{lin, 60, 0.1 + 0.9*0.5},
		{lin, 35, 0.1 + 0.9*0.75},
		{lin, 110, 0.1},
		{Schedule{Decay: "cosine", Steps: 4}, 1, (1 + math.Cos(math.Pi/4)) / 2},
		{Schedule{Decay: "linear", Steps: 4}, 4, 0},
	}
	for _, c := range cases {
		require.InDelta(t, c.want, c.s.Factor(c.step), 1e-15, "%s at step %d", c.s, c.step)
		require.Equal(t, float32(float64(float32(0.3))*c.want), c.s.Rate(0.3, c.step), "%s at step %d", c.s, c.step)
	}
}

// For any valid schedule the factor rises through the warm-up, falls
// through the decay, stays within [min, 1], and ends at min; the schedule
// reads back from its String.
func TestScheduleProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := Schedule{Decay: rapid.SampledFrom([]string{"", "cosine", "linear"}).Draw(t, "decay"),
			Warmup: rapid.IntRange(0, 50).Draw(t, "warmup")}
		if s.decays() {
			s.Steps = s.Warmup + rapid.IntRange(1, 200).Draw(t, "span")
			s.MinRatio = rapid.Float64Range(0, 1).Draw(t, "min")
		}
		require.NoError(t, s.Validate())
		prev := 0.0
		for step := 1; step <= s.Steps+s.Warmup+5; step++ {
			f := s.Factor(step)
			require.True(t, f > 0 || (s.MinRatio == 0 && step >= s.Steps && s.decays()), "step %d: %v", step, f)
			require.LessOrEqual(t, f, 1.0)
			if step <= s.Warmup {
				require.Greater(t, f, prev, "warm-up at step %d", step)
			} else {
				require.GreaterOrEqual(t, f, s.MinRatio-1e-15, "step %d", step)
				if step > s.Warmup+1 {
					require.LessOrEqual(t, f, prev+1e-15, "decay at step %d", step)
				}
			}
			prev = f
		}
		if s.decays() {
			require.InDelta(t, s.MinRatio, s.Factor(s.Steps), 1e-12)
		}
		back, err := ParseSchedule(s.String(), 0)
		require.NoError(t, err, s.String())
		require.Equal(t, s, back, s.String())
	})
}

func TestParseSchedule(t *testing.T) {
	good := []struct {
		spec         string
		defaultSteps int
		want         Schedule
	}{
		{"constant", 0, Schedule{}},
		{"", 0, Schedule{}},
		{"constant:warmup=100", 0, Schedule{Warmup: 100}},
		{"cosine", 937, Schedule{Decay: "cosine", Steps: 937}},
		{"cosine:warmup=100,min=0.1", 937, Schedule{Decay: "cosine", Warmup: 100, Steps: 937, MinRatio: 0.1}},
		{"linear:steps=50,warmup=5", 937, Schedule{Decay: "linear", Warmup: 5, Steps: 50}},
		{" cosine : warmup = 2 , steps = 9 ", 0, Schedule{Decay: "cosine", Warmup: 2, Steps: 9}},
	}
	for _, c := range good {
		got, err := ParseSchedule(c.spec, c.defaultSteps)
		require.NoError(t, err, c.spec)
		require.Equal(t, c.want, got, c.spec)
	}
	bad := []struct{ spec, want string }{
		{"exponential", `unknown decay (want constant, cosine or linear)`},
		{"cosine", "say at which step the decay ends (steps=N)"},
		// Without steps=, a bad value among the options given is said first.
		{"cosine:warmup=-1", "warmup=-1 steps, want ≥ 0"},
		{"cosine:min=2", "min=2, want a fraction of the rate in [0, 1]"},
		{"linear:warmup=5,min=NaN", "min=NaN"},
		{"cosine:steps=10,warmup=10", "steps=10 must exceed warmup=10"},
		{"cosine:steps=10,min=1.5", "min=1.5, want a fraction of the rate in [0, 1]"},
		{"cosine:steps=10,min=NaN", "min=NaN"},
		{"linear:steps=-3", "steps=-3, want ≥ 0"},
		{"constant:warmup=-1", "warmup=-1 steps, want ≥ 0"},
		{"constant:steps=10", "steps= and min= are for a decay (cosine or linear)"},
		{"cosine:steps=10,steps=20", "steps given twice"},
		{"cosine:steps=ten", `steps="ten" is not a number`},
		{"cosine:steps", `option "steps" is not key=value`},
		{"cosine:warmup=1,speed=2,steps=4", `unknown option "speed" (want warmup, steps or min)`},
	}
	for _, c := range bad {
		_, err := ParseSchedule(c.spec, 0)
		require.ErrorContains(t, err, c.want, c.spec)
	}
	// A plan's update with a bad schedule is refused where its shapes are
	// checked, as a decoded plan file's ops are.
	_, err := AdamUpdate{LR: 1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Schedule: Schedule{Decay: "cosine", Steps: 2, Warmup: 5}}.Infer([]Spec{{Shape{2}, F32}, {Shape{2}, F32}, {Shape{2}, F32}, {Shape{2}, F32}})
	require.ErrorContains(t, err, "adam_update: graph: learning-rate schedule cosine: steps=2 must exceed warmup=5")
}

// An update op's settings are checked as NewOptimizer checks the flags
// they come from: a plan file's ops carry them too.
func TestUpdateSettings(t *testing.T) {
	two := []Spec{{Shape{2}, F32}, {Shape{2}, F32}}
	three, four := append(two, two[0]), append(two, two...)
	for _, tt := range []struct {
		op   Op
		in   []Spec
		want string
	}{
		{SGDUpdate{LR: -5}, two, "sgd_update: learning rate -5: want a positive number"},
		{SGDUpdate{}, two, "sgd_update: learning rate 0"},
		{SGDUpdate{LR: 0.1, WeightDecay: -1}, two, "sgd_update: weight decay -1: want a number ≥ 0"},
		{MomentumUpdate{LR: 0.1, Momentum: 7}, three, "momentum_update: momentum 7: want a number in [0, 1)"},
		{AdamUpdate{LR: 0.1, Beta1: 1, Beta2: 0.999, Eps: 1e-8}, four, "adam_update: beta1 1: want a number in [0, 1)"},
		{AdamUpdate{LR: 0.1, Beta1: 0.9, Beta2: 0.999}, four, "adam_update: eps 0: want a positive number"},
	} {
		_, err := tt.op.Infer(tt.in)
		require.ErrorContains(t, err, tt.want)
	}
	for _, op := range []Op{SGDUpdate{LR: 0.1}, MomentumUpdate{LR: 0.1, Momentum: 0.9}, AdamUpdate{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}} {
		in := map[string][]Spec{"sgd_update": two, "momentum_update": three, "adam_update": four}[op.Type()]
		_, err := op.Infer(in)
		require.NoError(t, err, op.Type())
	}
}

// Any text either parses into a valid schedule that reads back from its
// String, or is refused: never a panic.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"constant", "cosine:warmup=100,steps=2000,min=0.1", "linear:steps=5", "cosine:steps=1e9", "constant:warmup=-0", "cosine:min=1,steps=1"} {
		f.Add(s, 100)
	}
	f.Fuzz(func(t *testing.T, spec string, defaultSteps int) {
		s, err := ParseSchedule(spec, defaultSteps)
		if err != nil {
			return
		}
		require.NoError(t, s.Validate())
		back, err := ParseSchedule(s.String(), 0)
		require.NoError(t, err, s.String())
		require.Equal(t, s, back)
		for _, step := range []int{1, s.Warmup, s.Warmup + 1, s.Steps, s.Steps + 1} {
			f := s.Factor(max(step, 1))
			require.True(t, f >= 0 && f <= 1, "%s at %d: %v", s, step, f)
		}
	})
}

// NewOptimizer builds what the CLIs name, with its settings, and refuses
// what it cannot build.
func TestNewOptimizer(t *testing.T) {
	sched := Schedule{Warmup: 5}
	for _, c := range []struct {
		spec OptimizerSpec
		want Optimizer
		name string
	}{
		{OptimizerSpec{Name: "sgd", LR: 0.1}, SGD{LR: 0.1}, "sgd(lr=0.1, momentum=0, weight_decay=0)"},
		{OptimizerSpec{Name: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4, Schedule: sched}, SGD{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4, Schedule: sched},
			"sgd(lr=0.1, momentum=0.9, weight_decay=0.0001, schedule=constant:warmup=5)"},
		{OptimizerSpec{Name: "adam", LR: 1e-3, WeightDecay: 0.1}, Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1},
			"adam(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.1)"},
		{OptimizerSpec{Name: "adamw", LR: 1e-3, WeightDecay: 0.1}, Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: true},
			"adamw(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.1)"},
	} {
		got, err := NewOptimizer(c.spec)
		require.NoError(t, err)
		require.Equal(t, c.want, got)
		require.Equal(t, c.name, got.Name())
	}
	for _, c := range []struct {
		spec OptimizerSpec
		want string
	}{
		{OptimizerSpec{Name: "lion", LR: 0.1}, `unknown optimizer "lion" (want sgd, adam or adamw)`},
		{OptimizerSpec{Name: "adamw", LR: 0.1, WeightDecay: -1}, "weight decay -1: want a number ≥ 0, finite in float32"},
		{OptimizerSpec{Name: "adamw", LR: 0.1, WeightDecay: math.Inf(1)}, "weight decay +Inf"},
		{OptimizerSpec{Name: "sgd", LR: 0.1, Schedule: Schedule{Decay: "cosine"}}, "steps=0 must exceed warmup=0"},
	} {
		_, err := NewOptimizer(c.spec)
		require.ErrorContains(t, err, c.want)
	}
}
