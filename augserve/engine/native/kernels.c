/* augserve's CPU kernels for quantized decoding (augserve/engine/native/__init__.py).
 *
 * Weight-only quantized matrix products on int8-quantized activations (integer dot
 * products: AVX-512 VNNI, AVX-VNNI or AVX2, else plain C), and the pieces of a
 * Llama-family decode step around them (RMSNorm, rotary, the KV write, attention over
 * the paged cache in place, SiLU-and-multiply), so that one call runs every layer of a
 * decode step. Compiled on first use by build.py (cc -O3 -march=native -fopenmp) and
 * called through ctypes; torch's libgomp is already loaded, so OpenMP here is torch's.
 *
 * Formats. A block is 32 consecutive weights of a row along K; a row of nb = K / 32
 * blocks is stored as its scales d[nb], then (if the format has them) its offsets m[nb],
 * each float16 or float32, then the quants; w = d q + m:
 *   q4: uint8 qs[16 nb], q in 0..15 the low nibble of qs[16 b + j] for j < 16 and the
 *     high nibble of qs[16 b + j - 16]; without offsets m = -8 d (GGUF's Q4_0);
 *   q8: uint8 q[32 nb], q in 0..255 (an int8 weight q' d + m' is stored as q = q' + 128,
 *     m = m' - 128 d); without offsets m = -128 d (GGUF's Q8_0).
 * `fmt` bits: FMT_Q8 (else q4), FMT_F16 (float16 scales, else float32), FMT_M (offsets
 * stored). Q4_0 is then 18 bytes a block as in the file, Q4_1 20, Q8_0 34.
 * Activations, M rows (acts_bytes): int8 q[M][K]; float d[M][nb], s[M][nb], d8[M][nb][8]
 * and z8[M][nb][8]: x ~ d q per block, |q| <= 127, s = d sum(q); d8 holds d and z8
 * s / 8 once per lane of a block's 8-lane dot product. A block's product is then
 * d_x (d_w sum(q_w q_x) + m_w sum(q_x)) = d_w d_x dot + m_w s_x, summed over the lanes
 * as sum_lanes (d_w d8 dot_lane + m_w z8).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define QK 32
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)
#define VEC512 1
#endif

int aug_abi_version(void) { return 9; }

const char *aug_isa(void) {
#if defined(VEC512)
    return "avx512-vnni";
#elif defined(__AVXVNNI__)
    return "avx-vnni";
#elif defined(__AVX2__)
    return "avx2";
#else
    return "scalar";
#endif
}

/* ---- bf16 ------------------------------------------------------------------------ */
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* min / max the compiler inlines and vectorizes (fminf / fmaxf are calls: NaN rules). */
static inline float minf(float a, float b) { return a < b ? a : b; }
static inline float maxf(float a, float b) { return a > b ? a : b; }

/* Round to nearest, ties to even (as nearbyintf in the default mode), |x| < 2^22, in a
 * form the compiler vectorizes. */
static inline float round_even(float x) { return (x + 12582912.0f) - 12582912.0f; }

/* exp(x), relative error ~1e-7 (Cephes' expf polynomial, Cody-Waite reduction), written
 * so that loops over it vectorize; x below -87 gives ~1e-38, not 0. */
static inline float exp_approx(float x) {
    x = minf(maxf(x, -87.0f), 88.0f);
    const float n = round_even(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p * r, r, r) + 1.0f;
    const int32_t e = ((int32_t)n + 127) << 23;
    float sc;
    memcpy(&sc, &e, 4);
    return p * sc;
}

/* ---- activations ------------------------------------------------------------------ */
typedef struct { int8_t *q; float *d, *s, *d8, *z8; } acts;

int64_t aug_acts_bytes(int64_t M, int64_t K) { return M * K + M * (K / QK) * 4 * 18; }

static acts acts_at(void *base, int64_t M, int64_t K) {
    const int64_t nb = K / QK;
    acts a;
    a.q = (int8_t *)base;
    a.d = (float *)((char *)base + M * K);
    a.s = a.d + M * nb;
    a.d8 = a.s + M * nb;
    a.z8 = a.d8 + M * nb * 8;
    return a;
}

