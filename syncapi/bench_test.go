package syncapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// BenchmarkDrain measures a first sync of 200 buckets × 1000 todos
// (200k ops) over HTTP, reading lines without parsing them (SPEC §9 P4).
func BenchmarkDrain(b *testing.B) {
	e := newEnv(b, todoRules, todoTables, nil)
	const lists, perList = 200, 1000
	var cs []model.Change
	for l := range lists {
		cs = append(cs, e.upsert("lists", fmt.Sprintf("l%03d", l), "list", "u1"))
	}
	res, err := e.w.WriteSnapshot(e.ctx, cs)
	if err != nil {
		b.Fatal(err)
	}
	last := res.MaxOpID
	for l := range lists {
		cs = cs[:0]
		for i := range perList {
			cs = append(cs, e.upsert("todos", fmt.Sprintf("t%03d-%04d", l, i), fmt.Sprintf("l%03d", l),
				"a todo description of about sixty characters, like the bench"))
		}
		if res, err = e.w.WriteSnapshot(e.ctx, cs); err != nil {
			b.Fatal(err)
		}
		last = res.MaxOpID
	}
	e.publish(last)
	tok := token(b, "u1", nil)
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(e.ctx)
		resp := e.request(ctx, tok, map[string]any{"raw_data": true}, http.Header{"Accept-Encoding": {"identity"}}, nil)
		r := bufio.NewReaderSize(resp.Body, 1<<20)
		lines := 0
		for {
			l, err := r.ReadSlice('\n')
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			lines++
			if bytes.HasPrefix(l, []byte(`{"checkpoint_complete"`)) {
				break
			}
		}
		cancel()
		resp.Body.Close()
		b.ReportMetric(float64(lines), "lines")
	}
	b.ReportMetric(float64(lists*perList+lists)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
