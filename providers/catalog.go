package providers

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/wts-project/wts/kernels/model"
)

// Model is one catalog entry: a base model name, the HF-layout folder that
// holds it, and its pinned revision.
type Model struct {
	Name     string
	Dir      string
	Revision string // the catalog commit: a content hash of Dir
	Config   model.Config
	// Tokenizer: Dir holds a Hugging Face tokenizer.json, so clients can
	// give and take text (the service itself works in token ids).
	Tokenizer bool
	// Weights is how the base's weights are kept in memory: "bf16" or
	// "f16" for a checkpoint saved in bfloat16 or float16 (its config's
	// torch_dtype), which loses nothing and reads half the bytes a token;
	// "f32" otherwise.
	Weights string
}

// Weights values.
const (
	WeightsF32  = "f32"
	WeightsBF16 = "bf16"
	WeightsF16  = "f16"
)

// Catalog maps base_model names to model folders.
type Catalog struct {
	models map[string]*Model
	names  []string
}

// NewCatalog reads each folder's config and hashes its contents. names and
// dirs are parallel.
func NewCatalog(entries map[string]string) (*Catalog, error) {
	c := &Catalog{models: map[string]*Model{}}
	for name, dir := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			return nil, fmt.Errorf("catalog model %s: %w", name, err)
		}
		cfg, err := model.ParseConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("catalog model %s: %w", name, err)
		}
		rev, err := Revision(dir)
		if err != nil {
			return nil, fmt.Errorf("catalog model %s: %w", name, err)
		}
		var dtype struct {
			TorchDtype string `json:"torch_dtype"`
		}
		weights := WeightsF32
		if json.Unmarshal(raw, &dtype) == nil {
			weights = cmp.Or(map[string]string{"bfloat16": WeightsBF16, "float16": WeightsF16}[dtype.TorchDtype], WeightsF32)
		}
		_, err = os.Stat(filepath.Join(dir, TokenizerFile))
		c.models[name] = &Model{Name: name, Dir: dir, Revision: rev, Config: cfg, Tokenizer: err == nil, Weights: weights}
		c.names = append(c.names, name)
	}
	sort.Strings(c.names)
	return c, nil
}

// TokenizerFile is the Hugging Face tokenizer a model folder may hold.
const TokenizerFile = "tokenizer.json"

// Lookup returns the entry for name.
func (c *Catalog) Lookup(name string) (*Model, bool) {
	m, ok := c.models[name]
	return m, ok
}

// Names lists the catalog's models in order.
func (c *Catalog) Names() []string { return c.names }

// Revision is the content hash of a model folder: SHA-256 over each regular
// file's name and bytes in name order, as 40 hex digits (the length of a git
// commit id, which is what callers are used to pinning).
func Revision(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range entries { // ReadDir sorts by name
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", e.Name())
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", e.Name(), err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:40], nil
}
