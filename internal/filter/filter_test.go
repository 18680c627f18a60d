package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// msg builds a stored record body: headers (key, value pairs) and payload.
func msg(payload string, kv ...string) ([]byte, bool) {
	if len(kv) == 0 {
		return []byte(payload), false
	}
	var hs []wire.HeaderField
	for i := 0; i < len(kv); i += 2 {
		hs = append(hs, wire.HeaderField{Key: kv[i], Value: kv[i+1]})
	}
	return wire.AppendExt(nil, nil, hs, []byte(payload)), true
}

func match(t *testing.T, src, payload string, kv ...string) Result {
	t.Helper()
	p, err := Compile(src)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	var m Message
	m.Reset(msg(payload, kv...))
	return p.Match(&m)
}

// TestMatch: the expressions of docs/filters.md on headers and JSON
// payloads, including what does not match rather than fail.
func TestMatch(t *testing.T) {
	trade := `{"sym":"EURUSD","price":101.5,"qty":10,"side":"buy","tags":["fx","spot"],"venue":{"mic":"XLON"}}`
	for _, tc := range []struct {
		src, payload string
		kv           []string
		want         Result
	}{
		{`headers.type == "trade" && payload.price > 100`, trade, []string{"type", "trade"}, Match},
		{`headers.type == "trade" && payload.price > 102`, trade, []string{"type", "trade"}, NoMatch},
		{`headers.type == "trade"`, trade, []string{"type", "quote"}, NoMatch},
		{`payload.qty == 10 && payload.qty >= 10.0`, trade, nil, Match}, // JSON numbers against int and double literals
		{`payload.sym in ["EURUSD", "GBPUSD"]`, trade, nil, Match},
		{`"spot" in payload.tags && payload.tags.size() == 2`, trade, nil, Match},
		{`payload.venue.mic.startsWith("XL")`, trade, nil, Match},
		{`payload.tags.exists(t, t == "fx")`, trade, nil, Match},
		{`has(payload.missing)`, trade, nil, NoMatch},
		{`payload.missing == 1`, trade, nil, NoMatch},     // error: no such key
		{`payload.sym > 3`, trade, nil, NoMatch},          // error: string against int
		{`payload.price > 100`, `not json`, nil, NoMatch}, // payload is null
		{`payload == null`, `not json`, nil, Match},
		{`payload == "hi"`, `"hi"`, nil, Match},                                                       // any JSON value
		{`"type" in headers && headers.type == "a"`, `{}`, []string{"type", "a", "type", "b"}, Match}, // the first value
		{`!("type" in headers)`, `{}`, nil, Match},
		{`payload.n == 3`, `{"n":3}`, []string{"k", "v"}, Match}, // an extended record's payload
	} {
		if got := match(t, tc.src, tc.payload, tc.kv...); got != tc.want {
			t.Errorf("%s on %s %v: %v, want %v", tc.src, tc.payload, tc.kv, got, tc.want)
		}
	}
}

// TestCompileErrors: each is ErrInvalid with a useful text.
func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"", "empty"},
		{strings.Repeat("a", MaxLen+1), "at most 1024"},
		{"\xff", "not UTF-8"},
		{`headers.type ==`, "Syntax error"},
		{`payload.price + 1`, "not bool"},
		{`headers.type == 3`, "no matching overload"},
		{`nosuch.x == 1`, "undeclared reference"},
	} {
		_, err := Compile(tc.src)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%.40q): %v, want ErrInvalid mentioning %q", tc.src, err, tc.want)
		}
	}
}

// TestCostLimit: an evaluation past MaxCost is aborted, not run to the
// end: a quadratic comprehension over a large array.
func TestCostLimit(t *testing.T) {
	arr := "[" + strings.Repeat("1,", 999) + "1]"
	src := `payload.a.all(x, payload.a.all(y, x == y))`
	if got := match(t, src, `{"a":`+arr+`}`); got != Aborted {
		t.Fatalf("1,000 x 1,000 comprehension: %v, want Aborted", got)
	}
	if got := match(t, src, `{"a":[1,1,1]}`); got != Match {
		t.Fatalf("small array: %v, want Match", got)
	}
}

// TestPayloadDecodedOnlyWhenUsed: a filter on headers alone never decodes
// the payload; a payload over MaxPayload is not decoded.
func TestPayloadDecodedOnlyWhenUsed(t *testing.T) {
	p, err := Compile(`headers.k == "v"`)
	if err != nil {
		t.Fatal(err)
	}
	var m Message
	m.Reset(msg(`{"x":1}`, "k", "v"))
	if p.Match(&m) != Match || m.decoded {
		t.Fatal("the payload was decoded for a headers-only filter")
	}
	big := `{"x":1,"pad":"` + strings.Repeat("p", MaxPayload) + `"}`
	if got := match(t, `payload.x == 1`, big); got != NoMatch {
		t.Fatalf("payload over MaxPayload: %v, want NoMatch", got)
	}
}

// FuzzFilter compiles fuzzer-chosen sources and evaluates what compiles
// on a fuzzer-chosen payload: never a panic, and every outcome is one of
// the three results.
func FuzzFilter(f *testing.F) {
	f.Add(`headers.type == "trade" && payload.price > 100`, `{"price":101}`)
	f.Add(`payload.a.all(x, x > 0)`, `{"a":[1,2,3]}`)
	f.Add(`payload.s.matches("^a+$")`, `{"s":"aaa"}`)
	f.Add(`size(payload) > 2`, `[1,2,3]`)
	f.Fuzz(func(t *testing.T, src, payload string) {
		p, err := Compile(src)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		var m Message
		m.Reset(msg(payload, "type", "x"))
		if r := p.Match(&m); r > Aborted {
			t.Fatalf("result %d", r)
		}
	})
}