void aug_quantize_rows(const float *x, int64_t M, int64_t K, int64_t ldx, void *out) {
    const int64_t nb = K / QK;
    const acts a = acts_at(out, M, K);
    for (int64_t r = 0; r < M; r++) {
        for (int64_t b = 0; b < nb; b++) {
            const float *v = x + r * ldx + b * QK;
            int8_t *q = a.q + r * K + b * QK;
            float amax = 0.0f;
#pragma omp simd reduction(max : amax)
            for (int j = 0; j < QK; j++) amax = maxf(amax, fabsf(v[j]));
            const float d = amax / 127.0f;
            const float id = d > 0.0f ? 1.0f / d : 0.0f;
            int sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < QK; j++) {
                const float t = minf(maxf(round_even(v[j] * id), -127.0f), 127.0f);
                q[j] = (int8_t)(int)t;
                sum += (int)t;
            }
            const int64_t i = r * nb + b;
            a.d[i] = d;
            a.s[i] = d * (float)sum;
            for (int j = 0; j < 8; j++) {
                a.d8[i * 8 + j] = d;
                a.z8[i * 8 + j] = a.s[i] * 0.125f;
            }
        }
    }
}

/* ---- weight formats ---------------------------------------------------------------- */
enum { FMT_Q8 = 1, FMT_F16 = 2, FMT_M = 4 };

static inline float half_to_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, f = h & 0x3ff;
    uint32_t u;
    if (e == 0) { /* zero or subnormal: f 2^-24 */
        const float v = (float)f * 5.9604644775390625e-08f;
        memcpy(&u, &v, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (f << 13);
    } else {
        u = sign | ((e + 112) << 23) | (f << 13);
    }
    float out;
    memcpy(&out, &u, 4);
    return out;
#endif
}

static inline int64_t block_bytes(int fmt) {
    const int64_t sb = fmt & FMT_F16 ? 2 : 4;
    return sb * (fmt & FMT_M ? 2 : 1) + (fmt & FMT_Q8 ? 32 : 16);
}

typedef struct { const uint8_t *d, *m, *q; } wrow_t;

static inline wrow_t wrow_at(const uint8_t *row, int fmt, int64_t nb) {
    const int64_t sb = fmt & FMT_F16 ? 2 : 4;
    wrow_t r;
    r.d = row;
    r.m = fmt & FMT_M ? row + sb * nb : NULL;
    r.q = row + sb * nb * (fmt & FMT_M ? 2 : 1);
    return r;
}

static inline float scale_at(const uint8_t *p, int fmt, int64_t b) {
    if (fmt & FMT_F16) {
        uint16_t h;
        memcpy(&h, p + 2 * b, 2);
        return half_to_f32(h);
    }
    float f;
    memcpy(&f, p + 4 * b, 4);
    return f;
}

/* The offset m of block b (stored, or implied by the format). */
static inline float offset_at(wrow_t w, int fmt, int64_t b) {
    if (fmt & FMT_M) return scale_at(w.m, fmt, b);
    return scale_at(w.d, fmt, b) * (fmt & FMT_Q8 ? -128.0f : -8.0f);
}

/* ---- one weight row against TM activation rows ------------------------------------ */
#if defined(__AVX2__)
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256i unpack_q4(const uint8_t *qs) { /* one block: 32 u8 in order */
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 8 lanes of sum(w_u8 * x_s8); q8: w up to 255, which maddubs would saturate. */
static inline __m256i dot256(__m256i w, __m256i x, int q8) {
#if defined(VEC512)
    (void)q8;
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#elif defined(__AVXVNNI__)
    (void)q8;
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, x);
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (!q8) return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
    const __m256i ws = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); /* w - 128 */
    const __m256i d = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_sign_epi8(ws, ws), _mm256_sign_epi8(x, ws)), ones);
    const __m256i sx = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), x), ones);
    return _mm256_add_epi32(d, _mm256_slli_epi32(sx, 7));
#endif
}
#endif

#if defined(VEC512)
static inline __m512i unpack2_q4(const uint8_t *qs) { /* two blocks: 64 u8 in order */
    const __m256i m = _mm256_set1_epi8(0x0f);
    const __m256i raw = _mm256_loadu_si256((const __m256i *)qs);
    const __m256i lo = _mm256_and_si256(raw, m);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m);
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
}

