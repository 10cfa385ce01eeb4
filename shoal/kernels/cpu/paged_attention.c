/* Causal attention of packed queries over a paged KV cache, read where it lies: the CPU path's attention.
 *
 * The layouts are shoal.kernels.ops': queries [tokens, heads, head_dim] (any token and head stride, so the
 * fused QKV projection's output is read without a copy), caches [blocks, block_size, kv_heads, head_dim],
 * output [tokens, heads, head_dim] contiguous. Sequence s owns query rows query_start[s]..query_start[s + 1]
 * and seq_lens[s] cached tokens; its query row i sits at position seq_lens[s] - query_len + i and sees keys
 * 0..that position (with a sliding window W, only position - W + 1..position). With a soft cap c (Gemma 2), each
 * scaled score s becomes c * tanh(s / c) before the softmax; tanh is a rational polynomial (Eigen's, relative
 * error below 4e-7 in fp32), so it vectorizes like the rest. Decodes, prefills, chunked
 * prefills and prefix-cache hits are one case, so a mixed batch is one call and no sequence is padded to another's
 * length.
 *
 * The work is split into items of (sequence, up to QROWS query rows, a span of KV heads): an item holds the
 * query rows of every query head that shares its KV heads (GQA), so each key and value is read once for all of
 * them. With enough sequences to keep every thread busy the span is all KV heads, so a block's tokens are read
 * as one contiguous run; with few (one long prompt, one stream) it is one KV head, for parallelism. An item walks
 * the keys its last row sees in runs of up to CHUNK tokens through the block table, prefetching the next run
 * (scattered blocks defeat the hardware prefetcher: a 64-sequence decode ran 1.4x slower without it): a run's
 * keys and values are widened to fp32 once, each row's scores take an online softmax (running max and sum, the
 * accumulator rescaled when the max grows: flash attention's recurrence), and a row stops at its causal limit.
 * exp is a vectorizable polynomial (Cephes' exp2f, relative error ~2e-7) rather than libm's scalar expf. Items go
 * to the caller's OpenMP threads dynamically: a prefill chunk's items cost hundreds of times a decode's.
 *
 * Paths, from the build's target (-O3 -march=native): AVX-512F (16 keys' dot products in one vector, with
 * AVX-512 BF16 dot products where the CPU has them), AVX2 with FMA (the same on 8 lanes, two vectors a run),
 * and plain C that GCC vectorizes for whatever is left (and for head sizes the wide paths' lanes do not divide);
 * fp32 accumulation throughout, bf16 rounded to nearest even on the way out, as torch rounds.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16 /* keys a step: one default block, one AVX-512 vector of scores */
#define ROWS_BUDGET 64 /* score rows (query rows x query heads) an item aims for */
#define MAX_HEAD_DIM 256

enum { SHOAL_F32 = 0, SHOAL_BF16 = 1 };
enum { SHOAL_OK = 0, SHOAL_BAD_SHAPE = 1, SHOAL_BAD_DTYPE = 2, SHOAL_NO_MEMORY = 3 };

int shoal_attention_max_head_dim(void) { return MAX_HEAD_DIM; }

static inline float bf16_to_float(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}

static inline uint16_t float_to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

/* n values of src (fp32 or bf16) to fp32, times scale. */
static inline void widen(float *restrict dst, const void *src, int dtype, int n, float scale) {
    if (dtype == SHOAL_BF16) {
        const uint16_t *s = (const uint16_t *)src;
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = bf16_to_float(s[i]) * scale;
    } else {
        const float *s = (const float *)src;
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = s[i] * scale;
    }
}

/* exp(x) for x <= 0 (scores minus their running max): 2^(x log2 e) as 2^n times Cephes' exp2f polynomial on
 * [-0.5, 0.5]; below -87 it returns exp(-87) ~ 1.6e-38, nothing next to the max's 1. */
static inline float exp_nonpositive(float x) {
    float y = (x < -87.0f ? -87.0f : x) * 1.4426950408889634f; /* fmaxf would be a call: no vectorizing */
    float n = floorf(y + 0.5f);
    float f = y - n;
    float p = 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    union {
        int32_t i;
        float f;
    } two_n = {.i = ((int32_t)n + 127) << 23};
    return p * two_n.f;
}

/* c * tanh(x / c): Eigen's rational approximation of tanh (odd degree 13 over even degree 6, clamped where tanh
 * rounds to +-1 in fp32). */
static inline float softcap1(float x, float cap) {
    float y = x / cap;
    y = y > 7.90531110763549805f ? 7.90531110763549805f : y < -7.90531110763549805f ? -7.90531110763549805f : y;
    const float y2 = y * y;
    float num = -2.76076847742355e-16f;
    num = num * y2 + 2.00018790482477e-13f;
    num = num * y2 - 8.60467152213735e-11f;
    num = num * y2 + 5.12229709037114e-08f;
    num = num * y2 + 1.48572235717979e-05f;
    num = num * y2 + 6.37261928875436e-04f;
    num = num * y2 + 4.89352455891786e-03f;
    float den = 1.19825839466702e-06f;
    den = den * y2 + 1.18534705686654e-04f;
    den = den * y2 + 2.26843463243900e-03f;
    den = den * y2 + 4.89352518554385e-03f;
    return cap * (y * num / den);
}

