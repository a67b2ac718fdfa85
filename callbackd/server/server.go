// Package server is callbackd's HTTP front: the provider-facing POST /notify/{channel}, the
// merchant API under /v1/, and the operational endpoints /healthz, /readyz and /metrics.
//
// It protects the pipeline from the network: the body is read raw under a size limit, a bounded
// number of callbacks are processed at once (beyond it a fast retryable failure, never a queue,
// so that a storm cannot exhaust the database pool; a slot is taken only once the body is in, so
// slow clients cannot hold them), each callback has a deadline below the providers' 5 s, every
// connection phase has a timeout (slowloris), and a shutdown drains the callbacks in flight
// before the process exits.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// Processor is the pipeline as the server uses it (*pipeline.Pipeline).
type Processor interface {
	// Adapter returns the adapter of a configured channel.
	Adapter(channel string) (notify.Adapter, bool)
	// Process decides one callback from its raw body.
	Process(ctx context.Context, channel string, r *http.Request, body []byte) (notify.Verdict, string)
	// Refuse counts a callback refused before processing and returns the verdict to answer.
	Refuse(channel string, reason notify.Reason) (notify.Verdict, string)
}

// Pinger reports whether the database is reachable (*store.Store).
type Pinger interface {
	Ping(ctx context.Context) error
}

// Options configure a Server. Zero durations take the defaults of package config.
type Options struct {
	// Pipeline decides the callbacks.
	Pipeline Processor
	// Metrics are served on /metrics and counted by the notify handler.
	Metrics *metrics.Metrics
	// Database is pinged by /readyz.
	Database Pinger
	// MerchantAPI serves /v1/ (nil: not mounted).
	MerchantAPI http.Handler
	// Logger receives the server's messages (nil: discarded).
	Logger *slog.Logger

	// MaxBodyBytes is the largest callback body read; a larger one is refused (body_too_large).
	MaxBodyBytes int64
	// MaxInFlight bounds the callbacks processed at once; beyond it a fast retryable answer.
	MaxInFlight int
	// RequestTimeout bounds processing one callback (below the providers' 5 s).
	RequestTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout bound each connection phase
	// (slowloris protection).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// ShutdownTimeout bounds the drain of the requests in flight after ctx is done.
	ShutdownTimeout time.Duration
	// DrainDelay keeps serving for this long after ctx is done, with /readyz already answering
	// 503, so that load balancers stop routing here before the listener closes.
	DrainDelay time.Duration
	// ReadyCacheTTL is how long a /readyz database ping result is reused (default 1 s), so that
	// probes and scrapes cannot load the database.
	ReadyCacheTTL time.Duration
	// ReadyPingTimeout bounds one readiness ping (default 1 s).
	ReadyPingTimeout time.Duration
}

// Server is callbackd's HTTP server. Create it with New, run it with Serve.
type Server struct {
	opts     Options
	log      *slog.Logger
	inflight chan struct{}
	ready    readiness
}

// New checks the options and builds the server.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Pipeline == nil:
		return nil, errors.New("server: new: a Pipeline is required")
	case opts.Metrics == nil:
		return nil, errors.New("server: new: Metrics are required")
	case opts.Database == nil:
		return nil, errors.New("server: new: a Database pinger is required")
	case opts.MaxBodyBytes <= 0:
		return nil, fmt.Errorf("server: new: MaxBodyBytes must be positive, got %d", opts.MaxBodyBytes)
	case opts.MaxInFlight <= 0:
		return nil, fmt.Errorf("server: new: MaxInFlight must be positive, got %d", opts.MaxInFlight)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.RequestTimeout, 4*time.Second)
	def(&opts.ReadHeaderTimeout, 5*time.Second)
	def(&opts.ReadTimeout, 10*time.Second)
	def(&opts.WriteTimeout, 15*time.Second)
	def(&opts.IdleTimeout, 90*time.Second)
	def(&opts.ShutdownTimeout, 20*time.Second)
	def(&opts.ReadyCacheTTL, time.Second)
	def(&opts.ReadyPingTimeout, time.Second)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:     opts,
		log:      log,
		inflight: make(chan struct{}, opts.MaxInFlight),
	}
	s.ready = readiness{db: opts.Database, ttl: opts.ReadyCacheTTL, timeout: opts.ReadyPingTimeout, log: log}
	return s, nil
}

// Handler is the main listener's handler: callbacks, the merchant API, and (when no separate
// operations listener is used) the operational endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notify/{channel}", s.handleNotify)
	if s.opts.MerchantAPI != nil {
		mux.Handle("/v1/", s.opts.MerchantAPI)
	}
	s.mountOps(mux)
	return mux
}

// OpsHandler serves /healthz, /readyz and /metrics alone, for a separate listener.
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	s.mountOps(mux)
	return mux
}

func (s *Server) mountOps(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.Handle("GET /metrics", s.opts.Metrics.Handler())
}

