package units

import (
	"math"
	"testing"
	"time"
)

func TestOver(t *testing.T) {
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"1 GB at 1 GB/s", Bytes(1e9).Over(GBps), time.Second},
		{"100 Gb/s link, 125 MB", Bytes(125e6).Over(100 * Gbps), 10 * time.Millisecond},
		{"1 TFLOP at 1 TFLOP/s", FLOPs(1e12).Over(TFLOPs), time.Second},
		{"rounds to ns", Bytes(3).Over(2 * GBps), 2 * time.Nanosecond},
		{"zero rate saturates", Bytes(1).Over(0), time.Duration(math.MaxInt64)},
		{"huge work saturates", FLOPs(1e30).Over(1), time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	tests := []struct{ got, want string }{
		{(3 * GiB / 2).String(), "1.50 GiB"},
		{Bytes(512).String(), "512 B"},
		{FLOPsPerSecond(312e12).String(), "312 TFLOP/s"},
		{(25 * GBps).String(), "25 GB/s"},
		{FLOPs(1.6e9).String(), "1.6 GFLOP"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
