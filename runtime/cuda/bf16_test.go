package cuda

import (
	"math"
	"testing"
)

func TestBF16FromFloat32(t *testing.T) {
	tests := []struct {
		name string
		in   uint32 // float32 bits
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"minus two", 0xc0000000, 0xc000},
		{"zero", 0x00000000, 0x0000},
		{"negative zero", 0x80000000, 0x8000},
		{"round down", 0x3f807fff, 0x3f80},
		{"round up", 0x3f808001, 0x3f81},
		{"tie to even, down", 0x3f808000, 0x3f80},
		{"tie to even, up", 0x3f818000, 0x3f82},
		{"infinity", 0x7f800000, 0x7f80},
		{"negative infinity", 0xff800000, 0xff80},
		{"max float32 overflows", 0x7f7fffff, 0x7f80},
		{"largest bf16 stays", 0x7f7f0000, 0x7f7f},
		{"smallest subnormal rounds to zero", 0x00000001, 0x0000},
		{"subnormal", 0x00010000, 0x0001},
		{"NaN with low payload stays NaN", 0x7f800001, 0x7fc0},
		{"negative quiet NaN", 0xffc00000, 0xffc0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BF16FromFloat32(math.Float32frombits(tt.in)); got != tt.want {
				t.Errorf("BF16FromFloat32(%#08x) = %#04x, want %#04x", tt.in, got, tt.want)
			}
		})
	}
}

func TestBF16RoundTrip(t *testing.T) {
	for b := range 1 << 16 {
		f := Float32FromBF16(uint16(b))
		if math.IsNaN(float64(f)) {
			if got := Float32FromBF16(BF16FromFloat32(f)); !math.IsNaN(float64(got)) {
				t.Fatalf("NaN %#04x came back as %v", b, got)
			}
			continue
		}
		if got := BF16FromFloat32(f); got != uint16(b) {
			t.Fatalf("round trip of %#04x gave %#04x", b, got)
		}
	}
}

func TestFloat32FromBF16(t *testing.T) {
	for _, tt := range []struct {
		in   uint16
		want float32
	}{{0x3f80, 1}, {0xc000, -2}, {0x3f81, 1.0078125}, {0x7f80, float32(math.Inf(1))}} {
		if got := Float32FromBF16(tt.in); got != tt.want {
			t.Errorf("Float32FromBF16(%#04x) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
