package httpapi

import (
	"reflect"
	"testing"

	"github.com/wts-project/wts/actors/payload"
)

// FuzzOpBodyPlain holds opBody's plain decoder to Strict: whatever it
// takes, Strict takes too and decodes to the same body.
func FuzzOpBodyPlain(f *testing.F) {
	for _, body := range []string{
		`{"idempotency_key":"k-1","kind":"forward","payload":{"data":[{"loss_fn_inputs":{"target_tokens":[1,2]},"model_input":{"token_ids":[0,1]}}]},"seq_id":3,"request_hash":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`,
		` {"seq_id" : 1 , "payload":{"a":[true,false,-1.5e3,"x",{},[]]} } `,
		`{"seq_id":1,"payload":{"a":null}}`,
		`{"seq_id":-1,"kind":"forward"}`,
		`{"seq_id":1,"seq_id":2}`,
		`{"seq_id":01}`,
		`{"kind":"f\u006fo"}`,
		`{"payload":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"payload":tru}`,
		`{"Kind":"forward"}`,
		`{"payload":{}}{}`,
	} {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var plain opBody
		if !plain.decodePlain([]byte(body)) {
			if !reflect.DeepEqual(plain, opBody{}) {
				t.Fatalf("%q: refused, but left %+v", body, plain)
			}
			return
		}
		var want opBody
		if err := payload.Strict([]byte(body), &want, ""); err != nil {
			t.Fatalf("%q: the plain decoder took it, Strict refused it: %v", body, err)
		}
		if !reflect.DeepEqual(plain, want) {
			t.Fatalf("%q: plain %+v, Strict %+v", body, plain, want)
		}
	})
}

// Submissions as clients send them take the plain decoder: compact (Go,
// the bench) or with Python's default separators.
func TestOpBodyPlainTakesClientShapes(t *testing.T) {
	for _, body := range []string{
		`{"idempotency_key":"k-1","kind":"forward","payload":{"data":[{"loss_fn_inputs":{"target_tokens":[1,2]},"model_input":{"token_ids":[0,1]}}]},"seq_id":3,"request_hash":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`,
		`{"seq_id": 7, "idempotency_key": "0b5c1e7a-7f43-4d0c-9a51-2f1f6f7f0d11", "kind": "optim_step", "payload": {"adam_params": {"learning_rate": 0.0001, "beta1": 0.9}}, "request_hash": "ab"}`,
	} {
		var b opBody
		if !b.decodePlain([]byte(body)) {
			t.Errorf("%s: not decoded by the plain decoder", body)
		}
	}
}
