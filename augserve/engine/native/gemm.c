/* Quantized weight rows times int8-quantized activations (native.h: the formats). */
#include "native.h"

int aug_abi_version(void) { return 10; }

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

int64_t aug_acts_bytes(int64_t M, int64_t K) { return acts_bytes(M, K); }

/* Row r of x (K floats at v) into the activations `a` of M rows: int8 per block of 32. */
void aug_quantize_row(const float *v, int64_t K, acts a, int64_t r) {
    const int64_t nb = K / QK;
    for (int64_t b = 0; b < nb; b++) {
        const float *vb = v + b * QK;
        int8_t *q = a.q + r * K + b * QK;
        float amax = 0.0f;
#pragma omp simd reduction(max : amax)
        for (int j = 0; j < QK; j++) amax = maxf(amax, fabsf(vb[j]));
        const float d = amax / 127.0f;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < QK; j++) {
            const float t = minf(maxf(round_even(vb[j] * id), -127.0f), 127.0f);
            q[j] = (int8_t)(int)t;
            sum += (int)t;
        }
        const int64_t i = r * nb + b;
        a.d[i] = d;
        a.s[i] = d * (float)sum;
        a.isum[i] = sum;
        for (int j = 0; j < 8; j++) {
            a.d8[i * 8 + j] = d;
            a.z8[i * 8 + j] = a.s[i] * 0.125f;
        }
    }
}

void aug_quantize_rows(const float *x, int64_t M, int64_t K, int64_t ldx, void *out) {
    const acts a = acts_at(out, M, K);
    for (int64_t r = 0; r < M; r++) aug_quantize_row(x + r * ldx, K, a, r);
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
    if (fmt & FMT_G16) {
        aug_gemm16(w, fmt, x, y, M, N, K, ldy, bias, nt);
        return;
    }
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

/* Rows `ids` (each < N) of the weight as float32 out[n][K], every value as GGUF's own
 * dequantization computes it: (q - offset) d where offsets are implied (Q4_0, Q8_0), d q +
 * m where stored (no fused multiply-add: -ffp-contract=off). An embedding tied to a
 * quantized LM head looks its rows up here instead of holding the table twice. */
void aug_rows(const void *w, int fmt, int64_t N, int64_t K, const int64_t *ids, int64_t n,
              float *out) {
    (void)N;
    const int64_t nb = K / QK, rb = nb * block_bytes(fmt);
    const float off = fmt & FMT_Q8 ? 128.0f : 8.0f;
    for (int64_t t = 0; t < n; t++) {
        const int64_t id = ids[t];
        float *o = out + t * K;
        const wgroup_t g = wgroup_at((const uint8_t *)w + (id / 16) * 16 * rb, fmt, nb);
        const wrow_t r = wrow_at((const uint8_t *)w + id * rb, fmt, nb);
        const int i = (int)(id % 16), grouped = fmt & FMT_G16;
        for (int64_t b = 0; b < nb; b++) {
            const float d = grouped ? g16_scale(g, fmt, b, i) : scale_at(r.d, fmt, b);
            const float m = !(fmt & FMT_M) ? 0.0f
                            : grouped      ? g16_offset(g, fmt, b, i)
                                           : offset_at(r, fmt, b);
            for (int j = 0; j < QK; j++) {
                int q;
                if (grouped) q = g16_quant(g, fmt, b, i, j);
                else if (fmt & FMT_Q8) q = r.q[b * 32 + j];
                else q = j < 16 ? r.q[b * 16 + j] & 15 : r.q[b * 16 + j - 16] >> 4;
                o[b * QK + j] = fmt & FMT_M ? (float)q * d + m : ((float)q - off) * d;
            }
        }
    }
}

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
    if (fmt & FMT_G16) {
        aug_dequant16(w, fmt, N, K, out, out_kind, nt);
        return;
    }
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
