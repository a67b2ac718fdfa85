package faults

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// PGProxy is a TCP proxy between callbackd and PostgreSQL that understands enough of the
// PostgreSQL wire protocol (version 3) to act on individual simple-protocol queries: it can reset
// the connection instead of forwarding a COMMIT (the transaction is rolled back: the effect is
// absent), forward the COMMIT and reset the connection when its CommandComplete arrives instead of
// relaying it (the effect is committed, the client never hears so), hold a query before
// forwarding it, or hold its answer after PostgreSQL sent it (the commit happened, no answer left
// yet).
//
// pgx sends BEGIN, COMMIT and ROLLBACK as simple Query messages ("begin", "commit", "rollback":
// Exec without arguments always uses the simple protocol), and every other statement of a
// transaction with the extended protocol. The proxy keeps the frontend bytes of each open
// transaction (Parse/Bind messages with their parameters) so that a rule can tell which
// transaction a COMMIT ends, for instance by the order number its statements carry.
//
// Every decision is counted per label and stage (see Count), so a test can prove that the fault
// it asked for really happened.
type PGProxy struct {
	target string
	ln     net.Listener

	rule atomic.Pointer[PGRule]

	mu       sync.Mutex
	sessions map[*pgSession]struct{}
	counts   map[string]int64
	changed  chan struct{} // closed and replaced whenever counts change

	nextID atomic.Int64
	closed atomic.Bool
	wg     sync.WaitGroup
}

// PGRule decides what the proxy does with one simple-protocol query. It is called on the
// connection's own goroutine, so it must not block; returning the zero PGAction forwards the
// query untouched.
type PGRule func(q PGQuery) PGAction

// PGQuery is a simple-protocol query seen on its way to PostgreSQL.
type PGQuery struct {
	// Conn identifies the client connection (1, 2, … in accept order).
	Conn int64
	// SQL is the query text without its terminating NUL, trimmed of white space.
	SQL string
	// Tx holds the frontend messages sent since the transaction's BEGIN, parameters included
	// (at most pgTxBufferLimit bytes); nil outside a transaction. Do not keep it after the rule
	// returns.
	Tx []byte
}

// IsCommit reports whether the query ends a transaction by committing it.
func (q PGQuery) IsCommit() bool {
	switch normalizeSQL(q.SQL) {
	case "commit", "end", "commit work", "commit transaction", "end work", "end transaction":
		return true
	}
	return false
}

// IsBegin reports whether the query opens a transaction.
func (q PGQuery) IsBegin() bool {
	s := normalizeSQL(q.SQL)
	return s == "begin" || strings.HasPrefix(s, "begin ") || strings.HasPrefix(s, "start transaction")
}

func (q PGQuery) endsTransaction() bool {
	s := normalizeSQL(q.SQL)
	return q.IsCommit() || s == "rollback" || strings.HasPrefix(s, "rollback ") || s == "abort"
}

func normalizeSQL(s string) string {
	return strings.ToLower(strings.TrimSpace(strings.TrimRight(strings.TrimSpace(s), ";")))
}

// TxContains reports whether the transaction's frontend bytes contain s (an order number sent
// as a statement parameter, for instance).
func (q PGQuery) TxContains(s string) bool {
	return s != "" && strings.Contains(string(q.Tx), s)
}

// PGAction is what the proxy does with one query. Stages run in this order: HoldBefore,
// ResetBefore, forward, (answer arrives) HoldAfter, ResetAfter, relay.
type PGAction struct {
	// Label names the fault in the counters; empty means "unlabelled" (still counted).
	Label string
	// HoldBefore, when not nil, delays forwarding the query until it is closed (or the
	// connection ends).
	HoldBefore <-chan struct{}
	// ResetBefore resets both connections instead of forwarding the query.
	ResetBefore bool
	// HoldAfter, when not nil, holds PostgreSQL's answer (its CommandComplete or ErrorResponse)
	// until it is closed (or the connection ends), then relays it.
	HoldAfter <-chan struct{}
	// ResetAfter resets both connections when the answer arrives (after HoldAfter) instead of
	// relaying it: PostgreSQL executed the query, the client never learns it.
	ResetAfter bool
	// ReplaceSQL, when not empty, is forwarded instead of the query (e.g. "rollback" for a
	// "commit"). Only for negative controls: it makes the proxy lie.
	ReplaceSQL string
	// AnswerTag, when not empty, replaces the command tag of PostgreSQL's CommandComplete
	// answer (e.g. "COMMIT" for the "ROLLBACK" of a replaced commit: a lost commit that the
	// client believes durable). Only for negative controls.
	AnswerTag string
}

