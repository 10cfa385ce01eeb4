/* A decoder layer's small ops on a CPU, each one call: RMSNorm (with the residual add fused), RoPE fused with the
 * KV-cache write, and SiLU-and-mul.
 *
 * On the torch path each of these is five to ten aten ops of a few microseconds' dispatch each, for a few
 * hundred floats of work at a decode step: a batch-1 step of a 30-layer model spent ~6 ms of 25 in them. Here each is
 * a loop GCC vectorizes for the machine it is built on (-O3 -march=native), threaded over rows (OpenMP, the
 * caller's count) only when there are enough of them to pay for waking the pool.
 *
 * Each op rounds where torch's composition of the same ops rounds (shoal.kernels.torch_ops, the reference), so
 * the two paths agree to the last bit but for the order of a sum: bf16 after the residual add, after the
 * normalisation and after the weight; RoPE's table cast to the activations' dtype, each product and the sum
 * rounded; SiLU rounded before the product. The library is built with -ffp-contract=off so that no product and
 * sum are fused into one rounding where torch rounds twice. exp is Cephes' exp2f polynomial (relative error
 * ~2e-7), which vectorizes where libm's expf would not.
 *
 * Layouts are shoal.kernels.ops': rows of `width` contiguous elements at any row stride for inputs, dense
 * outputs; caches [blocks, block_size, kv_heads, head_dim] addressed by slot (block * block_size + offset).
 * Every loop is written once over a `bf16` flag that each row's call fixes to a constant (inside the OpenMP
 * region: its body is outlined, where a flag tested outside would arrive as a variable), so each dtype gets its
 * own branch-free, vectorized copy of the always-inlined row functions.
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_HEAD_DIM 512
#define PARALLEL_ELEMENTS 65536 /* below this many elements one thread is faster than waking the pool */
#define INLINE static inline __attribute__((always_inline))

enum { SHOAL_F32 = 0, SHOAL_BF16 = 1 };
enum { SHOAL_OK = 0, SHOAL_BAD_SHAPE = 1, SHOAL_BAD_DTYPE = 2 };

int shoal_layer_ops_max_head_dim(void) { return MAX_HEAD_DIM; }

INLINE float bf16_to_float(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}

INLINE uint16_t float_to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

/* f as the activations' dtype holds it: unchanged in fp32, rounded to nearest even in bf16. */
INLINE float round_to(float f, int bf16) { return bf16 ? bf16_to_float(float_to_bf16(f)) : f; }

INLINE float load(const void *p, size_t i, int bf16) {
    return bf16 ? bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

INLINE void store(void *p, size_t i, float f, int bf16) {
    if (bf16)
        ((uint16_t *)p)[i] = float_to_bf16(f);
    else
        ((float *)p)[i] = f;
}

static int threads_for(long elements, int threads) { return elements >= PARALLEL_ELEMENTS && threads > 1 ? threads : 1; }

/* exp(x) as 2^n times Cephes' exp2f polynomial on [-0.5, 0.5], x clamped to [-87, 89] (fminf/fmaxf would be
 * calls: no vectorizing); past ~88.72 the product overflows to inf, as expf does. */
INLINE float exp_approx(float x) {
    x = x < -87.0f ? -87.0f : (x > 89.0f ? 89.0f : x);
    float y = x * 1.4426950408889634f;
    float n = floorf(y + 0.5f);
    float f = y - n;
    float p = 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    int32_t whole = (int32_t)n, low = whole >> 1; /* 2^n as two normal factors: n may be 128 */
    union {
        uint32_t u;
        float f;
    } first = {.u = (uint32_t)(low + 127) << 23}, second = {.u = (uint32_t)(whole - low + 127) << 23};
    return p * first.f * second.f;
}

/* One row: total = x + residual (stored, rounded) when there is a residual, then out = norm(total) * weight. */
INLINE void rms_norm_row(const void *x, const void *residual, const void *weight, void *out, void *total, int width,
                         float eps, int bf16) {
    const void *source = x;
    float squares = 0.0f;
    if (residual != NULL) {
#pragma omp simd reduction(+ : squares)
        for (int i = 0; i < width; i++) {
            float sum = round_to(load(x, i, bf16) + load(residual, i, bf16), bf16);
            store(total, i, sum, bf16);
            squares += sum * sum;
        }
        source = total;
    } else {
#pragma omp simd reduction(+ : squares)
        for (int i = 0; i < width; i++) {
            float value = load(x, i, bf16);
            squares += value * value;
        }
    }
    float inverse = 1.0f / sqrtf(squares / (float)width + eps);
#pragma omp simd
    for (int i = 0; i < width; i++) {
        float normed = round_to(load(source, i, bf16) * inverse, bf16);
        store(out, i, round_to(load(weight, i, bf16) * normed, bf16), bf16);
    }
}

INLINE void rms_norm_rows(const char *x, long x_stride, const char *residual, long residual_stride,
                          const void *weight, char *out, char *total, int rows, int width, float eps, int nt,
                          int bf16) {
    size_t size = bf16 ? 2 : 4;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int r = 0; r < rows; r++) {
        const char *row = x + (size_t)r * x_stride * size;
        const char *add = residual ? residual + (size_t)r * residual_stride * size : NULL;
        char *sum = total ? total + (size_t)r * width * size : NULL, *dst = out + (size_t)r * width * size;
        if (bf16)
            rms_norm_row(row, add, weight, dst, sum, width, eps, 1);
        else
            rms_norm_row(row, add, weight, dst, sum, width, eps, 0);
    }
}

