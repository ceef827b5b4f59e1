package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flowkit/flowkit/units"
)

// ErrUnknownDeviceType is wrapped when a device type is not in the catalog.
var ErrUnknownDeviceType = errors.New("topology: unknown device type")

// Class says what kind of processor a device is.
type Class int

const (
	GPU Class = iota
	CPU
)

func (c Class) String() string {
	if c == CPU {
		return "cpu"
	}
	return "gpu"
}

// Peak holds datasheet peak rates per data type, dense (the "with sparsity"
// figures datasheets print are twice these). F32 is the non-tensor rate;
// TF32, F16/BF16 and F8 are tensor-core rates. Zero means the device has no
// hardware for that type; PeakFor then falls back to a type it has.
type Peak struct {
	F32  units.FLOPsPerSecond `json:"f32"`
	TF32 units.FLOPsPerSecond `json:"tf32,omitempty"`
	F16  units.FLOPsPerSecond `json:"f16,omitempty"`
	BF16 units.FLOPsPerSecond `json:"bf16,omitempty"`
	F8   units.FLOPsPerSecond `json:"f8,omitempty"`
}

func (p Peak) scale(k float64) Peak {
	return Peak{F32: p.F32 * units.FLOPsPerSecond(k), TF32: p.TF32 * units.FLOPsPerSecond(k),
		F16: p.F16 * units.FLOPsPerSecond(k), BF16: p.BF16 * units.FLOPsPerSecond(k), F8: p.F8 * units.FLOPsPerSecond(k)}
}

// DTypes are the canonical data type names, in the order Peak lists them.
var DTypes = []string{"f32", "tf32", "f16", "bf16", "f8"}

// CanonicalDType maps the spellings in use (fp32, float32, half, bfloat16,
// fp8, e4m3, …) to one of DTypes; "" means f32. It reports false for a type
// it does not know.
func CanonicalDType(dtype string) (string, bool) {
	switch strings.ToLower(dtype) {
	case "", "f32", "fp32", "float32", "float":
		return "f32", true
	case "tf32":
		return "tf32", true
	case "f16", "fp16", "float16", "half":
		return "f16", true
	case "bf16", "bfloat16":
		return "bf16", true
	case "f8", "fp8", "e4m3", "e5m2", "f8e4m3", "f8e5m2":
		return "f8", true
	}
	return "", false
}

// PeakFor returns the peak rate for dtype. A type the device has no units
// for runs at the rate of the type it would be computed in: f8 as f16, and
// f16, bf16 and tf32 as f32 (bf16 on a V100, say, is emulated in f32).
func (p Peak) PeakFor(dtype string) (units.FLOPsPerSecond, bool) {
	d, ok := CanonicalDType(dtype)
	if !ok {
		return 0, false
	}
	switch d {
	case "f8":
		if p.F8 > 0 {
			return p.F8, true
		}
		if p.F16 > 0 {
			return p.F16, true
		}
	case "f16":
		if p.F16 > 0 {
			return p.F16, true
		}
	case "bf16":
		if p.BF16 > 0 {
			return p.BF16, true
		}
	case "tf32":
		if p.TF32 > 0 {
			return p.TF32, true
		}
	}
	return p.F32, true
}

// Efficiency is the default achievable fraction of a device's peaks, used
// when no calibration exists. Efficiency grows with the size of the work
// along a saturating curve, eff(w) = Max·w/(w+Half): a kernel with Half
// work runs at half the asymptotic efficiency. Half is the work the device
// would do in its fill time at peak (3 µs on a GPU, the time a kernel
// takes to fill the SMs; 1 µs on a CPU), so that small kernels cost about
// fill/Max beyond their ideal time on any dtype.
type Efficiency struct {
	Compute   float64       // asymptotic fraction of the peak FLOP rate
	Memory    float64       // asymptotic fraction of the memory bandwidth
	HalfFLOPs units.FLOPs   // work at which compute efficiency is Compute/2
	HalfBytes units.Bytes   // traffic at which memory efficiency is Memory/2
	Launch    time.Duration // fixed cost of starting one kernel
}

