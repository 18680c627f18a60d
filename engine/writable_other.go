//go:build !linux

package engine

import "github.com/sluice-rtm/sluice/internal/owned"

// writeWatch without epoll: arm reports false, so waiting connections are
// retried on a short timer (conn.armWritable).
type writeWatch struct{}

func newWriteWatch(*owned.Count) (*writeWatch, error) { return &writeWatch{}, nil }
func (w *writeWatch) arm(*conn) bool                  { return false }
func (w *writeWatch) forget(*conn)                    {}
func (w *writeWatch) close()                          {}