/* Scales b and b + 1: the first on lanes 0-7, the second on 8-15. */
static inline __m512 expand2(const uint8_t *p, int fmt, int64_t b) {
    __m128 f;
    if (fmt & FMT_F16) {
        int32_t v;
        memcpy(&v, p + 2 * b, 4);
        f = _mm_cvtph_ps(_mm_cvtsi32_si128(v));
    } else {
        double v;
        memcpy(&v, p + 4 * b, 8);
        f = _mm_castpd_ps(_mm_set_sd(v));
    }
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}
#endif

/* out[r] = the product of weight row `row` (nb blocks, format fmt) and activation rows
 * r0 + r, r < TM, over blocks [b0, b1). */
static inline __attribute__((always_inline)) void rows_dot(
    const int fmt, const int TM, const uint8_t *row, int64_t nb, acts a, int64_t r0, int64_t K,
    int64_t b0, int64_t b1, float *out) {
    const wrow_t w = wrow_at(row, fmt, nb);
    const int q8 = fmt & FMT_Q8;
    const int64_t qb = q8 ? 32 : 16; /* quant bytes a block */
#if defined(__AVX2__)
    const float implied = q8 ? -128.0f : -8.0f;
    int64_t b = b0;
    float part[8] = {0};
#if defined(VEC512)
    __m512 acc[8], accz[8]; /* two chains a row: the dot products and the offsets */
    for (int r = 0; r < TM; r++) acc[r] = accz[r] = _mm512_setzero_ps();
    for (; b + 2 <= b1; b += 2) {
        const __m512i wv = q8 ? _mm512_loadu_si512(w.q + b * 32) : unpack2_q4(w.q + b * 16);
        const __m512 dw = expand2(w.d, fmt, b);
        const __m512 mw = fmt & FMT_M ? expand2(w.m, fmt, b)
                                      : _mm512_mul_ps(dw, _mm512_set1_ps(implied));
        for (int r = 0; r < TM; r++) {
            const int64_t lane = ((r0 + r) * nb + b) * 8;
            const __m512i xv = _mm512_loadu_si512(a.q + (r0 + r) * K + b * QK);
            const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
            const __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a.d8 + lane));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
            accz[r] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a.z8 + lane), accz[r]);
        }
    }
    for (int r = 0; r < TM; r++) part[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], accz[r]));
#endif
    if (b < b1) {
        __m256 acc8[8];
        for (int r = 0; r < TM; r++) acc8[r] = _mm256_setzero_ps();
        for (; b < b1; b++) {
            const __m256i wv = q8 ? _mm256_loadu_si256((const __m256i *)(w.q + b * 32))
                                  : unpack_q4(w.q + b * 16);
            const __m256 dw = _mm256_set1_ps(scale_at(w.d, fmt, b));
            const __m256 mw = _mm256_set1_ps(offset_at(w, fmt, b));
            for (int r = 0; r < TM; r++) {
                const int64_t lane = ((r0 + r) * nb + b) * 8;
                const __m256i xv =
                    _mm256_loadu_si256((const __m256i *)(a.q + (r0 + r) * K + b * QK));
                const __m256 sc = _mm256_mul_ps(dw, _mm256_loadu_ps(a.d8 + lane));
                acc8[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot256(wv, xv, q8)), sc, acc8[r]);
                acc8[r] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(a.z8 + lane), acc8[r]);
            }
        }
        for (int r = 0; r < TM; r++) part[r] += hsum8(acc8[r]);
    }
    (void)qb;
    (void)implied;
    for (int r = 0; r < TM; r++) out[r] = part[r];
#else
    for (int r = 0; r < TM; r++) {
        const int64_t row_i = r0 + r;
        float acc = 0.0f;
        for (int64_t b = b0; b < b1; b++) {
            const int8_t *x = a.q + row_i * K + b * QK;
            const uint8_t *q = w.q + b * qb;
            int dot = 0;
            if (q8) {
                for (int j = 0; j < QK; j++) dot += q[j] * x[j];
            } else {
                for (int j = 0; j < 16; j++) dot += (q[j] & 15) * x[j] + (q[j] >> 4) * x[j + 16];
            }
            acc += scale_at(w.d, fmt, b) * a.d[row_i * nb + b] * (float)dot +
                   offset_at(w, fmt, b) * a.s[row_i * nb + b];
        }
        out[r] = acc;
    }
#endif
}

