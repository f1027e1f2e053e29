// The decode engine on an NVIDIA device: every layer of a Llama-family
// model (RMSNorm, projections with bf16 or f32 weights and f32
// accumulation, LoRA terms, Qwen3's per-head norms, RoPE, attention over a
// contiguous per-slot KV cache, SwiGLU) and the LM head with a greedy pick,
// for a batch of rows that each carry their own slot and position. It
// follows the CPU engine's arithmetic (kernels/transformer): RoPE angles
// from float32 products with cos and sin in double, norms summed in double.
#include "wts_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#define CHECK(x)                               \
	do {                                       \
		cudaError_t e_ = (x);                  \
		if (e_ != cudaSuccess) return (int)e_; \
	} while (0)

static unsigned blocks(size_t n, int t) { return (unsigned)((n + t - 1) / t); }

static __device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
	return v;
}

// load8 reads 8 weights from a 16-byte (bf16) or 32-byte (f32) aligned run.
static __device__ __forceinline__ void load8(const float *w, float *o) {
	float4 a = __ldg((const float4 *)w), b = __ldg((const float4 *)w + 1);
	o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}
static __device__ __forceinline__ void load8(const __nv_bfloat16 *w, float *o) {
	uint4 r = __ldg((const uint4 *)w);
	unsigned int u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		o[2 * i] = __uint_as_float(u[i] << 16);
		o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
	}
}
static __device__ __forceinline__ float load1(const float *w) { return __ldg(w); }
static __device__ __forceinline__ float load1(const __nv_bfloat16 *w) { return __bfloat162float(*w); }

// Y[m, n] = alpha·Σ_k X[m, k]·W[n, k] + bias[n] + beta·Y[m, n], for M rows:
// one warp per output column, reading the column's weights once per tile
// of MT rows (the tile's later passes find them in L1). X: [M, K], W: [N, K],
// Y: rows ldy apart.
template <typename W, int MT, bool VEC>
__global__ void gemm_rows(const float *__restrict__ X, const W *__restrict__ Wt, const float *__restrict__ bias,
                          float *__restrict__ Y, int M, int N, int K, int ldy, float alpha, float beta) {
	int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	int lane = threadIdx.x & 31;
	if (n >= N) return;
	const W *w = Wt + (size_t)n * K;
	for (int m0 = 0; m0 < M; m0 += MT) {
		float acc[MT];
#pragma unroll
		for (int i = 0; i < MT; i++) acc[i] = 0;
		if (VEC) {
#pragma unroll 4
			for (int k = lane * 8; k < K; k += 256) {
				float wv[8];
				load8(w + k, wv);
#pragma unroll
				for (int i = 0; i < MT; i++) {
					if (m0 + i < M) {
						const float4 *xp = (const float4 *)(X + (size_t)(m0 + i) * K + k);
						float4 a = xp[0], b = xp[1];
						acc[i] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y +
						          wv[6] * b.z + wv[7] * b.w;
					}
				}
			}
		} else {
			for (int k = lane; k < K; k += 32) {
				float wk = load1(w + k);
#pragma unroll
				for (int i = 0; i < MT; i++)
					if (m0 + i < M) acc[i] += wk * X[(size_t)(m0 + i) * K + k];
			}
		}
#pragma unroll
		for (int i = 0; i < MT; i++) {
			float s = warp_sum(acc[i]);
			if (lane == 0 && m0 + i < M) {
				float *y = Y + (size_t)(m0 + i) * ldy + n;
				float v = alpha * s;
				if (bias) v += bias[n];
				if (beta != 0) v += beta * *y;
				*y = v;
			}
		}
	}
}

template <typename W, int MT>
static void gemm_mt(const float *X, const W *Wt, const float *bias, float *Y, int M, int N, int K, int ldy,
                    float alpha, float beta, cudaStream_t s) {
	int blocks = (N + 7) / 8;
	if (K % 8 == 0)
		gemm_rows<W, MT, true><<<blocks, 256, 0, s>>>(X, Wt, bias, Y, M, N, K, ldy, alpha, beta);
	else
		gemm_rows<W, MT, false><<<blocks, 256, 0, s>>>(X, Wt, bias, Y, M, N, K, ldy, alpha, beta);
}

