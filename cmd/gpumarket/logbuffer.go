package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The server writes one log line per request. Written straight to stderr
// that is one write system call per request, taken under the handler's
// lock, so under load requests queue behind each other's writes. Instead
// the lines go into a buffer that is written out when it fills, every
// flush interval, at once for a warning or an error (the lines that matter
// most if the process then dies), and when serve stops. A crash of the
// process (kill -9, a fatal runtime error) loses at most the last
// interval's info lines.

// logBufferSize is the buffer of a logBuffer: a few hundred request lines.
const logBufferSize = 64 << 10

// logFlushInterval is how long an info line may wait in the buffer.
const logFlushInterval = time.Second

// logBuffer is a buffered, lock-protected writer that flushes itself
// periodically until Close.
type logBuffer struct {
	mu   sync.Mutex
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// newLogBuffer returns a buffer in front of out and starts flushing it
// every interval. Close stops that and flushes what is left.
func newLogBuffer(out io.Writer, size int, interval time.Duration) *logBuffer {
	b := &logBuffer{w: bufio.NewWriterSize(out, size), stop: make(chan struct{}), done: make(chan struct{})}
	go b.flushEvery(interval)
	return b
}

func (b *logBuffer) flushEvery(interval time.Duration) {
	defer close(b.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.Flush()
		case <-b.stop:
			return
		}
	}
}

// Write buffers p; it writes to the output only when the buffer is full.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush writes out what is buffered.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}

// Close stops the periodic flush and flushes what is left. Lines logged
// after Close are still buffered, and written by a later Flush.
func (b *logBuffer) Close() error {
	b.once.Do(func() {
		close(b.stop)
		<-b.done
	})
	return b.Flush()
}

// bufferedHandler is a slog text handler writing into a logBuffer that it
// flushes after every record at warning level or above.
type bufferedHandler struct {
	slog.Handler
	buf *logBuffer
}

// newBufferedHandler returns a text handler at level writing into buf.
func newBufferedHandler(buf *logBuffer, level slog.Level) bufferedHandler {
	return bufferedHandler{Handler: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}), buf: buf}
}

// Handle formats r into the buffer, and writes the buffer out when r is a
// warning or an error.
func (h bufferedHandler) Handle(ctx context.Context, r slog.Record) error {
	if err := h.Handler.Handle(ctx, r); err != nil {
		return err
	}
	if r.Level >= slog.LevelWarn {
		return h.buf.Flush()
	}
	return nil
}

// WithAttrs keeps the buffering of a logger made with With.
func (h bufferedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return bufferedHandler{Handler: h.Handler.WithAttrs(attrs), buf: h.buf}
}

// WithGroup keeps the buffering of a logger made with WithGroup.
func (h bufferedHandler) WithGroup(name string) slog.Handler {
	return bufferedHandler{Handler: h.Handler.WithGroup(name), buf: h.buf}
}
