package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingWriter counts the writes that reach out.
type countingWriter struct {
	out    io.Writer
	writes atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.out.Write(p)
}

// TestLogBufferHoldsInfoLines: info lines wait in the buffer — hundreds
// of them cost a handful of writes — and come out, in order, with the next
// warning, at the flush interval or at Close.
func TestLogBufferHoldsInfoLines(t *testing.T) {
	var out lockedBuffer
	counted := &countingWriter{out: &out}
	buf := newLogBuffer(counted, logBufferSize, time.Hour)
	log := slog.New(newBufferedHandler(buf, slog.LevelInfo)).With("request_id", "r1")

	log.Debug("below the level")
	log.Info("request", "path", "/one")
	if got := out.String(); got != "" {
		t.Fatalf("an info line was written at once: %q", got)
	}
	log.Warn("slow", "path", "/two")
	got := out.String()
	one, two := strings.Index(got, "path=/one"), strings.Index(got, "path=/two")
	if one < 0 || two < one || !strings.Contains(got, "request_id=r1") || strings.Contains(got, "below the level") {
		t.Fatalf("after a warning the log reads %q; want the info line, then the warning, both with the request id", got)
	}
	log.Info("request", "path", "/three")
	if strings.Contains(out.String(), "path=/three") {
		t.Fatal("an info line after the warning was written at once")
	}
	before := counted.writes.Load()
	const lines = 2000
	for i := range lines {
		log.Info("request", "path", fmt.Sprintf("/many/%d", i))
	}
	if w := counted.writes.Load() - before; w > lines/50 {
		t.Errorf("%d info lines took %d writes; want a few (one per %d bytes)", lines, w, logBufferSize)
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	got = out.String()
	if !strings.Contains(got, "path=/three") || !strings.Contains(got, fmt.Sprintf("path=/many/%d\n", lines-1)) {
		t.Errorf("Close left lines in the buffer: the log ends %q", got[max(0, len(got)-200):])
	}

	// The interval alone writes a line out.
	var out2 lockedBuffer
	buf2 := newLogBuffer(&out2, logBufferSize, 20*time.Millisecond)
	defer buf2.Close()
	slog.New(newBufferedHandler(buf2, slog.LevelInfo)).Info("request", "path", "/later")
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out2.String(), "path=/later"); {
		if time.Now().After(deadline) {
			t.Fatal("an info line was not written out within 5 s at a 20 ms flush interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkRequestLog measures the per-request log line — the attributes
// web's requestLogger writes, through a logger made With the request id —
// from concurrent requests into a file, with the unbuffered text handler
// serve used before ("direct", one write system call per line) and with
// the buffered handler serve uses now. writes/op counts the writes that
// reach the file.
func BenchmarkRequestLog(b *testing.B) {
	for _, how := range []string{"direct", "buffered"} {
		b.Run(how, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			counted := &countingWriter{out: f}
			var h slog.Handler = slog.NewTextHandler(counted, &slog.HandlerOptions{Level: slog.LevelInfo})
			var buf *logBuffer
			if how == "buffered" {
				buf = newLogBuffer(counted, logBufferSize, logFlushInterval)
				h = newBufferedHandler(buf, slog.LevelInfo)
			}
			log := slog.New(h)
			var id atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					start := time.Now()
					l := log.With("request_id", fmt.Sprintf("req-%d", id.Add(1)))
					l.Info("request", "method", "POST", "path", "/api/v1/quotes", "status", 200, "bytes", 5123,
						"duration_ms", float64(time.Since(start).Microseconds())/1000, "remote", "127.0.0.1")
				}
			})
			b.StopTimer()
			if buf != nil {
				if err := buf.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counted.writes.Load())/float64(b.N), "writes/op")
		})
	}
}