template <typename W>
static void gemm(const float *X, const W *Wt, const float *bias, float *Y, int M, int N, int K, int ldy, float alpha,
                 float beta, cudaStream_t s) {
	if (M == 1)
		gemm_mt<W, 1>(X, Wt, bias, Y, M, N, K, ldy, alpha, beta, s);
	else if (M <= 4)
		gemm_mt<W, 4>(X, Wt, bias, Y, M, N, K, ldy, alpha, beta, s);
	else
		gemm_mt<W, 8>(X, Wt, bias, Y, M, N, K, ldy, alpha, beta, s);
}

// split_bf16 writes x [M, K] as two bf16 matrices [Mpad, K] whose sum is x
// to about 2⁻¹⁷ of each value (hi the rounded value, lo the rounded rest),
// rows M..Mpad−1 zero: the tensor cores' operands with f32's precision.
__global__ void split_bf16(__nv_bfloat16 *hi, __nv_bfloat16 *lo, const float *x, int M, int K, int Mpad) {
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (size_t)Mpad * K) return;
	float v = i < (size_t)M * K ? x[i] : 0.f;
	__nv_bfloat16 h = __float2bfloat16_rn(v);
	hi[i] = h;
	lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
}

// gemm_tc is gemm_rows on the tensor cores for bf16 weights: a block's
// eight warps share 16 output columns and MT tiles of 16 rows, each warp
// taking every eighth 16-wide step of K (so that even a product of 1,024
// columns spreads over the device), multiplying the weights by both halves
// of the split activations with f32 accumulation; the block then sums the
// warps' parts. Needs K and N multiples of 16.
template <int MT>
__global__ void gemm_tc(const __nv_bfloat16 *__restrict__ xh, const __nv_bfloat16 *__restrict__ xl,
                        const __nv_bfloat16 *__restrict__ W, const float *__restrict__ bias, float *__restrict__ Y, int M,
                        int N, int K, int ldy, float alpha, float beta) {
	using namespace nvcuda;
	__shared__ float part[8][MT][256];
	int warp = threadIdx.x >> 5;
	int n0 = blockIdx.x * 16, m0 = blockIdx.y * MT * 16;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[MT];
#pragma unroll
	for (int i = 0; i < MT; i++) wmma::fill_fragment(acc[i], 0.f);
	int tiles = min(MT, (M - m0 + 15) / 16);
	for (int k = warp * 16; k < K; k += 128) {
		// Every load of the step is issued before its first product, so
		// that they wait on memory together, not one after another.
		wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
		wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> hi[MT], lo[MT];
		wmma::load_matrix_sync(b, W + (size_t)n0 * K + k, K);
#pragma unroll
		for (int i = 0; i < MT; i++) {
			if (i < tiles) {
				wmma::load_matrix_sync(hi[i], xh + (size_t)(m0 + i * 16) * K + k, K);
				wmma::load_matrix_sync(lo[i], xl + (size_t)(m0 + i * 16) * K + k, K);
			}
		}
#pragma unroll
		for (int i = 0; i < MT; i++) {
			if (i < tiles) {
				wmma::mma_sync(acc[i], hi[i], b, acc[i]);
				wmma::mma_sync(acc[i], lo[i], b, acc[i]);
			}
		}
	}
#pragma unroll
	for (int i = 0; i < MT; i++)
		if (m0 + i * 16 < M) wmma::store_matrix_sync(part[warp][i], acc[i], 16, wmma::mem_row_major);
	__syncthreads();
	for (int e = threadIdx.x; e < MT * 256; e += blockDim.x) {
		int i = e / 256, at = e % 256, m = m0 + i * 16 + at / 16, n = n0 + at % 16;
		if (m >= M) continue;
		float sum = 0;
		for (int w = 0; w < 8; w++) sum += part[w][i][at];
		float v = alpha * sum;
		if (bias) v += bias[n];
		float *y = Y + (size_t)m * ldy + n;
		if (beta != 0) v += beta * *y;
		*y = v;
	}
}

