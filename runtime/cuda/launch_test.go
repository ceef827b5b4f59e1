package cuda

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
	"unsafe"
)

func TestEncodeArgs(t *testing.T) {
	args := []any{int32(-7), DevicePtr(0x7f0000001000), float32(1.5), uint32(9), float32(-2), int64(-3), uint64(1 << 40), float64(0.25)}
	k, err := encodeArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	// Each value at its natural alignment: the int32 at 0, the pointer
	// padded to 8, the two 4-byte values packed, and so on.
	wantOffsets := []uintptr{0, 8, 16, 20, 24, 32, 40, 48}
	if !slices.Equal(k.offsets, wantOffsets) {
		t.Errorf("offsets %v, want %v", k.offsets, wantOffsets)
	}
	if got := len(k.buf) * 8; got != 56 {
		t.Errorf("buffer %d bytes, want 56", got)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&k.buf[0])), len(k.buf)*8)
	le := binary.LittleEndian
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"int32", uint64(le.Uint32(b[0:])), uint64(uint32(0xfffffff9))},
		{"DevicePtr", le.Uint64(b[8:]), 0x7f0000001000},
		{"float32", uint64(le.Uint32(b[16:])), uint64(math.Float32bits(1.5))},
		{"uint32", uint64(le.Uint32(b[20:])), 9},
		{"float32 negative", uint64(le.Uint32(b[24:])), uint64(math.Float32bits(-2))},
		{"int64", le.Uint64(b[32:]), uint64(0xfffffffffffffffd)},
		{"uint64", le.Uint64(b[40:]), 1 << 40},
		{"float64", le.Uint64(b[48:]), math.Float64bits(0.25)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if got := le.Uint32(b[28:]); got != 0 {
		t.Errorf("padding holds %#x, want 0", got)
	}
}

func TestEncodeArgsRejects(t *testing.T) {
	for _, a := range []any{int(1), uintptr(2), "x", nil, []float32{1}, HostBuffer{}, int16(3)} {
		if _, err := encodeArgs([]any{DevicePtr(1), a}); err == nil {
			t.Errorf("%T accepted", a)
		}
	}
	k, err := encodeArgs(nil)
	if err != nil || len(k.buf) != 0 || len(k.offsets) != 0 {
		t.Errorf("no arguments: got %+v, %v; want empty", k, err)
	}
}

func TestLaunchValidation(t *testing.T) {
	s := &Stream{h: 1} // never reaches the driver
	f := &Function{h: 1, name: "k"}
	tests := []struct {
		name        string
		f           *Function
		grid, block Dim3
		shared      int
		args        []any
		wantErr     string
	}{
		{"nil function", nil, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, nil, "nil function"},
		{"zero grid", f, Dim3{0, 1, 1}, Dim3{1, 1, 1}, 0, nil, "invalid grid"},
		{"zero block", f, Dim3{1, 1, 1}, Dim3{32, 0, 1}, 0, nil, "invalid block"},
		{"negative shared", f, Dim3{1, 1, 1}, Dim3{1, 1, 1}, -1, nil, "invalid shared"},
		{"int argument", f, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, []any{3}, "argument 0 has type int"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, s.Launch(tt.f, tt.grid, tt.block, tt.shared, tt.args...), tt.wantErr)
		})
	}
}
