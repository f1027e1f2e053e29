package payload

import "github.com/wts-project/wts/actors/payload/scan"

// fastBatch decodes raw into b when raw has scan's plain shape with
// fields of Batch only, and returns false for anything else, with b in any
// state; Strict then decodes (and explains) the payload. A forward's
// payload went through goccy/go-json's stream decoder, several times the
// time and allocations of this scan (BenchmarkDecodeTokens compares them).
// FuzzFastBatch holds it to decoding exactly what Strict does wherever it
// answers.
func fastBatch(raw []byte, b *Batch) bool {
	s := scan.Scanner{Buf: raw}
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "data":
			if b.Data != nil {
				return false
			}
			b.Data = []Datum{}
			return s.Array(func() bool {
				b.Data = append(b.Data, Datum{})
				return datum(&s, &b.Data[len(b.Data)-1])
			})
		case "loss_fn":
			v, ok := s.Str()
			if b.LossFn != "" || len(v) == 0 {
				return false
			}
			b.LossFn = string(v)
			return ok
		case "loss_fn_config":
			if b.LossFnConfig != nil {
				return false
			}
			b.LossFnConfig = map[string]float64{}
			return s.Object(func(name []byte) bool { // a repeated name: the last wins, as in Strict
				v, ok := s.Float()
				b.LossFnConfig[string(name)] = v
				return ok
			})
		}
		return false
	})
	return ok && s.End()
}

func datum(s *scan.Scanner, d *Datum) bool {
	return s.Object(func(key []byte) bool {
		switch string(key) {
		case "model_input":
			if d.ModelInput != nil {
				return false
			}
			d.ModelInput = &ModelInput{}
			return s.Object(func(key []byte) bool {
				return string(key) == "token_ids" && d.ModelInput.TokenIDs == nil && s.Ints(&d.ModelInput.TokenIDs)
			})
		case "loss_fn_inputs":
			if d.LossFnInputs != nil {
				return false
			}
			in := &LossInputs{}
			d.LossFnInputs = in
			return s.Object(func(key []byte) bool {
				switch string(key) {
				case "target_tokens":
					return in.TargetTokens == nil && s.Ints(&in.TargetTokens)
				case "weights":
					return in.Weights == nil && s.Floats(&in.Weights)
				case "logprobs":
					return in.Logprobs == nil && s.Floats(&in.Logprobs)
				case "advantages":
					return in.Advantages == nil && s.Floats(&in.Advantages)
				}
				return false
			})
		}
		return false
	})
}