typedef struct {
    const char *q, *k_cache, *v_cache;
    long q_token_stride, q_head_stride; /* elements */
    int q_dtype, kv_dtype;
    const int32_t *block_tables, *seq_lens, *query_start;
    int table_width, heads, kv_heads, head_dim, block_size;
    float scale;
    int window; /* 0: none */
    float softcap; /* 0: none */
    char *out;
} Problem;

typedef struct {
    float *q;       /* [rows][head_dim], pre-scaled */
    uint16_t *q_bf16; /* [rows][head_dim], as given (the bf16 dot products' query) */
    float *acc;     /* [rows][head_dim] */
    float *probs;   /* [rows][CHUNK] */
    float *keys;    /* [CHUNK][span * head_dim] */
    float *values;  /* [CHUNK][span * head_dim] */
    float *row_max; /* [rows] */
    float *row_sum; /* [rows] */
    int *limit;     /* [rows]: the last key position the row sees */
} Scratch;

static int scratch_alloc(Scratch *s, int rows, int head_dim, int span) {
    size_t floats = (size_t)rows * head_dim * 3 + (size_t)rows * CHUNK + (size_t)CHUNK * span * head_dim * 2 + rows * 2;
    float *block = aligned_alloc(64, ((floats * sizeof(float) + rows * sizeof(int)) + 63) / 64 * 64);
    if (!block) return 0;
    s->q = block;
    s->acc = s->q + (size_t)rows * head_dim;
    s->probs = s->acc + (size_t)rows * head_dim;
    s->keys = s->probs + (size_t)rows * CHUNK;
    s->values = s->keys + (size_t)CHUNK * span * head_dim;
    s->row_max = s->values + (size_t)CHUNK * span * head_dim;
    s->row_sum = s->row_max + rows;
    s->q_bf16 = (uint16_t *)(s->row_sum + rows);  /* rows * head_dim halves: half the floats set aside */
    s->limit = (int *)(s->row_sum + rows + (size_t)rows * head_dim);
    /* the AVX2 path reads a run's rows past its n (masked): never uninitialized memory */
    memset(s->keys, 0, sizeof(float) * (size_t)CHUNK * span * head_dim * 2);
    return 1;
}

/* Token `token`'s row for KV head kvh; the token's next heads follow it, and the block's next tokens follow at a
 * stride of kv_heads * head_dim elements. */
static inline const char *cache_rows(const Problem *p, const char *cache, const int32_t *table, int token, int kvh,
                                     size_t elem) {
    long block = table[token / p->block_size];
    long slot = block * p->block_size + token % p->block_size;
    return cache + ((slot * p->kv_heads + kvh) * (long)p->head_dim) * (long)elem;
}

/* The cache lines of n rows of row_bytes each, stride_bytes apart (a run never leaves its block). */
static inline void prefetch_rows(const char *first, int n, long row_bytes, long stride_bytes) {
    for (int t = 0; t < n; t++)
        for (long b = 0; b < row_bytes; b += 64) __builtin_prefetch(first + t * stride_bytes + b, 0, 3);
}

/* Tokens in the run from c0: up to CHUNK, up to keys_seen, never past c0's block. */
static inline int run_length(const Problem *p, int c0, int keys_seen) {
    const int in_block = p->block_size - c0 % p->block_size;
    const int n = keys_seen - c0 < CHUNK ? keys_seen - c0 : CHUNK;
    return n < in_block ? n : in_block;
}

/* n rows of `width` elements, stride_bytes apart, to fp32 rows of `width` side by side. */
static inline void widen_rows(float *restrict dst, const char *src, int dtype, int n, int width, long stride_bytes) {
    if (dtype == SHOAL_BF16) {
        for (int t = 0; t < n; t++) {
            const uint16_t *row = (const uint16_t *)(src + t * stride_bytes);
            float *out = dst + (size_t)t * width;
#pragma omp simd
            for (int i = 0; i < width; i++) out[i] = bf16_to_float(row[i]);
        }
    } else {
        for (int t = 0; t < n; t++) memcpy(dst + (size_t)t * width, src + t * stride_bytes, sizeof(float) * width);
    }
}

/* The online softmax's step for row m over a chunk whose raw scores are in probs[lo..valid): the scores become
 * weights exp(score - max) (zero elsewhere) and the row's max, sum and accumulator are brought up to date. */
static inline void softmax_step(Scratch *s, int m, int d, float *probs, int lo, int valid, float chunk_max) {
    const float old_max = s->row_max[m], new_max = old_max > chunk_max ? old_max : chunk_max;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int t = lo; t < valid; t++) {
        float e = exp_nonpositive(probs[t] - new_max);
        probs[t] = e;
        sum += e;
    }
    for (int t = 0; t < lo; t++) probs[t] = 0.0f; /* keys before the sliding window */
    for (int t = valid; t < CHUNK; t++) probs[t] = 0.0f; /* masked keys and the run's unused tail */
    if (new_max > old_max && old_max != -INFINITY) {
        const float correction = exp_nonpositive(old_max - new_max);
        float *acc = s->acc + (size_t)m * d;
#pragma omp simd
        for (int i = 0; i < d; i++) acc[i] *= correction;
        s->row_sum[m] *= correction;
    }
    s->row_max[m] = new_max;
    s->row_sum[m] += sum;
}

