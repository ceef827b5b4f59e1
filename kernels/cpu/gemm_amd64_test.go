//go:build !purego

package cpu

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// TestGemmDefaultAVX2 checks that Sgemm picks the assembly kernel where the
// CPU has it, so that the table tests cover it too.
func TestGemmDefaultAVX2(t *testing.T) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		t.Skip("CPU lacks AVX2 or FMA")
	}
	if got := gemmDefault.name; got != "avx2" {
		t.Errorf("default GEMM: got %q, want %q", got, "avx2")
	}
}