// DeviceSpec describes a device type: its peaks, memory, and default
// efficiencies. A CPU spec covers Cores cores; Spec scales a catalog CPU
// entry to any core count.
type DeviceSpec struct {
	Type         string
	Class        Class
	Peak         Peak
	Memory       units.Bytes
	MemBandwidth units.BytesPerSecond
	Cores        int // CPU only: the cores these figures cover
	Default      Efficiency
	Source       string // where the figures come from
}

// MaxCores is the most cores a CPU device may have: a cluster file's
// cores, and a plan's CPU workers, beyond it are refused, since no machine
// has that many and the cost model would price a CPU that does not exist.
const MaxCores = 1 << 16

// cpuEntry is a catalog CPU: rates per core, bandwidth per core and per
// socket (a few cores saturate the memory controllers).
type cpuEntry struct {
	peakPerCore    Peak
	bwPerCore      units.BytesPerSecond
	bwSocket       units.BytesPerSecond
	coresPerSocket int
}

type catalogEntry struct {
	spec DeviceSpec
	cpu  *cpuEntry
}

// Default efficiencies. GPU: cuBLAS reaches 70–80% of the tensor peak on
// large GEMMs and STREAM-like kernels 85–90% of HBM bandwidth; a launch
// plus its stream bookkeeping costs ~4 µs. CPU: Go kernels on AVX2 reach
// about half of the FMA peak; a worker-pool dispatch costs ~2 µs. Half
// sizes are set by Spec from the fill times. Calibration replaces all of
// these.
var (
	gpuEfficiency = Efficiency{Compute: 0.7, Memory: 0.85, Launch: 4 * time.Microsecond}
	cpuEfficiency = Efficiency{Compute: 0.5, Memory: 0.6, Launch: 2 * time.Microsecond}
)

const (
	gpuFill = 3 * time.Microsecond
	cpuFill = 1 * time.Microsecond
)

// withHalves sets the default half-efficiency sizes from the fill time.
func withHalves(s DeviceSpec) DeviceSpec {
	fill := gpuFill
	if s.Class == CPU {
		fill = cpuFill
	}
	s.Default.HalfFLOPs = units.FLOPs(float64(s.Peak.F32) * fill.Seconds())
	s.Default.HalfBytes = units.Bytes(float64(s.MemBandwidth) * fill.Seconds())
	return s
}

const tf = units.TFLOPs

func gpu(typ string, p Peak, mem units.Bytes, bw units.BytesPerSecond, source string) catalogEntry {
	return catalogEntry{spec: DeviceSpec{Type: typ, Class: GPU, Peak: p, Memory: mem, MemBandwidth: bw, Default: gpuEfficiency, Source: source}}
}

// cpu builds a CPU entry from its ISA: flopsPerCycle single-precision FLOPs
// per core per cycle (FMA pipes × SIMD lanes × 2) at clock GHz.
func cpu(typ string, flopsPerCycle, halfPerCycle, ghz float64, coresPerSocket int, bwPerCore, bwSocket units.BytesPerSecond, mem units.Bytes, source string) catalogEntry {
	f32 := units.FLOPsPerSecond(flopsPerCycle * ghz * 1e9)
	half := units.FLOPsPerSecond(halfPerCycle * ghz * 1e9)
	return catalogEntry{
		spec: DeviceSpec{Type: typ, Class: CPU, Memory: mem, Default: cpuEfficiency, Source: source, Cores: 1,
			Peak: Peak{F32: f32, F16: half, BF16: half}, MemBandwidth: bwPerCore},
		cpu: &cpuEntry{peakPerCore: Peak{F32: f32, F16: half, BF16: half}, bwPerCore: bwPerCore, bwSocket: bwSocket, coresPerSocket: coresPerSocket},
	}
}

