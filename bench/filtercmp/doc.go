// Package filtercmp benchmarks the two expression libraries considered
// for server-side filters (PROTOCOL.md 2.17, docs/filters.md),
// github.com/google/cel-go and github.com/expr-lang/expr, on Sluice
// messages: headers and a JSON payload, decoded as the server decodes
// them. It is a module of its own so that the library not chosen is no
// dependency of Sluice. Run:
//
//	cd bench/filtercmp && go test -run '^$' -bench . -benchmem
//
// The result and the choice are in BENCHMARKS.md ("Filter expressions").
package filtercmp
