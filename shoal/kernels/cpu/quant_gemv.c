/* Quantized weights times a few rows of activations, the way llama.cpp computes a decode step on a CPU.
 *
 * y[r, o] = sum_i w[o, i] * x[r, i] for up to MAX_ROWS rows r, with w stored in blocks of 32 inputs:
 *   Q4_1: 4-bit codes c (0..15), an fp16 scale d and min m per block: w = c * d + m  (Q4_0 is m = -8 d)
 *   Q8_0: int8 codes c, an fp16 scale d per block: w = c * d
 * The activations are quantized once per call, per block of 32, in two int8 levels: codes q = round(x / dx)
 * with dx = max|x| / 127 (llama.cpp's Q8_1), then the residual's codes r = round((x - q dx) / u), u = dx / 256,
 * so x ~= u (256 q + r): about 15 bits. One level alone moved SmolLM2's logits by 6-14% of their spread from the
 * dequantized model's (the engine's tolerance is 5%); the second level costs integer work only, and a decode
 * step waits on memory. Each block's dot product is then integer work, with p = 256 sum(c q) + sum(c r):
 *   Q4_1: sum_i w_i x_i ~= d u p + m u (256 sum(q) + sum(r))
 *   Q8_0: sum_i w_i x_i ~= d u p
 *
 * Layout (repacked at load, see quant_gemv.py): output rows go in tiles of TILE = 8, and a tile's block of 32
 * inputs is 8 steps of 4 inputs. For step k, one 32-byte vector holds the 4 codes of each of the 8 rows (byte
 * 4 j + t: row j, input 4 k + t), so one `vpdpbusd` (u8 x s8, sums of 4 into int32 lanes) against the step's 4
 * activation codes broadcast to every lane adds a partial dot product to each row's lane: after 8 steps, lane
 * j holds row j's integer dot product for the block, and the block's scales, 8 fp16 values (one per row), are
 * one vector too. No horizontal sums, no scalar work per row. Q4_1 packs steps k and k + 4 into the low and
 * high nibbles of the same 32 bytes: a tile's block is 128 bytes of codes, and its scales 16 bytes of d and 16
 * of m (scales [tiles, blocks, 2, 8]); Q8_0's is 256 bytes of codes and 16 bytes of d ([tiles, blocks, 8]).
 *
 * Paths, chosen at compile time from the target macros (-march=native at build): AVX512-VNNI (256-bit
 * `vpdpbusd` with AVX512VL) or AVX-VNNI; AVX2; and plain C. With VNNI, Q8_0's signed codes are flipped to
 * c + 128 (unsigned) and 128 (256 sum(q) + sum(r)) is taken back out per block. AVX2 has no u8 x s8 dot of 4, so
 * there the two levels are one int16 activation a = 256 q + r (|a| <= 32639) and each step is two `vpmaddwd`
 * (int16 pairs into int32): the weights' even inputs (0, 2) against the pair (a0, a2) broadcast, the odd ones
 * against (a1, a3), the weights widened to int16 once per tile for every row. The integer sum is the same p as
 * the two levels', exactly, in half the instructions a row (`vpmaddubsw` per level needed the signs moved onto
 * the weights and a second `vpmaddwd`).
 *
 * A decode step is memory-bound: each weight is read once per call, so the (<= PASS_ROWS) activation rows are
 * looped inside the block loop, each with its own accumulator, and OpenMP splits the tiles among the
 * caller's threads. A call of more rows (up to MAX_ROWS) goes over each tile in passes of PASS_ROWS, the tile's
 * codes still in L1 after the first: the weights are read from memory once, and each row's sums are what a call
 * of its pass's rows alone would give.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define SHOAL_SIMD 1
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define SHOAL_VNNI 1
#else
#define SHOAL_PAIRS 1 /* AVX2: int16 activations, see the header */
#endif
#endif

#define QK 32
#define TILE 8
#define PASS_ROWS 8 /* activation rows one pass over a tile carries, each in its own accumulator */
#define MAX_ROWS 64  /* rows a call takes: more than PASS_ROWS go over each tile in passes, the tile still in L1 */
#ifndef PREFETCH
/* Blocks ahead (measured 8, 16, 24, 32, 48): a tile's next blocks, or the next tile's first (they follow). */
#define PREFETCH 32
#endif

