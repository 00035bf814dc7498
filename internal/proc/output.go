package proc

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

const (
	// tailBytes is how much of each stream a process keeps for its
	// errors.
	tailBytes = 4 << 10
	// tailLines is how many lines of each stream an error shows.
	tailLines = 10
	// maxLine bounds the part of a line that is kept while it is not
	// ended, so that output without newlines cannot grow without end.
	maxLine = 64 << 10
)

// stream is one output stream of a process: it looks for the ready line
// until one is found, keeps the stream's last bytes and passes everything
// on to the caller's writer.
type stream struct {
	p     *Process
	to    io.Writer // nil, or the caller's writer until it fails
	label string

	mu        sync.Mutex
	pending   []byte // the line not yet ended, while the ready line is looked for
	tail      []byte // the last tailBytes written
	truncated bool   // tail lost its beginning: its first line is partial
}

func (s *stream) Write(b []byte) (int, error) {
	s.mu.Lock()
	s.keep(b)
	if s.p.readyRE != nil && !s.p.readyFound.Load() {
		s.scan(b)
	} else {
		s.pending = nil
	}
	s.mu.Unlock()
	s.p.forwardMu.Lock()
	if s.to != nil {
		if _, err := s.to.Write(b); err != nil {
			s.to = nil
		}
	}
	s.p.forwardMu.Unlock()
	return len(b), nil
}

// keep appends b to the tail, dropping what falls out of it.
func (s *stream) keep(b []byte) {
	if len(b) >= tailBytes {
		s.tail = append(s.tail[:0], b[len(b)-tailBytes:]...)
		s.truncated = true
		return
	}
	if over := len(s.tail) + len(b) - tailBytes; over > 0 {
		s.tail = append(s.tail[:0], s.tail[over:]...)
		s.truncated = true
	}
	s.tail = append(s.tail, b...)
}

// scan matches each line that b ends against the ready line.
func (s *stream) scan(b []byte) {
	s.pending = append(s.pending, b...)
	rest := s.pending
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSuffix(rest[:i], []byte("\r"))
		rest = rest[i+1:]
		if m := s.p.readyRE.FindSubmatch(line); m != nil {
			s.p.found(m)
			s.pending = nil
			return
		}
	}
	if len(rest) > maxLine {
		rest = rest[len(rest)-maxLine:]
	}
	s.pending = append(s.pending[:0], rest...)
}

// last returns at most n of the last whole lines of the stream, without
// blank ones.
func (s *stream) last(n int) []string {
	s.mu.Lock()
	text := string(s.tail)
	truncated := s.truncated
	s.mu.Unlock()
	lines := strings.Split(text, "\n")
	if truncated && len(lines) > 1 {
		lines = lines[1:]
	}
	var out []string
	for _, l := range lines {
		if l = strings.TrimRight(l, " \t\r"); strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}
