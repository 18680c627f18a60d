package engine

import (
	"strings"
	"testing"
)

// naiveMatch is the reference for pattern.match: split both on dots and
// compare token by token; a wildcard takes only non-empty tokens.
func naiveMatch(pat, name string) bool {
	pt, nt := strings.Split(pat, "."), strings.Split(name, ".")
	for i, p := range pt {
		if p == ">" {
			if i != len(pt)-1 || len(nt) <= i {
				return false
			}
			for _, t := range nt[i:] {
				if t == "" {
					return false
				}
			}
			return true
		}
		if i >= len(nt) || (p != "*" && p != nt[i]) || (p == "*" && nt[i] == "") {
			return false
		}
	}
	return len(nt) == len(pt)
}

// FuzzPatternMatch checks the allocation-free matcher against naiveMatch
// for every pattern that compiles.
func FuzzPatternMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"chat.*", "chat.eu"}, {"metrics.>", "metrics.cpu.host"}, {">", "a"}, {"a.*.c", "a.b.c"},
		{"*.>", "x"}, {"a.b", "a.b."}, {"a.>", "a."}, {"*", ""}, {"a.*", "a."}, {"a.>", "a.b..c"}, {"*.b", ".b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pat, name string) {
		p, err := compilePattern(pat)
		if err != nil {
			return
		}
		if got, want := p.match([]byte(name)), naiveMatch(pat, name); got != want {
			t.Fatalf("pattern %q on %q: match %v, reference %v", pat, name, got, want)
		}
	})
}