#ifdef __AVX512F__
#include <immintrin.h>

/* exp_nonpositive on 16 lanes; scalef multiplies by 2^n without building the exponent's bits. */
static inline __m512 exp512_nonpositive(__m512 x) {
    const __m512 y = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(1.4426950408889634f));
    const __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(y, n);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* softcap1 on 16 lanes. */
static inline __m512 softcap512(__m512 x, float cap) {
    const __m512 limit = _mm512_set1_ps(7.90531110763549805f);
    const __m512 y = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x, _mm512_set1_ps(cap)), _mm512_sub_ps(_mm512_setzero_ps(), limit)), limit);
    const __m512 y2 = _mm512_mul_ps(y, y);
    __m512 num = _mm512_set1_ps(-2.76076847742355e-16f);
    num = _mm512_fmadd_ps(num, y2, _mm512_set1_ps(2.00018790482477e-13f));
    num = _mm512_fmadd_ps(num, y2, _mm512_set1_ps(-8.60467152213735e-11f));
    num = _mm512_fmadd_ps(num, y2, _mm512_set1_ps(5.12229709037114e-08f));
    num = _mm512_fmadd_ps(num, y2, _mm512_set1_ps(1.48572235717979e-05f));
    num = _mm512_fmadd_ps(num, y2, _mm512_set1_ps(6.37261928875436e-04f));
    num = _mm512_fmadd_ps(num, y2, _mm512_set1_ps(4.89352455891786e-03f));
    __m512 den = _mm512_set1_ps(1.19825839466702e-06f);
    den = _mm512_fmadd_ps(den, y2, _mm512_set1_ps(1.18534705686654e-04f));
    den = _mm512_fmadd_ps(den, y2, _mm512_set1_ps(2.26843463243900e-03f));
    den = _mm512_fmadd_ps(den, y2, _mm512_set1_ps(4.89352518554385e-03f));
    return _mm512_mul_ps(_mm512_set1_ps(cap), _mm512_div_ps(_mm512_mul_ps(y, num), den));
}

/* softmax_step for a run's 16 scores in one vector, keys lo..valid - 1 visible: weights stored to probs, zero
 * elsewhere. */
static inline void softmax_step16(Scratch *s, int m, int d, float *probs, __m512 scores, int lo, int valid) {
    const __mmask16 visible = (__mmask16)(((1u << valid) - 1u) & ~((1u << lo) - 1u));
    const float chunk_max = _mm512_mask_reduce_max_ps(visible, scores);
    const float old_max = s->row_max[m], new_max = old_max > chunk_max ? old_max : chunk_max;
    const __m512 weights = _mm512_maskz_mov_ps(visible, exp512_nonpositive(_mm512_sub_ps(scores, _mm512_set1_ps(new_max))));
    _mm512_storeu_ps(probs, weights);
    if (new_max > old_max && old_max != -INFINITY) {
        const float correction = exp_nonpositive(old_max - new_max);
        float *acc = s->acc + (size_t)m * d;
        for (int i = 0; i < d; i += 16) _mm512_storeu_ps(acc + i, _mm512_mul_ps(_mm512_loadu_ps(acc + i), _mm512_set1_ps(correction)));
        s->row_sum[m] *= correction;
    }
    s->row_max[m] = new_max;
    s->row_sum[m] += _mm512_reduce_add_ps(weights);
}

/* r[t] = sum of v[t]'s 16 lanes, for 16 vectors: a transpose-and-add tree (15 shuffle/add pairs for 16 dot
 * products, where one horizontal sum each costs about 8 instructions). */
