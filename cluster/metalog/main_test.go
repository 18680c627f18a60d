package metalog

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every
// test shuts its logs and stream layers down in its cleanups. The check
// retries for up to leakWait: hashicorp's WAL ends its rotation goroutine
// just after Close returns.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(leakWait); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

const leakWait = 5 * time.Second

func findLeaks(d time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(d)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