/* y[r, n] = sum_k w[n, k] x[r, k] (+ bias[n]), r < M, n < N; rows of y ldy apart.
 * fmt: the rows' format; x: activations quantized by aug_quantize_rows. Each thread
 * takes a range of n; K is walked in chunks of KCHUNK blocks, so that the chunk of every
 * activation row stays in L1 while the thread's weight rows stream past it. */
#define KCHUNK 32

static inline __attribute__((always_inline)) void gemm_rows(
    const int fmt, const uint8_t *w, acts a, float *y, int64_t M, int64_t n0, int64_t n1,
    int64_t K, int64_t ldy, const float *bias) {
    const int64_t nb = K / QK, row_bytes = nb * block_bytes(fmt);
    float out[8];
    const int64_t chunk = M > 2 ? KCHUNK : nb; /* one or two rows: always in L1 */
    for (int64_t c0 = 0; c0 < nb; c0 += chunk) {
        const int64_t c1 = c0 + chunk < nb ? c0 + chunk : nb;
        for (int64_t n = n0; n < n1; n++) {
            const uint8_t *wr = w + n * row_bytes;
            const float bn = c0 > 0 ? 0.0f : (bias ? bias[n] : 0.0f);
            int64_t r = 0;
            for (; r + 8 <= M; r += 8) {
                rows_dot(fmt, 8, wr, nb, a, r, K, c0, c1, out);
                for (int i = 0; i < 8; i++)
                    y[(r + i) * ldy + n] = (c0 ? y[(r + i) * ldy + n] : 0.0f) + out[i] + bn;
            }
            for (; r + 4 <= M; r += 4) {
                rows_dot(fmt, 4, wr, nb, a, r, K, c0, c1, out);
                for (int i = 0; i < 4; i++)
                    y[(r + i) * ldy + n] = (c0 ? y[(r + i) * ldy + n] : 0.0f) + out[i] + bn;
            }
            for (; r < M; r++) {
                rows_dot(fmt, 1, wr, nb, a, r, K, c0, c1, out);
                y[r * ldy + n] = (c0 ? y[r * ldy + n] : 0.0f) + out[0] + bn;
            }
        }
    }
}

#define GEMM_CASE(F) \
    case F: gemm_rows(F, (const uint8_t *)w, a, y, M, n0, n1, K, ldy, bias); break;

void aug_gemm(const void *w, int fmt, const void *x, float *y, int64_t M, int64_t N,
              int64_t K, int64_t ldy, const float *bias, int nt) {
    const acts a = acts_at((void *)x, M, K);
#pragma omp parallel num_threads(nt) if (N * M * (K / QK) > 4096)
    {
        const int64_t tid = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t n0 = N * tid / T, n1 = N * (tid + 1) / T;
        switch (fmt & 7) {
            GEMM_CASE(0) GEMM_CASE(1) GEMM_CASE(2) GEMM_CASE(3)
            GEMM_CASE(4) GEMM_CASE(5) GEMM_CASE(6) GEMM_CASE(7)
        }
    }
}

int64_t aug_row_bytes(int fmt, int64_t K) { return K / QK * block_bytes(fmt); }

/* One block of a weight row as 32 floats. */
static inline void block_f32(wrow_t wr, int fmt, int64_t b, float *row) {
    const float d = scale_at(wr.d, fmt, b), m = offset_at(wr, fmt, b);
#if defined(VEC512)
    __m128i q0, q1; /* values 0-15 and 16-31 as bytes */
    if (fmt & FMT_Q8) {
        q0 = _mm_loadu_si128((const __m128i *)(wr.q + b * 32));
        q1 = _mm_loadu_si128((const __m128i *)(wr.q + b * 32 + 16));
    } else {
        const __m128i raw = _mm_loadu_si128((const __m128i *)(wr.q + b * 16));
        const __m128i mask = _mm_set1_epi8(0x0f);
        q0 = _mm_and_si128(raw, mask);
        q1 = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
    }
    const __m512 vd = _mm512_set1_ps(d), vm = _mm512_set1_ps(m);
    _mm512_storeu_ps(row, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q0)), vd, vm));
    _mm512_storeu_ps(row + 16,
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q1)), vd, vm));
#else
    for (int j = 0; j < QK; j++) {
        const int q = fmt & FMT_Q8 ? wr.q[b * 32 + j]
                                   : (j < 16 ? wr.q[b * 16 + j] & 15 : wr.q[b * 16 + j - 16] >> 4);
        row[j] = d * (float)q + m;
    }