/* out[r] = rms_norm(x[r] (+ residual[r])) * weight; with a residual, total[r] = x[r] + residual[r] too. x and
 * residual are rows at their own strides (elements); out and total are dense. */
int shoal_rms_norm(const void *x, long x_stride, const void *residual, long residual_stride, const void *weight,
                   void *out, void *total, int dtype, int rows, int width, float eps, int threads) {
    if (dtype != SHOAL_F32 && dtype != SHOAL_BF16) return SHOAL_BAD_DTYPE;
    if (rows < 0 || width < 1 || (residual != NULL && total == NULL)) return SHOAL_BAD_SHAPE;
    int nt = threads_for((long)rows * width, threads);
    rms_norm_rows(x, x_stride, residual, residual_stride, weight, out, total, rows, width, eps, nt,
                  dtype == SHOAL_BF16);
    return SHOAL_OK;
}

/* Rotate-half RoPE of one head row, from src to dst (which may be the same row): x * cos + swap_halves(x) *
 * (-sin | sin) on the first `rot` values, each product and the sum rounded; the rest copied. `table` is the
 * position's row, cosines then sines, each rounded to the activations' dtype first as the reference casts it. */
INLINE void rotate(void *dst, const void *src, const void *table, int table_bf16, int rot, int head_dim, int bf16) {
    int half = rot / 2;
#pragma omp simd
    for (int i = 0; i < half; i++) {
        float c = round_to(load(table, i, table_bf16), bf16), s = round_to(load(table, i + half, table_bf16), bf16);
        float a = load(src, i, bf16), b = load(src, i + half, bf16);
        store(dst, i, round_to(round_to(a * c, bf16) + round_to(b * -s, bf16), bf16), bf16);
        store(dst, i + half, round_to(round_to(b * c, bf16) + round_to(a * s, bf16), bf16), bf16);
    }
    if (dst != src)
        for (int i = rot; i < head_dim; i++) store(dst, i, load(src, i, bf16), bf16);
}

typedef struct {
    const int64_t *positions, *slots;
    char *query, *k_cache, *v_cache;
    const char *key, *value, *cos_sin;
    long q_token, q_head, k_token, k_head, v_token, v_head;
    int cos_sin_bf16, rot, heads, kv_heads, head_dim;
} Rotary;

INLINE void rotary_token(const Rotary *p, int t, int bf16) {
    size_t size = bf16 ? 2 : 4;
    const char *table = p->cos_sin + (size_t)p->positions[t] * p->rot * (p->cos_sin_bf16 ? 2 : 4);
    for (int h = 0; h < p->heads; h++) {
        char *row = p->query + ((size_t)t * p->q_token + (size_t)h * p->q_head) * size;
        rotate(row, row, table, p->cos_sin_bf16, p->rot, p->head_dim, bf16);
    }
    if (p->slots[t] < 0) return;
    size_t slot = (size_t)p->slots[t] * p->kv_heads * p->head_dim * size;
    for (int h = 0; h < p->kv_heads; h++) {
        size_t head = (size_t)h * p->head_dim * size;
        rotate(p->k_cache + slot + head, p->key + ((size_t)t * p->k_token + (size_t)h * p->k_head) * size, table,
               p->cos_sin_bf16, p->rot, p->head_dim, bf16);
        memcpy(p->v_cache + slot + head, p->value + ((size_t)t * p->v_token + (size_t)h * p->v_head) * size,
               (size_t)p->head_dim * size);
    }
}

