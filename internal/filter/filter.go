// Package filter compiles and evaluates the server-side filters of
// subscriptions (docs/filters.md, PROTOCOL.md 2.17): CEL expressions
// (github.com/google/cel-go, chosen over github.com/expr-lang/expr by the
// benchmark in bench/filtercmp and BENCHMARKS.md) over a message's headers
// and its JSON payload, such as
//
//	headers.type == "trade" && payload.price > 100
//
// A filter is compiled once; every evaluation is bounded by a CEL cost
// limit (runtime cost tracking stops it past MaxCost), so no filter takes
// more than a bounded CPU time per message. It is pure: no I/O, no clock.
package filter

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"

	"github.com/sluice-rtm/sluice/wire"
)

// Limits of a filter.
const (
	// MaxLen bounds a filter's source, in bytes.
	MaxLen = 1024
	// MaxCost bounds one evaluation, in CEL cost units (about one per
	// operation and per element a comprehension visits): a message whose
	// evaluation would cost more does not match (Stats.Aborted counts
	// it). Simple comparisons cost 1 to 10.
	MaxCost = 10_000
	// MaxPayload bounds the payload a filter decodes as JSON: a larger
	// payload is not decoded, and payload is null for the filter (so
	// payload.field comparisons do not match). Headers are always there.
	MaxPayload = 64 << 10
)

// ErrInvalid wraps every compile error.
var ErrInvalid = errors.New("invalid filter")

// env is the CEL environment every filter compiles in; built once.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("payload", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
	)
})

// Program is a compiled filter. Immutable and safe for concurrent use.
type Program struct {
	src     string
	prg     cel.Program
	payload bool // the expression refers to payload (else it is never decoded)
}

// Compile checks and compiles src: at most MaxLen bytes of UTF-8, a CEL
// expression of type bool over headers (map of string to string) and
// payload (the JSON value). Errors wrap ErrInvalid and say what is wrong.
func Compile(src string) (*Program, error) {
	switch {
	case src == "":
		return nil, fmt.Errorf("%w: empty", ErrInvalid)
	case len(src) > MaxLen:
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(src), MaxLen)
	case !utf8.ValidString(src):
		return nil, fmt.Errorf("%w: not UTF-8", ErrInvalid)
	}
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, iss.Err())
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("%w: the expression is of type %v, not bool", ErrInvalid, ast.OutputType())
	}
	prg, err := e.Program(ast, cel.CostLimit(MaxCost), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	refs := false
	for _, id := range referenced(ast) {
		if id == "payload" {
			refs = true
		}
	}
	return &Program{src: src, prg: prg, payload: refs}, nil
}

// referenced lists the variables the checked expression refers to.
func referenced(ast *cel.Ast) []string {
	var names []string
	for _, r := range ast.NativeRep().ReferenceMap() {
		if r.Name != "" {
			names = append(names, r.Name)
		}
	}
	return names
}

// Source returns the filter as it was compiled.
func (p *Program) Source() string { return p.src }

// Result is the outcome of one evaluation.
type Result uint8

const (
	NoMatch Result = iota
	Match
	// Aborted: the evaluation went over MaxCost (it does not match).
	Aborted
)

// Match evaluates p on m. An expression that fails on the message (a
// missing field, a comparison of a string with a number, a payload that
// is not JSON) does not match.
func (p *Program) Match(m *Message) Result {
	if p.payload {
		m.decode()
	}
	out, _, err := p.prg.Eval(m)
	if err != nil {
		if isCostErr(err) {
			return Aborted
		}
		return NoMatch
	}
	if out == types.True {
		return Match
	}
	return NoMatch
}

func isCostErr(err error) bool {
	var ec interpreter.EvalCancelledError
	return errors.As(err, &ec) && ec.Cause == interpreter.CostLimitExceeded
}

// Message is what a filter sees of one message: its headers and, decoded
// from JSON on first use, its payload. It implements cel's Activation.
// Reset it for each message; one goroutine at a time.
type Message struct {
	headers map[string]string
	raw     []byte
	payload any
	decoded bool
}

// Reset makes m the message stored as body (an extended record body when
// ext, PROTOCOL.md 2.14). The body must stay unchanged while m is used.
func (m *Message) Reset(body []byte, ext bool) {
	if m.headers == nil {
		m.headers = make(map[string]string)
	} else {
		clear(m.headers)
	}
	m.raw, m.payload, m.decoded = body, nil, false
	if !ext {
		return
	}
	e, err := wire.ParseExt(body, wire.TypeData)
	if err != nil {
		m.raw = nil
		return
	}
	m.raw = e.Payload
	for rest := e.Headers; ; {
		k, v, r, ok := wire.NextHeader(rest)
		if !ok {
			break
		}
		if _, dup := m.headers[string(k)]; !dup { // the first value of a key
			m.headers[string(k)] = string(v)
		}
		rest = r
	}
}

func (m *Message) decode() {
	if m.decoded {
		return
	}
	m.decoded = true
	if len(m.raw) == 0 || len(m.raw) > MaxPayload {
		return
	}
	var v any
	if json.Unmarshal(m.raw, &v) == nil {
		m.payload = v
	}
}

// ResolveName implements cel's Activation.
func (m *Message) ResolveName(name string) (any, bool) {
	switch name {
	case "headers":
		return m.headers, true
	case "payload":
		m.decode()
		return m.payload, true
	}
	return nil, false
}

// Parent implements cel's Activation.
func (m *Message) Parent() cel.Activation { return nil }
