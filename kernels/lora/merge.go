package lora

import (
	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/model"
)

// weight is the base tensor W [out, in] that module m of layer L adapts.
func (m Module) weight(L *model.Layer[float32]) *[]float32 {
	return [NumModules]*[]float32{&L.Wq, &L.Wk, &L.Wv, &L.Wo, &L.Wg, &L.Wu, &L.Wd}[m]
}

// Merge returns the base weights with the adapter folded in, as PEFT's
// merge_and_unload does: every adapted W [out, in] becomes W + scale·B·A.
// Tensors the adapter does not touch are shared with w, which is not
// changed. A trained lm_head of a tied model unties it: the embeddings stay
// the base's.
func Merge(w *model.Weights[float32], a *Adapter[float32]) *model.Weights[float32] {
	out := *w
	out.Layers = append([]model.Layer[float32](nil), w.Layers...)
	s := a.Scale()
	fold := func(base []float32, p *Pair[float32]) []float32 {
		merged := append([]float32(nil), base...)
		// merged [Out, In] += s · B [Out, r] · A [r, In]
		gemm.Gemm(false, false, p.Out, p.In, a.Cfg.Rank, s, p.B, a.Cfg.Rank, p.A, p.In, 1, merged, p.In)
		return merged
	}
	for l := range out.Layers {
		for m := Module(0); m < NumModules; m++ {
			if p := a.Layers[l][m]; p != nil {
				dst := m.weight(&out.Layers[l])
				*dst = fold(*dst, p)
			}
		}
	}
	if a.LMHead != nil {
		out.LMHead = fold(w.LMHead, a.LMHead)
		out.Cfg.TieEmbed = false
	}
	return &out
}