INLINE void rotary_tokens(const Rotary *p, int tokens, int nt, int bf16) {
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int t = 0; t < tokens; t++) {
        if (bf16)
            rotary_token(p, t, 1);
        else
            rotary_token(p, t, 0);
    }
}

/* Rotates query rows in place ([tokens, heads, head_dim] at strides q_token, q_head), writes the rotated keys and
 * the values ([tokens, kv_heads, head_dim] at their strides; left as they are) to their slots of the caches
 * (slots < 0 are padding: skipped). cos_sin is [max_position, rot] fp32 or bf16, cosines then sines. */
int shoal_rotary_write_kv(const int64_t *positions, void *query, long q_token, long q_head, const void *key,
                          long k_token, long k_head, const void *value, long v_token, long v_head, int dtype,
                          const void *cos_sin, int cos_sin_dtype, long max_position, int rot, void *k_cache,
                          void *v_cache, const int64_t *slots, long num_slots, int tokens, int heads, int kv_heads,
                          int head_dim, int threads) {
    if (dtype != SHOAL_F32 && dtype != SHOAL_BF16) return SHOAL_BAD_DTYPE;
    if (cos_sin_dtype != SHOAL_F32 && cos_sin_dtype != SHOAL_BF16) return SHOAL_BAD_DTYPE;
    if (head_dim < 1 || head_dim > MAX_HEAD_DIM || rot < 2 || rot % 2 || rot > head_dim) return SHOAL_BAD_SHAPE;
    for (int t = 0; t < tokens; t++)
        if (positions[t] < 0 || positions[t] >= max_position || slots[t] >= num_slots) return SHOAL_BAD_SHAPE;
    Rotary p = {positions, slots,    query,   k_cache, v_cache,       key, value,   cos_sin,  q_token,
                q_head,    k_token,  k_head,  v_token, v_head,        cos_sin_dtype == SHOAL_BF16,
                rot,       heads,    kv_heads, head_dim};
    rotary_tokens(&p, tokens, threads_for((long)tokens * (heads + 2 * kv_heads) * head_dim, threads),
                  dtype == SHOAL_BF16);
    return SHOAL_OK;
}

INLINE void silu_row(const char *row, char *dst, int width, int bf16) {
#pragma omp simd
    for (int i = 0; i < width; i++) {
        float gate = load(row, i, bf16), up = load(row, (size_t)width + i, bf16);
        float silu = round_to(gate / (1.0f + exp_approx(-gate)), bf16);
        store(dst, i, round_to(silu * up, bf16), bf16);
    }
}

INLINE void silu_rows(const char *x, long x_stride, char *out, int rows, int width, int nt, int bf16) {
    size_t size = bf16 ? 2 : 4;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int r = 0; r < rows; r++) {
        const char *row = x + (size_t)r * x_stride * size;
        if (bf16)
            silu_row(row, out + (size_t)r * width * size, width, 1);
        else
            silu_row(row, out + (size_t)r * width * size, width, 0);
    }
}

/* out[r] = silu(x[r, :width]) * x[r, width:] (x's rows at stride x_stride elements, out dense), SiLU rounded to
 * the dtype before the product as torch's two ops round. */
int shoal_silu_and_mul(const void *x, long x_stride, void *out, int dtype, int rows, int width, int threads) {
    if (dtype != SHOAL_F32 && dtype != SHOAL_BF16) return SHOAL_BAD_DTYPE;
    if (rows < 0 || width < 1) return SHOAL_BAD_SHAPE;
    silu_rows(x, x_stride, out, rows, width, threads_for((long)rows * width, threads), dtype == SHOAL_BF16);
    return SHOAL_OK;
}
