package hostile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// rawResult is what one hand-written HTTP exchange came to.
type rawResult struct {
	code     int    // 0 when no response was read
	body     string // first 4 KiB of the response body
	sent     int64  // bytes written, head and body
	answered time.Duration
	closed   time.Duration // until the server closed the connection (EOF or reset)
	err      error         // why reading stopped without a response, if it did
}

func (r rawResult) String() string {
	if r.code == 0 {
		return fmt.Sprintf("no answer, connection closed after %v (%d bytes sent; %v)", r.closed.Round(time.Millisecond), r.sent, r.err)
	}
	return fmt.Sprintf("%d %q after %v, connection closed after %v (%d bytes sent)",
		r.code, truncate(r.body, 60), r.answered.Round(time.Millisecond), r.closed.Round(time.Millisecond), r.sent)
}

// rawExchange writes head and then body (pacing it as body's Read does) on a fresh loopback
// connection, reads the response concurrently (a server may answer before the body is done),
// and then, with waitClose, waits for the server to close the connection, for at most limit in
// all.
func (e *env) rawExchange(head []byte, body io.Reader, limit time.Duration, waitClose bool) rawResult {
	var res rawResult
	conn, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		res.err = err
		return res
	}
	defer conn.Close()
	start := time.Now()
	_ = conn.SetDeadline(start.Add(limit))

	var sent atomic.Int64
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		n, err := conn.Write(head)
		sent.Add(int64(n))
		if err != nil || body == nil {
			return
		}
		buf := make([]byte, 64<<10)
		for {
			k, rerr := body.Read(buf)
			if k > 0 {
				n, err := conn.Write(buf[:k])
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
			if rerr != nil {
				return
			}
		}
	}()

	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		res.answered = time.Since(start)
		res.code = resp.StatusCode
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		res.body = string(b)
		resp.Body.Close()
		err = io.EOF
		if waitClose {
			// Drain until the server closes (or the limit).
			if _, err = io.Copy(io.Discard, br); err == nil {
				err = io.EOF
			}
		}
	}
	res.closed = time.Since(start)
	if res.code == 0 || !errors.Is(err, io.EOF) {
		res.err = err
	}
	_ = conn.Close() // unblocks the writer
	<-writeDone
	res.sent = sent.Load()
	return res
}

// requestHead renders a request line and headers as given (nothing validated or added, so that
// a test can put bytes on the wire no HTTP client would send).
func requestHead(path string, headers []string) []byte {
	var b bytes.Buffer
	b.WriteString("POST " + path + " HTTP/1.1\r\n")
	for _, h := range headers {
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// headerLines renders an http.Header as "Name: value" lines, sorted.
func headerLines(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	sort.Strings(out)
	return out
}

// withoutHeader drops the lines of one header (case-insensitively).
func withoutHeader(lines []string, name string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(strings.ToLower(l), strings.ToLower(name)+":") {
			out = append(out, l)
		}
	}
	return out
}

// trickle is a body that yields one byte per interval, n bytes in all.
type trickle struct {
	n        int
	interval time.Duration
}

func (tr *trickle) Read(p []byte) (int, error) {
	if tr.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(tr.interval)
	p[0] = ' '
	tr.n--
	return 1, nil
}

// zeros is a body of n bytes of 'x', generated as it is read (nothing held in memory).
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := int64(len(p))
	if k > z.n {
		k = z.n
	}
	for i := range p[:k] {
		p[i] = 'x'
	}
	z.n -= k
	return int(k), nil
}

var errEOF = io.EOF

// errIfNoAnswer is the error of an exchange that got no HTTP response.
func errIfNoAnswer(r rawResult) error {
	if r.code != 0 {
		return nil
	}
	if r.err == nil {
		return errors.New("connection closed without an answer")
	}
	return r.err
}
