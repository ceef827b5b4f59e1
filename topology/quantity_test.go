package topology

import (
	"errors"
	"testing"
	"time"

	"github.com/flowkit/flowkit/units"
)

func TestParseQuantities(t *testing.T) {
	bw := []struct {
		in   string
		want units.BytesPerSecond
	}{
		{"300GB/s", 300e9},
		{"100Gb/s", 12.5e9},
		{"25 Gbps", 25e9 / 8},
		{"1GiB/s", 1 << 30},
		{"-25GB/s", -25e9},
		{"1.5e1 GB/s", 15e9},
	}
	for _, tt := range bw {
		got, err := ParseBandwidth(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseBandwidth(%q): got %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	sizes := []struct {
		in   string
		want units.Bytes
	}{
		{"80GiB", 80 << 30},
		{"16GB", 16e9},
		{"512", 512},
		{"1.5KiB", 1536},
	}
	for _, tt := range sizes {
		got, err := ParseBytes(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q): got %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if got, err := ParseLatency("2us"); err != nil || got != 2*time.Microsecond {
		t.Errorf("ParseLatency(2us): got %v, %v", got, err)
	}
	for _, bad := range []string{"300GB", "fast", "", "10 parsecs/s", "GB/s"} {
		if _, err := ParseBandwidth(bad); !errors.Is(err, ErrBadQuantity) {
			t.Errorf("ParseBandwidth(%q): got %v, want ErrBadQuantity", bad, err)
		}
	}
	for _, bad := range []string{"80 GiBs", "lots", "1e400GB"} {
		if _, err := ParseBytes(bad); !errors.Is(err, ErrBadQuantity) {
			t.Errorf("ParseBytes(%q): got %v, want ErrBadQuantity", bad, err)
		}
	}
	if _, err := ParseLatency("2 furlongs"); !errors.Is(err, ErrBadQuantity) {
		t.Errorf("ParseLatency: got %v, want ErrBadQuantity", err)
	}
}

func TestExpandNames(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"gpu", []string{"gpu"}},
		{"gpu[0-2]", []string{"gpu0", "gpu1", "gpu2"}},
		{"nic[0,2]", []string{"nic0", "nic2"}},
		{"node[0-1]/nic", []string{"node0/nic", "node1/nic"}},
	}
	for _, tt := range tests {
		got, err := expandNames(tt.in)
		if err != nil || len(got) != len(tt.want) {
			t.Fatalf("expandNames(%q): got %v, %v; want %v", tt.in, got, err, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("expandNames(%q)[%d]: got %q, want %q", tt.in, i, got[i], tt.want[i])
			}
		}
	}
	for _, bad := range []string{"gpu[", "gpu]", "gpu[3-1]", "gpu[a]", "g[0-1][0-1]", "gpu[0-99999]"} {
		if _, err := expandNames(bad); err == nil {
			t.Errorf("expandNames(%q): got no error", bad)
		}
	}
}
