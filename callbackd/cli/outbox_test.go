package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// TestOutboxCommands runs `callbackd outbox dead-letters|list|redeliver` against a real database
// holding one dead and one delivered delivery.
func TestOutboxCommands(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.WithoutFsync("the outbox commands read and update a few rows"))
	dsn := pg.NewDatabase(t, "outbox_cli")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := store.Migrate(ctx, dsn, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	// The states a dispatcher leaves behind: evt_1 dead at "crm" after 6 attempts, delivered at
	// "erp"; evt_2 delivered at "crm".
	if _, err := st.Pool().Exec(ctx, `
WITH e AS (
    INSERT INTO outbox_events (event_id, channel, order_no, event_type, payload, status, expanded_at)
    VALUES ('evt_1', 'wx', 'order-1', 'payment.succeeded', '{}', 'DEAD', now()),
           ('evt_2', 'wx', 'order-2', 'payment.succeeded', '{}', 'DELIVERED', now())
    RETURNING id, event_id
)
INSERT INTO outbox_deliveries (event_row_id, event_id, channel, endpoint, status, attempts,
    next_attempt_at, last_http_status, last_error, delivered_at)
SELECT e.id, e.event_id, 'wx', d.endpoint, d.status, d.attempts, now(), d.http, d.err, d.delivered
FROM e JOIN (VALUES
    ('evt_1', 'crm', 'DEAD', 6, 503, 'endpoint answered HTTP 503', NULL::timestamptz),
    ('evt_1', 'erp', 'DELIVERED', 1, 204, '', now()),
    ('evt_2', 'crm', 'DELIVERED', 2, 200, '', now())
) AS d(event_id, endpoint, status, attempts, http, err, delivered) ON d.event_id = e.event_id`); err != nil {
		t.Fatalf("seed deliveries: %v", err)
	}
	t.Setenv("CALLBACKD_DATABASE_DSN", dsn)

	type view struct {
		WebhookID    string `json:"webhook_id"`
		Status       string `json:"status"`
		Attempts     int    `json:"attempts"`
		Redeliveries int    `json:"redeliveries"`
		LastError    string `json:"last_error"`
	}
	runJSON := func(args ...string) []view {
		t.Helper()
		code, out, errOut := run(t, append(args, "--output", "json")...)
		if code != ExitOK {
			t.Fatalf("callbackd %s: exit %d, stderr %q; want 0", strings.Join(args, " "), code, errOut)
		}
		var vs []view
		if err := json.Unmarshal([]byte(out), &vs); err != nil {
			t.Fatalf("callbackd %s: output is not a JSON list: %v\n%s", strings.Join(args, " "), err, out)
		}
		return vs
	}

	dead := runJSON("outbox", "dead-letters")
	if len(dead) != 1 || dead[0].WebhookID != "evt_1:crm" || dead[0].Attempts != 6 || dead[0].LastError != "endpoint answered HTTP 503" {
		t.Fatalf("dead-letters = %+v; want only evt_1:crm after 6 attempts with its last error", dead)
	}
	if got := runJSON("outbox", "list", "--status", "delivered"); len(got) != 2 {
		t.Fatalf("list --status delivered = %+v; want the 2 delivered deliveries", got)
	}

	re := runJSON("outbox", "redeliver", "evt_1", "--endpoint", "crm")
	if len(re) != 1 || re[0].WebhookID != "evt_1:crm" || re[0].Status != "PENDING" || re[0].Attempts != 0 || re[0].Redeliveries != 1 {
		t.Fatalf("redeliver evt_1 --endpoint crm = %+v; want evt_1:crm PENDING with a fresh cycle and 1 redelivery", re)
	}
	if got := runJSON("outbox", "dead-letters"); len(got) != 0 {
		t.Fatalf("dead-letters after the redelivery = %+v; want none", got)
	}
	if got := runJSON("outbox", "list", "--event", "evt_1"); len(got) != 2 || got[0].WebhookID != "evt_1:erp" || got[0].Status != "DELIVERED" {
		t.Fatalf("list --event evt_1 = %+v; want both deliveries, the erp one untouched (DELIVERED)", got)
	}

	code, out, _ := run(t, "outbox", "list", "--channel", "wx")
	if code != ExitOK || !strings.Contains(out, "WEBHOOK-ID") || !strings.Contains(out, "evt_2:crm") {
		t.Fatalf("list as a table: exit %d, output %q; want a header and the rows", code, out)
	}

	for _, tc := range []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"outbox", "redeliver", "evt_missing"}, ExitError, "not found"},
		{[]string{"outbox", "redeliver"}, ExitUsage, "exactly one EVENT_ID"},
		{[]string{"outbox", "list", "--status", "lost"}, ExitUsage, "--status"},
		{[]string{"outbox", "list", "--output", "xml"}, ExitUsage, "--output"},
		{[]string{"outbox"}, ExitUsage, "subcommand"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("callbackd %s: exit %d, stderr %q; want exit %d mentioning %q",
				strings.Join(tc.args, " "), code, errOut, tc.wantCode, tc.wantErr)
		}
	}
}