// handleNotify is POST /notify/{channel}.
func (s *Server) handleNotify(w http.ResponseWriter, r *http.Request) {
	channel := r.PathValue("channel")
	adapter, ok := s.opts.Pipeline.Adapter(channel)
	if !ok {
		// Not labelled by the requested name: a scan must not create metric series.
		http.Error(w, "unknown channel", http.StatusNotFound)
		return
	}

	// The body is read before an in-flight slot is taken. A slot stands for processing (it
	// bounds the database work); a client trickling its body must not hold one, or maxInFlight
	// such connections would shed every callback until their read timeout, again and again
	// (slowloris). Reading is bounded by MaxBodyBytes and the connection's ReadTimeout.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			v, msg := s.opts.Pipeline.Refuse(channel, notify.ReasonTooLarge)
			adapter.Respond(w, v, msg)
			return
		}
		// The client went away or stalled past the read timeout; answer in case it still listens.
		s.opts.Metrics.Callbacks.WithLabelValues(channel, adapter.Provider(), metrics.OutcomeRetry).Inc()
		adapter.Respond(w, notify.Retry, "request body unreadable")
		return
	}

	// Then the in-flight limit: a storm beyond capacity costs a body read and a tiny answer,
	// never a queue, and the provider retries later.
	select {
	case s.inflight <- struct{}{}:
	default:
		s.opts.Metrics.OverloadRejections.WithLabelValues(channel).Inc()
		s.opts.Metrics.Callbacks.WithLabelValues(channel, adapter.Provider(), metrics.OutcomeOverloaded).Inc()
		w.Header().Set("Retry-After", "1")
		adapter.Respond(w, notify.Retry, "overloaded")
		return
	}
	s.opts.Metrics.InFlight.Inc()
	defer func() {
		s.opts.Metrics.InFlight.Dec()
		<-s.inflight
	}()

	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	v, msg := s.opts.Pipeline.Process(ctx, channel, r, body)
	adapter.Respond(w, v, msg)
}

// handleReady is GET /readyz: 200 while the database answers, 503 otherwise and while draining.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if reason := s.ready.check(r.Context()); reason != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready: "+reason+"\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// readiness caches the database ping so that frequent probes cost at most one ping per TTL.
type readiness struct {
	db       Pinger
	ttl      time.Duration
	timeout  time.Duration
	log      *slog.Logger
	draining atomic.Bool

	mu        sync.Mutex
	checkedAt time.Time
	lastErr   error
	checked   bool
}

// check returns "" when ready, or a short secret-free reason.
func (rd *readiness) check(ctx context.Context) string {
	if rd.draining.Load() {
		return "shutting down"
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.checked || time.Since(rd.checkedAt) >= rd.ttl {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rd.timeout)
		err := rd.db.Ping(pctx)
		cancel()
		if (err == nil) != (rd.lastErr == nil) || !rd.checked {
			if err != nil {
				rd.log.Warn("database unreachable; not ready", "error", err.Error())
			} else if rd.checked {
				rd.log.Info("database reachable again; ready")
			}
		}
		rd.lastErr, rd.checkedAt, rd.checked = err, time.Now(), true
	}
	if rd.lastErr != nil {
		return "database unreachable"
	}
	return ""
}

// Serve runs the server on ln (and the operational endpoints on opsLn, when not nil) until ctx
// is done, then stops accepting, reports not ready, and drains the requests in flight for up to
// ShutdownTimeout. It returns nil after a complete drain, or the error that stopped it.
func (s *Server) Serve(ctx context.Context, ln net.Listener, opsLn net.Listener) error {
	servers := []*http.Server{s.httpServer(s.Handler())}
	listeners := []net.Listener{ln}
	if opsLn != nil {
		servers[0].Handler = s.mainOnly()
		servers = append(servers, s.httpServer(s.OpsHandler()))
		listeners = append(listeners, opsLn)
	}
	errs := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("server: serve %s: %w", listeners[i].Addr(), err)
				return
			}
			errs <- nil
		}()
	}
	s.log.Info("listening", "addr", ln.Addr().String())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
		if serveErr == nil {
			serveErr = errors.New("server: a listener stopped unexpectedly")
		}
	}

	s.ready.draining.Store(true)
	if serveErr == nil && s.opts.DrainDelay > 0 {
		s.log.Info("shutting down; not ready, still serving during the drain delay", "delay", s.opts.DrainDelay.String())
		time.Sleep(s.opts.DrainDelay)
	}
	s.log.Info("shutting down; draining callbacks in flight", "timeout", s.opts.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	var shutdownErr error
	for _, srv := range servers {
		if err := srv.Shutdown(sctx); err != nil {
			shutdownErr = errors.Join(shutdownErr, fmt.Errorf("server: shutdown: %w", err))
			_ = srv.Close()
		}
	}
	if shutdownErr == nil {
		s.log.Info("drained")
	}
	return errors.Join(serveErr, shutdownErr)
}

// mainOnly is the main listener's handler when the operational endpoints listen apart.
func (s *Server) mainOnly() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notify/{channel}", s.handleNotify)
	if s.opts.MerchantAPI != nil {
		mux.Handle("/v1/", s.opts.MerchantAPI)
	}
	// Liveness stays on the main port too, so a plain TCP-and-HTTP check works either way.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}
