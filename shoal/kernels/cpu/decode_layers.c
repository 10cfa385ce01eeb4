/* A small decode batch through every decoder layer of a Llama-family model in one call.
 *
 * At a batch-1 decode step of a 30-layer model the C kernels (quant_gemv.c, paged_attention.c, layer_ops.c) did
 * 12.7 ms of work and Python spent another 5.3 ms between them: nine module calls a layer, each checking its
 * tensors, allocating its output and converting a dozen ctypes arguments. This file calls the same kernels in
 * the same order with the same arguments, so the result is the module path's to the bit, from one Python call a
 * step: the kernels' entry points arrive as function pointers (they live in their own libraries, each built with
 * its own flags), the layers' weights and caches as a table built once, and the step's metadata and scratch
 * buffers as one struct. The caller (shoal.kernels.cpu.decode_layers) has checked every shape once.
 *
 * A layer: h = rms_norm(x [+ residual]); qkv = h @ Wqkv [+ bias]; [q, k = rms_norm per head (Qwen3)]; RoPE on q and
 * k with k and v written to the cache; a = attention(q); o = a @ Wo; h = rms_norm(o + residual);
 * g = h @ Wgate_up; x = silu(g[:, :I]) * g[:, I:] @ Wdown. The first layer's residual is its input; each later
 * one's is the sum the previous norm stored. The bias is added as torch adds it (in fp32, rounded to the dtype);
 * the per-head norms write q and k densely, as the modules' reshape does, and RoPE and attention read them there.
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef int (*gemv_fn)(int kind, const void *codes, const uint16_t *scales, const void *x, int x_dtype, void *y,
                       int y_dtype, int rows, int in_features, long out_features, int threads);
typedef int (*rms_norm_fn)(const void *x, long x_stride, const void *residual, long residual_stride,
                           const void *weight, void *out, void *total, int dtype, int rows, int width, float eps,
                           int threads);
typedef int (*rotary_fn)(const int64_t *positions, void *query, long q_token, long q_head, const void *key,
                         long k_token, long k_head, const void *value, long v_token, long v_head, int dtype,
                         const void *cos_sin, int cos_sin_dtype, long max_position, int rot, void *k_cache,
                         void *v_cache, const int64_t *slots, long num_slots, int tokens, int heads, int kv_heads,
                         int head_dim, int threads);
typedef int (*silu_fn)(const void *x, long x_stride, void *out, int dtype, int rows, int width, int threads);
typedef int (*attention_fn)(const void *q, long q_token_stride, long q_head_stride, int q_dtype, const void *k_cache,
                            const void *v_cache, int kv_dtype, const int32_t *block_tables, int table_width,
                            int num_blocks, const int32_t *seq_lens, const int32_t *query_start, void *out,
                            int num_seqs, int heads, int kv_heads, int head_dim, int block_size, float scale,
                            int window, float softcap, int threads);

/* The ops, in the order a layer runs them: where a refused call is reported. */
enum { OP_INPUT_NORM = 0, OP_QKV, OP_ROTARY, OP_ATTENTION, OP_O, OP_POST_NORM, OP_GATE_UP, OP_SILU, OP_DOWN, OP_QK_NORM };

typedef struct { /* one quantized projection: the kernel's kind and layout (quant_gemv.py) */
    int kind;
    const void *codes;
    const uint16_t *scales;
} Projection;

typedef struct { /* one decoder layer, fixed once the model and its KV cache are loaded */
    const void *input_norm, *post_norm;
    Projection qkv, o, gate_up, down;
    const void *qkv_bias;        /* NULL: none */
    const void *q_norm, *k_norm; /* per-head norms' weights (Qwen3), NULL: none */
    void *k_cache, *v_cache;
    int window; /* sliding window, 0: none */
} Layer;

typedef struct { /* the model: its kernels and shape */
    void *gemv, *rms_norm, *rotary, *silu, *attention;
    int dtype, hidden, heads, kv_heads, head_dim, intermediate, num_blocks, block_size;
    float eps, scale, softcap;
    const void *cos_sin;
    int cos_sin_dtype, rot;
    long max_position;
} Model;

typedef struct { /* one step: its metadata, its buffers, and where a refused call happened */
    const int64_t *positions, *slots;
    const int32_t *block_tables, *seq_lens, *query_start;
    int table_width, num_seqs, rows, threads;
    void *x, *residual_a, *residual_b, *normed, *qkv, *attn, *o, *gate_up, *act;
    void *q, *k; /* the per-head norms' outputs [rows, heads * head_dim], [rows, kv_heads * head_dim] */
    int failed_layer, failed_op; /* written when a call is refused */
} Step;

static int refused(Step *s, int layer, int op, int status) {
    s->failed_layer = layer;
    s->failed_op = op;
    return status;
}

#define RUN(op, call)                                                                                                \
    do {                                                                                                             \
        int status_ = (call);                                                                                        \
        if (status_) return refused(s, l, op, status_);                                                             \
    } while (0)

