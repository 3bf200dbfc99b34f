/* Weights grouped by 16 rows (FMT_G16, native.h) times int8-quantized activations, and
 * their dequantization.
 *
 * The row layout (gemm.c) puts a block's 32 weights across the lanes of one register,
 * so every (weight row, activation row, block) ends in its own scaling and every output
 * in a horizontal sum: at 8 activation rows that arithmetic, not the weight bytes, bounds
 * a decode step. Here a register's 16 lanes are 16 weight rows: each dot-product
 * instruction multiplies four weights of each of 16 rows by the same four activations
 * (broadcast), a block's scaling is one multiply-add for 16 outputs, and the 16 outputs
 * of an activation row are stored as they are. The quants of a block are laid out so that
 * one 64-byte load is a register of 16 rows x 4 weights (q8), or two after splitting the
 * nibbles (q4). */
#include "native.h"

/* Bytes ahead of the quants in use that are prefetched: a decode step streams every
 * weight from memory once, and the hardware's prefetchers alone left a batch-1 step of a
 * 0.5B model 35% slower than the row layout (quick runs: 9.5 ms against 7.1; 8 KB ahead
 * 6.0-8.2; the alternated benchmark, docs/engine-quant.md: 8.0 against 6.9). */
#define PF_BYTES 8192

/* The AVX2 path of this file (products and dequantization), where AVX-512 VNNI is absent. */
#if !defined(VEC512) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VEC256 1
#endif

#if defined(VEC512)
/* The 16 rows' scales (or offsets) of block b, as floats. */
static inline __m512 scales16(const uint8_t *p, int fmt, int64_t b) {
    if (fmt & FMT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * b)));
    return _mm512_loadu_ps((const float *)(p + 64 * b));
}


/* y[r0 + r, n0 .. n0 + 16) for r < TM: group `w` against activation rows r0 .. r0 + TM.
 * Each row's block sum runs in two chains (low and high nibbles; even and odd quads), so
 * that a single row (a batch-1 decode step) is not one chain of eight dependent
 * dot-product instructions a block. */
static inline __attribute__((always_inline)) void tile16(
    const int fmt, const int TM, wgroup_t w, int64_t nb, acts a, int64_t r0, int64_t K,
    float *y, int64_t ldy, const float *bias) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    const int32_t off = fmt & FMT_Q8 ? 128 : 8; /* the implied offset, in quant units */
    const int64_t qbytes = fmt & FMT_Q8 ? 512 : 256;
    __m512 acc[8];
    for (int r = 0; r < TM; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = w.q + b * qbytes;
        for (int64_t c = 0; c < qbytes; c += 64)
            _mm_prefetch((const char *)(q + PF_BYTES + c), _MM_HINT_T0);
        __m512i d0[8], d1[8];
        const int32_t *xq[8]; /* each row's 8 quads of block b */
        for (int r = 0; r < TM; r++) {
            const int64_t i = (r0 + r) * nb + b;
            xq[r] = (const int32_t *)(a.q + (r0 + r) * K + b * QK);
            d0[r] = fmt & FMT_M ? _mm512_setzero_si512() : _mm512_set1_epi32(-off * a.isum[i]);
            d1[r] = _mm512_setzero_si512();
        }
        if (fmt & FMT_Q8) {
            for (int u = 0; u < 8; u += 2) {
                const __m512i w0 = _mm512_loadu_si512(q + 64 * u);
                const __m512i w1 = _mm512_loadu_si512(q + 64 * (u + 1));
                for (int r = 0; r < TM; r++) {
                    d0[r] = _mm512_dpbusd_epi32(d0[r], w0, _mm512_set1_epi32(xq[r][u]));
                    d1[r] = _mm512_dpbusd_epi32(d1[r], w1, _mm512_set1_epi32(xq[r][u + 1]));
                }
            }
        } else {
            for (int p = 0; p < 4; p++) {
                const __m512i v = _mm512_loadu_si512(q + 64 * p);
                const __m512i lo = _mm512_and_si512(v, low);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                for (int r = 0; r < TM; r++) {
                    d0[r] = _mm512_dpbusd_epi32(d0[r], lo, _mm512_set1_epi32(xq[r][p]));
                    d1[r] = _mm512_dpbusd_epi32(d1[r], hi, _mm512_set1_epi32(xq[r][p + 4]));
                }
            }
        }
        const __m512 dw = scales16(w.d, fmt, b);
        for (int r = 0; r < TM; r++) {
            const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[(r0 + r) * nb + b]));
            const __m512i dot = _mm512_add_epi32(d0[r], d1[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
        }
        if (fmt & FMT_M) {
            const __m512 mw = scales16(w.m, fmt, b);
            for (int r = 0; r < TM; r++)
                acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[(r0 + r) * nb + b]), acc[r]);
        }
    }
    const __m512 bv = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    for (int r = 0; r < TM; r++) _mm512_storeu_ps(y + (r0 + r) * ldy, _mm512_add_ps(acc[r], bv));
}
#elif defined(VEC256)
/* AVX2: the same sums in two halves of 8 rows (one 32-byte register of 8 rows x 4
 * weights each), the dot product as maddubs + madd (u8 x s8 pairs into 16 bits, then
 * pairs into 32). A q4 weight (<= 15) cannot saturate a 16-bit pair; a q8 one (<= 255)
 * could, so q8 multiplies |w - 128| by x carrying the sign of w - 128 (gemm.c's trick,
 * |x| <= 127 keeps a pair under 32768), and the initial sum moves the offset to match. */
