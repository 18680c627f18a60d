package client

import "testing"

// TestSessionSubCache: the reader's one-entry lookup cache follows every
// change of the session's subscriptions (each bumps subsGen under mu): a
// removed subscription is not found, and an id given to another
// subscription finds the new one.
func TestSessionSubCache(t *testing.T) {
	a, b := &Subscription{id: 1}, &Subscription{id: 2}
	s := &session{subs: map[uint32]*Subscription{1: a, 2: b}}
	change := func(f func()) {
		s.mu.Lock()
		f()
		s.subsGen.Add(1)
		s.mu.Unlock()
	}
	steps := []struct {
		do   func()
		id   uint32
		want *Subscription
	}{
		{nil, 1, a},
		{nil, 1, a}, // cached
		{nil, 2, b},
		{nil, 3, nil},
		{func() { delete(s.subs, 1) }, 1, nil},
		{func() { s.subs[1] = b }, 1, b},
		{func() { s.subs[1] = a }, 1, a},
		{nil, 2, b},
		{func() { delete(s.subs, 2) }, 2, nil},
		{nil, 1, a},
	}
	for i, st := range steps {
		if st.do != nil {
			change(st.do)
		}
		if got := s.sub(st.id); got != st.want {
			t.Fatalf("step %d: sub(%d) = %p, want %p", i, st.id, got, st.want)
		}
	}
}
