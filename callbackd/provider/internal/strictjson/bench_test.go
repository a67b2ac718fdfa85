package strictjson_test

import (
	"strings"
	"testing"

	"github.com/seed-1cff2221/callback-platform/callbackd/provider/internal/strictjson"
)

// wechatOuter is a WeChat Pay APIv3 notification as it arrives: the envelope with the
// encrypted resource (ciphertext of the realistic length for a transaction).
var wechatOuter = `{"id":"EV-2018022511223320873","create_time":"2015-05-20T13:29:35+08:00",` +
	`"resource_type":"encrypt-resource","event_type":"TRANSACTION.SUCCESS","summary":"支付成功",` +
	`"resource":{"original_type":"transaction","algorithm":"AEAD_AES_256_GCM","ciphertext":"` +
	strings.Repeat("v1gGk4Q3mXQ9sT0lYtq6Rj2Hn8Jd5Kc7Wb1Zf3Lp0Ea9Uy2Ix4Ov6Ms8Nr+Pq/Gh=", 24) +
	`","associated_data":"transaction","nonce":"fdasflkja484w"}}`

// wechatResource is the decrypted resource of a successful transaction notification.
var wechatResource = `{"transaction_id":"1217752501201407033233368018","amount":{"payer_total":100,` +
	`"total":100,"currency":"CNY","payer_currency":"CNY"},"mchid":"1230000109","trade_state":"SUCCESS",` +
	`"bank_type":"CMC","promotion_detail":[{"amount":100,"wechatpay_contribute":0,"coupon_id":"109519",` +
	`"scope":"GLOBAL","merchant_contribute":0,"name":"单品惠-6","other_contribute":0,"currency":"CNY",` +
	`"stock_id":"931386","goods_detail":[{"goods_remark":"商品备注信息","quantity":1,"discount_amount":1,` +
	`"goods_id":"M1006","unit_price":100},{"goods_remark":"商品备注信息","quantity":1,"discount_amount":1,` +
	`"goods_id":"M1006","unit_price":100}],"type":"CASH"}],"success_time":"2018-06-08T10:34:56+08:00",` +
	`"payer":{"openid":"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},"out_trade_no":"1217752501201407033233368018",` +
	`"appid":"wxd678efh567hg6787","trade_state_desc":"支付成功","trade_type":"MICROPAY","attach":"自定义数据",` +
	`"scene_info":{"device_id":"013467007045764"}}`

func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct {
		name string
		doc  string
		o    strictjson.Options
	}{
		{"wechat-outer/fold", wechatOuter, strictjson.Options{MaxDepth: 16, FoldCase: true}},
		{"wechat-resource/fold", wechatResource, strictjson.Options{MaxDepth: 16, FoldCase: true}},
		{"wechat-resource/exact", wechatResource, strictjson.Options{MaxDepth: 16}},
	} {
		doc := []byte(bc.doc)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if err := strictjson.Check(doc, bc.o); err != nil {
					b.Fatalf("expected accepted, got %v", err)
				}
			}
		})
	}
}