static inline __m512 sum16(const __m512 *v) {
    __m512 x[8], y[4], z[2];
    for (int i = 0; i < 8; i++)
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int j = 0; j < 4; j++)
        y[j] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int k = 0; k < 2; k++)
        z[k] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * k], y[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(y[2 * k], y[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Scores of row m against the run's n <= 16 keys (head_dim a multiple of 16; key t at keys + t * stride), its
 * keys lo..valid - 1 visible, soft-capped by cap (0: not). */
static inline void scores16(Scratch *s, int m, int d, const float *keys, int stride, int n, int lo, int valid,
                            float cap) {
    const float *q = s->q + (size_t)m * d;
    __m512 partial[16];
    for (int t = 0; t < 16; t++) {
        __m512 acc = _mm512_setzero_ps();
        if (t < n) {
            const float *k = keys + (size_t)t * stride;
            for (int i = 0; i < d; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), acc);
        }
        partial[t] = acc;
    }
    const __m512 scores = sum16(partial);
    softmax_step16(s, m, d, s->probs + (size_t)m * CHUNK, cap != 0.0f ? softcap512(scores, cap) : scores, lo, valid);
}

/* acc[m] += sum_t probs[m][t] * value[t] for every row, row m's values at s->values + offset(m) with a token
 * stride of `stride`; the accumulator's 16-lane columns are held in registers over the run. */
static inline void accumulate16(Scratch *s, int rows, int heads, int group, int d, int stride, int n) {
    for (int m = 0; m < rows; m++) {
        const float *probs = s->probs + (size_t)m * CHUNK;
        const float *values = s->values + (size_t)(m % heads / group) * d;
        float *acc = s->acc + (size_t)m * d;
        for (int i = 0; i < d; i += 64) {
            const int width = d - i < 64 ? d - i : 64; /* 16, 32, 48 or 64 columns */
            __m512 a0 = _mm512_loadu_ps(acc + i), a1 = a0, a2 = a0, a3 = a0;
            if (width > 16) a1 = _mm512_loadu_ps(acc + i + 16);
            if (width > 32) a2 = _mm512_loadu_ps(acc + i + 32);
            if (width > 48) a3 = _mm512_loadu_ps(acc + i + 48);
            for (int t = 0; t < n; t++) {
                const __m512 w = _mm512_set1_ps(probs[t]);
                const float *v = values + (size_t)t * stride + i;
                a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v), a0);
                if (width > 16) a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 16), a1);
                if (width > 32) a2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 32), a2);
                if (width > 48) a3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 48), a3);
            }
            _mm512_storeu_ps(acc + i, a0);
            if (width > 16) _mm512_storeu_ps(acc + i + 16, a1);
            if (width > 32) _mm512_storeu_ps(acc + i + 32, a2);
            if (width > 48) _mm512_storeu_ps(acc + i + 48, a3);
        }
    }
}

#define SHOAL_WIDE 16 /* the wide path's lanes: head_dim must be a multiple */
#define scores_wide scores16
#define accumulate_wide accumulate16

#ifdef __AVX512BF16__
/* bf16 queries and cache, head_dim a multiple of 32: the dot products straight from the cache's bf16 with
 * `vdpbf16ps` (pairs of bf16 products summed into fp32 lanes), no widening pass. The query row is kept in bf16 as
 * the model produced it (scores are scaled after); the values are weighted by probabilities rounded to bf16, as
 * the torch path's `probs.to(values.dtype)` does. A pair of tokens' value rows is interleaved per 128-bit lane
 * (unpacklo/hi of 16-bit elements), so the accumulator holds each 32-column chunk in a fixed permuted order:
 * columns 8L..8L+3 in lanes 4L..4L+3 of its first vector and 8L+4..8L+7 in its second (see `unpermute`). */
#define SHOAL_BF16_DOT 1

static inline void scores_bf16(Scratch *s, int m, int d, const uint16_t *keys, long stride, int n, int lo, int valid,
                               float scale, float cap) {
    const uint16_t *q = s->q_bf16 + (size_t)m * d;
    __m512 partial[16];
    for (int t = 0; t < 16; t++) {
        __m512 acc = _mm512_setzero_ps();
        if (t < n) {
            const uint16_t *k = keys + t * stride;
            for (int i = 0; i < d; i += 32)
                acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(q + i), (__m512bh)_mm512_loadu_si512(k + i));
        }
        partial[t] = acc;
    }
    const __m512 scores = _mm512_mul_ps(sum16(partial), _mm512_set1_ps(scale));
    softmax_step16(s, m, d, s->probs + (size_t)m * CHUNK, cap != 0.0f ? softcap512(scores, cap) : scores, lo, valid);
}

static inline void accumulate_bf16(Scratch *s, int rows, int heads, int group, int d, const uint16_t *values,
                                   long stride, int n) {
    for (int m = 0; m < rows; m++) {
        const float *probs = s->probs + (size_t)m * CHUNK;
        const uint16_t *v = values + (size_t)(m % heads / group) * d;
        float *acc = s->acc + (size_t)m * d;
        uint32_t pairs[8]; /* the probabilities of tokens 2k and 2k + 1 as two bf16 in one 32-bit word */
        _mm256_storeu_si256((__m256i *)pairs, (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(probs)));
        for (int i = 0; i < d; i += 32) {
            __m512 lo = _mm512_loadu_ps(acc + i), hi = _mm512_loadu_ps(acc + i + 16);
            for (int t = 0; t < n; t += 2) {
                const int u = t + 1 < n ? t + 1 : t; /* an odd run's last token pairs with itself, weight 0 */
                const __m512bh weights = (__m512bh)_mm512_set1_epi32((int)pairs[t / 2]);
                const __m512i a = _mm512_loadu_si512(v + t * stride + i), b = _mm512_loadu_si512(v + u * stride + i);
                lo = _mm512_dpbf16_ps(lo, (__m512bh)_mm512_unpacklo_epi16(a, b), weights);
                hi = _mm512_dpbf16_ps(hi, (__m512bh)_mm512_unpackhi_epi16(a, b), weights);
            }
            _mm512_storeu_ps(acc + i, lo);
            _mm512_storeu_ps(acc + i + 16, hi);
        }
    }
}

