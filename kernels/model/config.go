// Package model holds a Llama-family model's configuration and frozen weights:
// parsing an HF config.json, loading HF-named safetensors (single or sharded,
// F32/BF16/F16), and generating HF-layout folders with deterministic weights.
package model

import (
	"encoding/json"
	"fmt"

	"github.com/wts-project/wts/kernels/kerr"
)

// Config is the part of an HF config.json that decides the computation.
type Config struct {
	ModelType    string // llama, qwen2 or qwen3
	Vocab        int
	Hidden       int
	Intermediate int
	Layers       int
	Heads        int
	KVHeads      int
	HeadDim      int
	MaxPos       int
	RMSEps       float64
	RopeTheta    float64
	RopeScaling  *RopeScaling
	TieEmbed     bool
	QKVBias      bool // Qwen2 always; Llama and Qwen3 when attention_bias
	OBias        bool // Llama and Qwen3 when attention_bias
	QKNorm       bool // Qwen3: per-head RMSNorm on q and k before RoPE
	BOS, EOS     int
}

// RopeScaling is the Llama-3 style frequency adjustment (rope_type "llama3"),
// or a plain position division (rope_type "linear").
type RopeScaling struct {
	Type                string  `json:"rope_type"`
	Factor              float64 `json:"factor"`
	LowFreqFactor       float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor      float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPosition int     `json:"original_max_position_embeddings,omitempty"`
}

// hfConfig mirrors the JSON field names transformers writes.
type hfConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	VocabSize         int             `json:"vocab_size"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumHiddenLayers   int             `json:"num_hidden_layers"`
	NumAttentionHeads int             `json:"num_attention_heads"`
	NumKeyValueHeads  int             `json:"num_key_value_heads,omitempty"`
	HeadDim           int             `json:"head_dim,omitempty"`
	MaxPosition       int             `json:"max_position_embeddings"`
	RMSNormEps        float64         `json:"rms_norm_eps"`
	RopeTheta         float64         `json:"rope_theta"`
	RopeScaling       json.RawMessage `json:"rope_scaling,omitempty"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings,omitempty"`
	AttentionBias     bool            `json:"attention_bias"`
	HiddenAct         string          `json:"hidden_act"`
	BOSTokenID        *int            `json:"bos_token_id,omitempty"`
	EOSTokenID        json.RawMessage `json:"eos_token_id,omitempty"`
	TorchDtype        string          `json:"torch_dtype,omitempty"`
	InitializerRange  float64         `json:"initializer_range,omitempty"`
}

// ErrUnsupported marks a config this engine cannot run (another architecture,
// an activation or rope variant we do not implement).
var ErrUnsupported = fmt.Errorf("%w: unsupported architecture", kerr.ErrBadModel)

