package proc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"time"
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
	// fileScan is how often [Start] reads what a process wrote to a file
	// while it waits for the ready line.
	fileScan = 10 * time.Millisecond
)

// stream is one output stream of a process. It looks for the ready line
// until one is found, and keeps the stream's last bytes.
//
// A stream the caller gave a writer to is piped: what the process writes
// comes through [stream.Write] and is passed on. A stream nobody reads is
// filed: the process writes to an unlinked temporary file, which costs it
// no more than a log file and this process nothing, and the file is read
// only while the ready line is looked for and when the tail is asked for.
type stream struct {
	p     *Process
	label string
	to    io.Writer // piped: the caller's writer until it fails

	mu        sync.Mutex
	file      *os.File // filed, while the process runs
	name      string   // the file's name, when it could not be unlinked at once
	scanned   int64    // how much of file has been looked at for the ready line
	pending   []byte   // the line not yet ended, while the ready line is looked for
	tail      []byte   // the last tailBytes written (piped) or left (filed, once ended)
	truncated bool     // tail lost its beginning: its first line is partial
}

// newStream returns a stream that passes what the process writes on to
// to, or files it when to is nil.
func newStream(p *Process, label string, to io.Writer) (*stream, error) {
	s := &stream{p: p, label: label, to: to}
	if to != nil {
		return s, nil
	}
	f, err := os.CreateTemp("", "proc-"+label+"-*")
	if err != nil {
		return nil, err
	}
	s.file = f
	// Unlinked, it leaves nothing behind however this process ends; a
	// system that cannot unlink an open file removes it at the end.
	if os.Remove(f.Name()) != nil {
		s.name = f.Name()
	}
	return s, nil
}

// output is what the process writes this stream to.
func (s *stream) output() io.Writer {
	if s.file != nil {
		return s.file
	}
	return s
}

func (s *stream) Write(b []byte) (int, error) {
	s.mu.Lock()
	s.keep(b)
	if s.looking() {
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

func (s *stream) looking() bool { return s.p.readyRE != nil && !s.p.readyFound.Load() }

// filed reports whether the process writes this stream to a file.
func (s *stream) filed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.file != nil
}

// scanFile looks for the ready line in what the process has written to
// the file since the last scan.
func (s *stream) scanFile() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scanFileLocked()
}

func (s *stream) scanFileLocked() {
	buf := make([]byte, 32<<10)
	for s.file != nil && s.looking() {
		n, err := s.file.ReadAt(buf, s.scanned)
		s.scanned += int64(n)
		s.scan(buf[:n])
		if err != nil || n == 0 {
			return
		}
	}
}

// finish scans what is left of the file once the process has ended, keeps
// its tail and closes it.
func (s *stream) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		return
	}
	s.scanFileLocked()
	s.tail, s.truncated = s.fileTail()
	s.file.Close()
	s.file = nil
	if s.name != "" {
		os.Remove(s.name)
	}
}

// fileTail reads the last tailBytes of the file.
func (s *stream) fileTail() ([]byte, bool) {
	fi, err := s.file.Stat()
	if err != nil {
		return nil, false
	}
	off := max(fi.Size()-tailBytes, 0)
	b := make([]byte, fi.Size()-off)
	n, err := s.file.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false
	}
	return b[:n], off > 0
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
	tail, truncated := s.tail, s.truncated
	if s.file != nil {
		tail, truncated = s.fileTail()
	}
	text := string(tail)
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