#endif
}

/* The weight [N, K] as float32 (out_kind 0) or bf16 (out_kind 1), for prefill-sized
 * products. */
void aug_dequant(const void *w, int fmt, int64_t N, int64_t K, void *out, int out_kind, int nt) {
    const int64_t nb = K / QK, row_bytes = nb * block_bytes(fmt);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const wrow_t wr = wrow_at((const uint8_t *)w + n * row_bytes, fmt, nb);
        float row[QK];
        for (int64_t b = 0; b < nb; b++) {
            const int64_t at = n * K + b * QK;
            if (out_kind == 0) {
                block_f32(wr, fmt, b, (float *)out + at);
                continue;
            }
            block_f32(wr, fmt, b, row);
            uint16_t *dst = (uint16_t *)out + at;
#pragma omp simd
            for (int j = 0; j < QK; j++) dst[j] = f32_to_bf16(row[j]);
        }
    }
}

/* ---- elementwise ------------------------------------------------------------------ */
void aug_rmsnorm(const float *x, const float *w, float *y, int64_t M, int64_t D, float eps) {
    for (int64_t r = 0; r < M; r++) {
        const float *v = x + r * D;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t j = 0; j < D; j++) ss += v[j] * v[j];
        const float inv = 1.0f / sqrtf(ss / (float)D + eps);
        for (int64_t j = 0; j < D; j++) y[r * D + j] = w[j] * (v[j] * inv);
    }
}

static void silu_mul(const float *gu, float *out, int64_t M, int64_t I) {
    for (int64_t r = 0; r < M; r++) {
        const float *g = gu + r * 2 * I, *u = g + I;
#pragma omp simd
        for (int64_t j = 0; j < I; j++) out[r * I + j] = g[j] / (1.0f + exp_approx(-g[j])) * u[j];
    }
}

/* Neox rotary of n heads of D dims in place: pairs (i, i + D/2); cos/sin rows of D/2. */
static void rope_neox(float *x, int n, int D, const float *cs, const float *sn) {
    const int h = D / 2;
    for (int k = 0; k < n; k++) {
        float *v = x + (int64_t)k * D;
        for (int i = 0; i < h; i++) {
            const float a = v[i], b = v[i + h];
            v[i] = a * cs[i] - b * sn[i];
            v[i + h] = b * cs[i] + a * sn[i];
        }
    }
}

static void store_row(void *cache, int kind, int64_t at, const float *src, int D) {
    if (kind == 0) {
        memcpy((float *)cache + at, src, (size_t)D * 4);
    } else {
        uint16_t *dst = (uint16_t *)cache + at;
        for (int j = 0; j < D; j++) dst[j] = f32_to_bf16(src[j]);
    }
}

static inline void load_row(const void *cache, int kind, int64_t at, float *dst, int D) {
    if (kind == 0) {
        memcpy(dst, (const float *)cache + at, (size_t)D * 4);
    } else {
        const uint16_t *src = (const uint16_t *)cache + at;
#pragma omp simd
        for (int j = 0; j < D; j++) dst[j] = bf16_to_f32(src[j]);
    }
}

/* Where token t's row of KV head kh starts in a [blocks, bs, KVH, D] cache. */
static inline int64_t row_at(const int64_t *tab, int64_t t, int bs, int KVH, int kh, int D) {
    const int64_t blk = bs == 16 ? t >> 4 : t / bs, slot = t - blk * bs;
    return ((tab[blk] * bs + slot) * KVH + kh) * D;
}

/* ---- decode attention over the paged cache, in place ---------------------------------
 * q [B, H, D] -> out [B, H, D]; cache [blocks, bs, KVH, D] (kind 0 float32, 1 bf16);
 * tables [B, tstride] block ids, lens [B] context lengths (the new token included).
 * Work is split into chunks of a sequence's context (flash-decoding), so that one long
 * sequence still occupies every thread; each chunk reads a token's rows of all KV heads
 * at once (contiguous in the cache) and leaves its unnormalized partial (max, sum,
 * weighted values) per head; a merge per sequence combines the chunks. */