/* The permuted accumulator's columns back in order (32 at a time). */
static inline void unpermute(float *restrict out, const float *acc, int d) {
    for (int i = 0; i < d; i += 32)
        for (int lane = 0; lane < 4; lane++)
            for (int k = 0; k < 4; k++) {
                out[i + 8 * lane + k] = acc[i + 4 * lane + k];
                out[i + 8 * lane + 4 + k] = acc[i + 16 + 4 * lane + k];
            }
}
#define SHOAL_ATTENTION_ISA "avx512f+avx512_bf16"
#else
#define SHOAL_ATTENTION_ISA "avx512f"
#endif
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* exp_nonpositive on 8 lanes; 2^n built in the exponent's bits (n >= -126: a normal number). */
static inline __m256 exp256_nonpositive(__m256 x) {
    const __m256 y = _mm256_mul_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(1.4426950408889634f));
    const __m256 n = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(y, n);
    __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

/* softcap1 on 8 lanes. */
static inline __m256 softcap256(__m256 x, float cap) {
    const __m256 limit = _mm256_set1_ps(7.90531110763549805f);
    const __m256 y = _mm256_min_ps(
        _mm256_max_ps(_mm256_div_ps(x, _mm256_set1_ps(cap)), _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit);
    const __m256 y2 = _mm256_mul_ps(y, y);
    __m256 num = _mm256_set1_ps(-2.76076847742355e-16f);
    num = _mm256_fmadd_ps(num, y2, _mm256_set1_ps(2.00018790482477e-13f));
    num = _mm256_fmadd_ps(num, y2, _mm256_set1_ps(-8.60467152213735e-11f));
    num = _mm256_fmadd_ps(num, y2, _mm256_set1_ps(5.12229709037114e-08f));
    num = _mm256_fmadd_ps(num, y2, _mm256_set1_ps(1.48572235717979e-05f));
    num = _mm256_fmadd_ps(num, y2, _mm256_set1_ps(6.37261928875436e-04f));
    num = _mm256_fmadd_ps(num, y2, _mm256_set1_ps(4.89352455891786e-03f));
    __m256 den = _mm256_set1_ps(1.19825839466702e-06f);
    den = _mm256_fmadd_ps(den, y2, _mm256_set1_ps(1.18534705686654e-04f));
    den = _mm256_fmadd_ps(den, y2, _mm256_set1_ps(2.26843463243900e-03f));
    den = _mm256_fmadd_ps(den, y2, _mm256_set1_ps(4.89352518554385e-03f));
    return _mm256_mul_ps(_mm256_set1_ps(cap), _mm256_div_ps(_mm256_mul_ps(y, num), den));
}

static inline float hmax8(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

static inline float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

/* r[t] = sum of v[t]'s 8 lanes, for 8 vectors: two rounds of pairwise adds and one across the halves (10
 * instructions for 8 dot products, where one horizontal sum each costs about 5). */
static inline __m256 sum8(const __m256 *v) {
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* softmax_step for a run's 16 scores in two vectors, keys lo..valid - 1 visible: weights stored to probs, zero
 * elsewhere (the invisible lanes, whatever the scratch held, are masked before the max and after the exp). */
static inline void softmax_step8x2(Scratch *s, int m, int d, float *probs, const __m256 *scores, int lo, int valid) {
    const __m256i first = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm256_set1_epi32(8);
    const __m256i from = _mm256_set1_epi32(lo), to = _mm256_set1_epi32(valid);
    const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
    __m256 visible[2], masked[2];
    for (int h = 0; h < 2; h++) {
        const __m256i index = h ? _mm256_add_epi32(first, eight) : first;
        visible[h] = _mm256_castsi256_ps(
            _mm256_andnot_si256(_mm256_cmpgt_epi32(from, index), _mm256_cmpgt_epi32(to, index)));
        masked[h] = _mm256_blendv_ps(minus_inf, scores[h], visible[h]);
    }
    const float chunk_max = hmax8(_mm256_max_ps(masked[0], masked[1]));
    const float old_max = s->row_max[m], new_max = old_max > chunk_max ? old_max : chunk_max;
    __m256 sum = _mm256_setzero_ps();
    for (int h = 0; h < 2; h++) {
        const __m256 weights =
            _mm256_and_ps(exp256_nonpositive(_mm256_sub_ps(masked[h], _mm256_set1_ps(new_max))), visible[h]);
        _mm256_storeu_ps(probs + 8 * h, weights);
        sum = _mm256_add_ps(sum, weights);
    }
    if (new_max > old_max && old_max != -INFINITY) {
        const float correction = exp_nonpositive(old_max - new_max);
        float *acc = s->acc + (size_t)m * d;
        for (int i = 0; i < d; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), _mm256_set1_ps(correction)));
        s->row_sum[m] *= correction;
    }
    s->row_max[m] = new_max;
    s->row_sum[m] += hsum8(sum);
}

/* Scores of row m against the run's n <= 16 keys (head_dim a multiple of 8; key t at keys + t * stride), its
 * keys lo..valid - 1 visible, soft-capped by cap (0: not). Eight keys at a time, each with its own accumulator
 * (eight independent FMA chains), the query's vector loaded once for the eight; a half past n is not computed,
 * and keys past n within a half read the scratch's rows left from an earlier run (zeros at first, see
 * scratch_alloc), which the softmax masks. */
static inline void scores8(Scratch *s, int m, int d, const float *keys, int stride, int n, int lo, int valid,
                           float cap) {
    const float *q = s->q + (size_t)m * d;
    __m256 scores[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int h = 0; h < 2 && 8 * h < n; h++) {
        const float *k = keys + (size_t)(8 * h) * stride;
        __m256 partial[8];
        for (int t = 0; t < 8; t++) partial[t] = _mm256_setzero_ps();
        for (int i = 0; i < d; i += 8) {
            const __m256 qv = _mm256_loadu_ps(q + i);
            for (int t = 0; t < 8; t++)
                partial[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + (size_t)t * stride + i), partial[t]);
        }
        scores[h] = sum8(partial);
        if (cap != 0.0f) scores[h] = softcap256(scores[h], cap);
    }
    softmax_step8x2(s, m, d, s->probs + (size_t)m * CHUNK, scores, lo, valid);
}

