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

// One projection's LoRA pair: A [rank, in], B [out, rank] (f32); a NULL a
// means the projection has none.
typedef struct {
	const float *a, *b;
	int rank;
	float scale;
} wts_lora;

enum { WTS_Q, WTS_K, WTS_V, WTS_O, WTS_GATE, WTS_UP, WTS_DOWN, WTS_NPROJ };

// A layer's device weights. Projections that read one input are stored
// as one matrix, so that a step runs one product for them: q, k and v as
// qkv [Q+2KV, D], gate and up as gate_up [2I, D] (bf16 or f32).
typedef struct {
	const float *attn_norm, *mlp_norm; // [D]
	const float *q_norm, *k_norm;      // [hd] or NULL
	const void *qkv;
	const float *qkv_bias; // [Q+2KV] or NULL
	const void *o;         // [D, Q]
	const float *o_bias;   // [D] or NULL
	const void *gate_up, *down;
	wts_lora lora[WTS_NPROJ];
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
	const void *head;      // LM head [V, D] (may be embed)
	wts_lora head_lora;
	wts_layer *layer; // host array [layers]
	int slots, max_len, max_rows;
	float *k_cache, *v_cache; // [slots][layers][max_len][KV]
	// scratch, [max_rows × ...]
	float *x, *h, *qkv, *q, *att, *gu, *a, *lu, *logits;
	void *xh, *xl; // bf16 [ceil16(max_rows) × max(D, Q, I)]: split activations for the tensor cores
	int *rows;     // device [3][max_rows]: tokens, slots, positions
	int *next;     // device [max_rows]
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
