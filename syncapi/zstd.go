package syncapi

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstdStream compresses a stream with zstd (RFC 8878), one frame per
// line: a zstd stream is any sequence of frames, which decoders read one
// after the other, so each line is complete, and handed on, when its
// frame is. The frames are made by one encoder that all streams share
// (EncodeAll is safe for concurrent use and keeps no per-call state), so
// a stream — idle, or blocked on a stalled client — holds no compressor
// at all, as with gzip (gzipStream). A frame does not see the lines
// before it; a data line, the bulk of the bytes, is up to a megabyte of
// ops that repeat the same keys and bucket, and compresses well alone.
type zstdStream struct{}

// zstdEncoder is the shared encoder: fastest level (a stream's CPU goes
// to the lines, not their compression), as many concurrent frames as
// there are processors, and windows no larger than a data line needs.
var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithWindowSize(maxBatchBytes<<1))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	return enc, nil
})

// encode writes p as one frame to out; the end of the stream needs
// nothing more.
func (zstdStream) encode(out *bytes.Buffer, p []byte, _ bool) error {
	if len(p) == 0 {
		return nil
	}
	enc, err := zstdEncoder()
	if err != nil {
		return err
	}
	out.Write(enc.EncodeAll(p, out.AvailableBuffer()))
	return nil
}
