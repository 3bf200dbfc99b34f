/* Weights grouped by 16 rows (FMT_G16, native.h) times activations quantized to int16:
 * the product of a prefill-sized batch where the CPU has no bf16 instructions (AVX2).
 *
 * There the dense alternative runs on float32, 8 multiply-adds an instruction; AVX2's
 * vpmaddwd does 16 (pairs of int16 into int32). Activations are quantized per block of
 * 32 to int16 (x ~ d q, |q| <= 32767: an error of at most 2^-16 of the block's largest
 * value, finer than bfloat16's 2^-9 of each value, the precision of the dense product on
 * bf16 machines), which keeps a prefill's numerics where int8 activations did not
 * (quant.NATIVE_DENSE_ROWS).
 *
 * Each thread takes a range of groups. A group's weights are expanded once into int16
 * (q minus the implied offset), laid out as [block][half][pair][8 rows][2]: one 32-byte
 * register holds a pair of consecutive weights of 8 rows, multiplied by one pair of
 * activations broadcast. Then every activation row runs against it, 3 at a time: 3 rows x
 * 2 halves of integer sums and as many float sums are 12 of AVX2's 16 registers. */
#include "native.h"

#if defined(__AVX2__) && defined(__FMA__)
#define WIDE256 1
#endif

/* Activations: int16 q[M][K], float d[M][nb] and s[M][nb]: x ~ d q per block, s = d sum(q). */
typedef struct { int16_t *q; float *d, *s; } acts16;

int64_t aug_acts16_bytes(int64_t M, int64_t K) { return M * K * 2 + M * (K / QK) * 8; }

static acts16 acts16_at(void *base, int64_t M, int64_t K) {
    acts16 a;
    a.q = (int16_t *)base;
    a.d = (float *)((char *)base + M * K * 2);
    a.s = a.d + M * (K / QK);
    return a;
}

static void quantize16_row(const float *x, int64_t K, acts16 a, int64_t row) {
    const int64_t nb = K / QK;
    for (int64_t b = 0; b < nb; b++) {
        const float *v = x + row * K + b * QK;
        int16_t *q = a.q + row * K + b * QK;
        float amax = 0.0f;
#pragma omp simd reduction(max : amax)
        for (int j = 0; j < QK; j++) amax = maxf(amax, fabsf(v[j]));
        const float d = amax / 32767.0f;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < QK; j++) {
            const float t = minf(maxf(round_even(v[j] * id), -32767.0f), 32767.0f);
            q[j] = (int16_t)(int)t;
            sum += (int)t;
        }
        a.d[row * nb + b] = d;
        a.s[row * nb + b] = d * (float)sum;
    }
}

/* ---- a group's weights in int16 ---------------------------------------------------- */
typedef struct { int16_t *q; float *d, *m; } wide_t; /* m NULL: the offset is in q */

#if defined(WIDE256)
/* v: 8 rows x 4 quants (row r's in bytes 4r .. 4r + 3), the block's pairs j and j + 1
 * -> int16 registers [j][8 rows][2] and [j + 1][8 rows][2], offset `off` subtracted. */
static inline void expand_quads(__m256i v, int16_t off, int16_t *dst, int j) {
    const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7), o = _mm256_set1_epi16(off);
    const __m256i lo = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)), o);
    const __m256i hi = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1)), o);
    const __m256i a = _mm256_permutevar8x32_epi32(lo, idx); /* rows 0-3: pair j, then j + 1 */
    const __m256i b = _mm256_permutevar8x32_epi32(hi, idx); /* rows 4-7 */
    _mm256_storeu_si256((__m256i *)(dst + 16 * j), _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256((__m256i *)(dst + 16 * (j + 1)), _mm256_permute2x128_si256(a, b, 0x31));
}
#endif

static void expand_group(wgroup_t w, int fmt, int64_t nb, wide_t out) {
    const int16_t off = fmt & FMT_M ? 0 : (fmt & FMT_Q8 ? 128 : 8);
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < 16; i++) {
            out.d[16 * b + i] = g16_scale(w, fmt, b, i);
            if (out.m) out.m[16 * b + i] = g16_offset(w, fmt, b, i);
        }
        for (int h = 0; h < 2; h++) {
            int16_t *dst = out.q + (2 * b + h) * 256;
#if defined(WIDE256)
            if (fmt & FMT_Q8) {
                for (int u = 0; u < 8; u++) {
                    const uint8_t *src = w.q + b * 512 + 64 * u + 32 * h;
                    expand_quads(_mm256_loadu_si256((const __m256i *)src), off, dst, 2 * u);
                }
            } else {
                const __m256i low = _mm256_set1_epi8(0x0f);
                for (int p = 0; p < 4; p++) {
                    const __m256i raw =
                        _mm256_loadu_si256((const __m256i *)(w.q + b * 256 + 64 * p + 32 * h));
                    expand_quads(_mm256_and_si256(raw, low), off, dst, 2 * p);
                    expand_quads(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), off, dst,
                                 8 + 2 * p);
                }
            }
#else
            for (int j = 0; j < 16; j++)
                for (int r = 0; r < 8; r++)
                    for (int t = 0; t < 2; t++)
                        dst[16 * j + 2 * r + t] =
                            (int16_t)(g16_quant(w, fmt, b, 8 * h + r, 2 * j + t) - off);
#endif
        }
    }
}

