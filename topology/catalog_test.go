package topology

import (
	"testing"

	"github.com/flowkit/flowkit/units"
)

func TestCatalogSanity(t *testing.T) {
	for _, typ := range DeviceTypes() {
		t.Run(typ, func(t *testing.T) {
			s, ok := Lookup(typ)
			if !ok {
				t.Fatalf("Lookup(%q): not found", typ)
			}
			if s.Peak.F32 <= 0 || s.Memory <= 0 || s.MemBandwidth <= 0 {
				t.Errorf("got peak f32 %v, memory %v, bandwidth %v; want all positive", s.Peak.F32, s.Memory, s.MemBandwidth)
			}
			for _, p := range []units.FLOPsPerSecond{s.Peak.TF32, s.Peak.F16, s.Peak.BF16, s.Peak.F8} {
				if p < 0 {
					t.Errorf("got negative peak %v", p)
				}
			}
			if len(s.Source) < 20 {
				t.Errorf("got source %q, want where the figures come from", s.Source)
			}
			e := s.Default
			if e.Compute <= 0 || e.Compute > 1 || e.Memory <= 0 || e.Memory > 1 || e.HalfFLOPs <= 0 || e.HalfBytes <= 0 || e.Launch <= 0 {
				t.Errorf("got default efficiency %+v, want fractions in (0,1] and positive sizes", e)
			}
		})
	}
}

func TestPeakFor(t *testing.T) {
	v100, _ := Lookup("V100")
	h100, _ := Lookup("H100-SXM")
	tests := []struct {
		spec  DeviceSpec
		dtype string
		want  units.FLOPsPerSecond
	}{
		{v100, "f32", 15.7e12},
		{v100, "fp16", 125e12},
		{v100, "bf16", 15.7e12}, // no BF16 units: emulated in f32
		{v100, "f8", 125e12},    // no FP8: computed as f16
		{v100, "tf32", 15.7e12},
		{h100, "bfloat16", 989.4e12},
		{h100, "e4m3", 1978.9e12},
		{h100, "", 67e12},
	}
	for _, tt := range tests {
		got, ok := tt.spec.Peak.PeakFor(tt.dtype)
		if !ok || got != tt.want {
			t.Errorf("%s PeakFor(%q): got %v, %v; want %v", tt.spec.Type, tt.dtype, got, ok, tt.want)
		}
	}
	if _, ok := v100.Peak.PeakFor("int4"); ok {
		t.Errorf("PeakFor(int4): got ok, want unknown")
	}
}

func TestCPUSpecScalesWithCores(t *testing.T) {
	one, err := Spec("cpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := one.Peak.F32, units.FLOPsPerSecond(32*2.45e9); got != want {
		t.Errorf("1 core: got %v, want %v (2 FMA × 8 lanes × 2 × 2.45 GHz)", got, want)
	}
	two, _ := Spec("cpu", 2)
	if two.Peak.F32 != 2*one.Peak.F32 || two.MemBandwidth != 2*one.MemBandwidth {
		t.Errorf("2 cores: got %v, %v; want twice %v, %v", two.Peak.F32, two.MemBandwidth, one.Peak.F32, one.MemBandwidth)
	}
	many, _ := Spec("cpu", 64)
	if got, want := many.MemBandwidth, 204.8*units.GBps; got != want {
		t.Errorf("64 cores: got bandwidth %v, want the socket's %v", got, want)
	}
	if _, err := Spec("Z9000", 1); err == nil {
		t.Errorf("Spec(Z9000): got no error")
	}
}