/* accumulate16 on 8 lanes: the accumulator's 8-lane columns, up to 32 at a time, held in registers over the run. */
static inline void accumulate8(Scratch *s, int rows, int heads, int group, int d, int stride, int n) {
    for (int m = 0; m < rows; m++) {
        const float *probs = s->probs + (size_t)m * CHUNK;
        const float *values = s->values + (size_t)(m % heads / group) * d;
        float *acc = s->acc + (size_t)m * d;
        for (int i = 0; i < d; i += 32) {
            const int width = d - i < 32 ? d - i : 32; /* 8, 16, 24 or 32 columns */
            __m256 a0 = _mm256_loadu_ps(acc + i), a1 = a0, a2 = a0, a3 = a0;
            if (width > 8) a1 = _mm256_loadu_ps(acc + i + 8);
            if (width > 16) a2 = _mm256_loadu_ps(acc + i + 16);
            if (width > 24) a3 = _mm256_loadu_ps(acc + i + 24);
            for (int t = 0; t < n; t++) {
                const __m256 w = _mm256_set1_ps(probs[t]);
                const float *v = values + (size_t)t * stride + i;
                a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v), a0);
                if (width > 8) a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8), a1);
                if (width > 16) a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 16), a2);
                if (width > 24) a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 24), a3);
            }
            _mm256_storeu_ps(acc + i, a0);
            if (width > 8) _mm256_storeu_ps(acc + i + 8, a1);
            if (width > 16) _mm256_storeu_ps(acc + i + 16, a2);
            if (width > 24) _mm256_storeu_ps(acc + i + 24, a3);
        }
    }
}

#define SHOAL_WIDE 8
#define scores_wide scores8
#define accumulate_wide accumulate8
#define SHOAL_ATTENTION_ISA "avx2"
#else
#define SHOAL_ATTENTION_ISA "portable C"
#endif

const char *shoal_attention_isa(void) { return SHOAL_ATTENTION_ISA; }

/* Scores of row m against the run's keys lo..valid - 1, the visible ones: one dot product at a time, soft-capped
 * by cap (0: not). */
static inline void scores_portable(Scratch *s, int m, int d, const float *keys, int stride, int lo, int valid,
                                   float cap) {
    const float *q = s->q + (size_t)m * d;
    float *probs = s->probs + (size_t)m * CHUNK;
    float chunk_max = -INFINITY;
    for (int t = lo; t < valid; t++) {
        const float *k = keys + (size_t)t * stride;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < d; i++) dot += q[i] * k[i];
        if (cap != 0.0f) dot = softcap1(dot, cap);
        probs[t] = dot;
        chunk_max = dot > chunk_max ? dot : chunk_max;
    }
    softmax_step(s, m, d, probs, lo, valid, chunk_max);
}

static inline void accumulate_portable(Scratch *s, int rows, int heads, int group, int d, int stride, int n) {
    for (int m = 0; m < rows; m++) {
        const float *probs = s->probs + (size_t)m * CHUNK;
        const float *values = s->values + (size_t)(m % heads / group) * d;
        float *acc = s->acc + (size_t)m * d;
        for (int t = 0; t < n; t++) {
            const float w = probs[t];
            if (w == 0.0f) continue;
            const float *v = values + (size_t)t * stride;
#pragma omp simd
            for (int i = 0; i < d; i++) acc[i] += w * v[i];
        }
    }
}

/* The keys of the run c0..c0 + n - 1 that row m sees, as offsets lo..returned - 1 into the run: up to its own
 * position, and from its position - window + 1 with a sliding window. */
static inline int visible_keys(const Problem *p, const Scratch *s, int m, int c0, int n, int *lo) {
    const int valid = s->limit[m] - c0 + 1 < n ? s->limit[m] - c0 + 1 : n;
    const int from = p->window ? s->limit[m] - p->window + 1 - c0 : 0;
    *lo = from > 0 ? from : 0;
    return valid;
}

