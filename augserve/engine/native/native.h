/* augserve's CPU kernels for quantized decoding (augserve/engine/native/__init__.py).
 *
 * Weight-only quantized matrix products on int8-quantized activations (integer dot
 * products: AVX-512 VNNI, AVX-VNNI or AVX2, else plain C), and the pieces of a
 * Llama-family decode step around them (RMSNorm, rotary, the KV write, attention over
 * the paged cache in place, SiLU-and-multiply), so that one call runs every layer of a
 * decode step. gemm.c, attention.c and decode.c are compiled together on first use by
 * build.py (cc -O3 -march=native -fopenmp) and called through ctypes; torch's libgomp is
 * already loaded, so OpenMP here is torch's.
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
 * FMT_G16: the same bytes with rows grouped by 16 (N a multiple of 16; gemm16.c): group g
 * (rows 16g .. 16g + 15, 16 rows' bytes) holds d[nb][16], then m[nb][16] if stored, then
 * block by block the quants, 16 rows x 4 bytes at a time: q4, for p < 4, each row's bytes
 * 4p .. 4p + 3 of its block (low nibbles: weights 4p .. 4p + 3, high: 16 + 4p ..); q8,
 * for u < 8, each row's weights 4u .. 4u + 3.
 * Activations, M rows (acts_bytes): int8 q[M][K]; float d[M][nb], s[M][nb], d8[M][nb][8]
 * and z8[M][nb][8]; int32 isum[M][nb]: x ~ d q per block, |q| <= 127, isum = sum(q),
 * s = d isum; d8 holds d and z8 s / 8 once per lane of a block's 8-lane dot product. A
 * block's product is then d_x (d_w sum(q_w q_x) + m_w sum(q_x)) = d_w d_x dot + m_w s_x,
 * summed over the lanes as sum_lanes (d_w d8 dot_lane + m_w z8) in the row layout; the
 * grouped one (gemm16.c) folds an implied offset into the integer sum (dot - 8 isum for
 * q4, dot - 128 isum for q8).
 */
/* Shared by the native kernels' translation units (gemm.c, gemm16.c, attention.c, decode.c):
 * the formats, the activations' layout and small inline helpers. */
#ifndef AUGSERVE_NATIVE_H
#define AUGSERVE_NATIVE_H

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
typedef struct { int8_t *q; float *d, *s, *d8, *z8; int32_t *isum; } acts;

static inline int64_t acts_bytes(int64_t M, int64_t K) { return M * K + M * (K / QK) * 4 * 19; }

static inline acts acts_at(void *base, int64_t M, int64_t K) {
    const int64_t nb = K / QK;
    acts a;
    a.q = (int8_t *)base;
    a.d = (float *)((char *)base + M * K);
    a.s = a.d + M * nb;
    a.d8 = a.s + M * nb;
    a.z8 = a.d8 + M * nb * 8;
    a.isum = (int32_t *)(a.z8 + M * nb * 8);
    return a;
}

/* ---- weight formats ---------------------------------------------------------------- */
enum { FMT_Q8 = 1, FMT_F16 = 2, FMT_M = 4, FMT_G16 = 8 };

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

/* ---- rows grouped by 16 (FMT_G16) ------------------------------------------------ */
typedef struct { const uint8_t *d, *m, *q; } wgroup_t;

static inline wgroup_t wgroup_at(const uint8_t *g, int fmt, int64_t nb) {
    const int64_t sb = fmt & FMT_F16 ? 2 : 4;
    wgroup_t w;
    w.d = g;
    w.m = fmt & FMT_M ? g + 16 * sb * nb : NULL;
    w.q = g + 16 * sb * nb * (fmt & FMT_M ? 2 : 1);
    return w;
}

/* Row i's quant j (0..31) of block b. */
static inline int g16_quant(wgroup_t w, int fmt, int64_t b, int i, int j) {
    if (fmt & FMT_Q8) return w.q[b * 512 + (j >> 2) * 64 + i * 4 + (j & 3)];
    const uint8_t byte = w.q[b * 256 + ((j & 15) >> 2) * 64 + i * 4 + (j & 3)];
    return j < 16 ? byte & 15 : byte >> 4;
}

static inline float g16_scale(wgroup_t w, int fmt, int64_t b, int i) {
    return scale_at(w.d, fmt, b * 16 + i);
}

static inline float g16_offset(wgroup_t w, int fmt, int64_t b, int i) {
    if (fmt & FMT_M) return scale_at(w.m, fmt, b * 16 + i);
    return g16_scale(w, fmt, b, i) * (fmt & FMT_Q8 ? -128.0f : -8.0f);
}

static inline void store_row(void *cache, int kind, int64_t at, const float *src, int D) {
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

/* exported functions one unit calls in another */
void aug_quantize_rows(const float *x, int64_t M, int64_t K, int64_t ldx, void *out);
void aug_quantize_row(const float *v, int64_t K, acts a, int64_t r);
void aug_gemm(const void *w, int fmt, const void *x, float *y, int64_t M, int64_t N,
              int64_t K, int64_t ldy, const float *bias, int nt);
void aug_gemm16(const void *w, int fmt, const void *x, float *y, int64_t M, int64_t N,
                int64_t K, int64_t ldy, const float *bias, int nt);
void aug_dequant16(const void *w, int fmt, int64_t N, int64_t K, void *out, int out_kind,
                   int nt);
void aug_rmsnorm(const float *x, const float *w, float *y, int64_t M, int64_t D, float eps);
void aug_attn_decode(const float *q, const void *kc, const void *vc, int kind,
                     const int64_t *tables, int64_t tstride, const int64_t *lens, float *out,
                     int64_t B, int H, int KVH, int D, int bs, float scale, int nt);

#endif
