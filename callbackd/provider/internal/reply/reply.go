// Package reply writes the generic adapters' answers: 204 without a body on success, and a small
// JSON document with a 5xx (retry) or 4xx (reject) status otherwise.
package reply

import (
	"encoding/json"
	"net/http"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

type body struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// Generic answers a Stripe-style or Standard Webhooks sender: any 2xx acknowledges, anything
// else makes it resend.
func Generic(w http.ResponseWriter, v notify.Verdict, message string) {
	switch v {
	case notify.Success:
		w.WriteHeader(http.StatusNoContent)
	case notify.Reject:
		JSON(w, http.StatusBadRequest, body{Status: "rejected", Message: message})
	default:
		JSON(w, http.StatusInternalServerError, body{Status: "retry", Message: message})
	}
}

// JSON writes v as the JSON body of a response with the given status.
func JSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings are passed here; keep the status meaningful anyway.
		b = []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
