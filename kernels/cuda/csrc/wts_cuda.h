// C interface of the CUDA decode engine (wts_cuda.cu), called from Go
// through cgo (kernels/cuda, built with -tags cuda). Every function returns
// a cudaError_t value: 0 is success.
#ifndef WTS_CUDA_H
#define WTS_CUDA_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int wts_device_count(int *n);
// name: at least 256 bytes.
int wts_device_info(int dev, char *name, size_t *total, size_t *free_bytes, int *major, int *minor);
const char *wts_error_string(int code);

int wts_malloc(int dev, void **p, size_t bytes);
int wts_free(int dev, void *p);
int wts_h2d(int dev, void *dst, const void *src, size_t bytes);

// One projection's device weights: W [out, in] (bf16 or f32), an optional
// bias [out] and an optional LoRA pair A [r, in], B [out, r] (f32).
typedef struct {
	const void *w;
	const float *bias;
	const float *a, *b;
	int rank;
	float scale;
} wts_proj;

enum { WTS_Q, WTS_K, WTS_V, WTS_O, WTS_GATE, WTS_UP, WTS_DOWN, WTS_NPROJ };

typedef struct {
	const float *attn_norm, *mlp_norm; // [D]
	const float *q_norm, *k_norm;      // [hd] or NULL
	wts_proj p[WTS_NPROJ];
} wts_layer;

// The model on one device: its shape, weights, KV caches and scratch.
typedef struct {
	int dev;
	int bf16; // weights (not norms, biases or LoRA) stored as bf16
	int vocab, hidden, inter, layers, heads, kv_heads, head_dim;
	float eps;
	const float *inv_freq; // [head_dim/2], device
	const void *embed;     // [V, D]
	const float *norm;     // [D]
	wts_proj head;         // LM head [V, D] (w may be embed)
	wts_layer *layer;      // host array [layers]
	int slots, max_len, max_rows;
	float *k_cache, *v_cache; // [slots][layers][max_len][KV]
	// scratch, [max_rows × ...]
	float *x, *h, *q, *k, *v, *att, *g, *u, *lu, *logits;
	void *xh, *xl; // bf16 [ceil16(max_rows) × max(D, Q, I)]: split activations for the tensor cores
	int *rows; // device [3][max_rows]: tokens, slots, positions
	int *next; // device [max_rows]
	int max_rank;
	int use_graphs; // capture each step size's kernels in a CUDA graph
	void *stream;   // cudaStream_t
	void *graphs;   // cudaGraphExec_t [max_rows+1], by rows; NULL without use_graphs
} wts_model;

int wts_model_init(wts_model *m); // after the fields are set: the stream
int wts_model_release(wts_model *m);
// One forward of n rows (row i: token tokens[i] at position pos[i] of the
// KV cache slot slots[i]), each row's K and V written into its slot first.
// next gets each row's greedy token; logits, when not NULL, every row's
// logits [n, V].
int wts_model_step(wts_model *m, int n, const int *tokens, const int *slots, const int *pos, int *next, float *logits);
// Device memory bandwidth: GB/s of a device-to-device copy of bytes
// (read and write both counted), the best of iters.
int wts_bandwidth(int dev, size_t bytes, int iters, double *gbps);

#ifdef __cplusplus
}
#endif
#endif
