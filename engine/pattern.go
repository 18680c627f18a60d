package engine

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/sluice-rtm/sluice/wire"
)

// pattern is a compiled channel pattern.
type pattern struct {
	toks []string // literal tokens or "*"
	tail bool     // ends with ">": one or more further tokens
}

func compilePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, fmt.Errorf("empty pattern")
	}
	if len(s) > wire.MaxChannelLen {
		return pattern{}, fmt.Errorf("pattern longer than %d bytes", wire.MaxChannelLen)
	}
	parts := strings.Split(s, ".")
	var p pattern
	for i, t := range parts {
		switch {
		case t == "":
			return pattern{}, fmt.Errorf("pattern %q has an empty token", s)
		case t == ">":
			if i != len(parts)-1 {
				return pattern{}, fmt.Errorf("pattern %q: \">\" must be the last token", s)
			}
			p.tail = true
			continue
		case t != "*" && strings.ContainsAny(t, "*>"):
			return pattern{}, fmt.Errorf("pattern %q: \"*\" and \">\" must be whole tokens", s)
		}
		p.toks = append(p.toks, t)
	}
	if err := wire.ValidChannel([]byte(strings.NewReplacer("*", "x", ">", "x").Replace(s))); err != nil {
		return pattern{}, fmt.Errorf("pattern %q: %v", s, err)
	}
	return p, nil
}

// match reports whether channel name matches p. It does not allocate.
// A wildcard never matches an empty token: "*" is exactly one non-empty
// token and ">" one or more non-empty tokens, so "a.*" does not match
// "a." and "a.>" does not match "a." or "a.b." (channel names may have
// empty tokens; a permission on a prefix's children is not one on those).
func (p *pattern) match(name []byte) bool {
	pos := 0 // start of the next token; len(name)+1 once none is left
	for _, t := range p.toks {
		if pos > len(name) {
			return false
		}
		var tok []byte
		if i := bytes.IndexByte(name[pos:], '.'); i >= 0 {
			tok, pos = name[pos:pos+i], pos+i+1
		} else {
			tok, pos = name[pos:], len(name)+1
		}
		if t == "*" {
			if len(tok) == 0 {
				return false
			}
		} else if string(tok) != t {
			return false
		}
	}
	if p.tail {
		if pos > len(name) {
			return false
		}
		// Every remaining token is non-empty: no leading, trailing or
		// doubled dot in name[pos:].
		rest := name[pos:]
		return len(rest) > 0 && rest[0] != '.' && rest[len(rest)-1] != '.' && !bytes.Contains(rest, []byte(".."))
	}
	return pos == len(name)+1
}

// matchAny reports whether name matches one of ps.
func matchAny(ps []pattern, name []byte) bool {
	for i := range ps {
		if ps[i].match(name) {
			return true
		}
	}
	return false
}