func (a PGAction) zero() bool {
	return a.HoldBefore == nil && !a.ResetBefore && a.HoldAfter == nil && !a.ResetAfter && a.ReplaceSQL == "" && a.AnswerTag == ""
}

// afterStages reports whether the action waits for its query's answer.
func (a PGAction) afterStages() bool {
	return a.HoldAfter != nil || a.ResetAfter || a.AnswerTag != ""
}

// The stages counted per label.
const (
	// StageHeldQuery: a query was held before forwarding.
	StageHeldQuery = "held-query"
	// StageResetBefore: the connection was reset instead of forwarding a query.
	StageResetBefore = "reset-before"
	// StageForwarded: an acted-on query was forwarded to PostgreSQL.
	StageForwarded = "forwarded"
	// StageHeldAnswer: PostgreSQL's answer arrived and is being held (for a COMMIT: the
	// transaction is committed and the client does not know yet).
	StageHeldAnswer = "held-answer"
	// StageResetAfter: the connection was reset instead of relaying PostgreSQL's answer.
	StageResetAfter = "reset-after"
	// StageRelayed: PostgreSQL's answer to an acted-on query was relayed to the client.
	StageRelayed = "relayed"
	// StageReplaced: the query was replaced by PGAction.ReplaceSQL (negative controls).
	StageReplaced = "replaced"
	// StageRetagged: the answer's command tag was replaced by PGAction.AnswerTag.
	StageRetagged = "retagged"
	// StageAnswerPrefix + the command tag ("COMMIT", "ROLLBACK") or "ERROR" counts the answers
	// PostgreSQL gave to acted-on queries.
	StageAnswerPrefix = "answer:"
)

// pgTxBufferLimit bounds the bytes kept per open transaction.
const pgTxBufferLimit = 1 << 20

// Protocol request codes of untyped startup-phase messages.
const (
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
	pgCancelRequest = 80877102
)

// NewPGProxy listens on a free loopback port and forwards every connection to target
// (PostgreSQL's host:port). Close stops it.
func NewPGProxy(target string) (*PGProxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgwire proxy: listen: %w", err)
	}
	p := &PGProxy{target: target, ln: ln, sessions: map[*pgSession]struct{}{}, counts: map[string]int64{},
		changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *PGProxy) Addr() string { return p.ln.Addr().String() }

// DSN returns dsn with its host and port replaced by the proxy's.
func (p *PGProxy) DSN(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("pgwire proxy: parse DSN: malformed URL") // never quote a DSN: it may carry a password
	}
	u.Host = p.Addr()
	return u.String(), nil
}

// SetRule installs the rule applied to every later simple-protocol query; nil forwards
// everything.
func (p *PGProxy) SetRule(r PGRule) {
	if r == nil {
		p.rule.Store(nil)
		return
	}
	p.rule.Store(&r)
}

// Count returns how often stage happened under label.
func (p *PGProxy) Count(label, stage string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[label+"/"+stage]
}

// Counts returns every counter, keyed "label/stage".
func (p *PGProxy) Counts() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}

// WaitCount waits until Count(label, stage) reaches n or ctx ends.
func (p *PGProxy) WaitCount(ctx context.Context, label, stage string, n int64) error {
	for {
		p.mu.Lock()
		got, ch := p.counts[label+"/"+stage], p.changed
		p.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("pgwire proxy: waiting for %d %s/%s, have %d: %w", n, label, stage, got, ctx.Err())
		}
	}
}

func (p *PGProxy) count(label, stage string) {
	p.mu.Lock()
	p.counts[label+"/"+stage]++
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// ResetAll resets every open connection (both sides).
func (p *PGProxy) ResetAll() int {
	p.mu.Lock()
	ss := make([]*pgSession, 0, len(p.sessions))
	for s := range p.sessions {
		ss = append(ss, s)
	}
	p.mu.Unlock()
	for _, s := range ss {
		s.reset()
	}
	return len(ss)
}

// Close stops accepting, resets every connection and waits for the proxy's goroutines.
func (p *PGProxy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *PGProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c.(*net.TCPConn))
		}()
	}
}