static inline __m256 scales8(const uint8_t *p, int fmt, int64_t b, int half) {
    if (fmt & FMT_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 * b + 16 * half)));
    return _mm256_loadu_ps((const float *)(p + 64 * b + 32 * half));
}

static inline __m256i dot8(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

static inline __attribute__((always_inline)) void tile16(
    const int fmt, const int TM, wgroup_t w, int64_t nb, acts a, int64_t r0, int64_t K,
    float *y, int64_t ldy, const float *bias) {
    const __m256i low = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8((char)0x80);
    const int64_t qbytes = fmt & FMT_Q8 ? 512 : 256;
    /* the initial sum, in units of isum: q4 drops its implied 8 (no FMT_M); q8's
     * w - 128 already drops 128, which FMT_M (no implied offset) adds back */
    const int32_t init = fmt & FMT_Q8 ? (fmt & FMT_M ? 128 : 0) : (fmt & FMT_M ? 0 : -8);
    for (int half = 0; half < 2; half++) {
        __m256 acc[8];
        for (int r = 0; r < TM; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *q = w.q + b * qbytes + 32 * half;
            if (half == 0)
                for (int64_t c = 0; c < qbytes; c += 64)
                    _mm_prefetch((const char *)(q + PF_BYTES + c), _MM_HINT_T0);
            __m256i d[8];
            const int32_t *xq[8];
            for (int r = 0; r < TM; r++) {
                xq[r] = (const int32_t *)(a.q + (r0 + r) * K + b * QK);
                d[r] = _mm256_set1_epi32(init * a.isum[(r0 + r) * nb + b]);
            }
            if (fmt & FMT_Q8) {
                for (int u = 0; u < 8; u++) {
                    const __m256i ws = _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i *)(q + 64 * u)), flip);
                    const __m256i wa = _mm256_sign_epi8(ws, ws);
                    for (int r = 0; r < TM; r++) {
                        const __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(xq[r][u]), ws);
                        d[r] = _mm256_add_epi32(d[r], dot8(wa, x));
                    }
                }
            } else {
                for (int p = 0; p < 4; p++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 64 * p));
                    const __m256i lo = _mm256_and_si256(v, low);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                    for (int r = 0; r < TM; r++) {
                        const __m256i s = _mm256_add_epi32(
                            dot8(lo, _mm256_set1_epi32(xq[r][p])),
                            dot8(hi, _mm256_set1_epi32(xq[r][p + 4])));
                        d[r] = _mm256_add_epi32(d[r], s);
                    }
                }
            }
            const __m256 dw = scales8(w.d, fmt, b, half);
            for (int r = 0; r < TM; r++) {
                const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(a.d[(r0 + r) * nb + b]));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r]), sc, acc[r]);
            }
            if (fmt & FMT_M) {
                const __m256 mw = scales8(w.m, fmt, b, half);
                for (int r = 0; r < TM; r++)
                    acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s[(r0 + r) * nb + b]), acc[r]);
            }
        }
        const __m256 bv = bias ? _mm256_loadu_ps(bias + 8 * half) : _mm256_setzero_ps();
        for (int r = 0; r < TM; r++)
            _mm256_storeu_ps(y + (r0 + r) * ldy + 8 * half, _mm256_add_ps(acc[r], bv));
    }
}
#else
/* Plain C: the same sums, one output at a time (builds without AVX2 or AVX-512 VNNI). */
static inline void tile16(const int fmt, const int TM, wgroup_t w, int64_t nb, acts a,
                          int64_t r0, int64_t K, float *y, int64_t ldy, const float *bias) {
    for (int r = 0; r < TM; r++) {
        const int64_t row = r0 + r;
        for (int i = 0; i < 16; i++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const int8_t *x = a.q + row * K + b * QK;
                int dot = 0;
                for (int j = 0; j < QK; j++) dot += g16_quant(w, fmt, b, i, j) * x[j];
                acc += g16_scale(w, fmt, b, i) * a.d[row * nb + b] * (float)dot +
                       g16_offset(w, fmt, b, i) * a.s[row * nb + b];
            }
            y[row * ldy + i] = acc + (bias ? bias[i] : 0.0f);
        }
    }
}
#endif

