//go:build !linux

package engine

// writeWatch without epoll: arm reports false, so waiting connections are
// retried on a short timer (conn.armWritable).
type writeWatch struct{}

func newWriteWatch() (*writeWatch, error) { return &writeWatch{}, nil }
func (w *writeWatch) arm(*conn) bool      { return false }
func (w *writeWatch) forget(*conn)        {}
func (w *writeWatch) close()              {}