// catalog is the device catalog. Figures are dense peaks from the vendors'
// datasheets (named in each Source); where a datasheet prints only "with
// sparsity" tensor figures, they are halved.
var catalog = []catalogEntry{
	gpu("V100-SXM2-16GB", Peak{F32: 15.7 * tf, F16: 125 * tf}, 16*units.GiB, 900*units.GBps,
		"NVIDIA Tesla V100 datasheet (2020): SXM2 15.7 TFLOPS FP32, 125 TFLOPS tensor FP16; 16 GB HBM2 at 900 GB/s; no TF32/BF16/FP8 units"),
	gpu("V100-SXM2-32GB", Peak{F32: 15.7 * tf, F16: 125 * tf}, 32*units.GiB, 900*units.GBps,
		"NVIDIA Tesla V100 datasheet (2020): SXM2 15.7 TFLOPS FP32, 125 TFLOPS tensor FP16; 32 GB HBM2 at 900 GB/s"),
	gpu("A100-SXM4-40GB", Peak{F32: 19.5 * tf, TF32: 156 * tf, F16: 312 * tf, BF16: 312 * tf}, 40*units.GiB, 1555*units.GBps,
		"NVIDIA A100 datasheet (2021): 19.5 TFLOPS FP32, 156 TF32, 312 FP16/BF16 tensor (dense); 40 GB HBM2 at 1,555 GB/s"),
	gpu("A100-SXM4-80GB", Peak{F32: 19.5 * tf, TF32: 156 * tf, F16: 312 * tf, BF16: 312 * tf}, 80*units.GiB, 2039*units.GBps,
		"NVIDIA A100 datasheet (2021): 19.5 TFLOPS FP32, 156 TF32, 312 FP16/BF16 tensor (dense); 80 GB HBM2e at 2,039 GB/s"),
	gpu("H100-SXM", Peak{F32: 67 * tf, TF32: 494.7 * tf, F16: 989.4 * tf, BF16: 989.4 * tf, F8: 1978.9 * tf}, 80*units.GiB, 3350*units.GBps,
		"NVIDIA H100 datasheet (2023), SXM5: 67 TFLOPS FP32; 989/1,979/3,958 TFLOPS TF32/BF16/FP8 with sparsity, halved; 80 GB HBM3 at 3.35 TB/s"),
	gpu("H200", Peak{F32: 67 * tf, TF32: 494.7 * tf, F16: 989.4 * tf, BF16: 989.4 * tf, F8: 1978.9 * tf}, 143771*units.MiB, 4800*units.GBps,
		"NVIDIA H200 datasheet (2024), SXM: compute as H100 SXM (sparsity figures halved); 141 GB HBM3e at 4.8 TB/s, which nvidia-smi reports as 143,771 MiB (140.4 GiB)"),
	gpu("T4", Peak{F32: 8.1 * tf, F16: 65 * tf}, 16*units.GiB, 320*units.GBps,
		"NVIDIA T4 datasheet (2019): 8.1 TFLOPS FP32, 65 TFLOPS mixed FP16/FP32 tensor; 16 GB GDDR6 at 320 GB/s"),
	gpu("A10G", Peak{F32: 35 * tf, TF32: 35 * tf, F16: 70 * tf, BF16: 70 * tf}, 24*units.GiB, 600*units.GBps,
		"no NVIDIA datasheet; derived for AWS g5 from nvidia-smi: 80 SMs × 128 FP32 lanes × 2 × 1.71 GHz = 35 TFLOPS FP32; GA102 tensor rate (half an A10's per SM) gives 70 TFLOPS FP16/BF16, 35 TF32; 24 GB GDDR6 at 600 GB/s"),
	gpu("L4", Peak{F32: 30.3 * tf, TF32: 60 * tf, F16: 121 * tf, BF16: 121 * tf, F8: 242.5 * tf}, 24*units.GiB, 300*units.GBps,
		"NVIDIA L4 datasheet (2023): 30.3 TFLOPS FP32; 120/242/485 TFLOPS TF32/FP16-BF16/FP8 with sparsity, halved; 24 GB GDDR6 at 300 GB/s"),

	// CPUs: FP32 FLOPs per cycle = FMA pipes × lanes × 2. With no half-precision
	// FMA, f16/bf16 are converted and computed at the f32 rate.
	cpu("cpu", 2*8*2, 2*8*2, 2.45, 64, 20*units.GBps, 204.8*units.GBps, 16*units.GiB,
		"AMD EPYC Zen 3 (this machine's kind): 2×256-bit FMA pipes = 32 FP32 FLOPs/cycle at the 2.45 GHz /proc/cpuinfo reports = 78.4 GFLOPS/core; 8 × DDR4-3200 = 204.8 GB/s per socket, ~20 GB/s per core (single-core STREAM order); calibrate"),
	cpu("cpu-zen2", 2*8*2, 2*8*2, 2.25, 64, 20*units.GBps, 204.8*units.GBps, 512*units.GiB,
		"AMD EPYC 7742 (DGX A100 host): Zen 2, 2×256-bit FMA = 32 FP32 FLOPs/cycle at 2.25 GHz base; 8 × DDR4-3200 = 204.8 GB/s per socket; DGX A100 has 1 TB over 2 sockets"),
	cpu("cpu-broadwell", 2*8*2, 2*8*2, 2.3, 18, 10*units.GBps, 76.8*units.GBps, 244*units.GiB,
		"Intel Xeon E5-2686 v4 (p3) / E5-2698 v4 (DGX-1): Broadwell AVX2, 2 FMA × 8 lanes = 32 FP32 FLOPs/cycle at 2.3 GHz base; 4 × DDR4-2400 = 76.8 GB/s per socket; p3.16xlarge has 488 GiB over 2 sockets"),
	cpu("cpu-cascadelake", 2*16*2, 2*16*2, 2.5, 24, 12*units.GBps, 140.8*units.GBps, 192*units.GiB,
		"Intel Xeon Platinum 8259CL (g4dn): Cascade Lake AVX-512, 2 FMA × 16 lanes = 64 FP32 FLOPs/cycle at 2.5 GHz base; 6 × DDR4-2933 = 140.8 GB/s per socket; g4dn.12xlarge has 192 GiB"),
	cpu("cpu-sapphirerapids", 2*16*2, 1024, 2.0, 56, 12*units.GBps, 307.2*units.GBps, 1024*units.GiB,
		"Intel Xeon Platinum 8480C (DGX H100 host): AVX-512, 64 FP32 FLOPs/cycle at 2.0 GHz base; AMX 1,024 BF16 FLOPs/cycle (Intel's figure, also used for FP16); 8 × DDR5-4800 = 307.2 GB/s per socket; DGX H100 has 2 TB over 2 sockets"),
}