/* One item: query rows [r0, r1) of sequence seq, every query head of KV heads [kvh0, kvh0 + span). Score row
 * m is query row r0 + m / (span * group), query head kvh0 * group + m % (span * group). */
static void attend_item(const Problem *p, Scratch *s, int seq, int r0, int r1, int kvh0, int span) {
    const int d = p->head_dim, group = p->heads / p->kv_heads, width = span * d;
    const size_t q_elem = p->q_dtype == SHOAL_BF16 ? 2 : 4, kv_elem = p->kv_dtype == SHOAL_BF16 ? 2 : 4;
    const int start = p->query_start[seq], query_len = p->query_start[seq + 1] - start;
    const int context = p->seq_lens[seq], first_pos = context - query_len;
    const int32_t *table = p->block_tables + (long)seq * p->table_width;
    const int heads = span * group, rows = (r1 - r0) * heads;
#ifdef SHOAL_WIDE
    const int wide = d % SHOAL_WIDE == 0;
#else
    const int wide = 0;
#endif
#ifdef SHOAL_BF16_DOT
    const int dot_bf16 = d % 32 == 0 && p->q_dtype == SHOAL_BF16 && p->kv_dtype == SHOAL_BF16;
#else
    const int dot_bf16 = 0;
#endif

    for (int m = 0; m < rows; m++) {
        const int r = r0 + m / heads, head = kvh0 * group + m % heads;
        const char *src = p->q + ((start + r) * p->q_token_stride + head * p->q_head_stride) * (long)q_elem;
        if (dot_bf16)
            memcpy(s->q_bf16 + (size_t)m * d, src, sizeof(uint16_t) * d);
        else
            widen(s->q + (size_t)m * d, src, p->q_dtype, d, p->scale);
        s->limit[m] = first_pos + r;
        s->row_max[m] = -INFINITY;
        s->row_sum[m] = 0.0f;
    }
    memset(s->acc, 0, sizeof(float) * (size_t)rows * d);

    const int keys_seen = first_pos + r1; /* keys 0..first_pos + r1 - 1 */
    /* with a sliding window, the first row sees nothing before its own position - window + 1 */
    const int first_key = p->window && first_pos + r0 - p->window + 1 > 0 ? first_pos + r0 - p->window + 1 : 0;
    const long stride_bytes = (long)p->kv_heads * d * (long)kv_elem, run_bytes = (long)width * (long)kv_elem;
    for (int c0 = first_key, n = 0; c0 < keys_seen; c0 += n) { /* runs of up to CHUNK tokens within one block */
        n = run_length(p, c0, keys_seen);
        if (c0 + n < keys_seen) { /* the next run's rows */
            const int next = run_length(p, c0 + n, keys_seen);
            prefetch_rows(cache_rows(p, p->k_cache, table, c0 + n, kvh0, kv_elem), next, run_bytes, stride_bytes);
            prefetch_rows(cache_rows(p, p->v_cache, table, c0 + n, kvh0, kv_elem), next, run_bytes, stride_bytes);
        }
#ifdef SHOAL_BF16_DOT
        if (dot_bf16) {
            const uint16_t *keys = (const uint16_t *)cache_rows(p, p->k_cache, table, c0, kvh0, kv_elem);
            const uint16_t *values = (const uint16_t *)cache_rows(p, p->v_cache, table, c0, kvh0, kv_elem);
            const long stride = (long)p->kv_heads * d;
            for (int m = 0; m < rows; m++) {
                int lo;
                const int valid = visible_keys(p, s, m, c0, n, &lo);
                if (valid <= lo) {
                    memset(s->probs + (size_t)m * CHUNK, 0, sizeof(float) * CHUNK);
                    continue;
                }
                scores_bf16(s, m, d, keys + (size_t)(m % heads / group) * d, stride, n, lo, valid, p->scale, p->softcap);
            }
            accumulate_bf16(s, rows, heads, group, d, values, stride, n);
            continue;
        }
#endif
        widen_rows(s->keys, cache_rows(p, p->k_cache, table, c0, kvh0, kv_elem), p->kv_dtype, n, width, stride_bytes);
        for (int m = 0; m < rows; m++) {
            int lo;
            const int valid = visible_keys(p, s, m, c0, n, &lo);
            if (valid <= lo) { /* the row's causal limit lies before this run, or its window after it */
                memset(s->probs + (size_t)m * CHUNK, 0, sizeof(float) * CHUNK);
                continue;
            }
            const float *keys = s->keys + (size_t)(m % heads / group) * d;
#ifdef SHOAL_WIDE
            if (wide) {
                scores_wide(s, m, d, keys, width, n, lo, valid, p->softcap);
                continue;
            }
#endif
            scores_portable(s, m, d, keys, width, lo, valid, p->softcap);
        }
        widen_rows(s->values, cache_rows(p, p->v_cache, table, c0, kvh0, kv_elem), p->kv_dtype, n, width, stride_bytes);
#ifdef SHOAL_WIDE
        if (wide) {
            accumulate_wide(s, rows, heads, group, d, width, n);
            continue;
        }
#endif
        accumulate_portable(s, rows, heads, group, d, width, n);
    }

    for (int m = 0; m < rows; m++) {
        const int r = r0 + m / heads, head = kvh0 * group + m % heads;
        const float inv = 1.0f / s->row_sum[m];
        const float *acc = s->acc + (size_t)m * d;
#ifdef SHOAL_BF16_DOT
        if (dot_bf16) { /* back in column order, into the (now free) fp32 query row */
            unpermute(s->q + (size_t)m * d, acc, d);
            acc = s->q + (size_t)m * d;
        }
#endif
        long offset = ((long)(start + r) * p->heads + head) * d;
        if (p->q_dtype == SHOAL_BF16) {
            uint16_t *o = (uint16_t *)p->out + offset;
#pragma omp simd
            for (int i = 0; i < d; i++) o[i] = float_to_bf16(acc[i] * inv);
        } else {
            float *o = (float *)p->out + offset;
#pragma omp simd
            for (int i = 0; i < d; i++) o[i] = acc[i] * inv;
        }
    }
}