/* ---- TM activation rows against one expanded group ---------------------------------- */
#if defined(WIDE256)
static inline __attribute__((always_inline)) void tile_wide(
    const int TM, const int HAS_M, wide_t w, int64_t nb, acts16 a, int64_t r0, int64_t K,
    float *y, int64_t ldy, const float *bias) {
    __m256 acc[3][2];
    for (int r = 0; r < TM; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int16_t *wb = w.q + b * 512;
        const int32_t *xq[3]; /* each row's 16 pairs of block b */
        __m256i d[3][2];
        for (int r = 0; r < TM; r++) {
            xq[r] = (const int32_t *)(a.q + (r0 + r) * K + b * QK);
            d[r][0] = d[r][1] = _mm256_setzero_si256();
        }
        /* Unrolled by 8 (measured: 1.15-1.25x at 512 rows against no unrolling; a full 16
         * spills). */
#pragma GCC unroll 8
        for (int j = 0; j < 16; j++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(wb + 16 * j));
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(wb + 256 + 16 * j));
            for (int r = 0; r < TM; r++) {
                const __m256i x = _mm256_set1_epi32(xq[r][j]);
                d[r][0] = _mm256_add_epi32(d[r][0], _mm256_madd_epi16(w0, x));
                d[r][1] = _mm256_add_epi32(d[r][1], _mm256_madd_epi16(w1, x));
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256 dw = _mm256_loadu_ps(w.d + 16 * b + 8 * h);
            for (int r = 0; r < TM; r++) {
                const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(a.d[(r0 + r) * nb + b]));
                acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r][h]), sc, acc[r][h]);
            }
            if (HAS_M) {
                const __m256 mw = _mm256_loadu_ps(w.m + 16 * b + 8 * h);
                for (int r = 0; r < TM; r++)
                    acc[r][h] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s[(r0 + r) * nb + b]),
                                                acc[r][h]);
            }
        }
    }
    for (int h = 0; h < 2; h++) {
        const __m256 bv = bias ? _mm256_loadu_ps(bias + 8 * h) : _mm256_setzero_ps();
        for (int r = 0; r < TM; r++)
            _mm256_storeu_ps(y + (r0 + r) * ldy + 8 * h, _mm256_add_ps(acc[r][h], bv));
    }
}
#else
/* Plain C: the same sums, one output at a time. */
static inline void tile_wide(const int TM, const int HAS_M, wide_t w, int64_t nb, acts16 a,
                             int64_t r0, int64_t K, float *y, int64_t ldy, const float *bias) {
    for (int r = 0; r < TM; r++) {
        const int64_t row = r0 + r;
        for (int i = 0; i < 16; i++) {
            const int h = i / 8, ri = i % 8;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const int16_t *wb = w.q + (2 * b + h) * 256;
                const int16_t *x = a.q + row * K + b * QK;
                int32_t dot = 0;
                for (int j = 0; j < 16; j++)
                    dot += wb[16 * j + 2 * ri] * x[2 * j] + wb[16 * j + 2 * ri + 1] * x[2 * j + 1];
                acc += (float)dot * (w.d[16 * b + i] * a.d[row * nb + b]);
                if (HAS_M) acc += w.m[16 * b + i] * a.s[row * nb + b];
            }
            y[row * ldy + i] = acc + (bias ? bias[i] : 0.0f);
        }
    }
}
#endif

static inline __attribute__((always_inline)) void rows_wide(
    const int HAS_M, wide_t w, int64_t nb, acts16 a, int64_t M, int64_t K, float *y,
    int64_t ldy, const float *bias) {
    int64_t r = 0;
    for (; r + 3 <= M; r += 3) tile_wide(3, HAS_M, w, nb, a, r, K, y, ldy, bias);
    for (; r + 2 <= M; r += 2) tile_wide(2, HAS_M, w, nb, a, r, K, y, ldy, bias);
    for (; r < M; r++) tile_wide(1, HAS_M, w, nb, a, r, K, y, ldy, bias);
}

/* y[r, n] = sum_k w[n, k] x[r, k] (+ bias[n]) for FMT_G16 weights (N a multiple of 16),
 * x float32 [M][K] contiguous; `work`: aug_acts16_bytes(M, K) bytes. */
void aug_gemm16_wide(const void *w, int fmt, const float *x, void *work, float *y, int64_t M,
                     int64_t N, int64_t K, int64_t ldy, const float *bias, int nt) {
    const int64_t nb = K / QK, group_bytes = 16 * nb * block_bytes(fmt), G = N / 16;
    const acts16 a = acts16_at(work, M, K);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < M; r++) quantize16_row(x, K, a, r);
        const int64_t tid = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t g0 = G * tid / T, g1 = G * (tid + 1) / T;
        const int has_m = (fmt & FMT_M) != 0;
        int16_t *q = aligned_alloc(64, (size_t)nb * 1024);
        float *dm = malloc((size_t)nb * 16 * 4 * 2);
        if (q && dm) {
            const wide_t wx = {q, dm, has_m ? dm + nb * 16 : NULL};
            for (int64_t g = g0; g < g1; g++) {
                const wgroup_t wg = wgroup_at((const uint8_t *)w + g * group_bytes, fmt, nb);
                expand_group(wg, fmt, nb, wx);
                const float *bg = bias ? bias + 16 * g : NULL;
                if (has_m) rows_wide(1, wx, nb, a, M, K, y + 16 * g, ldy, bg);
                else rows_wide(0, wx, nb, a, M, K, y + 16 * g, ldy, bg);
            }
        } else {
            for (int64_t r = 0; r < M; r++) /* no memory: NaN, never a silent wrong sum */
                for (int64_t n = 16 * g0; n < 16 * g1; n++) y[r * ldy + n] = NAN;
        }
        free(q);
        free(dm);
    }
}