static void attend_chunk(const float *qb, const void *kc, const void *vc, int kind,
                         const int64_t *tab, int64_t t0, int64_t t1, int H, int KVH, int D,
                         int bs, float scale, float *m, float *l, float *acc) {
    const int g = H / KVH;
    const int64_t n = t1 - t0, width = (int64_t)KVH * D;
    float *sc = (float *)malloc(sizeof(float) * (size_t)(H * n + width));
    float *row = sc + H * n;
    for (int64_t t = t0; t < t1; t++) {
        load_row(kc, kind, row_at(tab, t, bs, KVH, 0, D), row, (int)width);
        for (int h = 0; h < H; h++) {
            const float *qh = qb + (int64_t)h * D, *kr = row + (int64_t)(h / g) * D;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int j = 0; j < D; j++) s += qh[j] * kr[j];
            sc[h * n + (t - t0)] = s * scale;
        }
    }
    for (int h = 0; h < H; h++) {
        float *sh = sc + h * n, mx = -INFINITY, sum = 0.0f;
        for (int64_t t = 0; t < n; t++) mx = maxf(mx, sh[t]);
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < n; t++) {
            sh[t] = exp_approx(sh[t] - mx);
            sum += sh[t];
        }
        m[h] = mx;
        l[h] = sum;
    }
    memset(acc, 0, sizeof(float) * (size_t)(H * D));
    for (int64_t t = t0; t < t1; t++) {
        load_row(vc, kind, row_at(tab, t, bs, KVH, 0, D), row, (int)width);
        for (int h = 0; h < H; h++) {
            const float p = sc[h * n + (t - t0)], *vr = row + (int64_t)(h / g) * D;
            float *ah = acc + (int64_t)h * D;
#pragma omp simd
            for (int j = 0; j < D; j++) ah[j] += p * vr[j];
        }
    }
    free(sc);
}

void aug_attn_decode(const float *q, const void *kc, const void *vc, int kind,
                     const int64_t *tables, int64_t tstride, const int64_t *lens, float *out,
                     int64_t B, int H, int KVH, int D, int bs, float scale, int nt) {
    int64_t longest = 1, rows = 0;
    for (int64_t b = 0; b < B; b++) {
        longest = lens[b] > longest ? lens[b] : longest;
        rows += lens[b];
    }
    /* chunks: enough tasks for the threads (2 a thread), none under 128 tokens */
    const int64_t per_seq = B >= 2 * nt ? 1 : (2 * nt + B - 1) / B;
    int64_t chunk = (longest + per_seq - 1) / per_seq;
    chunk = chunk < 128 ? 128 : chunk;
    int64_t *first = (int64_t *)malloc(sizeof(int64_t) * (size_t)(B + 1));
    first[0] = 0;
    for (int64_t b = 0; b < B; b++) first[b + 1] = first[b] + (lens[b] + chunk - 1) / chunk;
    const int64_t tasks = first[B], part = (int64_t)H * (D + 2);
    float *parts = (float *)malloc(sizeof(float) * (size_t)(tasks * part));
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (tasks > 1 && rows * KVH > 2048)
    for (int64_t task = 0; task < tasks; task++) {
        int64_t b = 0;
        while (first[b + 1] <= task) b++;
        const int64_t c = task - first[b], t0 = c * chunk;
        const int64_t t1 = t0 + chunk < lens[b] ? t0 + chunk : lens[b];
        float *p = parts + task * part;
        attend_chunk(q + b * H * D, kc, vc, kind, tables + b * tstride, t0, t1, H, KVH, D, bs,
                     scale, p, p + H, p + 2 * H);
    }
    for (int64_t b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            float mx = -INFINITY, sum = 0.0f;
            for (int64_t t = first[b]; t < first[b + 1]; t++) mx = maxf(mx, parts[t * part + h]);
            float *o = out + (b * H + h) * D;
            memset(o, 0, sizeof(float) * (size_t)D);
            for (int64_t t = first[b]; t < first[b + 1]; t++) {
                const float *p = parts + t * part;
                const float w = exp_approx(p[h] - mx), *a = p + 2 * H + (int64_t)h * D;
                sum += w * p[H + h];
#pragma omp simd
                for (int j = 0; j < D; j++) o[j] += w * a[j];
            }
            const float inv = 1.0f / sum;
            for (int j = 0; j < D; j++) o[j] *= inv;
        }
    }
    free(parts);
    free(first);
}

/* ---- a Llama-family decode step ---------------------------------------------------- */
typedef struct {
    const void *w;
    int32_t fmt; /* FMT_* bits */
    int32_t n, k;
    const float *bias; /* [n] or NULL */
} qmat;

