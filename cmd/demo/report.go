package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

// gates are the deduplication gates in pipeline order, with what they are for people.
var gates = []struct{ label, desc string }{
	{metrics.GateWindow, "in-process window (this replica finished it seconds ago)"},
	{metrics.GateRedis, "Redis claim and success mark"},
	{metrics.GateDatabase, "PostgreSQL receipt (unique idempotency key)"},
}

// Report is what the demo found.
type Report struct {
	Replicas    int  `json:"replicas"`
	Orders      int  `json:"orders_per_channel"`
	Duplicates  int  `json:"duplicates"`
	Concurrency int  `json:"concurrency"`
	Shuffle     bool `json:"shuffle"`

	Channels []ChannelReport `json:"channels"`
	Total    Totals          `json:"total"`

	// Balanced is true when every channel has one payment ledger entry per paid order, no order
	// with two, and every registered order paid.
	Balanced        bool      `json:"balanced"`
	DurationSeconds float64   `json:"duration_seconds"`
	Processes       Processes `json:"processes"`
}

// ChannelReport is one channel's part.
type ChannelReport struct {
	Name     string                     `json:"name"`
	Label    string                     `json:"label"`
	Provider callbackdv1alpha1.Provider `json:"provider"`
	// Storm is the storm's summary; Resends the provider's scheduled resends of the orders the
	// storm left unacknowledged (nil when there were none).
	Storm   storm.Summary  `json:"storm"`
	Resends *storm.Summary `json:"resends,omitempty"`
	// Lost is the number of orders whose notification was never sent; FoundByQuery how many of
	// them the merchant's "check payment" found paid by asking the provider.
	Lost         int `json:"lost"`
	FoundByQuery int `json:"found_by_query"`
	// DuplicatesStopped by gate, from callbackd's /metrics.
	DuplicatesStopped map[string]int64 `json:"duplicates_stopped"`
	// Books, straight from PostgreSQL.
	Books Books `json:"books"`
}

// Books are a channel's rows in PostgreSQL.
type Books struct {
	OrdersRegistered int64 `json:"orders_registered"`
	OrdersPaid       int64 `json:"orders_paid"`
	LedgerEntries    int64 `json:"ledger_entries"`
	// OrdersPaidTwice counts orders with more than one payment ledger entry (must be 0).
	OrdersPaidTwice int64 `json:"orders_paid_twice"`
	// PaidAmount is the sum of the payment ledger entries in minor units.
	PaidAmount int64 `json:"paid_amount_minor"`
}

func (b Books) balanced() bool {
	return b.LedgerEntries == b.OrdersPaid && b.OrdersPaidTwice == 0 && b.OrdersPaid == b.OrdersRegistered
}

// Totals add the channels up.
type Totals struct {
	Sent              int              `json:"notifications_sent"`
	Lost              int              `json:"lost"`
	FoundByQuery      int              `json:"found_by_query"`
	Answers           storm.Answers    `json:"answers"`
	DuplicatesStopped map[string]int64 `json:"duplicates_stopped"`
	Books             Books            `json:"books"`
}

// finish computes the totals and the verdict.
func (r *Report) finish() {
	r.Total.DuplicatesStopped = map[string]int64{}
	r.Balanced = len(r.Channels) > 0
	for _, c := range r.Channels {
		for _, s := range []*storm.Summary{&c.Storm, c.Resends} {
			if s == nil {
				continue
			}
			r.Total.Sent += s.Sent
			r.Total.Answers.Success += s.Answers.Success
			r.Total.Answers.Retry += s.Answers.Retry
			r.Total.Answers.Reject += s.Answers.Reject
			r.Total.Answers.TransportError += s.Answers.TransportError
		}
		for g, n := range c.DuplicatesStopped {
			r.Total.DuplicatesStopped[g] += n
		}
		r.Total.Lost += c.Lost
		r.Total.FoundByQuery += c.FoundByQuery
		b := &r.Total.Books
		b.OrdersRegistered += c.Books.OrdersRegistered
		b.OrdersPaid += c.Books.OrdersPaid
		b.LedgerEntries += c.Books.LedgerEntries
		b.OrdersPaidTwice += c.Books.OrdersPaidTwice
		b.PaidAmount += c.Books.PaidAmount
		if !c.Books.balanced() {
			r.Balanced = false
		}
	}
}

func (c ChannelReport) sent() int {
	n := c.Storm.Sent
	if c.Resends != nil {
		n += c.Resends.Sent
	}
	return n
}

