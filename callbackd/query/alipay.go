package query

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/alipay"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// alipayQueryMethod is the OpenAPI method of the order query.
const alipayQueryMethod = "alipay.trade.query"

// chinaTime is UTC+8, the zone of the OpenAPI timestamp parameter.
var chinaTime = time.FixedZone("CST", 8*3600)

// Alipay queries Alipay's OpenAPI gateway with alipay.trade.query, the request signed RSA2 with
// the application private key, the answer's sign verified with the channel's Alipay public key.
type Alipay struct {
	channel string
	gateway string
	appID   string
	key     *keys.Set[signingKey]
	adapter *alipay.Adapter
	opts    ClientOptions
}

var _ Client = (*Alipay)(nil)

func newAlipay(ctx context.Context, ch config.Channel, a *alipay.Adapter, opts ClientOptions) (*Alipay, error) {
	base, err := baseURL(ch.Reconciliation.QueryBaseURL, DefaultAlipayURL)
	if err != nil {
		return nil, err
	}
	key, err := loadSigningKey(ctx, "channel "+ch.Name+": Alipay application private key", ch.Keys.AlipayAppPrivateKeyFile, opts)
	if err != nil {
		return nil, err
	}
	return &Alipay{
		channel: ch.Name,
		gateway: base + alipayGatewayPath,
		appID:   ch.Merchant.MerchantID,
		key:     key,
		adapter: a,
		opts:    opts,
	}, nil
}

// alipayAnswer is the gateway's envelope: the response object under "<method>_response" (or
// "error_response" for requests it could not attribute) and the sign over its exact bytes.
type alipayAnswer struct {
	Response json.RawMessage `json:"alipay_trade_query_response"`
	Error    json.RawMessage `json:"error_response"`
	Sign     string          `json:"sign"`
}

// alipayResult is the response object: the common result fields and the trade.
type alipayResult struct {
	Code    string `json:"code"`
	Msg     string `json:"msg"`
	SubCode string `json:"sub_code"`
	SubMsg  string `json:"sub_msg"`
	alipay.QueriedTrade
}

// Query implements Client.
func (c *Alipay) Query(ctx context.Context, order store.Order) (Answer, error) {
	const op = "query: alipay"
	if order.MerchantID != c.appID {
		return Answer{}, permanent(op, "order %s belongs to app_id %s, the channel is %s", order.OrderNo, order.MerchantID, c.appID)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	form, err := c.signedForm(order.OrderNo)
	if err != nil {
		return Answer{}, permanent(op, "sign request: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway, strings.NewReader(form.Encode()))
	if err != nil {
		return Answer{}, permanent(op, "build request: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded;charset=utf-8")

	status, _, body, err := exchange(op, c.opts.HTTPClient, req)
	if err != nil {
		return Answer{}, err
	}
	if status != http.StatusOK {
		return Answer{}, classifyStatus(op, status, "")
	}

	var env alipayAnswer
	if err := json.Unmarshal(body, &env); err != nil {
		return Answer{}, permanent(op, "answer is not JSON")
	}
	if len(env.Response) == 0 {
		// The gateway's unsigned error_response: the request itself was refused.
		var r alipayResult
		_ = json.Unmarshal(env.Error, &r)
		if r.Code == "20000" {
			return Answer{}, transient(op, "gateway error %s %s", r.Code, truncate(r.SubCode))
		}
		return Answer{}, permanent(op, "gateway refused the request: %s %s", truncate(r.Code), truncate(r.SubCode))
	}
	if err := c.adapter.VerifyResponse(env.Response, env.Sign); err != nil {
		return Answer{}, permanent(op, "answer refused: %v", err)
	}
	var r alipayResult
	if err := json.Unmarshal(env.Response, &r); err != nil {
		return Answer{}, permanent(op, "response object is malformed")
	}
	switch {
	case r.Code == "10000":
	case r.SubCode == "ACQ.TRADE_NOT_EXIST":
		return Answer{State: StateNotFound, ProviderState: r.SubCode}, nil
	case r.Code == "20000" || r.SubCode == "ACQ.SYSTEM_ERROR" || r.SubCode == "aop.ACQ.SYSTEM_ERROR":
		return Answer{}, transient(op, "%s %s", r.Code, truncate(r.SubCode))
	default:
		return Answer{}, permanent(op, "%s %s %s", truncate(r.Code), truncate(r.SubCode), truncate(r.SubMsg))
	}
	if r.OutTradeNo != order.OrderNo {
		return Answer{}, permanent(op, "answer is about another order")
	}
	n, err := c.adapter.TradeNotification(r.QueriedTrade, env.Response)
	if err != nil {
		return Answer{}, permanent(op, "answer refused: %v", err)
	}
	return answerOf(n, r.TradeStatus), nil
}

// signedForm builds the OpenAPI request parameters and their RSA2 sign: every parameter but sign
// (sign_type included), empty values skipped, sorted by key, k=v joined with &.
func (c *Alipay) signedForm(outTradeNo string) (url.Values, error) {
	biz, err := json.Marshal(map[string]string{"out_trade_no": outTradeNo})
	if err != nil {
		return nil, err
	}
	params := map[string]string{
		"app_id":      c.appID,
		"method":      alipayQueryMethod,
		"format":      "JSON",
		"charset":     "utf-8",
		"sign_type":   "RSA2",
		"timestamp":   c.opts.Now().In(chinaTime).Format(time.DateTime),
		"version":     "1.0",
		"biz_content": string(biz),
	}
	names := make([]string, 0, len(params))
	for k, v := range params {
		if v != "" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var content bytes.Buffer
	for i, k := range names {
		if i > 0 {
			content.WriteByte('&')
		}
		content.WriteString(k + "=" + params[k])
	}
	k := c.key.Current()
	if k == nil || k.key == nil {
		return nil, errors.New("no application private key loaded")
	}
	sum := sha256.Sum256(content.Bytes())
	sig, err := rsa.SignPKCS1v15(rand.Reader, k.key, crypto.SHA256, sum[:])
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	form := url.Values{}
	for k, v := range params {
		form.Set(k, v)
	}
	form.Set("sign", base64.StdEncoding.EncodeToString(sig))
	return form, nil
}