// base: Y = X·Wᵀ + bias + beta·Y for a base weight W [N, K], on the tensor
// cores where the weights are bf16 and the step has rows enough to use
// them. Y: rows ldy apart.
static void base(const wts_model *m, const void *w, const float *bias, const float *X, float *Y, int M, int N, int K,
                 int ldy, float beta, cudaStream_t s) {
	if (m->bf16 && M >= 8 && K % 16 == 0 && N % 16 == 0) {
		int Mpad = (M + 15) / 16 * 16;
		split_bf16<<<blocks((size_t)Mpad * K, 256), 256, 0, s>>>((__nv_bfloat16 *)m->xh, (__nv_bfloat16 *)m->xl, X, M, K, Mpad);
		gemm_tc<4><<<dim3(N / 16, (M + 63) / 64), 256, 0, s>>>((const __nv_bfloat16 *)m->xh, (const __nv_bfloat16 *)m->xl,
		                                                       (const __nv_bfloat16 *)w, bias, Y, M, N, K, ldy, 1.f, beta);
	} else if (m->bf16) {
		gemm(X, (const __nv_bfloat16 *)w, bias, Y, M, N, K, ldy, 1.f, beta, s);
	} else {
		gemm(X, (const float *)w, bias, Y, M, N, K, ldy, 1.f, beta, s);
	}
}

// lora adds scale·(X·Aᵀ)·Bᵀ into Y (rows ldy apart) where the projection
// has a pair. X: [M, in], Y: [M, out].
static void lora(const wts_model *m, const wts_lora *p, const float *X, float *Y, int M, int out, int in, int ldy,
                 cudaStream_t s) {
	if (!p->a) return;
	gemm(X, p->a, (const float *)0, m->lu, M, p->rank, in, p->rank, 1.f, 0.f, s);
	gemm(m->lu, p->b, (const float *)0, Y, M, out, p->rank, ldy, p->scale, 1.f, s);
}

// RMSNorm of each row of x [rows, D] into y, the sum of squares in double.
__global__ void rmsnorm(float *y, const float *x, const float *w, int D, float eps) {
	__shared__ double part[32];
	const float *xr = x + (size_t)blockIdx.x * D;
	float *yr = y + (size_t)blockIdx.x * D;
	double ss = 0;
	for (int i = threadIdx.x; i < D; i += blockDim.x) ss += (double)xr[i] * xr[i];
	for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
	if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
	__syncthreads();
	if (threadIdx.x == 0) {
		double t = 0;
		for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += part[i];
		part[0] = t;
	}
	__syncthreads();
	float r = (float)(1.0 / sqrt(part[0] / D + (double)eps));
	for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * r * w[i];
}

template <typename W>
__global__ void embed_rows(float *x, const W *E, const int *tokens, int D) {
	const W *e = E + (size_t)tokens[blockIdx.x] * D;
	for (int i = threadIdx.x; i < D; i += blockDim.x) x[(size_t)blockIdx.x * D + i] = load1(e + i);
}

// qk_prep readies one head of a row's q or k from qkv [M, Q+2KV]: Qwen3's
// per-head RMSNorm (sum of squares in double) where the layer has one, then
// RoPE (rotate-half) at the row's position; a q head goes to q [M, Q], a k
// head, and its v, to the row's slot of the KV cache. Block (row, head):
// heads 0..H−1 are q's, H..H+Hkv−1 k's; hd ≤ 256.
__global__ void qk_prep(float *q, float *kc, float *vc, const float *qkv, const float *q_norm, const float *k_norm,
                        const int *slots, const int *pos, const float *inv_freq, int layer, int layers, int max_len,
                        int H, int Hkv, int hd, float eps) {
	__shared__ float x[256];
	__shared__ double part[32];
	int r = blockIdx.x, h = blockIdx.y, KV = Hkv * hd, half = hd / 2;
	bool isq = h < H;
	const float *row = qkv + (size_t)r * (H * hd + 2 * KV);
	const float *src = isq ? row + h * hd : row + H * hd + (h - H) * hd;
	const float *nw = isq ? q_norm : k_norm;
	for (int d = threadIdx.x; d < hd; d += blockDim.x) x[d] = src[d];
	__syncthreads();
	if (nw) {
		double ss = 0;
		for (int d = threadIdx.x; d < hd; d += blockDim.x) ss += (double)x[d] * x[d];
		for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
		if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
		__syncthreads();
		ss = 0;
		for (int i = 0; i < (int)(blockDim.x >> 5); i++) ss += part[i];
		float rs = (float)(1.0 / sqrt(ss / hd + (double)eps));
		__syncthreads();
		for (int d = threadIdx.x; d < hd; d += blockDim.x) x[d] = x[d] * rs * nw[d];
		__syncthreads();
	}
	size_t at = (((size_t)slots[r] * layers + layer) * max_len + pos[r]) * KV + (size_t)(h - H) * hd;
	float *dst = isq ? q + ((size_t)r * H + h) * hd : kc + at;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float ang = (float)pos[r] * inv_freq[i];
		float c = (float)cos((double)ang), sn = (float)sin((double)ang);
		float x1 = x[i], x2 = x[i + half];
		dst[i] = x1 * c - x2 * sn;
		dst[i + half] = x2 * c + x1 * sn;
	}
	if (!isq)
		for (int d = threadIdx.x; d < hd; d += blockDim.x) vc[at + d] = row[H * hd + KV + (h - H) * hd + d];
}

