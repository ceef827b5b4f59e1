package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// maxExpansion bounds one name range, so a typo cannot ask for a billion
// devices.
const maxExpansion = 4096

// expandNames expands one bracket group: "gpu[0-3]" is gpu0…gpu3,
// "nic[0,2]" is nic0 and nic2, "node[0-1]/nic" is node0/nic and node1/nic.
// A name without brackets is itself.
func expandNames(pattern string) ([]string, error) {
	open := strings.IndexByte(pattern, '[')
	if open < 0 {
		if strings.ContainsRune(pattern, ']') {
			return nil, fmt.Errorf("unbalanced ']' in %q", pattern)
		}
		return []string{pattern}, nil
	}
	close := strings.IndexByte(pattern[open:], ']')
	if close < 0 {
		return nil, fmt.Errorf("unbalanced '[' in %q", pattern)
	}
	close += open
	prefix, body, suffix := pattern[:open], pattern[open+1:close], pattern[close+1:]
	if strings.ContainsAny(suffix, "[]") {
		return nil, fmt.Errorf("%q: only one [range] per name", pattern)
	}
	var out []string
	for part := range strings.SplitSeq(body, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q: bad range element %q (want N or N-M)", pattern, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a {
				return nil, fmt.Errorf("%q: bad range %q (want N-M with N ≤ M)", pattern, part)
			}
		}
		if b-a+len(out) >= maxExpansion {
			return nil, fmt.Errorf("%q expands to more than %d names", pattern, maxExpansion)
		}
		for i := a; i <= b; i++ {
			out = append(out, prefix+strconv.Itoa(i)+suffix)
		}
	}
	return out, nil
}

// validName reports whether s may name a node, device or switch.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
