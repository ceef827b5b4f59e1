package topology

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/flowkit/flowkit/units"
)

// ErrBadQuantity is wrapped by every error about a malformed size,
// bandwidth or latency string.
var ErrBadQuantity = errors.New("topology: bad quantity")

var byteUnits = map[string]float64{
	"B":  1,
	"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}

// Bits are lower-case b, bytes upper-case B; prefixes are decimal unless
// written Ki/Mi/Gi/Ti. "Gbps" and "GBps" are accepted as the vendors write them.
var bandwidthUnits = map[string]float64{
	"B/s": 1, "kB/s": 1e3, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
	"KiB/s": 1 << 10, "MiB/s": 1 << 20, "GiB/s": 1 << 30, "TiB/s": 1 << 40,
	"b/s": 1.0 / 8, "kb/s": 1e3 / 8, "Kb/s": 1e3 / 8, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8, "Tb/s": 1e12 / 8,
	"Mbps": 1e6 / 8, "Gbps": 1e9 / 8, "Tbps": 1e12 / 8, "MBps": 1e6, "GBps": 1e9, "TBps": 1e12,
}

// splitNumber splits "300GB/s" or "2.5 GiB" into its number and unit.
func splitNumber(s string) (float64, string, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] == '+' || s[i] == '-' || s[i] == '.' || s[i] == 'e' && i > 0 && isDigit(s[i-1]) || isDigit(s[i])) {
		i++
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, "", false
	}
	return v, strings.TrimSpace(s[i:]), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ParseBytes parses a size such as "80GiB", "16 GB" or "512MiB". Decimal
// prefixes (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB, GiB,
// TiB) powers of 1024. A plain number is bytes.
func ParseBytes(s string) (units.Bytes, error) {
	v, u, ok := splitNumber(s)
	if !ok {
		return 0, fmt.Errorf("%w: size %q: want a number and a unit like 80GiB or 16GB", ErrBadQuantity, s)
	}
	if u == "" {
		u = "B"
	}
	m, ok := byteUnits[u]
	if !ok {
		return 0, fmt.Errorf("%w: size %q: unknown unit %q (want B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)", ErrBadQuantity, s, u)
	}
	b := v * m
	if math.Abs(b) > math.MaxInt64/2 {
		return 0, fmt.Errorf("%w: size %q is too large", ErrBadQuantity, s)
	}
	return units.Bytes(math.Round(b)), nil
}

// ParseSize is ParseBytes for a size where a plain number is more likely
// a slip than bytes (a memory of "80", a gradient bucket of "25"): the
// unit is required, and the size must come to whole bytes.
func ParseSize(s string) (units.Bytes, error) {
	v, u, ok := splitNumber(s)
	if ok && u == "" {
		return 0, fmt.Errorf("%w: size %q: give a unit, as %sMiB or %sGiB (B for bytes)", ErrBadQuantity, s, strings.TrimSpace(s), strings.TrimSpace(s))
	}
	b, err := ParseBytes(s)
	if err != nil {
		return 0, err
	}
	if m := byteUnits[u]; v*m != math.Round(v*m) {
		return 0, fmt.Errorf("%w: size %q is not a whole number of bytes", ErrBadQuantity, s)
	}
	return b, nil
}

// ParseBandwidth parses a rate such as "300GB/s", "100Gb/s", "25 Gbps" or
// "12.5GiB/s". The unit is required: bits (b) and bytes (B) differ by 8.
func ParseBandwidth(s string) (units.BytesPerSecond, error) {
	v, u, ok := splitNumber(s)
	if !ok || u == "" {
		return 0, fmt.Errorf("%w: bandwidth %q: want a number and a unit like 300GB/s or 100Gb/s", ErrBadQuantity, s)
	}
	m, ok := bandwidthUnits[u]
	if !ok {
		return 0, fmt.Errorf("%w: bandwidth %q: unknown unit %q (want B/s, kB/s, MB/s, GB/s, TB/s, GiB/s, Mb/s, Gb/s, Tb/s, Gbps)", ErrBadQuantity, s, u)
	}
	return units.BytesPerSecond(v * m), nil
}

// ParseLatency parses a duration in Go's syntax ("2us", "1.5µs", "300ns",
// "1ms").
func ParseLatency(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%w: latency %q: want a duration like 2us, 500ns or 1ms", ErrBadQuantity, s)
	}
	return d, nil
}
