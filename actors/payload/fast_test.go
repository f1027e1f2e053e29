package payload

import (
	"reflect"
	"testing"
)

// FuzzFastBatch holds fastBatch to Strict: whatever it takes, Strict takes
// too and decodes to the same Batch.
func FuzzFastBatch(f *testing.F) {
	for _, body := range []string{
		`{"data":[{"model_input":{"token_ids":[5,10,15]},"loss_fn_inputs":{"target_tokens":[10,15,20]}}]}`,
		`{"data":[{"model_input":{"token_ids":[1,2]},"loss_fn_inputs":{"target_tokens":[2,3],"weights":[0.5,1e-3],"logprobs":[-1.25,-0.0],"advantages":[2E+2,-3]}}],"loss_fn":"ppo","loss_fn_config":{"clip_low_threshold":0.8,"clip_high_threshold":1.2}}`,
		" {\n\t\"data\" : [ ] , \"loss_fn\":\"cross_entropy\"\r} ",
		`{"data":[{"model_input":{"token_ids":[]},"loss_fn_inputs":{}}],"loss_fn_config":{}}`,
		`{"data":[{"model_input":{"token_ids":[007]}}]}`,
		`{"data":[{"model_input":{"token_ids":[1]}}],"data":[]}`,
		`{"data":[{"model_input":{"token_ids":[1.5]},"loss_fn_inputs":{"weights":[1e400]}}]}`,
		`{"data":null,"loss_fn":"\u0070po"}`,
		`{"data":[],"Loss_Fn":"ppo"}`,
		`{"loss_fn_config":{"a":1,"a":2}}`,
		`{"data":[{"model_input":{"token_ids":[123456789012345678901]}}]}`,
		`{"data":[]}x`,
	} {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var fast Batch
		if !fastBatch([]byte(body), &fast) {
			return
		}
		var want Batch
		if err := Strict([]byte(body), &want, "payload"); err != nil {
			t.Fatalf("%q: fastBatch took it, Strict refused it: %v", body, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("%q: fastBatch %+v, Strict %+v", body, fast, want)
		}
	})
}

// The payloads clients send take the fast path: the SDK's and the bench's
// shapes (keys in any order, with or without the optional loss inputs).
func TestFastBatchTakesClientShapes(t *testing.T) {
	for _, body := range []string{
		`{"data":[{"loss_fn_inputs":{"target_tokens":[5,10]},"model_input":{"token_ids":[5,10]}}]}`,
		`{"data":[{"model_input":{"token_ids":[1,2,3]},"loss_fn_inputs":{"target_tokens":[2,3,4],"weights":[0,1,1]}}],"loss_fn":"cross_entropy"}`,
		`{"loss_fn":"importance_sampling","data":[{"model_input":{"token_ids":[1,2]},"loss_fn_inputs":{"target_tokens":[2,3],"logprobs":[-0.5,-1.5],"advantages":[1,-1]}}]}`,
		`{"data":[{"model_input":{"token_ids":[1]},"loss_fn_inputs":{"target_tokens":[2]}}],"loss_fn":"ppo","loss_fn_config":{"clip_low_threshold":0.8}}`,
	} {
		var b Batch
		if !fastBatch([]byte(body), &b) {
			t.Errorf("%s: not decoded by the fast path", body)
		}
	}
}
