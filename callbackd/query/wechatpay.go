package query

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/wechatpay"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// WeChatPay queries WeChat Pay APIv3: GET /v3/pay/transactions/out-trade-no/{out_trade_no}
// ?mchid=…, signed with the merchant key (Authorization: WECHATPAY2-SHA256-RSA2048 …), the answer
// verified with the channel's WeChat Pay keys.
type WeChatPay struct {
	channel string
	baseURL string
	mchID   string
	serial  string
	key     *keys.Set[signingKey]
	adapter *wechatpay.Adapter
	opts    ClientOptions
}

var _ Client = (*WeChatPay)(nil)

func newWeChatPay(ctx context.Context, ch config.Channel, a *wechatpay.Adapter, opts ClientOptions) (*WeChatPay, error) {
	base, err := baseURL(ch.Reconciliation.QueryBaseURL, DefaultWeChatPayURL)
	if err != nil {
		return nil, err
	}
	key, err := loadSigningKey(ctx, "channel "+ch.Name+": WeChat Pay merchant key", ch.Keys.WeChatMerchantKeyFile, opts)
	if err != nil {
		return nil, err
	}
	return &WeChatPay{
		channel: ch.Name,
		baseURL: base,
		mchID:   ch.Merchant.MerchantID,
		serial:  ch.Keys.WeChatMerchantSerial,
		key:     key,
		adapter: a,
		opts:    opts,
	}, nil
}

// wechatError is the body of an APIv3 failure.
type wechatError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Query implements Client.
func (c *WeChatPay) Query(ctx context.Context, order store.Order) (Answer, error) {
	const op = "query: wechatpay"
	if order.MerchantID != c.mchID {
		return Answer{}, permanent(op, "order %s belongs to merchant %s, the channel is %s", order.OrderNo, order.MerchantID, c.mchID)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	target := c.baseURL + wechatQueryPathPrefix + url.PathEscape(order.OrderNo) + "?mchid=" + url.QueryEscape(c.mchID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return Answer{}, permanent(op, "build request: %v", err)
	}
	auth, err := c.authorization(http.MethodGet, req.URL.RequestURI(), nil)
	if err != nil {
		return Answer{}, permanent(op, "sign request: %v", err)
	}
	req.Header.Set("Authorization", auth)

	status, header, body, err := exchange(op, c.opts.HTTPClient, req)
	if err != nil {
		return Answer{}, err
	}

	switch status {
	case http.StatusOK:
	case http.StatusNotFound:
		// ORDER_NOT_EXIST closes an expired order, so it must be WeChat Pay's own word.
		var e wechatError
		_ = json.Unmarshal(body, &e)
		if e.Code != "ORDER_NOT_EXIST" {
			return Answer{}, classifyStatus(op, status, truncate(e.Code))
		}
		if err := c.adapter.VerifyResponse(header, body); err != nil {
			return Answer{}, permanent(op, "ORDER_NOT_EXIST answer: %v", err)
		}
		return Answer{State: StateNotFound, ProviderState: e.Code}, nil
	default:
		var e wechatError
		_ = json.Unmarshal(body, &e)
		switch e.Code {
		case "SYSTEM_ERROR", "FREQUENCY_LIMITED", "BANKERROR":
			return Answer{}, transient(op, "HTTP %d %s", status, e.Code)
		}
		return Answer{}, classifyStatus(op, status, truncate(e.Code))
	}

	if err := c.adapter.VerifyResponse(header, body); err != nil {
		return Answer{}, permanent(op, "answer refused: %v", err)
	}
	n, err := c.adapter.QueriedTransaction(body)
	if err != nil {
		return Answer{}, permanent(op, "answer refused: %v", err)
	}
	if n.OutTradeNo != order.OrderNo {
		return Answer{}, permanent(op, "answer is about another order")
	}
	var state struct {
		TradeState string `json:"trade_state"`
	}
	_ = json.Unmarshal(body, &state)
	return answerOf(n, state.TradeState), nil
}

// answerOf classifies a normalized notification.
func answerOf(n notify.Notification, providerState string) Answer {
	a := Answer{Notification: n, ProviderState: providerState, State: StateNotPaid}
	switch {
	case n.Status != notify.StatusSucceeded:
	case n.Kind == notify.KindPayment:
		a.State = StatePaid
	case n.Kind == notify.KindClose:
		a.State = StateClosed
	}
	return a
}

// authorization is the WECHATPAY2-SHA256-RSA2048 Authorization header value: SHA256withRSA with
// the merchant key over "METHOD\nURI\ntimestamp\nnonce\nbody\n".
func (c *WeChatPay) authorization(method, uri string, body []byte) (string, error) {
	nonceBytes := make([]byte, 16)
	if _, err := rand.Read(nonceBytes); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	nonce := strings.ToUpper(hex.EncodeToString(nonceBytes))
	ts := strconv.FormatInt(c.opts.Now().Unix(), 10)
	msg := method + "\n" + uri + "\n" + ts + "\n" + nonce + "\n" + string(body) + "\n"
	sum := sha256.Sum256([]byte(msg))
	k := c.key.Current()
	if k == nil || k.key == nil {
		return "", errors.New("no merchant key loaded")
	}
	sig, err := rsa.SignPKCS1v15(rand.Reader, k.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return fmt.Sprintf(`WECHATPAY2-SHA256-RSA2048 mchid=%q,nonce_str=%q,signature=%q,timestamp=%q,serial_no=%q`,
		c.mchID, nonce, base64.StdEncoding.EncodeToString(sig), ts, c.serial), nil
}

// baseURL validates a configured base URL (or takes the default) and drops a trailing slash.
func baseURL(configured, def string) (string, error) {
	if configured == "" {
		configured = def
	}
	u, err := url.Parse(configured)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("reconciliation.queryBaseURL %q is not an http(s) URL", configured)
	}
	return strings.TrimRight(configured, "/"), nil
}

// redactURL strips the URL from a transport error: it is long and adds nothing to the reason.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