// pgSession is one client connection and its upstream connection.
type pgSession struct {
	id     int64
	p      *PGProxy
	client *net.TCPConn
	server *net.TCPConn

	done      chan struct{}
	closeOnce sync.Once

	// expectSSL: the client sent SSLRequest or GSSENCRequest; the server's next byte is the
	// one-byte answer, delivered to the client loop through sslAnswer.
	expectSSL atomic.Bool
	sslAnswer chan byte

	// pending is the action waiting for its query's answer.
	pending atomic.Pointer[PGAction]
}

func (p *PGProxy) serve(client *net.TCPConn) {
	d := net.Dialer{Timeout: 5 * time.Second}
	up, err := d.Dial("tcp", p.target)
	if err != nil {
		_ = client.SetLinger(0)
		_ = client.Close()
		p.count("", "dial-error")
		return
	}
	s := &pgSession{id: p.nextID.Add(1), p: p, client: client, server: up.(*net.TCPConn),
		done: make(chan struct{}), sslAnswer: make(chan byte, 1)}
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		s.reset()
		return
	}
	p.sessions[s] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.sessions, s)
		p.mu.Unlock()
	}()

	var wg sync.WaitGroup
	wg.Go(func() {
		s.frontend()
		s.close()
	})
	wg.Go(func() {
		s.backend()
		s.close()
	})
	wg.Wait()
}

// close ends both connections with an orderly FIN.
func (s *pgSession) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		_ = s.client.Close()
		_ = s.server.Close()
	})
}

// reset ends both connections with a TCP RST (SO_LINGER 0), as a crashed peer or a middlebox
// would.
func (s *pgSession) reset() {
	s.closeOnce.Do(func() {
		close(s.done)
		_ = s.client.SetLinger(0)
		_ = s.server.SetLinger(0)
		_ = s.client.Close()
		_ = s.server.Close()
	})
}

// pgRawCopy copies src to dst until either ends (after TLS was negotiated, or for a CancelRequest).
func pgRawCopy(dst io.Writer, src io.Reader) { _, _ = io.Copy(dst, src) }

// frontend relays client → PostgreSQL, parsing messages.
func (s *pgSession) frontend() {
	r := bufio.NewReaderSize(s.client, 64<<10)
	w := bufio.NewWriterSize(s.server, 64<<10)
	write := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		if r.Buffered() == 0 {
			return w.Flush() == nil
		}
		return true
	}

	// Startup phase: untyped messages (int32 length, int32 code, ...).
	for {
		msg, err := readUntyped(r)
		if err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		switch code {
		case pgSSLRequest, pgGSSENCRequest:
			s.expectSSL.Store(true)
			if !write(msg) || w.Flush() != nil {
				return
			}
			var b byte
			select {
			case b = <-s.sslAnswer:
			case <-s.done:
				return
			}
			if b == 'S' || b == 'G' { // encrypted from here on: relay without parsing
				pgRawCopy(s.server, r)
				return
			}
			continue
		case pgCancelRequest:
			if write(msg) {
				_ = w.Flush()
				pgRawCopy(s.server, r)
			}
			return
		}
		if !write(msg) {
			return
		}
		break
	}

	var tx []byte
	inTx := false
	for {
		msg, err := readTyped(r)
		if err != nil {
			return
		}
		if msg[0] != 'Q' {
			if inTx && len(tx)+len(msg) <= pgTxBufferLimit {
				tx = append(tx, msg...)
			}
			if !write(msg) {
				return
			}
			continue
		}
		q := PGQuery{Conn: s.id, SQL: strings.TrimSpace(strings.TrimRight(string(msg[5:]), "\x00"))}
		if inTx {
			q.Tx = tx
		}
		var act PGAction
		if rule := s.p.rule.Load(); rule != nil {
			act = (*rule)(q)
		}
		switch {
		case q.IsBegin():
			inTx, tx = true, tx[:0]
		case q.endsTransaction():
			inTx, tx = false, tx[:0]
		}
		if act.zero() {
			if !write(msg) {
				return
			}
			continue
		}
		if !s.apply(act, msg, w, write) {
			return
		}
	}
}