// aliases are the short names DESIGN.md and papers use.
var aliases = map[string]string{
	"V100":     "V100-SXM2-16GB",
	"V100-16":  "V100-SXM2-16GB",
	"V100-32":  "V100-SXM2-32GB",
	"A100":     "A100-SXM4-40GB",
	"A100-40":  "A100-SXM4-40GB",
	"A100-80":  "A100-SXM4-80GB",
	"H100":     "H100-SXM",
	"H100-80":  "H100-SXM",
	"H200-141": "H200",
}

func lookupEntry(typ string) (catalogEntry, bool) {
	if a, ok := aliases[typ]; ok {
		typ = a
	}
	for _, e := range catalog {
		if e.spec.Type == typ {
			return e, true
		}
	}
	for _, e := range catalog {
		if strings.EqualFold(e.spec.Type, typ) {
			return e, true
		}
	}
	return catalogEntry{}, false
}

// Lookup returns the catalog entry for a device type (or one of its
// aliases: V100, A100-40, A100-80, H100, …). A CPU type is returned for one
// core; use Spec for a given core count.
func Lookup(typ string) (DeviceSpec, bool) {
	e, ok := lookupEntry(typ)
	return withHalves(e.spec), ok
}

// Spec returns the spec of a device of type typ with the given number of
// cores (CPU types; ignored for GPUs). A CPU's peaks scale with cores and its
// memory bandwidth with cores up to one socket's controllers per
// coresPerSocket cores.
func Spec(typ string, cores int) (DeviceSpec, error) {
	e, ok := lookupEntry(typ)
	if !ok {
		return DeviceSpec{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownDeviceType, typ, strings.Join(DeviceTypes(), ", "))
	}
	s := e.spec
	if e.cpu == nil {
		return withHalves(s), nil
	}
	if cores < 1 {
		cores = 1
	}
	s.Cores = cores
	s.Peak = e.cpu.peakPerCore.scale(float64(cores))
	sockets := (cores + e.cpu.coresPerSocket - 1) / e.cpu.coresPerSocket
	s.MemBandwidth = min(e.cpu.bwPerCore*units.BytesPerSecond(cores), e.cpu.bwSocket*units.BytesPerSecond(sockets))
	return withHalves(s), nil
}

// DeviceTypes lists the catalog's device types, sorted.
func DeviceTypes() []string {
	var names []string
	for _, e := range catalog {
		names = append(names, e.spec.Type)
	}
	slices.Sort(names)
	return names
}