enum { SHOAL_F32 = 0, SHOAL_BF16 = 1 };
enum { SHOAL_Q4_1 = 0, SHOAL_Q8_0 = 1 };
enum { SHOAL_OK = 0, SHOAL_BAD_SHAPE = 1, SHOAL_BAD_DTYPE = 2, SHOAL_NO_MEMORY = 3, SHOAL_BAD_KIND = 4 };

int shoal_max_rows(void) { return MAX_ROWS; }

int shoal_tile(void) { return TILE; }

const char *shoal_isa(void) {
#if defined(SHOAL_VNNI) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return "avx512_vnni";
#elif defined(SHOAL_VNNI)
    return "avx_vnni";
#elif defined(SHOAL_SIMD)
    return "avx2";
#else
    return "scalar";
#endif
}

static inline float bits_to_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float load_activation(const void *x, int dtype, size_t i) {
    if (dtype == SHOAL_F32) return ((const float *)x)[i];
    return bits_to_float((uint32_t)((const uint16_t *)x)[i] << 16);
}

static inline void store_output(void *y, int dtype, size_t i, float v) {
    if (dtype == SHOAL_F32) {
        ((float *)y)[i] = v;
        return;
    }
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) { /* NaN stays NaN */
        ((uint16_t *)y)[i] = (uint16_t)((bits >> 16) | 0x40);
        return;
    }
    bits += 0x7FFF + ((bits >> 16) & 1); /* round to nearest even */
    ((uint16_t *)y)[i] = (uint16_t)(bits >> 16);
}

/* The activations of one call, quantized per block of 32 in two levels: x ~= u (256 q + r). */
typedef struct {
    int8_t *q;   /* [rows, cols] */
    int8_t *r;   /* [rows, cols]: the residual's codes */
    float *u;    /* [rows, blocks] */
    int32_t *s;  /* [rows, blocks]: 256 sum(q) + sum(r) */
    float *us;   /* [rows, blocks]: u * s */
#ifdef SHOAL_PAIRS
    int32_t *pairs; /* [rows, cols / 2]: per step of 4 inputs, (a0, a2) and (a1, a3) as int16 pairs, a = 256 q + r */
#endif
} Activations;

/* One scratch buffer per calling thread, grown as needed: no allocation per call. */
static _Thread_local void *scratch = NULL;
static _Thread_local size_t scratch_size = 0;

static inline int8_t round_code(float v) { return (int8_t)lrintf(fminf(fmaxf(v, -127.0f), 127.0f)); }

static int quantize_activations(const void *x, int dtype, int rows, int cols, Activations *a) {
    int blocks = cols / QK;
    size_t codes = (size_t)rows * cols, per_block = (size_t)rows * blocks;
    size_t need = 2 * codes + per_block * (2 * sizeof(float) + sizeof(int32_t));
#ifdef SHOAL_PAIRS
    need += codes * sizeof(int16_t);
#endif
    if (need > scratch_size) {
        void *grown = realloc(scratch, need);
        if (!grown) return SHOAL_NO_MEMORY;
        scratch = grown;
        scratch_size = need;
    }
    a->u = (float *)scratch;
    a->us = a->u + per_block;
    a->s = (int32_t *)(a->us + per_block);
#ifdef SHOAL_PAIRS
    a->pairs = a->s + per_block;
    a->q = (int8_t *)(a->pairs + codes / 2);
#else
    a->q = (int8_t *)(a->s + per_block);
#endif
    a->r = a->q + codes;
    for (int row = 0; row < rows; row++) {
        for (int b = 0; b < blocks; b++) {
            size_t start = (size_t)row * cols + (size_t)b * QK;
            float v[QK], amax = 0.0f;
            for (int i = 0; i < QK; i++) {
                v[i] = load_activation(x, dtype, start + i);
                amax = fmaxf(amax, fabsf(v[i]));
            }
            float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f, u = d / 256.0f;
            int32_t sum = 0;
            for (int i = 0; i < QK; i++) {
                int8_t q = round_code(v[i] * inv);
                int8_t r = round_code((v[i] - (float)q * d) * inv * 256.0f);
                a->q[start + i] = q;
                a->r[start + i] = r;
                sum += 256 * q + r;
            }
#ifdef SHOAL_PAIRS
            for (int k = 0; k < QK / 4; k++) {
                const int8_t *q = a->q + start + 4 * k, *r = a->r + start + 4 * k;
                int32_t *pair = a->pairs + start / 2 + 2 * k;
                for (int odd = 0; odd < 2; odd++) {
                    uint16_t first = (uint16_t)(256 * q[odd] + r[odd]), second = (uint16_t)(256 * q[odd + 2] + r[odd + 2]);
                    pair[odd] = (int32_t)((uint32_t)first | (uint32_t)second << 16);
                }
            }
#endif
            a->u[row * blocks + b] = u;
            a->s[row * blocks + b] = sum;
            a->us[row * blocks + b] = u * (float)sum;
        }
    }
    return SHOAL_OK;
}

