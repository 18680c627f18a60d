package metalog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
)

// kvFSM is the tests' state machine: a map of strings with set and
// compare-and-set, so a proposer with a stale view loses. It records
// every index it applied, and fails the test (through violation) if an
// index is not above the last.
type kvFSM struct {
	mu        sync.Mutex
	kv        map[string]string
	last      uint64
	applied   int
	violation error

	// gate, when set before the log starts, holds Apply of a 'g' command
	// until it is closed; entered is signalled when one waits there.
	gate, entered chan struct{}
}

func newKV() *kvFSM { return &kvFSM{kv: make(map[string]string)} }

// Commands: op byte ('s' set, 'c' compare-and-set), then key, expected
// value (cas only) and value, each a u16 length and bytes.
func setCmd(key, val string) []byte { return appendStrs([]byte{'s'}, key, val) }

func casCmd(key, expect, val string) []byte { return appendStrs([]byte{'c'}, key, expect, val) }

func appendStrs(b []byte, ss ...string) []byte {
	for _, s := range ss {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	return b
}

func readStrs(b []byte, n int) ([]string, bool) {
	out := make([]string, 0, n)
	for range n {
		if len(b) < 2 {
			return nil, false
		}
		l := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+l {
			return nil, false
		}
		out = append(out, string(b[2:2+l]))
		b = b[2+l:]
	}
	return out, len(b) == 0
}

// Apply returns "ok", "conflict:<current>" or "bad".
func (f *kvFSM) Apply(index uint64, cmd []byte) []byte {
	if len(cmd) == 1 && cmd[0] == 'g' && f.gate != nil {
		f.entered <- struct{}{}
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if index <= f.last && f.violation == nil {
		f.violation = fmt.Errorf("index %d applied after %d", index, f.last)
	}
	f.last = index
	f.applied++
	if len(cmd) == 0 {
		return []byte("bad")
	}
	switch cmd[0] {
	case 'g':
		return []byte("ok")
	case 's':
		s, ok := readStrs(cmd[1:], 2)
		if !ok {
			return []byte("bad")
		}
		f.kv[s[0]] = s[1]
		return []byte("ok")
	case 'c':
		s, ok := readStrs(cmd[1:], 3)
		if !ok {
			return []byte("bad")
		}
		if cur := f.kv[s[0]]; cur != s[1] {
			return []byte("conflict:" + cur)
		}
		f.kv[s[0]] = s[2]
		return []byte("ok")
	}
	return []byte("bad")
}

func (f *kvFSM) get(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kv[key]
}

func (f *kvFSM) state() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.kv)
}

func (f *kvFSM) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.violation
}

// Snapshot copies the map: Persist runs concurrently with later Applies.
func (f *kvFSM) Snapshot() (Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return kvSnapshot{kv: maps.Clone(f.kv)}, nil
}

type kvSnapshot struct{ kv map[string]string }

func (s kvSnapshot) Persist(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, k := range slices.Sorted(maps.Keys(s.kv)) {
		if _, err := bw.Write(appendStrs(nil, k, s.kv[k])); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func (s kvSnapshot) Release() {}

// Restore replaces the map with the snapshot's pairs.
func (f *kvFSM) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	kv := make(map[string]string)
	for len(b) > 0 {
		var s []string
		var n int
		for range 2 {
			if len(b[n:]) < 2 {
				return errors.New("kv snapshot: truncated")
			}
			l := int(binary.BigEndian.Uint16(b[n:]))
			if len(b[n:]) < 2+l {
				return errors.New("kv snapshot: truncated")
			}
			s = append(s, string(b[n+2:n+2+l]))
			n += 2 + l
		}
		kv[s[0]] = s[1]
		b = b[n:]
	}
	f.mu.Lock()
	f.kv = kv
	f.mu.Unlock()
	return nil
}