static inline __attribute__((always_inline)) void gemm_groups(
    const int fmt, const uint8_t *w, acts a, float *y, int64_t M, int64_t g0, int64_t g1,
    int64_t K, int64_t ldy, const float *bias) {
    const int64_t nb = K / QK, group_bytes = 16 * nb * block_bytes(fmt);
    for (int64_t g = g0; g < g1; g++) {
        const wgroup_t wg = wgroup_at(w + g * group_bytes, fmt, nb);
        float *yg = y + 16 * g;
        const float *bg = bias ? bias + 16 * g : NULL;
        int64_t r = 0;
        for (; r + 8 <= M; r += 8) tile16(fmt, 8, wg, nb, a, r, K, yg, ldy, bg);
        for (; r + 4 <= M; r += 4) tile16(fmt, 4, wg, nb, a, r, K, yg, ldy, bg);
        for (; r + 2 <= M; r += 2) tile16(fmt, 2, wg, nb, a, r, K, yg, ldy, bg);
        for (; r < M; r++) tile16(fmt, 1, wg, nb, a, r, K, yg, ldy, bg);
    }
}

#define GEMM16_CASE(F) \
    case F: gemm_groups(F, (const uint8_t *)w, a, y, M, g0, g1, K, ldy, bias); break;

/* aug_gemm for FMT_G16 weights (N a multiple of 16): each thread takes a range of groups. */
void aug_gemm16(const void *w, int fmt, const void *x, float *y, int64_t M, int64_t N,
                int64_t K, int64_t ldy, const float *bias, int nt) {
    const acts a = acts_at((void *)x, M, K);
    const int64_t G = N / 16;
#pragma omp parallel num_threads(nt) if (N * M * (K / QK) > 4096)
    {
        const int64_t tid = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t g0 = G * tid / T, g1 = G * (tid + 1) / T;
        switch (fmt & 7) {
            GEMM16_CASE(0) GEMM16_CASE(1) GEMM16_CASE(2) GEMM16_CASE(3)
            GEMM16_CASE(4) GEMM16_CASE(5) GEMM16_CASE(6) GEMM16_CASE(7)
        }
    }
}