func (c ChannelReport) answers() storm.Answers {
	a := c.Storm.Answers
	if c.Resends != nil {
		a.Success += c.Resends.Answers.Success
		a.Retry += c.Resends.Answers.Retry
		a.Reject += c.Resends.Answers.Reject
		a.TransportError += c.Resends.Answers.TransportError
	}
	return a
}

// writeJSON writes the report as JSON to path.
func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

// print writes the report as text or JSON.
func (r *Report) print(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	labels := make([]string, len(r.Channels))
	for i, c := range r.Channels {
		labels[i] = c.Label
	}
	fmt.Fprintf(&b, "\ncallback-platform demo\n")
	fmt.Fprintf(&b, "%d payment channels (%s), %d orders each, every order paid once.\n", len(r.Channels), strings.Join(labels, ", "), r.Orders)
	fmt.Fprintf(&b, "The provider delivered each payment notification %d times: %d requests at a time%s,\n",
		r.Duplicates, r.Concurrency, map[bool]string{true: ", in random order", false: ""}[r.Shuffle])
	fmt.Fprintf(&b, "%s, the way a retry storm looks.\n", replicasText(r.Replicas))
	if r.Total.Lost > 0 {
		fmt.Fprintf(&b, "%d of the notifications were lost on the way; the merchant's \"check payment\" must find those\n", r.Total.Lost)
		fmt.Fprintf(&b, "orders paid by asking the provider.\n")
	}
	fmt.Fprintf(&b, "callbackd must book every payment exactly once.\n\n")

	var t table
	header := []string{}
	for _, c := range r.Channels {
		header = append(header, c.Label)
	}
	t.add("", append(header, "total")...)
	perChannel := func(label string, f func(ChannelReport) int64, total int64) {
		cells := []string{}
		for _, c := range r.Channels {
			cells = append(cells, strconv.FormatInt(f(c), 10))
		}
		t.add(label, append(cells, strconv.FormatInt(total, 10))...)
	}
	perChannel("notifications sent", func(c ChannelReport) int64 { return int64(c.sent()) }, int64(r.Total.Sent))
	perChannel("  answered success", func(c ChannelReport) int64 { return int64(c.answers().Success) }, int64(r.Total.Answers.Success))
	perChannel("  answered \"not yet, resend\"", func(c ChannelReport) int64 { return int64(c.answers().Retry) }, int64(r.Total.Answers.Retry))
	perChannel("  answered reject", func(c ChannelReport) int64 { return int64(c.answers().Reject) }, int64(r.Total.Answers.Reject))
	perChannel("  no answer (transport error)", func(c ChannelReport) int64 { return int64(c.answers().TransportError) }, int64(r.Total.Answers.TransportError))
	perChannel("  of which resent later by the provider", func(c ChannelReport) int64 {
		if c.Resends == nil {
			return 0
		}
		return int64(c.Resends.Sent)
	}, int64(r.Total.Sent-sumStorm(r)))
	if r.Total.Lost > 0 {
		perChannel("notifications lost (never sent)", func(c ChannelReport) int64 { return int64(c.Lost) }, int64(r.Total.Lost))
		perChannel("  found paid by \"check payment\" (provider query)", func(c ChannelReport) int64 { return int64(c.FoundByQuery) }, int64(r.Total.FoundByQuery))
	}
	t.add("duplicates stopped at")
	for _, g := range gates {
		gate := g.label
		perChannel("  "+g.desc, func(c ChannelReport) int64 { return c.DuplicatesStopped[gate] }, r.Total.DuplicatesStopped[gate])
	}
	perChannel("orders registered", func(c ChannelReport) int64 { return c.Books.OrdersRegistered }, r.Total.Books.OrdersRegistered)
	perChannel("orders paid", func(c ChannelReport) int64 { return c.Books.OrdersPaid }, r.Total.Books.OrdersPaid)
	perChannel("ledger entries (from PostgreSQL)", func(c ChannelReport) int64 { return c.Books.LedgerEntries }, r.Total.Books.LedgerEntries)
	perChannel("orders booked twice", func(c ChannelReport) int64 { return c.Books.OrdersPaidTwice }, r.Total.Books.OrdersPaidTwice)
	stat := func(label string, f func(storm.Summary) string) {
		cells := []string{}
		for _, c := range r.Channels {
			cells = append(cells, f(c.Storm))
		}
		t.add(label, cells...)
	}
	stat("answer latency p50", func(s storm.Summary) string { return fmt.Sprintf("%.1f ms", s.Latency.P50) })
	stat("answer latency p99", func(s storm.Summary) string { return fmt.Sprintf("%.1f ms", s.Latency.P99) })
	stat("storm throughput", func(s storm.Summary) string { return fmt.Sprintf("%.0f/s", s.Throughput) })
	t.write(&b)
	fmt.Fprintf(&b, "\ntime taken: %.1fs in all (starting PostgreSQL, Redis and callbackd, the storms, stopping everything)\n", r.DurationSeconds)
	if r.Balanced {
		fmt.Fprintf(&b, "books balance: %d orders paid, %d ledger entries, one per paid order, none twice.\n",
			r.Total.Books.OrdersPaid, r.Total.Books.LedgerEntries)
	} else {
		fmt.Fprintf(&b, "BOOKS DO NOT BALANCE: %d orders registered, %d paid, %d ledger entries, %d orders booked twice.\n",
			r.Total.Books.OrdersRegistered, r.Total.Books.OrdersPaid, r.Total.Books.LedgerEntries, r.Total.Books.OrdersPaidTwice)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func replicasText(n int) string {
	if n == 1 {
		return "all to one callbackd"
	}
	return fmt.Sprintf("spread over %d callbackd replicas as by a load balancer", n)
}

// table renders rows of a label and right-aligned cells.
type table struct{ rows [][]string }

func (t *table) add(label string, cells ...string) {
	t.rows = append(t.rows, append([]string{label}, cells...))
}

func (t *table) write(b *strings.Builder) {
	var widths []int
	for _, row := range t.rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range t.rows {
		line := fmt.Sprintf("%-*s", widths[0], row[0])
		for i, cell := range row[1:] {
			line += fmt.Sprintf("  %*s", widths[i+1], cell)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
}

func sumStorm(r *Report) int {
	n := 0
	for _, c := range r.Channels {
		n += c.Storm.Sent
	}
	return n
}

// scrapeDuplicates reads callbackd_duplicates_stopped_total{channel,gate} from /metrics.
func scrapeDuplicates(ctx context.Context, client *http.Client, url string) (map[string]map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape metrics: HTTP %d", resp.StatusCode)
	}
	return parseDuplicates(resp.Body)
}

// parseDuplicates extracts callbackd_duplicates_stopped_total samples from the Prometheus text
// format: channel → gate → count.
func parseDuplicates(r io.Reader) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := metrics.DuplicatesStoppedTotal + "{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return nil, fmt.Errorf("parse metrics: malformed sample %q", line)
		}
		labels := parseLabels(line[len(prefix):end])
		fields := strings.Fields(line[end+1:])
		if len(fields) == 0 {
			return nil, fmt.Errorf("parse metrics: sample without a value %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("parse metrics: value of %q: %w", line, err)
		}
		ch := labels["channel"]
		if out[ch] == nil {
			out[ch] = map[string]int64{}
		}
		out[ch][labels["gate"]] += int64(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return out, nil
}

// parseLabels parses `a="x",b="y"` (values with \" \\ \n escapes).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return out
		}
		name := strings.TrimSpace(strings.TrimPrefix(s[:eq], ","))
		var v strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				if s[i] == 'n' {
					v.WriteByte('\n')
					continue
				}
			}
			v.WriteByte(s[i])
		}
		out[name] = v.String()
		if i+1 >= len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

// readBooks counts each channel's orders and payment ledger entries straight from PostgreSQL.
func readBooks(ctx context.Context, dsn string) (map[string]Books, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("read the books: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
		SELECT o.channel,
		       count(*),
		       count(*) FILTER (WHERE o.status = 'PAID'),
		       coalesce(sum(l.entries), 0),
		       count(*) FILTER (WHERE l.entries > 1),
		       coalesce(sum(l.amount), 0)
		FROM payment_orders o
		LEFT JOIN (SELECT order_no, count(*) AS entries, sum(amount) AS amount
		           FROM ledger_entries WHERE entry_type = 'payment' GROUP BY order_no) l USING (order_no)
		GROUP BY o.channel`)
	if err != nil {
		return nil, fmt.Errorf("read the books: %w", err)
	}
	defer rows.Close()
	out := map[string]Books{}
	for rows.Next() {
		var ch string
		var b Books
		if err := rows.Scan(&ch, &b.OrdersRegistered, &b.OrdersPaid, &b.LedgerEntries, &b.OrdersPaidTwice, &b.PaidAmount); err != nil {
			return nil, fmt.Errorf("read the books: %w", err)
		}
		out[ch] = b
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the books: %w", err)
	}
	return out, nil
}
