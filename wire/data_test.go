package wire

import (
	"bytes"
	"testing"
)

// TestDataPrefix: the shared DATA prefix decodes to what was encoded, is
// the prefix AppendDataHeader writes after the frame header, and a short
// one is refused.
func TestDataPrefix(t *testing.T) {
	p := AppendDataPrefix(nil, 0x0102030405060708, 0x0a0b0c0d)
	if len(p) != DataPrefixLen {
		t.Fatalf("prefix of %d bytes, want %d", len(p), DataPrefixLen)
	}
	if first, count, ok := DataPrefix(p); !ok || first != 0x0102030405060708 || count != 0x0a0b0c0d {
		t.Fatalf("DataPrefix = %x %x %v", first, count, ok)
	}
	h := AppendDataHeader(nil, 9, 0x0102030405060708, 0x0a0b0c0d, 0)
	if !bytes.Equal(h[HeaderLen:], p) {
		t.Fatalf("AppendDataHeader's prefix %x, AppendDataPrefix %x", h[HeaderLen:], p)
	}
	if _, _, ok := DataPrefix(p[:DataPrefixLen-1]); ok {
		t.Fatal("a short prefix decoded")
	}
}