#if defined(VEC512)
/* Four registers of 16 words (word i: row i) -> t[k] holding, in its 128-bit lane c,
 * row 4c + k's words from s[0..3] in order. */
static inline void transpose4(const __m512i s[4], __m512i t[4]) {
    const __m512i a0 = _mm512_unpacklo_epi32(s[0], s[1]);
    const __m512i a1 = _mm512_unpackhi_epi32(s[0], s[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(s[2], s[3]);
    const __m512i a3 = _mm512_unpackhi_epi32(s[2], s[3]);
    t[0] = _mm512_unpacklo_epi64(a0, a2);
    t[1] = _mm512_unpackhi_epi64(a0, a2);
    t[2] = _mm512_unpacklo_epi64(a1, a3);
    t[3] = _mm512_unpackhi_epi64(a1, a3);
}
#elif defined(VEC256)
/* Eight registers of 8 words (word i: row i) -> s[i] holding row i's words from the eight
 * in order. */
static inline void transpose8(__m256i s[8]) {
    __m256i a[8], b[8];
    for (int k = 0; k < 8; k += 2) {
        a[k] = _mm256_unpacklo_epi32(s[k], s[k + 1]);
        a[k + 1] = _mm256_unpackhi_epi32(s[k], s[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        b[k] = _mm256_unpacklo_epi64(a[k], a[k + 2]);
        b[k + 1] = _mm256_unpackhi_epi64(a[k], a[k + 2]);
        b[k + 2] = _mm256_unpacklo_epi64(a[k + 1], a[k + 3]);
        b[k + 3] = _mm256_unpackhi_epi64(a[k + 1], a[k + 3]);
    }
    for (int k = 0; k < 4; k++) {
        s[k] = _mm256_permute2x128_si256(b[k], b[k + 4], 0x20);
        s[k + 4] = _mm256_permute2x128_si256(b[k], b[k + 4], 0x31);
    }
}
#endif

/* Block b of group w's 16 rows as floats: out[i ld + j] = d q + m. */
static void g16_block_f32(wgroup_t w, int fmt, int64_t b, float *out, int64_t ld) {
#if defined(VEC512)
    /* v[0..3]: each row's words of weights 0-15 (q4: the low nibbles of its 4 words;
     * q8: quads 0-3), v[4..7]: of weights 16-31 (the high nibbles; quads 4-7) */
    __m512i v[8];
    if (fmt & FMT_Q8) {
        for (int u = 0; u < 8; u++) v[u] = _mm512_loadu_si512(w.q + b * 512 + 64 * u);
    } else {
        const __m512i low = _mm512_set1_epi8(0x0f);
        for (int p = 0; p < 4; p++) {
            const __m512i raw = _mm512_loadu_si512(w.q + b * 256 + 64 * p);
            v[p] = _mm512_and_si512(raw, low);
            v[p + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        }
    }
    const __m512 dv = scales16(w.d, fmt, b);
    const float implied = fmt & FMT_Q8 ? -128.0f : -8.0f;
    const __m512 mv =
        fmt & FMT_M ? scales16(w.m, fmt, b) : _mm512_mul_ps(dv, _mm512_set1_ps(implied));
    float ds[16], ms[16];
    _mm512_storeu_ps(ds, dv);
    _mm512_storeu_ps(ms, mv);
    for (int half = 0; half < 2; half++) {
        __m512i t[4];
        transpose4(v + 4 * half, t);
        for (int k = 0; k < 4; k++) {
            const __m128i lanes[4] = {
                _mm512_extracti32x4_epi32(t[k], 0), _mm512_extracti32x4_epi32(t[k], 1),
                _mm512_extracti32x4_epi32(t[k], 2), _mm512_extracti32x4_epi32(t[k], 3)};
            for (int c = 0; c < 4; c++) {
                const int i = 4 * c + k;
                const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lanes[c]));
                const __m512 y = _mm512_fmadd_ps(f, _mm512_set1_ps(ds[i]), _mm512_set1_ps(ms[i]));
                _mm512_storeu_ps(out + i * ld + 16 * half, y);
            }
        }
    }
#elif defined(VEC256)
    /* per half of 8 rows, v[u]: each row's word of quad u (q4: the low nibbles of quad u
     * < 4, the high ones of quad u - 4), transposed into each row's 32 quants in order;
     * d q + m rounded twice, as the row layout's plain C (no fused multiply-add) */
    const float implied = fmt & FMT_Q8 ? -128.0f : -8.0f;
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int half = 0; half < 2; half++) {
        __m256i v[8];
        if (fmt & FMT_Q8) {
            for (int u = 0; u < 8; u++)
                v[u] = _mm256_loadu_si256((const __m256i *)(w.q + b * 512 + 64 * u + 32 * half));
        } else {
            for (int p = 0; p < 4; p++) {
                const __m256i raw =
                    _mm256_loadu_si256((const __m256i *)(w.q + b * 256 + 64 * p + 32 * half));
                v[p] = _mm256_and_si256(raw, low);
                v[p + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            }
        }
        transpose8(v);
        const __m256 dv = scales8(w.d, fmt, b, half);
        const __m256 mv =
            fmt & FMT_M ? scales8(w.m, fmt, b, half) : _mm256_mul_ps(dv, _mm256_set1_ps(implied));
        float ds[8], ms[8];
        _mm256_storeu_ps(ds, dv);
        _mm256_storeu_ps(ms, mv);
        for (int r = 0; r < 8; r++) {
            const __m128i lanes[2] = {_mm256_castsi256_si128(v[r]), _mm256_extracti128_si256(v[r], 1)};
            const __m256 d = _mm256_set1_ps(ds[r]), m = _mm256_set1_ps(ms[r]);
            float *dst = out + (8 * half + r) * ld;
            for (int c = 0; c < 4; c++) {
                const __m128i q8 = c & 1 ? _mm_srli_si128(lanes[c >> 1], 8) : lanes[c >> 1];
                const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8));
                _mm256_storeu_ps(dst + 8 * c, _mm256_add_ps(_mm256_mul_ps(f, d), m));
            }
        }
    }
#else
    for (int i = 0; i < 16; i++) {
        const float d = g16_scale(w, fmt, b, i), m = g16_offset(w, fmt, b, i);
        for (int j = 0; j < QK; j++) out[i * ld + j] = d * (float)g16_quant(w, fmt, b, i, j) + m;
    }
#endif
}

/* aug_dequant for FMT_G16 weights: [N, K] float32 (out_kind 0) or bf16 (1). */
void aug_dequant16(const void *w, int fmt, int64_t N, int64_t K, void *out, int out_kind,
                   int nt) {
    const int64_t nb = K / QK, group_bytes = 16 * nb * block_bytes(fmt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t g = 0; g < N / 16; g++) {
        const wgroup_t wg = wgroup_at((const uint8_t *)w + g * group_bytes, fmt, nb);
        float rows[16][QK];
        for (int64_t b = 0; b < nb; b++) {
            if (out_kind == 0) {
                g16_block_f32(wg, fmt, b, (float *)out + 16 * g * K + b * QK, K);
                continue;
            }
            g16_block_f32(wg, fmt, b, rows[0], QK);
            for (int i = 0; i < 16; i++) {
                uint16_t *dst = (uint16_t *)out + (16 * g + i) * K + b * QK;
#pragma omp simd
                for (int j = 0; j < QK; j++) dst[j] = f32_to_bf16(rows[i][j]);
            }
        }
    }
}