// Attention of row r's head h over keys 0..pos[r] of its slot: block (r, h),
// scores in dynamic shared memory [max_len].
__global__ void attend(float *out, const float *q, const float *kc, const float *vc, const int *slots, const int *pos,
                       int layer, int layers, int max_len, int H, int Hkv, int hd) {
	extern __shared__ float sc[];
	__shared__ float red[32];
	int r = blockIdx.x, h = blockIdx.y, g = h / (H / Hkv), KV = Hkv * hd;
	int n = pos[r] + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	const float *qr = q + ((size_t)r * H + h) * hd;
	size_t base = ((size_t)slots[r] * layers + layer) * max_len * KV + (size_t)g * hd;
	float scale = rsqrtf((float)hd);
	for (int j = warp; j < n; j += warps) {
		const float *kr = kc + base + (size_t)j * KV;
		float s = 0;
		for (int d = lane; d < hd; d += 32) s += qr[d] * kr[d];
		s = warp_sum(s);
		if (lane == 0) sc[j] = s * scale;
	}
	__syncthreads();
	float mx = -FLT_MAX;
	for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, sc[j]);
	for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
	if (lane == 0) red[warp] = mx;
	__syncthreads();
	mx = red[0];
	for (int i = 1; i < warps; i++) mx = fmaxf(mx, red[i]);
	__syncthreads();
	float sum = 0;
	for (int j = threadIdx.x; j < n; j += blockDim.x) {
		float e = expf(sc[j] - mx);
		sc[j] = e;
		sum += e;
	}
	sum = warp_sum(sum);
	if (lane == 0) red[warp] = sum;
	__syncthreads();
	sum = 0;
	for (int i = 0; i < warps; i++) sum += red[i];
	float *o = out + ((size_t)r * H + h) * hd;
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float a = 0;
		for (int j = 0; j < n; j++) a += sc[j] * vc[base + (size_t)j * KV + d];
		o[d] = a / sum;
	}
}

// a [M, I] = silu(gate)·up, from gate_up [M, 2I].
__global__ void swiglu(float *a, const float *gu, int I, size_t n) {
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	size_t r = i / I, j = i % I;
	float g = gu[r * 2 * I + j], u = gu[r * 2 * I + I + j];
	a[i] = g / (1.f + expf(-g)) * u;
}

// The greedy token of each logits row [V]: the first of the largest.
__global__ void argmax_rows(int *next, const float *logits, int V) {
	__shared__ float bv[32];
	__shared__ int bi[32];
	const float *row = logits + (size_t)blockIdx.x * V;
	float best = -FLT_MAX;
	int at = 0x7fffffff;
	for (int j = threadIdx.x; j < V; j += blockDim.x)
		if (row[j] > best) best = row[j], at = j;
	for (int o = 16; o > 0; o >>= 1) {
		float v = __shfl_xor_sync(0xffffffff, best, o);
		int i = __shfl_xor_sync(0xffffffff, at, o);
		if (v > best || (v == best && i < at)) best = v, at = i;
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) bv[warp] = best, bi[warp] = at;
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int i = 1; i < (int)(blockDim.x >> 5); i++)
			if (bv[i] > best || (bv[i] == best && bi[i] < at)) best = bv[i], at = bi[i];
		next[blockIdx.x] = at;
	}
}