#ifdef SHOAL_VNNI
/* acc + per-lane sums of 4 products u8 x s8. */
static inline __m256i dot_add(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}

static inline __m256i broadcast4(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

/* 256 sum(w q) + sum(w r) per lane over one block's 8 steps: the weights' 8 step vectors (unsigned) against both
 * levels. */
static inline __m256i block_dot(const __m256i *w, const int8_t *q, const int8_t *res) {
    __m256i high = _mm256_setzero_si256(), low = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) {
        high = dot_add(high, w[k], broadcast4(q + 4 * k));
        low = dot_add(low, w[k], broadcast4(res + 4 * k));
    }
    return _mm256_add_epi32(_mm256_slli_epi32(high, 8), low);
}
#endif

#ifndef SHOAL_SIMD
static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    if (exponent == 0x1F) return bits_to_float(sign | 0x7F800000u | (mantissa << 13));
    if (exponent) return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
    float magnitude = (float)mantissa * (1.0f / 16777216.0f); /* subnormal: mantissa * 2^-24 */
    return sign ? -magnitude : magnitude;
}
#endif

#ifdef SHOAL_PAIRS
/* The same p per lane from int16 weights: even[k] holds inputs 4k and 4k + 2 of each row's lane, odd[k] inputs
 * 4k + 1 and 4k + 3, against the block's activation pairs (16 words, see Activations). */
static inline __m256i block_dot_pairs(const __m256i *even, const __m256i *odd, const int32_t *pairs) {
    __m256i sum = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) {
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(even[k], _mm256_set1_epi32(pairs[2 * k])));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(odd[k], _mm256_set1_epi32(pairs[2 * k + 1])));
    }
    return sum;
}
#endif

/* One tile (TILE output rows) of Q4_1 weights against R activation rows (R a constant after inlining, so the
 * accumulators stay in registers); out[row * TILE + j] is output row j's result for activation row `row`. */
static inline __attribute__((always_inline)) void q4_1_tile(const uint8_t *codes, const uint16_t *scales,
                                                            int blocks, const Activations *a, const int R,
                                                            float *out) {
    int cols = blocks * QK;
#ifdef SHOAL_SIMD
    __m256 acc[PASS_ROWS];
    for (int row = 0; row < R; row++) acc[row] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const uint8_t *block = codes + (size_t)b * 128;
        _mm_prefetch((const char *)(block + PREFETCH * 128), _MM_HINT_T0);
        _mm_prefetch((const char *)(block + PREFETCH * 128 + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(scales + (size_t)(b + PREFETCH) * 16), _MM_HINT_T0);
#ifdef SHOAL_PAIRS /* each 16-bit element holds inputs t, t + 1 of steps c (low nibbles) and c + 4 (high) */
        const __m256i low4 = _mm256_set1_epi16(0x000F);
        __m256i even[8], odd[8];
        for (int c = 0; c < 4; c++) {
            __m256i packed = _mm256_loadu_si256((const __m256i *)(block + 32 * c));
            even[c] = _mm256_and_si256(packed, low4);
            odd[c] = _mm256_and_si256(_mm256_srli_epi16(packed, 8), low4);
            even[c + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
            odd[c + 4] = _mm256_srli_epi16(packed, 12);
        }
#else
        const __m256i nibble = _mm256_set1_epi8(0x0F);
        __m256i w[8];
        for (int c = 0; c < 4; c++) {
            __m256i packed = _mm256_loadu_si256((const __m256i *)(block + 32 * c));
            w[c] = _mm256_and_si256(packed, nibble);
            w[c + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
        }
#endif
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + (size_t)b * 16)));
        __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + (size_t)b * 16 + 8)));
        for (int row = 0; row < R; row++) {
            size_t at = (size_t)row * cols + (size_t)b * QK, ab = (size_t)row * blocks + b;
#ifdef SHOAL_PAIRS
            __m256 dot = _mm256_cvtepi32_ps(block_dot_pairs(even, odd, a->pairs + at / 2));
#else
            __m256 dot = _mm256_cvtepi32_ps(block_dot(w, a->q + at, a->r + at));
#endif
            acc[row] = _mm256_fmadd_ps(dot, _mm256_mul_ps(d, _mm256_set1_ps(a->u[ab])), acc[row]);
            acc[row] = _mm256_fmadd_ps(m, _mm256_set1_ps(a->us[ab]), acc[row]);
        }
    }
    for (int row = 0; row < R; row++) _mm256_storeu_ps(out + row * TILE, acc[row]);
