package logrepl

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// trickle returns at most n bytes per Read, as a socket with little
// waiting does.
type trickle struct {
	r io.Reader
	n int
}

func (t *trickle) Read(b []byte) (int, error) { return t.r.Read(b[:min(len(b), t.n)]) }

// TestPacedReaderSpacesShortReads: once on, a read that found little makes
// the next wait until paceWait has passed; a read that filled its room
// does not; every byte arrives in order either way.
func TestPacedReaderSpacesShortReads(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100)
	p := &pacedReader{r: &trickle{r: bytes.NewReader(data), n: 10}}
	p.on.Store(true)
	buf := make([]byte, 64)
	var got []byte
	start := time.Now()
	for range 5 {
		n, err := p.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if d := time.Since(start); d < 4*paceWait {
		t.Errorf("5 short reads took %s, want at least 4 × %s", d, paceWait)
	}
	if !p.short {
		t.Error("a 10-byte read into 64 bytes of room not counted as short")
	}
	p.r = &trickle{r: bytes.NewReader(data[50:]), n: 64}
	if n, err := p.Read(buf); err != nil || n != 64 || p.short {
		t.Errorf("full read: n=%d err=%v short=%v", n, err, p.short)
	}
	got = append(got, buf...)
	if !bytes.Equal(got, data[:len(got)]) {
		t.Error("bytes lost or reordered")
	}
}