// apply carries out act for the query msg; it returns false when the session is over.
func (s *pgSession) apply(act PGAction, msg []byte, w *bufio.Writer, write func([]byte) bool) bool {
	if act.HoldBefore != nil {
		if w.Flush() != nil {
			return false
		}
		s.p.count(act.Label, StageHeldQuery)
		select {
		case <-act.HoldBefore:
		case <-s.done:
			return false
		}
	}
	if act.ResetBefore {
		s.p.count(act.Label, StageResetBefore)
		s.reset()
		return false
	}
	if act.ReplaceSQL != "" {
		msg = simpleQuery(act.ReplaceSQL)
		s.p.count(act.Label, StageReplaced)
	}
	if act.afterStages() {
		a := act
		s.pending.Store(&a) // before forwarding: the answer cannot arrive earlier
	}
	if !write(msg) || w.Flush() != nil {
		return false
	}
	s.p.count(act.Label, StageForwarded)
	return true
}

// backend relays PostgreSQL → client, parsing messages, and carries out the pending action at
// the first CommandComplete or ErrorResponse after its query was forwarded. pgx reads every
// result of a connection before it sends the next simple query, so that message is the query's
// own answer.
func (s *pgSession) backend() {
	r := bufio.NewReaderSize(s.server, 64<<10)
	w := bufio.NewWriterSize(s.client, 64<<10)
	for {
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
		typ, err := r.ReadByte()
		if err != nil {
			_ = w.Flush()
			return
		}
		if s.expectSSL.CompareAndSwap(true, false) { // the one-byte answer to SSLRequest
			if w.WriteByte(typ) != nil || w.Flush() != nil {
				return
			}
			s.sslAnswer <- typ
			if typ == 'S' || typ == 'G' {
				pgRawCopy(s.client, r)
				return
			}
			continue
		}
		msg, err := readTypedRest(r, typ)
		if err != nil {
			_ = w.Flush()
			return
		}
		if typ == 'C' || typ == 'E' {
			if act := s.pending.Swap(nil); act != nil {
				if !s.answer(*act, msg, w) {
					return
				}
				continue
			}
		}
		if _, err := w.Write(msg); err != nil {
			return
		}
	}
}

// answer carries out the after-stages of act on PostgreSQL's answer msg.
func (s *pgSession) answer(act PGAction, msg []byte, w *bufio.Writer) bool {
	tag := "ERROR"
	if msg[0] == 'C' {
		tag = strings.TrimRight(string(msg[5:]), "\x00")
	}
	s.p.count(act.Label, StageAnswerPrefix+tag)
	if act.HoldAfter != nil {
		if w.Flush() != nil {
			return false
		}
		s.p.count(act.Label, StageHeldAnswer)
		select {
		case <-act.HoldAfter:
		case <-s.done:
			return false
		}
	}
	if act.ResetAfter {
		s.p.count(act.Label, StageResetAfter)
		s.reset()
		return false
	}
	if act.AnswerTag != "" && msg[0] == 'C' {
		msg = commandComplete(act.AnswerTag)
		s.p.count(act.Label, StageRetagged)
	}
	if _, err := w.Write(msg); err != nil {
		return false
	}
	s.p.count(act.Label, StageRelayed)
	return true
}

// maxPGMessage bounds one protocol message (PostgreSQL's own limit for most is 1 GB; callbackd
// never sends more than a few kilobytes).
const maxPGMessage = 64 << 20

// readUntyped reads a startup-phase message: int32 length (itself included), then the rest.
func readUntyped(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > maxPGMessage {
		return nil, fmt.Errorf("pgwire: startup message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// readTyped reads a regular message: type byte, int32 length (itself included), body.
func readTyped(r *bufio.Reader) ([]byte, error) {
	typ, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	return readTypedRest(r, typ)
}

func readTypedRest(r *bufio.Reader, typ byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 4 || n > maxPGMessage {
		return nil, fmt.Errorf("pgwire: message %q length %d", typ, n)
	}
	msg := make([]byte, 1+n)
	msg[0] = typ
	copy(msg[1:5], hdr[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// simpleQuery encodes a simple-protocol Query message.
func simpleQuery(sql string) []byte {
	return typedMessage('Q', append([]byte(sql), 0))
}

// commandComplete encodes a CommandComplete message with tag.
func commandComplete(tag string) []byte {
	return typedMessage('C', append([]byte(tag), 0))
}

func typedMessage(typ byte, body []byte) []byte {
	msg := make([]byte, 5, 5+len(body))
	msg[0] = typ
	binary.BigEndian.PutUint32(msg[1:5], uint32(4+len(body)))
	return append(msg, body...)
}