#else
    for (int row = 0; row < R; row++) {
        for (int j = 0; j < TILE; j++) {
            float total = 0.0f;
            for (int b = 0; b < blocks; b++) {
                const uint8_t *block = codes + (size_t)b * 128;
                size_t at = (size_t)row * cols + (size_t)b * QK, ab = (size_t)row * blocks + b;
                int32_t dot = 0;
                for (int k = 0; k < 8; k++)
                    for (int t = 0; t < 4; t++) {
                        uint8_t byte = block[32 * (k % 4) + 4 * j + t];
                        dot += (k < 4 ? byte & 0x0F : byte >> 4) * (256 * a->q[at + 4 * k + t] + a->r[at + 4 * k + t]);
                    }
                const uint16_t *s = scales + (size_t)b * 16;
                total += half_to_float(s[j]) * a->u[ab] * (float)dot + half_to_float(s[8 + j]) * a->us[ab];
            }
            out[row * TILE + j] = total;
        }
    }
#endif
}

/* One tile of Q8_0 weights against R activation rows. */
static inline __attribute__((always_inline)) void q8_0_tile(const int8_t *codes, const uint16_t *scales,
                                                            int blocks, const Activations *a, const int R,
                                                            float *out) {
    int cols = blocks * QK;
#ifdef SHOAL_SIMD
    __m256 acc[PASS_ROWS];
    for (int row = 0; row < R; row++) acc[row] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const int8_t *block = codes + (size_t)b * 256;
        for (int line = 0; line < 4; line++) _mm_prefetch((const char *)(block + PREFETCH * 256 + 64 * line), _MM_HINT_T0);
        _mm_prefetch((const char *)(scales + (size_t)(b + PREFETCH) * 8), _MM_HINT_T0);
#ifdef SHOAL_PAIRS /* the signed bytes widened: low byte of each 16-bit element (inputs 0, 2), high (1, 3) */
        __m256i even[8], odd[8];
        for (int k = 0; k < 8; k++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(block + 32 * k));
            even[k] = _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8);
            odd[k] = _mm256_srai_epi16(w, 8);
        }
#else
        __m256i w[8];
        for (int k = 0; k < 8; k++) w[k] = _mm256_loadu_si256((const __m256i *)(block + 32 * k));
#endif
#ifdef SHOAL_VNNI
        for (int k = 0; k < 8; k++) w[k] = _mm256_xor_si256(w[k], _mm256_set1_epi8((char)0x80)); /* c + 128 */
#endif
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + (size_t)b * 8)));
        for (int row = 0; row < R; row++) {
            size_t at = (size_t)row * cols + (size_t)b * QK, ab = (size_t)row * blocks + b;
#ifdef SHOAL_PAIRS
            __m256i dot = block_dot_pairs(even, odd, a->pairs + at / 2);
#else
            __m256i dot = block_dot(w, a->q + at, a->r + at);
#endif
#ifdef SHOAL_VNNI
            dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(128 * a->s[ab]));
#endif
            acc[row] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(a->u[ab])), acc[row]);
        }
    }
    for (int row = 0; row < R; row++) _mm256_storeu_ps(out + row * TILE, acc[row]);
#else
    for (int row = 0; row < R; row++) {
        for (int j = 0; j < TILE; j++) {
            float total = 0.0f;
            for (int b = 0; b < blocks; b++) {
                const int8_t *block = codes + (size_t)b * 256;
                size_t at = (size_t)row * cols + (size_t)b * QK, ab = (size_t)row * blocks + b;
                int32_t dot = 0;
                for (int k = 0; k < 8; k++)
                    for (int t = 0; t < 4; t++)
                        dot += block[32 * k + 4 * j + t] * (256 * a->q[at + 4 * k + t] + a->r[at + 4 * k + t]);
                total += half_to_float(scales[(size_t)b * 8 + j]) * a->u[ab] * (float)dot;
            }
            out[row * TILE + j] = total;
        }
    }
