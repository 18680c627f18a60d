// Command sluice is the Sluice server and its command-line client in one
// binary: `sluice serve` runs a server; `sluice pub` and `sluice sub`
// publish and subscribe; `sluice help` lists every subcommand.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}