/* Returns SHOAL_OK or why the call was refused. The caller (paged_attention.py) has checked the shapes against
 * the tensors; this re-checks what would make the kernel read out of bounds. */
int shoal_paged_attention(const void *q, long q_token_stride, long q_head_stride, int q_dtype, const void *k_cache,
                          const void *v_cache, int kv_dtype, const int32_t *block_tables, int table_width,
                          int num_blocks, const int32_t *seq_lens, const int32_t *query_start, void *out, int num_seqs, int heads,
                          int kv_heads, int head_dim, int block_size, float scale, int window, float softcap,
                          int threads) {
    if ((q_dtype != SHOAL_F32 && q_dtype != SHOAL_BF16) || (kv_dtype != SHOAL_F32 && kv_dtype != SHOAL_BF16))
        return SHOAL_BAD_DTYPE;
    if (num_seqs < 0 || heads < 1 || kv_heads < 1 || heads % kv_heads || head_dim < 1 || head_dim > MAX_HEAD_DIM ||
        block_size < 1 || table_width < 1 || window < 0 || !(softcap >= 0.0f))
        return SHOAL_BAD_SHAPE;
    const int group = heads / kv_heads;
    long units = 0; /* (sequence, query rows) pairs at the widest span */
    for (int s = 0; s < num_seqs; s++) {
        int query_len = query_start[s + 1] - query_start[s];
        if (query_len < 1 || seq_lens[s] < query_len || (long)table_width * block_size < seq_lens[s])
            return SHOAL_BAD_SHAPE;
        for (int b = 0; b < (seq_lens[s] + block_size - 1) / block_size; b++) {
            int32_t block = block_tables[(long)s * table_width + b];
            if (block < 0 || block >= num_blocks) return SHOAL_BAD_SHAPE;
        }
        units += (query_len * heads + ROWS_BUDGET - 1) / ROWS_BUDGET;
    }
    if (threads < 1) threads = 1;
    /* all KV heads at once while that leaves 4 items a thread, else one at a time (parallel over heads) */
    const int span = units >= 4L * threads ? kv_heads : 1;
    const int qrows = span * group >= ROWS_BUDGET ? 1 : ROWS_BUDGET / (span * group);
    long items = 0;
    for (int s = 0; s < num_seqs; s++)
        items += (long)(kv_heads / span) * ((query_start[s + 1] - query_start[s] + qrows - 1) / qrows);
    if (items == 0) return SHOAL_OK;
    int *item_seq = malloc(sizeof(int) * 2 * (size_t)items);
    if (!item_seq) return SHOAL_NO_MEMORY;
    int *item_row = item_seq + items;
    long i = 0;
    for (int s = 0; s < num_seqs; s++)
        for (int r = 0; r < query_start[s + 1] - query_start[s]; r += qrows)
            for (int h = 0; h < kv_heads; h += span, i++) {
                item_seq[i] = s;
                item_row[i] = r * kv_heads + h; /* row start and first KV head in one int */
            }

    Problem p = {(const char *)q, (const char *)k_cache, (const char *)v_cache, q_token_stride, q_head_stride,
                 q_dtype, kv_dtype, block_tables, seq_lens, query_start, table_width, heads, kv_heads, head_dim,
                 block_size, scale, window, softcap, (char *)out};
    int failed = 0;
    if (threads > items) threads = (int)items;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        Scratch scratch = {0};
        const int ready = scratch_alloc(&scratch, qrows * span * group, head_dim, span);
        failed |= !ready;
#pragma omp for schedule(dynamic, 1) /* every thread reaches it (its barrier), allocated or not */
        for (long j = 0; j < items; j++) {
            if (!ready) continue;
            int s = item_seq[j], r0 = item_row[j] / kv_heads, kvh0 = item_row[j] % kv_heads;
            int query_len = query_start[s + 1] - query_start[s];
            int r1 = r0 + qrows < query_len ? r0 + qrows : query_len;
            attend_item(&p, &scratch, s, r0, r1, kvh0, span);
        }
        if (ready) free(scratch.q);
    }
    free(item_seq);
    return failed ? SHOAL_NO_MEMORY : SHOAL_OK;
}
