package fakeprovider

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

// wechatAuthScheme is the Authorization scheme of WeChat Pay APIv3 requests.
const wechatAuthScheme = "WECHATPAY2-SHA256-RSA2048"

// wechatTolerance is WeChat Pay's timestamp window for signed requests.
const wechatTolerance = 5 * time.Minute

// wechatAmount and wechatTransaction are the query answer, in WeChat Pay's field order.
type wechatAmount struct {
	Total         int64  `json:"total"`
	PayerTotal    *int64 `json:"payer_total,omitempty"`
	Currency      string `json:"currency"`
	PayerCurrency string `json:"payer_currency,omitempty"`
}

type wechatTransaction struct {
	Amount          wechatAmount        `json:"amount"`
	AppID           string              `json:"appid"`
	Attach          string              `json:"attach"`
	BankType        string              `json:"bank_type,omitempty"`
	MchID           string              `json:"mchid"`
	OutTradeNo      string              `json:"out_trade_no"`
	Payer           *paysim.WeChatPayer `json:"payer,omitempty"`
	PromotionDetail []any               `json:"promotion_detail"`
	SuccessTime     string              `json:"success_time,omitempty"`
	TradeState      string              `json:"trade_state"`
	TradeStateDesc  string              `json:"trade_state_desc"`
	TradeType       string              `json:"trade_type,omitempty"`
	TransactionID   string              `json:"transaction_id,omitempty"`
}

type wechatError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// wechatQuery answers GET /v3/pay/transactions/out-trade-no/{out_trade_no}?mchid=….
func (s *Server) wechatQuery(w http.ResponseWriter, r *http.Request) {
	outTradeNo := r.PathValue("out_trade_no")
	mchid := r.URL.Query().Get("mchid")
	if mchid == "" {
		s.wechatFail(w, nil, http.StatusBadRequest, "PARAM_ERROR", "mchid is required")
		return
	}
	set := s.channel(callbackdv1alpha1.ProviderWeChatPay, mchid)
	if set == nil {
		s.wechatFail(w, nil, http.StatusBadRequest, "PARAM_ERROR", "mchid is unknown")
		return
	}
	if err := s.verifyWeChatRequest(set, mchid, r); err != nil {
		s.logger.Info("fakeprovider: refused a WeChat Pay query", "mchid", mchid, "reason", err.Error())
		s.wechatFail(w, set, http.StatusUnauthorized, "SIGN_ERROR", "signature verification failed")
		return
	}
	t, ok := s.lookup(tradeKey{callbackdv1alpha1.ProviderWeChatPay, mchid, outTradeNo})
	if !ok {
		s.wechatFail(w, set, http.StatusNotFound, "ORDER_NOT_EXIST", "订单不存在")
		return
	}
	m := set.Manifest.Merchant
	tx := wechatTransaction{
		Amount:          wechatAmount{Total: t.Amount, Currency: t.Currency},
		AppID:           m.AppID,
		MchID:           mchid,
		OutTradeNo:      t.OutTradeNo,
		PromotionDetail: []any{},
	}
	switch t.state() {
	case StatePaid:
		tx.Amount.PayerTotal, tx.Amount.PayerCurrency = &t.Amount, t.Currency
		tx.BankType, tx.TradeType, tx.TransactionID = "OTHERS", "JSAPI", t.TransactionID
		tx.Payer = &paysim.WeChatPayer{OpenID: openID(t.OutTradeNo)}
		tx.SuccessTime = paysim.WeChatTime(t.PaidAt)
		tx.TradeState, tx.TradeStateDesc = "SUCCESS", "支付成功"
	case StateClosed:
		tx.TradeState, tx.TradeStateDesc = "CLOSED", "订单已关闭"
	default:
		tx.TradeState, tx.TradeStateDesc = "NOTPAY", "订单未支付"
	}
	s.wechatAnswer(w, set, http.StatusOK, tx)
}

// openID is a stable test openid of the payer of an order (the one paysim's notifications carry).
func openID(outTradeNo string) string {
	sum := sha256.Sum256([]byte("openid" + outTradeNo))
	return "oUpF8u" + hex.EncodeToString(sum[:])[:22]
}

// verifyWeChatRequest checks the merchant's Authorization header: scheme, mchid, the merchant
// key serial, the timestamp window, and the SHA256withRSA signature of
// "METHOD\nURL\ntimestamp\nnonce\nbody\n" with the merchant's public key.
func (s *Server) verifyWeChatRequest(set *keyset.Set, mchid string, r *http.Request) error {
	auth := r.Header.Get("Authorization")
	scheme, params, ok := strings.Cut(auth, " ")
	if !ok || scheme != wechatAuthScheme {
		return errors.New("authorization scheme is not " + wechatAuthScheme)
	}
	fields := map[string]string{}
	for _, part := range strings.Split(params, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return errors.New("malformed authorization parameters")
		}
		unq, err := strconv.Unquote(v)
		if err != nil {
			return errors.New("authorization values must be quoted")
		}
		fields[k] = unq
	}
	if fields["mchid"] != mchid {
		return errors.New("authorization mchid differs from the query's mchid")
	}
	if fields["serial_no"] != set.Manifest.Keys.WeChatMerchantSerial {
		return errors.New("unknown merchant key serial")
	}
	ts, err := strconv.ParseInt(fields["timestamp"], 10, 64)
	if err != nil {
		return errors.New("bad timestamp")
	}
	if d := s.now().Sub(time.Unix(ts, 0)); d >= wechatTolerance || d <= -wechatTolerance {
		return errors.New("timestamp outside the 5 minute window")
	}
	sig, err := base64.StdEncoding.DecodeString(fields["signature"])
	if err != nil {
		return errors.New("signature is not base64")
	}
	// A GET has an empty body: the message ends with "nonce\n\n".
	message := r.Method + "\n" + r.URL.RequestURI() + "\n" + fields["timestamp"] + "\n" + fields["nonce_str"] + "\n\n"
	sum := sha256.Sum256([]byte(message))
	if err := rsa.VerifyPKCS1v15(set.MerchantPublicKey, crypto.SHA256, sum[:], sig); err != nil {
		return errors.New("signature does not verify with the merchant key")
	}
	return nil
}

func (s *Server) wechatFail(w http.ResponseWriter, set *keyset.Set, status int, code, message string) {
	s.wechatAnswer(w, set, status, wechatError{Code: code, Message: message})
}

// wechatAnswer writes v as JSON, signed with WeChat Pay's key when the channel is known.
func (s *Server) wechatAnswer(w http.ResponseWriter, set *keyset.Set, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode answer", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	requestID, _ := paysim.RandomString(24)
	h.Set("Request-ID", requestID)
	if set != nil {
		nonce, err := paysim.RandomString(32)
		if err != nil {
			http.Error(w, "nonce", http.StatusInternalServerError)
			return
		}
		ts := strconv.FormatInt(s.now().Unix(), 10)
		sig, err := paysim.SignWeChat(set.PlatformKey, ts, nonce, body)
		if err != nil {
			http.Error(w, "sign answer", http.StatusInternalServerError)
			return
		}
		h.Set("Wechatpay-Serial", set.Manifest.WeChatSerial)
		h.Set("Wechatpay-Signature", sig)
		h.Set("Wechatpay-Timestamp", ts)
		h.Set("Wechatpay-Nonce", nonce)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
