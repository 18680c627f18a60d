package ringbuf_test

import (
	"fmt"

	"github.com/sluice-rtm/sluice/ringbuf"
)

// A writer appends; a reader takes a reference, reads a run of stored
// records (u32 length prefix + payload each) and releases it; the owner
// frees the buffer, and its memory is recycled after the last Release.
func Example() {
	b := ringbuf.New(5000, 2<<20)
	for i, msg := range []string{"alpha", "beta", "gamma"} {
		if _, err := b.Append([]byte(msg), int64(100+i)); err != nil {
			fmt.Println(err)
		}
	}
	if b.Acquire() {
		run, end, nbytes := b.AppendRun(nil, 1, b.Len(), 1<<20)
		fmt.Printf("%d slice(s), records [1,%d), %d bytes: %q\n", len(run), end, nbytes, run[0])
		fmt.Println(string(b.Get(0)), b.SearchStamp(101))
		b.Release()
	}
	b.Free()
	fmt.Println(b.Acquire())
	// Output:
	// 1 slice(s), records [1,3), 17 bytes: "\x00\x00\x00\x04beta\x00\x00\x00\x05gamma"
	// alpha 1
	// false
}
