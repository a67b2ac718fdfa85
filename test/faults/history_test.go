package faults

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestHistoryJSONL(t *testing.T) {
	h := &History{}
	n := Notification{Channel: Channel, OrderNo: "o-1", Kind: KindPayment}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	h.Record(Op{Key: n.Key(), Class: Retryable, Status: 503, Sent: at, Answered: at.Add(time.Millisecond)})
	h.Record(Op{Key: n.Key(), Class: Success, Status: 200, Sent: at, Answered: at.Add(2 * time.Millisecond)})
	p := filepath.Join(t.TempDir(), "h.jsonl")
	if err := h.WriteJSONL(p); err != nil {
		t.Fatalf("WriteJSONL: %v", err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer f.Close()
	var got []Op
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			t.Fatalf("line %d: %v", len(got)+1, err)
		}
		got = append(got, op)
	}
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 || got[1].Class != Success || !got[1].Answered.Equal(at.Add(2*time.Millisecond)) {
		t.Fatalf("history read back: expected 2 ops numbered 1, 2 with the second a success, got %+v", got)
	}
	if s := h.Succeeded(); !s[n.Key()] || len(s) != 1 {
		t.Fatalf("Succeeded: expected {%s}, got %v", n.Key(), s)
	}
}

func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		code int
		want Class
	}{{200, Success}, {204, Success}, {429, Retryable}, {500, Retryable}, {503, Retryable}, {400, Rejected}, {401, Rejected}, {404, Rejected}} {
		if got := ClassOf(tc.code); got != tc.want {
			t.Errorf("ClassOf(%d): expected %s, got %s", tc.code, tc.want, got)
		}
	}
}