// ParseConfig reads an HF config.json for the Llama, Qwen2 or Qwen3 families.
func ParseConfig(data []byte) (Config, error) {
	var h hfConfig
	if err := json.Unmarshal(data, &h); err != nil {
		return Config{}, fmt.Errorf("config.json: %w", err)
	}
	c := Config{
		ModelType: h.ModelType, Vocab: h.VocabSize, Hidden: h.HiddenSize, Intermediate: h.IntermediateSize,
		Layers: h.NumHiddenLayers, Heads: h.NumAttentionHeads, KVHeads: h.NumKeyValueHeads, HeadDim: h.HeadDim,
		MaxPos: h.MaxPosition, RMSEps: h.RMSNormEps, RopeTheta: h.RopeTheta, EOS: -1, BOS: -1,
	}
	switch h.ModelType {
	case "llama":
		c.QKVBias, c.OBias = h.AttentionBias, h.AttentionBias
	case "qwen2":
		c.QKVBias = true
	case "qwen3":
		c.QKVBias, c.OBias, c.QKNorm = h.AttentionBias, h.AttentionBias, true
	default:
		return Config{}, fmt.Errorf("%w: model_type %q (want llama, qwen2 or qwen3)", ErrUnsupported, h.ModelType)
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("%w: hidden_act %q", ErrUnsupported, h.HiddenAct)
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RMSEps == 0 {
		c.RMSEps = 1e-6
	}
	// LlamaConfig, Qwen2Config and Qwen3Config all default to untied.
	c.TieEmbed = h.TieWordEmbeddings != nil && *h.TieWordEmbeddings
	if h.BOSTokenID != nil {
		c.BOS = *h.BOSTokenID
	}
	if len(h.EOSTokenID) > 0 && string(h.EOSTokenID) != "null" {
		var one int
		var many []int
		if json.Unmarshal(h.EOSTokenID, &one) == nil {
			c.EOS = one
		} else if json.Unmarshal(h.EOSTokenID, &many) == nil && len(many) > 0 {
			c.EOS = many[0]
		}
	}
	if len(h.RopeScaling) > 0 && string(h.RopeScaling) != "null" {
		var rs struct {
			RopeScaling
			LegacyType string `json:"type"`
		}
		if err := json.Unmarshal(h.RopeScaling, &rs); err != nil {
			return Config{}, fmt.Errorf("config.json rope_scaling: %w", err)
		}
		if rs.Type == "" {
			rs.Type = rs.LegacyType
		}
		switch rs.Type {
		case "default", "":
		case "llama3", "linear":
			c.RopeScaling = &rs.RopeScaling
		default:
			return Config{}, fmt.Errorf("%w: rope_scaling type %q", ErrUnsupported, rs.Type)
		}
	}
	return c, c.Validate()
}

// maxDim bounds every dimension of a config (and maxLayers the depth): far
// beyond any model this engine can hold, and small enough that products of
// two dimensions cannot overflow an int.
const (
	maxDim    = 1 << 24
	maxLayers = 1 << 10
)

// Validate checks that the dimensions are positive and consistent.
func (c Config) Validate() error {
	if c.Vocab <= 0 || c.Hidden <= 0 || c.Intermediate <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 {
		return fmt.Errorf("config: dimensions must be positive: %+v", c)
	}
	for _, d := range []int{c.Vocab, c.Hidden, c.Intermediate, c.Heads, c.KVHeads, c.HeadDim, c.MaxPos, c.Heads * c.HeadDim} {
		if d > maxDim {
			return fmt.Errorf("config: dimension %d is beyond %d", d, maxDim)
		}
	}
	if c.Layers > maxLayers {
		return fmt.Errorf("config: %d layers is beyond %d", c.Layers, maxLayers)
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("config: %d attention heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config: head_dim %d must be even for RoPE", c.HeadDim)
	}
	if c.MaxPos <= 0 {
		return fmt.Errorf("config: max_position_embeddings must be positive")
	}
	if rs := c.RopeScaling; rs != nil {
		if rs.Factor <= 0 {
			return fmt.Errorf("config: rope_scaling factor must be positive")
		}
		if rs.Type == "llama3" && (rs.OriginalMaxPosition <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor) {
			return fmt.Errorf("config: llama3 rope_scaling needs original_max_position_embeddings and high_freq_factor > low_freq_factor")
		}
	}
	return nil
}

// QDim is the width of the query projection (heads × head_dim).
func (c Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of each of the key and value projections.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

// HFJSON renders the config as transformers would write it, so generated
// folders load in transformers unchanged.
func (c Config) HFJSON() ([]byte, error) {
	arch := map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[c.ModelType]
	tie := c.TieEmbed
	h := hfConfig{
		Architectures: []string{arch}, ModelType: c.ModelType, VocabSize: c.Vocab, HiddenSize: c.Hidden,
		IntermediateSize: c.Intermediate, NumHiddenLayers: c.Layers, NumAttentionHeads: c.Heads,
		NumKeyValueHeads: c.KVHeads, HeadDim: c.HeadDim, MaxPosition: c.MaxPos, RMSNormEps: c.RMSEps,
		RopeTheta: c.RopeTheta, TieWordEmbeddings: &tie, AttentionBias: c.ModelType != "qwen2" && c.QKVBias,
		HiddenAct: "silu", TorchDtype: "float32", InitializerRange: 0.02,
	}
	if c.BOS >= 0 {
		bos := c.BOS
		h.BOSTokenID = &bos
	}
	if c.EOS >= 0 {
		h.EOSTokenID, _ = json.Marshal(c.EOS)
	}
	if c.RopeScaling != nil {
		h.RopeScaling, _ = json.Marshal(c.RopeScaling)
	}
	return json.MarshalIndent(h, "", "  ")
}
