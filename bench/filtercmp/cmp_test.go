package filtercmp

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"github.com/google/cel-go/cel"
	"github.com/sluice-rtm/sluice/wire"
)

// message is one stored record body: headers type and sym, a JSON payload
// of a trade (about 150 bytes).
func message(i int) []byte {
	hs := []wire.HeaderField{{Key: "type", Value: []string{"trade", "quote"}[i%2]}, {Key: "sym", Value: "EURUSD"}}
	payload := fmt.Sprintf(`{"sym":"EURUSD","price":%d.25,"qty":%d,"side":"%s","venue":"%s","tags":["fx","spot"],"ts":1767225600123}`,
		90+i%30, 1+i%20, []string{"buy", "sell"}[i%3%2], []string{"XLON", "XPAR", "BATS"}[i%3])
	return wire.AppendExt(nil, nil, hs, []byte(payload))
}

// decode turns a record body into the filter's variables: headers (first
// value of each key) and the payload's JSON.
func decode(b []byte) (map[string]any, error) {
	e, err := wire.ParseExt(b, wire.TypeData)
	if err != nil {
		return nil, err
	}
	hs := make(map[string]any, 4)
	for _, h := range wire.AppendHeaderFields(nil, e.Headers) {
		if _, ok := hs[h.Key]; !ok {
			hs[h.Key] = h.Value
		}
	}
	var p any
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		p = nil
	}
	return map[string]any{"headers": hs, "payload": p}, nil
}

// exprs are the filters measured, in the syntax both libraries share
// (the last one differs: CEL's method call, expr's operator).
var exprs = []struct{ name, cel, expr string }{
	{"type-and-price", `headers.type == "trade" && payload.price > 100`, `headers.type == "trade" && payload.price > 100`},
	{"in-list-and-qty", `payload.sym in ["EURUSD", "GBPUSD"] && payload.qty >= 5 && payload.side == "buy"`,
		`payload.sym in ["EURUSD", "GBPUSD"] && payload.qty >= 5 && payload.side == "buy"`},
	{"string-prefix", `payload.venue.startsWith("XL") || headers.sym == "USDJPY"`,
		`payload.venue startsWith "XL" || headers.sym == "USDJPY"`},
}

const nmsgs = 64

func messages() [][]byte {
	ms := make([][]byte, nmsgs)
	for i := range ms {
		ms[i] = message(i)
	}
	return ms
}

func celProgram(tb testing.TB, src string) cel.Program {
	env, err := cel.NewEnv(cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("payload", cel.DynType), cel.CrossTypeNumericComparisons(true))
	if err != nil {
		tb.Fatal(err)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		tb.Fatal(iss.Err())
	}
	prg, err := env.Program(ast, cel.CostLimit(10_000), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		tb.Fatal(err)
	}
	return prg
}

func exprProgram(tb testing.TB, src string) *vm.Program {
	prg, err := expr.Compile(src, expr.Env(map[string]any{"headers": map[string]any{}, "payload": map[string]any{}}), expr.AsBool())
	if err != nil {
		tb.Fatal(err)
	}
	return prg
}

// TestSameAnswers: both libraries select the same messages.
func TestSameAnswers(t *testing.T) {
	for _, e := range exprs {
		cp, ep := celProgram(t, e.cel), exprProgram(t, e.expr)
		n := 0
		for _, m := range messages() {
			vars, err := decode(m)
			if err != nil {
				t.Fatal(err)
			}
			cv, _, cerr := cp.Eval(vars)
			ev, eerr := expr.Run(ep, vars)
			if cerr != nil || eerr != nil || cv.Value() != ev {
				t.Fatalf("%s: cel %v %v, expr %v %v", e.name, cv, cerr, ev, eerr)
			}
			if ev == true {
				n++
			}
		}
		if n == 0 || n == nmsgs {
			t.Fatalf("%s selects %d of %d: not a filter", e.name, n, nmsgs)
		}
	}
}

// BenchmarkEval: evaluation alone, variables decoded beforehand.
func BenchmarkEval(b *testing.B) {
	var vars []map[string]any
	for _, m := range messages() {
		v, err := decode(m)
		if err != nil {
			b.Fatal(err)
		}
		vars = append(vars, v)
	}
	for _, e := range exprs {
		b.Run("cel/"+e.name, func(b *testing.B) {
			prg := celProgram(b, e.cel)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, _, err := prg.Eval(vars[i%nmsgs]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("expr/"+e.name, func(b *testing.B) {
			prg := exprProgram(b, e.expr)
			var m vm.VM
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := m.Run(prg, vars[i%nmsgs]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMessage: what a gateway does per message and filter: parse the
// stored record, decode the JSON payload, evaluate.
func BenchmarkMessage(b *testing.B) {
	ms := messages()
	e := exprs[0]
	b.Run("cel", func(b *testing.B) {
		prg := celProgram(b, e.cel)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			vars, _ := decode(ms[i%nmsgs])
			if _, _, err := prg.Eval(vars); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("expr", func(b *testing.B) {
		prg := exprProgram(b, e.expr)
		var m vm.VM
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			vars, _ := decode(ms[i%nmsgs])
			if _, err := m.Run(prg, vars); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-only", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := decode(ms[i%nmsgs]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCompile: compiling one filter (done once per distinct filter
// on a gateway).
func BenchmarkCompile(b *testing.B) {
	e := exprs[1]
	b.Run("cel", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			celProgram(b, e.cel)
		}
	})
	b.Run("expr", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			exprProgram(b, e.expr)
		}
	})
}