#endif
}

/* The rows of `a` from `first` on: every per-row array shifted by as many rows. */
static Activations rows_from(const Activations *a, int first, int cols) {
    size_t codes = (size_t)first * cols, per_block = (size_t)first * (cols / QK);
    Activations part = {a->q + codes, a->r + codes, a->u + per_block, a->s + per_block, a->us + per_block,
#ifdef SHOAL_PAIRS
                        a->pairs + codes / 2
#endif
    };
    return part;
}

/* One pass of R (a constant, so the tile function's row loops unroll) rows from `first` over tile t, into y. */
#define TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, R)                                                           \
    TILE_FN(CODES + (size_t)t * blocks * (CODE_BYTES), scales + (size_t)t * blocks * (SCALES), blocks, &part, R,   \
            sums);                                                                                                 \
    for (int r = 0; r < R; r++)                                                                                    \
        for (int j = 0; j < TILE; j++)                                                                             \
            store_output(y, y_dtype, (size_t)(first + r) * out_features + (size_t)t * TILE + j,                    \
                         sums[r * TILE + j]);                                                                      \
    break;

/* Every tile, OpenMP sharing them among the threads, each in passes of up to PASS_ROWS rows: the tile's codes are
 * in L1 after the first pass, so the weights are read from memory once, and each row's sums are what a call of
 * its pass's rows alone gives. */
#define FOR_EACH_TILE(TILE_FN, CODES, CODE_BYTES, SCALES)                                                          \
    _Pragma("omp parallel for num_threads(threads) schedule(static)") for (long t = 0; t < tiles; t++) {           \
        float sums[PASS_ROWS * TILE];                                                                              \
        for (int first = 0; first < rows; first += PASS_ROWS) {                                                    \
            Activations part = rows_from(&a, first, in_features);                                                  \
            switch (rows - first < PASS_ROWS ? rows - first : PASS_ROWS) {                                         \
                case 1: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 1)                                           \
                case 2: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 2)                                           \
                case 3: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 3)                                           \
                case 4: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 4)                                           \
                case 5: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 5)                                           \
                case 6: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 6)                                           \
                case 7: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 7)                                           \
                default: TILE_PASS(TILE_FN, CODES, CODE_BYTES, SCALES, 8)                                          \
            }                                                                                                      \
        }                                                                                                          \
    }

static int check(int rows, int in_features, long out_features, int x_dtype, int y_dtype) {
    if (rows < 1 || rows > MAX_ROWS || in_features < QK || in_features % QK || out_features < TILE ||
        out_features % TILE)
        return SHOAL_BAD_SHAPE;
    if ((x_dtype != SHOAL_F32 && x_dtype != SHOAL_BF16) || (y_dtype != SHOAL_F32 && y_dtype != SHOAL_BF16))
        return SHOAL_BAD_DTYPE;
    return SHOAL_OK;
}

/* y [rows, out] = x [rows, in] @ W.T; x and y row-major, SHOAL_F32 or SHOAL_BF16. Returns SHOAL_OK or an error.
 *   SHOAL_Q4_1: codes [out / 8, in / 32, 128] bytes, scales [out / 8, in / 32, 2, 8] fp16 (d, m)
 *   SHOAL_Q8_0: codes [out / 8, in / 32, 256] int8, scales [out / 8, in / 32, 8] fp16 */
int shoal_gemv(int kind, const void *codes, const uint16_t *scales, const void *x, int x_dtype, void *y,
               int y_dtype, int rows, int in_features, long out_features, int threads) {
    int status = check(rows, in_features, out_features, x_dtype, y_dtype);
    Activations a;
    if (status == SHOAL_OK && kind != SHOAL_Q4_1 && kind != SHOAL_Q8_0) status = SHOAL_BAD_KIND;
    if (status != SHOAL_OK || (status = quantize_activations(x, x_dtype, rows, in_features, &a)) != SHOAL_OK)
        return status;
    int blocks = in_features / QK;
    long tiles = out_features / TILE;
    if (kind == SHOAL_Q4_1) {
        const uint8_t *q4 = codes;
        FOR_EACH_TILE(q4_1_tile, q4, 128, 16)
    } else {
        const int8_t *q8 = codes;
        FOR_EACH_TILE(q8_0_tile, q8, 256, 8)
    }
    return SHOAL_OK;
}