extern "C" {

int wts_device_count(int *n) { return (int)cudaGetDeviceCount(n); }

int wts_device_info(int dev, char *name, size_t *total, size_t *free_bytes, int *major, int *minor) {
	cudaDeviceProp p;
	CHECK(cudaGetDeviceProperties(&p, dev));
	for (int i = 0; i < 255 && (name[i] = p.name[i]); i++) {
	}
	name[255] = 0;
	*major = p.major, *minor = p.minor;
	CHECK(cudaSetDevice(dev));
	return (int)cudaMemGetInfo(free_bytes, total);
}

const char *wts_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

int wts_malloc(int dev, void **p, size_t bytes) {
	CHECK(cudaSetDevice(dev));
	CHECK(cudaMalloc(p, bytes));
	return (int)cudaMemset(*p, 0, bytes);
}

int wts_free(int dev, void *p) {
	CHECK(cudaSetDevice(dev));
	return (int)cudaFree(p);
}

int wts_h2d(int dev, void *dst, const void *src, size_t bytes) {
	CHECK(cudaSetDevice(dev));
	return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}

int wts_model_init(wts_model *m) {
	CHECK(cudaSetDevice(m->dev));
	cudaStream_t s;
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	m->stream = s;
	if (m->use_graphs) {
		m->graphs = calloc(m->max_rows + 1, sizeof(cudaGraphExec_t));
		if (!m->graphs) return (int)cudaErrorMemoryAllocation;
	}
	// Scores of one attention block: a float per cached position.
	return (int)cudaFuncSetAttribute(attend, cudaFuncAttributeMaxDynamicSharedMemorySize, m->max_len * 4);
}

int wts_model_release(wts_model *m) {
	CHECK(cudaSetDevice(m->dev));
	if (m->graphs) {
		cudaGraphExec_t *g = (cudaGraphExec_t *)m->graphs;
		for (int i = 0; i <= m->max_rows; i++)
			if (g[i]) cudaGraphExecDestroy(g[i]);
		free(m->graphs);
		m->graphs = 0;
	}
	if (m->stream) CHECK(cudaStreamDestroy((cudaStream_t)m->stream));
	m->stream = 0;
	return 0;
}

// forward enqueues the step's kernels on s: from the rows already on the
// device to each row's greedy token in m->next.
static int forward(wts_model *m, int n, cudaStream_t s) {
	int D = m->hidden, H = m->heads, Hkv = m->kv_heads, hd = m->head_dim, I = m->inter, V = m->vocab;
	int Q = H * hd, KV = Hkv * hd, QKV = Q + 2 * KV, R = m->max_rows;
	int *dtok = m->rows, *dslot = m->rows + R, *dpos = m->rows + 2 * R;
	if (m->bf16)
		embed_rows<<<n, 256, 0, s>>>(m->x, (const __nv_bfloat16 *)m->embed, dtok, D);
	else
		embed_rows<<<n, 256, 0, s>>>(m->x, (const float *)m->embed, dtok, D);
	for (int l = 0; l < m->layers; l++) {
		const wts_layer *L = &m->layer[l];
		rmsnorm<<<n, 256, 0, s>>>(m->h, m->x, L->attn_norm, D, m->eps);
		base(m, L->qkv, L->qkv_bias, m->h, m->qkv, n, QKV, D, QKV, 0.f, s);
		lora(m, &L->lora[WTS_Q], m->h, m->qkv, n, Q, D, QKV, s);
		lora(m, &L->lora[WTS_K], m->h, m->qkv + Q, n, KV, D, QKV, s);
		lora(m, &L->lora[WTS_V], m->h, m->qkv + Q + KV, n, KV, D, QKV, s);
		qk_prep<<<dim3(n, H + Hkv), 128, 0, s>>>(m->q, m->k_cache, m->v_cache, m->qkv, L->q_norm, L->k_norm, dslot, dpos,
		                                         m->inv_freq, l, m->layers, m->max_len, H, Hkv, hd, m->eps);
		attend<<<dim3(n, H), 128, m->max_len * 4, s>>>(m->att, m->q, m->k_cache, m->v_cache, dslot, dpos, l, m->layers,
		                                               m->max_len, H, Hkv, hd);
		// The o-projection adds into the residual stream x.
		base(m, L->o, L->o_bias, m->att, m->x, n, D, Q, D, 1.f, s);
		lora(m, &L->lora[WTS_O], m->att, m->x, n, D, Q, D, s);
		rmsnorm<<<n, 256, 0, s>>>(m->h, m->x, L->mlp_norm, D, m->eps);
		base(m, L->gate_up, (const float *)0, m->h, m->gu, n, 2 * I, D, 2 * I, 0.f, s);
		lora(m, &L->lora[WTS_GATE], m->h, m->gu, n, I, D, 2 * I, s);
		lora(m, &L->lora[WTS_UP], m->h, m->gu + I, n, I, D, 2 * I, s);
		swiglu<<<blocks((size_t)n * I, 256), 256, 0, s>>>(m->a, m->gu, I, (size_t)n * I);
		base(m, L->down, (const float *)0, m->a, m->x, n, D, I, D, 1.f, s);
		lora(m, &L->lora[WTS_DOWN], m->a, m->x, n, D, I, D, s);
	}
	rmsnorm<<<n, 256, 0, s>>>(m->h, m->x, m->norm, D, m->eps);
	base(m, m->head, (const float *)0, m->h, m->logits, n, V, D, V, 0.f, s);
	lora(m, &m->head_lora, m->h, m->logits, n, V, D, V, s);
	argmax_rows<<<n, 1024, 0, s>>>(m->next, m->logits, V);
	return (int)cudaGetLastError();
}

int wts_model_step(wts_model *m, int n, const int *tokens, const int *slots, const int *pos, int *next, float *logits) {
	CHECK(cudaSetDevice(m->dev));
	cudaStream_t s = (cudaStream_t)m->stream;
	int R = m->max_rows;
	CHECK(cudaMemcpyAsync(m->rows, tokens, n * sizeof(int), cudaMemcpyHostToDevice, s));
	CHECK(cudaMemcpyAsync(m->rows + R, slots, n * sizeof(int), cudaMemcpyHostToDevice, s));
	CHECK(cudaMemcpyAsync(m->rows + 2 * R, pos, n * sizeof(int), cudaMemcpyHostToDevice, s));
	if (m->graphs) {
		// A step of n rows is captured once and replayed: one launch in
		// place of some twenty kernels' a layer.
		cudaGraphExec_t *exec = (cudaGraphExec_t *)m->graphs + n;
		if (!*exec) {
			CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
			int code = forward(m, n, s);
			cudaGraph_t g;
			cudaError_t end = cudaStreamEndCapture(s, &g);
			if (code) return code;
			CHECK(end);
			code = (int)cudaGraphInstantiateWithFlags(exec, g, 0);
			cudaGraphDestroy(g);
			if (code) {
				*exec = 0;
				return code;
			}
		}
		CHECK(cudaGraphLaunch(*exec, s));
	} else {
		int code = forward(m, n, s);
		if (code) return code;
	}
	CHECK(cudaMemcpyAsync(next, m->next, n * sizeof(int), cudaMemcpyDeviceToHost, s));
	if (logits) CHECK(cudaMemcpyAsync(logits, m->logits, (size_t)n * m->vocab * sizeof(float), cudaMemcpyDeviceToHost, s));
	return (int)cudaStreamSynchronize(s);
}

int wts_bandwidth(int dev, size_t bytes, int iters, double *gbps) {
	CHECK(cudaSetDevice(dev));
	void *a, *b;
	CHECK(cudaMalloc(&a, bytes));
	if (cudaMalloc(&b, bytes) != cudaSuccess) {
		cudaFree(a);
		return (int)cudaErrorMemoryAllocation;
	}
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float best = 1e30f;
	for (int i = 0; i <= iters; i++) {
		cudaEventRecord(e0);
		cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
		cudaEventRecord(e1);
		cudaEventSynchronize(e1);
		float ms;
		cudaEventElapsedTime(&ms, e0, e1);
		if (i > 0 && ms < best) best = ms; // the first is a warm-up
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	*gbps = 2.0 * bytes / (best * 1e-3) / 1e9;
	return (int)cudaGetLastError();
}
}