typedef struct {
    qmat qkv, o, gate_up, down;
    const float *in_norm, *post_norm;
    void *kc, *vc;
} llama_layer;

typedef struct {
    int32_t n_layers, hidden, heads, kv_heads, head_dim, inter, block_size, cache_kind;
    float eps, scale;
    const float *cos_t, *sin_t; /* [max_len, head_dim / 2] */
    const float *final_norm;
    const llama_layer *layers;
} llama_model;

static void qmatmul(const qmat *m, const void *xa, float *y, int64_t M, int nt) {
    aug_gemm(m->w, m->fmt, xa, y, M, m->n, m->k, m->n, m->bias, nt);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Bytes of scratch `aug_llama_decode` needs for B sequences. */
int64_t aug_llama_workspace(const llama_model *md, int64_t B) {
    const int64_t hid = md->hidden, I = md->inter, hd = (int64_t)md->heads * md->head_dim;
    const int64_t qkv = (int64_t)(md->heads + 2 * md->kv_heads) * md->head_dim;
    const int64_t widest = max64(max64(hid, hd), I);
    const int64_t floats = B * (max64(hid, hd) + qkv + 2 * hd + 2 * I + I + hid);
    return floats * 4 + aug_acts_bytes(B, widest) + 64;
}

/* One decode step of B sequences through every layer. x [B, hidden] float32 holds the
 * input embeddings and is the residual stream; out [B, hidden] receives the final norm
 * of it. Writes each sequence's new K/V at slots[b]. */
void aug_llama_decode(const llama_model *md, float *x, int64_t B, const int64_t *positions,
                      const int64_t *tables, int64_t tstride, const int64_t *lens,
                      const int64_t *slots, float *out, void *work, int nt) {
    const int hid = md->hidden, H = md->heads, KVH = md->kv_heads, D = md->head_dim;
    const int64_t I = md->inter, qkvn = (int64_t)(H + 2 * KVH) * D, hd = (int64_t)H * D;
    float *h = (float *)work, *qkv = h + B * max64(hid, hd), *q = qkv + B * qkvn;
    float *ao = q + B * hd, *gu = ao + B * hd, *act = gu + B * 2 * I, *tmp = act + B * I;
    void *xa = (void *)(tmp + B * hid);
    for (int l = 0; l < md->n_layers; l++) {
        const llama_layer *L = md->layers + l;
        aug_rmsnorm(x, L->in_norm, h, B, hid, md->eps);
        aug_quantize_rows(h, B, hid, hid, xa);
        qmatmul(&L->qkv, xa, qkv, B, nt);
        for (int64_t b = 0; b < B; b++) {
            float *r = qkv + b * qkvn;
            const float *cs = md->cos_t + positions[b] * (D / 2);
            const float *sn = md->sin_t + positions[b] * (D / 2);
            rope_neox(r, H + KVH, D, cs, sn);
            for (int kh = 0; kh < KVH; kh++) {
                const int64_t at = (slots[b] * KVH + kh) * D;
                store_row(L->kc, md->cache_kind, at, r + (int64_t)(H + kh) * D, D);
                store_row(L->vc, md->cache_kind, at, r + (int64_t)(H + KVH + kh) * D, D);
            }
            memcpy(q + b * hd, r, sizeof(float) * (size_t)hd);
        }
        aug_attn_decode(q, L->kc, L->vc, md->cache_kind, tables, tstride, lens, ao, B, H, KVH, D,
                        md->block_size, md->scale, nt);
        aug_quantize_rows(ao, B, hd, hd, xa);
        qmatmul(&L->o, xa, tmp, B, nt);
        for (int64_t i = 0; i < B * hid; i++) x[i] += tmp[i];
        aug_rmsnorm(x, L->post_norm, h, B, hid, md->eps);
        aug_quantize_rows(h, B, hid, hid, xa);
        qmatmul(&L->gate_up, xa, gu, B, nt);
        silu_mul(gu, act, B, I);
        aug_quantize_rows(act, B, I, I, xa);
        qmatmul(&L->down, xa, tmp, B, nt);
        for (int64_t i = 0; i < B * hid; i++) x[i] += tmp[i];
    }
    aug_rmsnorm(x, md->final_norm, out, B, hid, md->eps);
}