/* torch's bf16 rounding (c10::BFloat16): nearest even, any NaN the quiet NaN 0x7FC0. */
static uint16_t to_bf16(float f) {
    if (isnan(f)) return 0x7FC0;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* y [rows, width] += bias [width], each sum in fp32 and rounded to the dtype, as torch's `out + bias`. */
static void add_bias(void *y, const void *bias, int rows, long width, int bf16) {
    for (long i = 0; i < (long)rows * width; i++) {
        if (bf16)
            ((uint16_t *)y)[i] = to_bf16(from_bf16(((uint16_t *)y)[i]) + from_bf16(((const uint16_t *)bias)[i % width]));
        else
            ((float *)y)[i] += ((const float *)bias)[i % width];
    }
}

/* The residual buffer that is not `residual`: where the next norm stores its sum. */
static void *other(const Step *s, const void *residual) { return residual == s->residual_a ? s->residual_b : s->residual_a; }

/* Runs `num_layers` layers over `s->x` [rows, hidden] (the embeddings in; the last layer's MLP output out) and
 * leaves the residual in `*residual_out` (one of the step's two residual buffers). Returns 0 or the refusing
 * kernel's status, with the layer and op in `s`. No call's output is one of its inputs: the first layer's
 * residual is the embeddings in `x`, and each norm stores its sum in the residual buffer not being read. */
int shoal_decode_layers(const Model *m, const Layer *layers, int num_layers, Step *s, void **residual_out) {
    gemv_fn gemv = (gemv_fn)m->gemv;
    rms_norm_fn rms_norm = (rms_norm_fn)m->rms_norm;
    rotary_fn rotary = (rotary_fn)m->rotary;
    silu_fn silu = (silu_fn)m->silu;
    attention_fn attention = (attention_fn)m->attention;
    int rows = s->rows, nt = s->threads, dt = m->dtype, hd = m->head_dim, hidden = m->hidden;
    long qkv_width = (long)(m->heads + 2 * m->kv_heads) * hd, q_size = (long)m->heads * hd;
    long kv_size = (long)m->kv_heads * hd, element = dt ? 2 : 4, gate_up = 2L * m->intermediate;
    char *qkv = (char *)s->qkv;
    void *residual = s->x;
    for (int l = 0; l < num_layers; l++) {
        const Layer *L = &layers[l];
        if (l == 0)
            RUN(OP_INPUT_NORM, rms_norm(s->x, hidden, 0, 0, L->input_norm, s->normed, 0, dt, rows, hidden, m->eps, nt));
        else {
            void *sum = other(s, residual);
            RUN(OP_INPUT_NORM, rms_norm(s->x, hidden, residual, hidden, L->input_norm, s->normed, sum, dt, rows,
                                        hidden, m->eps, nt));
            residual = sum;
        }
        RUN(OP_QKV, gemv(L->qkv.kind, L->qkv.codes, L->qkv.scales, s->normed, dt, qkv, dt, rows, hidden, qkv_width,
                         nt));
        if (L->qkv_bias) add_bias(qkv, L->qkv_bias, rows, qkv_width, dt);
        char *q = qkv, *k = qkv + q_size * element;
        long q_stride = qkv_width, k_stride = qkv_width;
        if (L->q_norm) { /* each token's heads as rows, into dense q and k as the modules' reshape leaves them */
            for (int t = 0; t < rows; t++) {
                RUN(OP_QK_NORM, rms_norm(qkv + t * qkv_width * element, hd, 0, 0, L->q_norm,
                                         (char *)s->q + t * q_size * element, 0, dt, m->heads, hd, m->eps, nt));
                RUN(OP_QK_NORM, rms_norm(qkv + (t * qkv_width + q_size) * element, hd, 0, 0, L->k_norm,
                                         (char *)s->k + t * kv_size * element, 0, dt, m->kv_heads, hd, m->eps, nt));
            }
            q = (char *)s->q, k = (char *)s->k, q_stride = q_size, k_stride = kv_size;
        }
        RUN(OP_ROTARY, rotary(s->positions, q, q_stride, hd, k, k_stride, hd, qkv + (q_size + kv_size) * element,
                              qkv_width, hd, dt, m->cos_sin, m->cos_sin_dtype, m->max_position, m->rot, L->k_cache,
                              L->v_cache, s->slots, (long)m->num_blocks * m->block_size, rows, m->heads, m->kv_heads,
                              hd, nt));
        RUN(OP_ATTENTION, attention(q, q_stride, hd, dt, L->k_cache, L->v_cache, dt, s->block_tables,
                                    s->table_width, m->num_blocks, s->seq_lens, s->query_start, s->attn,
                                    s->num_seqs, m->heads, m->kv_heads, hd, m->block_size, m->scale, L->window,
                                    m->softcap, nt));
        RUN(OP_O, gemv(L->o.kind, L->o.codes, L->o.scales, s->attn, dt, s->o, dt, rows, (int)q_size, hidden, nt));
        void *sum = other(s, residual);
        RUN(OP_POST_NORM, rms_norm(s->o, hidden, residual, hidden, L->post_norm, s->normed, sum, dt, rows, hidden,
                                   m->eps, nt));
        residual = sum;
        RUN(OP_GATE_UP, gemv(L->gate_up.kind, L->gate_up.codes, L->gate_up.scales, s->normed, dt, s->gate_up, dt,
                             rows, hidden, gate_up, nt));
        RUN(OP_SILU, silu(s->gate_up, gate_up, s->act, dt, rows, m->intermediate, nt));
        RUN(OP_DOWN, gemv(L->down.kind, L->down.codes, L->down.scales, s->act, dt, s->x, dt, rows, m->intermediate,
                          hidden, nt));
    }
    *residual_out = residual;
    return 0;
}
