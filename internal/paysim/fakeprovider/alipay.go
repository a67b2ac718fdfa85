package fakeprovider

import (
	"bytes"
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

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

// alipayQueryMethod is the only gateway method the fake serves.
const alipayQueryMethod = "alipay.trade.query"

// alipayQueryAnswer is alipay_trade_query_response, in Alipay's field order.
type alipayQueryAnswer struct {
	Code           string `json:"code"`
	Msg            string `json:"msg"`
	SubCode        string `json:"sub_code,omitempty"`
	SubMsg         string `json:"sub_msg,omitempty"`
	TradeNo        string `json:"trade_no,omitempty"`
	OutTradeNo     string `json:"out_trade_no,omitempty"`
	BuyerLogonID   string `json:"buyer_logon_id,omitempty"`
	TradeStatus    string `json:"trade_status,omitempty"`
	TotalAmount    string `json:"total_amount,omitempty"`
	ReceiptAmount  string `json:"receipt_amount,omitempty"`
	BuyerPayAmount string `json:"buyer_pay_amount,omitempty"`
	SendPayDate    string `json:"send_pay_date,omitempty"`
	BuyerUserID    string `json:"buyer_user_id,omitempty"`
}

// alipayGateway answers the Alipay OpenAPI gateway. Parameters may come in the query string,
// the form body, or both (SDKs differ), as at the real gateway.
func (s *Server) alipayGateway(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		s.alipayError(w, "40002", "Invalid Arguments", "isv.invalid-parameter", "参数无效")
		return
	}
	params := r.Form // query string and form body together
	if params.Get("method") != alipayQueryMethod {
		s.alipayError(w, "40002", "Invalid Arguments", "isv.invalid-method", "不存在的方法名")
		return
	}
	appID := params.Get("app_id")
	set := s.channel(callbackdv1alpha1.ProviderAlipay, appID)
	if set == nil {
		s.alipayError(w, "40002", "Invalid Arguments", "isv.invalid-app-id", "无效的AppID参数")
		return
	}
	if err := verifyAlipayRequest(set, params); err != nil {
		s.logger.Info("fakeprovider: refused an Alipay query", "app_id", appID, "reason", err.Error())
		s.alipayAnswer(w, set, alipayQueryAnswer{Code: "40002", Msg: "Invalid Arguments", SubCode: "isv.invalid-signature", SubMsg: "验签出错"})
		return
	}
	var biz struct {
		OutTradeNo string `json:"out_trade_no"`
		TradeNo    string `json:"trade_no"`
	}
	if err := json.Unmarshal([]byte(params.Get("biz_content")), &biz); err != nil || biz.OutTradeNo == "" {
		s.alipayAnswer(w, set, alipayQueryAnswer{Code: "40004", Msg: "Business Failed", SubCode: "ACQ.INVALID_PARAMETER", SubMsg: "参数无效"})
		return
	}
	t, ok := s.lookup(tradeKey{callbackdv1alpha1.ProviderAlipay, appID, biz.OutTradeNo})
	if !ok || (biz.TradeNo != "" && biz.TradeNo != t.TransactionID) {
		s.alipayAnswer(w, set, alipayQueryAnswer{Code: "40004", Msg: "Business Failed", SubCode: "ACQ.TRADE_NOT_EXIST", SubMsg: "交易不存在", OutTradeNo: biz.OutTradeNo})
		return
	}
	yuan := yuanOf(t.Amount)
	a := alipayQueryAnswer{
		Code:         "10000",
		Msg:          "Success",
		TradeNo:      t.TransactionID,
		OutTradeNo:   t.OutTradeNo,
		BuyerLogonID: "159****5620",
		TotalAmount:  yuan,
		BuyerUserID:  "2088101117955611",
	}
	switch t.state() {
	case StatePaid:
		a.TradeStatus, a.ReceiptAmount, a.BuyerPayAmount = paysim.AlipayTradeSuccess, yuan, yuan
		a.SendPayDate = paysim.AlipayTime(t.PaidAt)
	case StateClosed:
		a.TradeStatus = paysim.AlipayTradeClosed
	default:
		a.TradeStatus = paysim.AlipayWaitBuyerPay
	}
	s.alipayAnswer(w, set, a)
}

// yuanOf renders fen as a yuan decimal string ("0.01", "99.00"), exactly.
func yuanOf(fen int64) string {
	sign := ""
	if fen < 0 {
		sign, fen = "-", -fen
	}
	return fmt.Sprintf("%s%d.%02d", sign, fen/100, fen%100)
}

// verifyAlipayRequest checks an OpenAPI request's RSA2 signature with the application's public
// key: every parameter but sign (sign_type included, unlike notifications), empty values
// skipped, sorted by key, k=v joined with &.
func verifyAlipayRequest(set *keyset.Set, params url.Values) error {
	if params.Get("sign_type") != "RSA2" {
		return errors.New("sign_type must be RSA2")
	}
	sig, err := base64.StdEncoding.DecodeString(params.Get("sign"))
	if err != nil || len(sig) == 0 {
		return errors.New("sign is missing or not base64")
	}
	keys := make([]string, 0, len(params))
	for k, v := range params {
		if k == "sign" || len(v) == 0 || v[0] == "" {
			continue
		}
		if len(v) > 1 {
			return errors.New("parameter " + k + " is repeated")
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + params.Get(k))
	}
	sum := sha256.Sum256(b.Bytes())
	if err := rsa.VerifyPKCS1v15(set.AppPublicKey, crypto.SHA256, sum[:], sig); err != nil {
		return errors.New("sign does not verify with the application key")
	}
	return nil
}

// alipayAnswer writes {"alipay_trade_query_response":<a>,"sign":"…"}, the signature being
// SHA256withRSA with Alipay's key over the exact bytes of <a>.
func (s *Server) alipayAnswer(w http.ResponseWriter, set *keyset.Set, a alipayQueryAnswer) {
	inner, err := json.Marshal(a)
	if err != nil {
		http.Error(w, "encode answer", http.StatusInternalServerError)
		return
	}
	sum := sha256.Sum256(inner)
	sig, err := rsa.SignPKCS1v15(rand.Reader, set.AlipayKey, crypto.SHA256, sum[:])
	if err != nil {
		http.Error(w, "sign answer", http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	b.WriteString(`{"alipay_trade_query_response":`)
	b.Write(inner)
	b.WriteString(`,"sign":"`)
	b.WriteString(base64.StdEncoding.EncodeToString(sig))
	b.WriteString(`"}`)
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// alipayError is the gateway's unsigned error_response, for requests it cannot attribute to an
// application.
func (s *Server) alipayError(w http.ResponseWriter, code, msg, subCode, subMsg string) {
	body, _ := json.Marshal(map[string]alipayQueryAnswer{"error_response": {Code: code, Msg: msg, SubCode: subCode, SubMsg: subMsg}})
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
