/* Decode attention over the paged KV cache, in place: a plain-C chunk kernel for any
 * head size and ISA, an AVX-512 one for head sizes 32, 64 and 128, and an AVX2 one for
 * head sizes that are multiples of 8. */
#include "native.h"

/* ---- decode attention over the paged cache, in place ---------------------------------
 * q [B, H, D] -> out [B, H, D]; cache [blocks, bs, KVH, D] (kind 0 float32, 1 bf16);
 * tables [B, tstride] block ids, lens [B] context lengths (the new token included).
 * Work is split into chunks of a sequence's context (flash-decoding), so that one long
 * sequence still occupies every thread; each chunk reads a token's rows of all KV heads
 * at once (contiguous in the cache) and leaves its unnormalized partial (max, sum,
 * weighted values) per head; a merge per sequence combines the chunks. */
/* Row offsets (all KV heads) of tokens t, t+1, ... of one sequence, a block table walked
 * without a division per token. */
typedef struct { const int64_t *tab; int64_t blk, slot, width; int bs; } rows_t;

static inline rows_t rows_from(const int64_t *tab, int64_t t, int bs, int64_t width) {
    rows_t r = {tab, t / bs, t % bs, width, bs};
    return r;
}

static inline int64_t rows_next(rows_t *r) {
    const int64_t at = (r->tab[r->blk] * r->bs + r->slot) * r->width;
    if (++r->slot == r->bs) {
        r->slot = 0;
        r->blk++;
    }
    return at;
}

/* Each head's scores sc[h * stride + t], t < n, become exp(score - max) in place; m[h]
 * and l[h] get the max and the sum (the chunk's partial softmax). */
static void softmax_rows(float *sc, int64_t stride, int64_t n, int H, float *m, float *l) {
    for (int h = 0; h < H; h++) {
        float *sh = sc + h * stride, mx = -INFINITY, sum = 0.0f;
        for (int64_t t = 0; t < n; t++) mx = maxf(mx, sh[t]);
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < n; t++) {
            sh[t] = exp_approx(sh[t] - mx);
            sum += sh[t];
        }
        m[h] = mx;
        l[h] = sum;
    }
}

static void attend_chunk(const float *qb, const void *kc, const void *vc, int kind,
                         const int64_t *tab, int64_t t0, int64_t t1, int H, int KVH, int D,
                         int bs, float scale, float *m, float *l, float *acc) {
    const int g = H / KVH;
    const int64_t n = t1 - t0, width = (int64_t)KVH * D;
    float *sc = (float *)malloc(sizeof(float) * (size_t)(H * n + width));
    float *row = sc + H * n;
    rows_t krows = rows_from(tab, t0, bs, width);
    for (int64_t t = t0; t < t1; t++) {
        load_row(kc, kind, rows_next(&krows), row, (int)width);
        for (int h = 0; h < H; h++) {
            const float *qh = qb + (int64_t)h * D, *kr = row + (int64_t)(h / g) * D;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int j = 0; j < D; j++) s += qh[j] * kr[j];
            sc[h * n + (t - t0)] = s * scale;
        }
    }
    softmax_rows(sc, n, n, H, m, l);
    memset(acc, 0, sizeof(float) * (size_t)(H * D));
    rows_t vrows = rows_from(tab, t0, bs, width);
    for (int64_t t = t0; t < t1; t++) {
        load_row(vc, kind, rows_next(&vrows), row, (int)width);
        for (int h = 0; h < H; h++) {
            const float p = sc[h * n + (t - t0)], *vr = row + (int64_t)(h / g) * D;
            float *ah = acc + (int64_t)h * D;
#pragma omp simd
            for (int j = 0; j < D; j++) ah[j] += p * vr[j];
        }
    }
    free(sc);
}

#if defined(__AVX2__) /* the AVX2 and AVX-512 tiles prefetch */
/* Rows are fetched this many tokens ahead: a sequence's blocks are scattered, so the
 * hardware prefetchers lose the stream at every block (and 4 KB page) boundary. */
#define PF 32

static inline void prefetch_row(const void *cache, int64_t at, int esz, int bytes) {
    const char *r = (const char *)cache + at * esz;
    for (int o = 0; o < bytes; o += 64) _mm_prefetch(r + o, _MM_HINT_T0);
}
#endif

#if defined(__AVX512F__) && !defined(AUG_ATTN_PLAIN) /* PLAIN: benchmarks time the other */
#define AUG_ATTN16 1
/* ---- AVX-512: 16 tokens' scores at once ----------------------------------------------
 * A score is a dot product over D; reducing each one across a vector's lanes costs more
 * than its multiplies at D = 32-128. Here the lane-wise partial products of 16 tokens
 * are reduced together (a transpose-and-add tree: 16 dot products for ~45 shuffles and
 * adds), and the weighted sum of V keeps a token's row in registers for the g query
 * heads that share it. Needs D % 16 == 0. */
static inline __m512 hsum16(const __m512 *v) {
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int j = 0; j < 4; j++)
        u[j] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * j], t[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t[2 * j], t[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 y0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 y1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(y0, y1, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(y0, y1, _MM_SHUFFLE(3, 1, 3, 1)));
}

static inline __attribute__((always_inline)) __m512 load16(const void *cache, int kind,
                                                           int64_t at) {
    if (kind == 0) return _mm512_loadu_ps((const float *)cache + at);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)cache + at));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Scores of up to 16 tokens (rows at[0..k)) for every head, scaled, into sc[h * n16 + s]:
 * per token a KV head's row is loaded once for the g query heads that share it; each
 * head's 16 lane-wise partials are then reduced together. NC = D / 16, a constant. */
static inline __attribute__((always_inline)) void scores16(
    const float *qb, const void *kc, int kind, const int64_t *at, int k, int H, int KVH,
    int NC, float scale, __m512 *part, float *sc, int64_t n16, int64_t s) {
    const int g = H / KVH, D = 16 * NC;
    for (int i = 0; i < k; i++) {
        for (int kh = 0; kh < KVH; kh++) {
            __m512 kr[8];
            for (int c = 0; c < NC; c++) kr[c] = load16(kc, kind, at[i] + kh * D + 16 * c);
            for (int h = kh * g; h < (kh + 1) * g; h++) {
                __m512 d = _mm512_mul_ps(_mm512_loadu_ps(qb + h * D), kr[0]);
                for (int c = 1; c < NC; c++)
                    d = _mm512_fmadd_ps(_mm512_loadu_ps(qb + h * D + 16 * c), kr[c], d);
                part[h * 16 + i] = d;
            }
        }
    }
    for (int h = 0; h < H; h++) {
        for (int i = k; i < 16; i++) part[h * 16 + i] = _mm512_setzero_ps();
        _mm512_store_ps(sc + h * n16 + s,
                        _mm512_mul_ps(hsum16(part + h * 16), _mm512_set1_ps(scale)));
    }
}

/* acc[h] = sum_t p[h][t] v_t for the GS heads h0.. of KV head kh, accumulators in
 * registers (GS * NC of them, both constants). */
static inline __attribute__((always_inline)) void weigh16(
    const void *vc, int kind, const int64_t *tab, int64_t t0, int64_t n, int bs, int KVH,
    int kh, int h0, int GS, int NC, const float *sc, int64_t n16, float *acc) {
    const int D = 16 * NC;
    __m512 a[16];
    for (int j = 0; j < GS * NC; j++) a[j] = _mm512_setzero_ps();
    rows_t rows = rows_from(tab, t0, bs, (int64_t)KVH * D);
    rows_t ahead = rows_from(tab, t0 + PF, bs, (int64_t)KVH * D);
    const int esz = kind == 0 ? 4 : 2;
    for (int64_t t = 0; t < n; t++) {
        const int64_t at = rows_next(&rows) + (int64_t)kh * D;
        if (t + PF < n) prefetch_row(vc, rows_next(&ahead) + (int64_t)kh * D, esz, D * esz);
        __m512 vr[8];
        for (int c = 0; c < NC; c++) vr[c] = load16(vc, kind, at + 16 * c);
        for (int h = 0; h < GS; h++) {
            const __m512 p = _mm512_set1_ps(sc[(h0 + h) * n16 + t]);
            for (int c = 0; c < NC; c++) a[h * NC + c] = _mm512_fmadd_ps(p, vr[c], a[h * NC + c]);
        }
    }
    for (int h = 0; h < GS; h++)
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(acc + (h0 + h) * D + 16 * c, a[h * NC + c]);
}

#define WEIGH(GS_, NC_)                                                                    \
    static void weigh_##GS_##_##NC_(const void *vc, int kind, const int64_t *tab,          \
                                    int64_t t0, int64_t n, int bs, int KVH, int kh, int h0, \
                                    const float *sc, int64_t n16, float *acc) {            \
        weigh16(vc, kind, tab, t0, n, bs, KVH, kh, h0, GS_, NC_, sc, n16, acc);            \
    }
WEIGH(1, 2) WEIGH(2, 2) WEIGH(4, 2) WEIGH(8, 2) WEIGH(1, 4) WEIGH(2, 4) WEIGH(4, 4)
WEIGH(1, 8) WEIGH(2, 8)
#undef WEIGH
typedef void (*weigh_fn)(const void *, int, const int64_t *, int64_t, int64_t, int, int, int,
                         int, const float *, int64_t, float *);

#define SCORES(NC_)                                                                        \
    static void scores_##NC_(const float *qb, const void *kc, int kind, const int64_t *at,  \
                             int k, int H, int KVH, float scale, __m512 *part, float *sc,   \
                             int64_t n16, int64_t s) {                                      \
        scores16(qb, kc, kind, at, k, H, KVH, NC_, scale, part, sc, n16, s);                \
    }
SCORES(2) SCORES(4) SCORES(8)
#undef SCORES

/* The widest head group for `g` heads left (GS <= g, GS * NC <= 16 accumulators). */
static weigh_fn pick_weigh(int g, int nc, int *gs) {
    static const weigh_fn by_nc2[4] = {weigh_1_2, weigh_2_2, weigh_4_2, weigh_8_2};
    static const weigh_fn by_nc4[3] = {weigh_1_4, weigh_2_4, weigh_4_4};
    static const weigh_fn by_nc8[2] = {weigh_1_8, weigh_2_8};
    const int most = nc == 2 ? 3 : nc == 4 ? 2 : 1;
    int e = 0;
    while (e < most && (2 << e) <= g) e++;
    *gs = 1 << e;
    return nc == 2 ? by_nc2[e] : nc == 4 ? by_nc4[e] : by_nc8[e];
}

static void attend_chunk16(const float *qb, const void *kc, const void *vc, int kind,
                           const int64_t *tab, int64_t t0, int64_t t1, int H, int KVH, int D,
                           int bs, float scale, float *m, float *l, float *acc) {
    const int g = H / KVH, nc = D / 16;
    const int64_t n = t1 - t0, n16 = (n + 15) & ~(int64_t)15;
    float *sc = (float *)aligned_alloc(64, sizeof(float) * (size_t)(H * n16));
    __m512 *part = (__m512 *)aligned_alloc(64, sizeof(__m512) * (size_t)(16 * H));
    int64_t at[16];
    rows_t rows = rows_from(tab, t0, bs, (int64_t)KVH * D);
    rows_t ahead = rows_from(tab, t0 + PF, bs, (int64_t)KVH * D);
    const int esz = kind == 0 ? 4 : 2, rowb = KVH * D * esz;
    for (int64_t s = 0; s < n; s += 16) {
        const int k = n - s < 16 ? (int)(n - s) : 16;
        for (int i = 0; i < k; i++) at[i] = rows_next(&rows);
        for (int i = 0; i < k && s + i + PF < n; i++)
            prefetch_row(kc, rows_next(&ahead), esz, rowb);
        if (nc == 2) scores_2(qb, kc, kind, at, k, H, KVH, scale, part, sc, n16, s);
        else if (nc == 4) scores_4(qb, kc, kind, at, k, H, KVH, scale, part, sc, n16, s);
        else scores_8(qb, kc, kind, at, k, H, KVH, scale, part, sc, n16, s);
    }
    softmax_rows(sc, n16, n, H, m, l);
    for (int kh = 0; kh < KVH; kh++) {
        for (int h0 = kh * g, gs = 0; h0 < (kh + 1) * g; h0 += gs) { /* 7 heads: 4, 2, 1 */
            const weigh_fn weigh = pick_weigh((kh + 1) * g - h0, nc, &gs);
            weigh(vc, kind, tab, t0, n, bs, KVH, kh, h0, sc, n16, acc);
        }
    }
    free(part);
    free(sc);
}
#endif

#if !defined(AUG_ATTN16) && defined(__AVX2__) && defined(__FMA__) && !defined(AUG_ATTN_PLAIN)
#define AUG_ATTN8 1
/* ---- AVX2: 8 tokens' scores at once (the AVX-512 tiles' scheme in 256-bit lanes) ------
 * A token's K row is loaded once for the query heads that share it; each head's lane-wise
 * partial products of 8 tokens are reduced together (an hadd tree: 8 dot products for 6
 * hadds, 2 lane permutes and an add); the weighted sum of V keeps up to 8 chunks of 8 of
 * a head's accumulator in registers. Needs D % 8 == 0. */
static inline __m256 hsum8x8(const __m256 *v) {
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20),
                         _mm256_permute2f128_ps(a, b, 0x31));
}

static inline __m256 load8(const void *cache, int kind, int64_t at) {
    if (kind == 0) return _mm256_loadu_ps((const float *)cache + at);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)cache + at));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static void attend_chunk8(const float *qb, const void *kc, const void *vc, int kind,
                          const int64_t *tab, int64_t t0, int64_t t1, int H, int KVH, int D,
                          int bs, float scale, float *m, float *l, float *acc) {
    const int g = H / KVH, nc = D / 8;
    const int64_t n = t1 - t0, n8 = (n + 7) & ~(int64_t)7, width = (int64_t)KVH * D;
    float *sc = (float *)aligned_alloc(32, sizeof(float) * (size_t)(H * n8));
    __m256 *part = (__m256 *)aligned_alloc(32, sizeof(__m256) * (size_t)(8 * H));
    const int esz = kind == 0 ? 4 : 2, rowb = (int)width * esz;
    rows_t rows = rows_from(tab, t0, bs, width), ahead = rows_from(tab, t0 + PF, bs, width);
    for (int64_t s = 0; s < n; s += 8) {
        const int k = n - s < 8 ? (int)(n - s) : 8;
        for (int i = 0; i < 8; i++) {
            if (i >= k) {
                for (int h = 0; h < H; h++) part[h * 8 + i] = _mm256_setzero_ps();
                continue;
            }
            const int64_t at = rows_next(&rows);
            if (s + i + PF < n) prefetch_row(kc, rows_next(&ahead), esz, rowb);
            for (int kh = 0; kh < KVH; kh++) {
                const int64_t kr = at + (int64_t)kh * D;
                if (nc <= 8) { /* the K row in registers for the g heads that share it */
                    __m256 k8[8];
                    for (int c = 0; c < nc; c++) k8[c] = load8(kc, kind, kr + 8 * c);
                    for (int h = kh * g; h < (kh + 1) * g; h++) {
                        const float *qh = qb + (int64_t)h * D;
                        __m256 d = _mm256_mul_ps(_mm256_loadu_ps(qh), k8[0]);
                        for (int c = 1; c < nc; c++)
                            d = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * c), k8[c], d);
                        part[h * 8 + i] = d;
                    }
                    continue;
                }
                for (int h = kh * g; h < (kh + 1) * g; h++) {
                    const float *qh = qb + (int64_t)h * D;
                    __m256 d = _mm256_mul_ps(_mm256_loadu_ps(qh), load8(kc, kind, kr));
                    for (int c = 1; c < nc; c++)
                        d = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * c),
                                            load8(kc, kind, kr + 8 * c), d);
                    part[h * 8 + i] = d;
                }
            }
        }
        for (int h = 0; h < H; h++)
            _mm256_store_ps(sc + h * n8 + s,
                            _mm256_mul_ps(hsum8x8(part + h * 8), _mm256_set1_ps(scale)));
    }
    softmax_rows(sc, n8, n, H, m, l);
    for (int h = 0; h < H; h++) {
        const int64_t off = (int64_t)(h / g) * D;
        for (int c0 = 0; c0 < nc; c0 += 8) { /* 8 chunks (64 values) of the head at a time */
            const int w = nc - c0 < 8 ? nc - c0 : 8;
            __m256 a[8];
            for (int c = 0; c < w; c++) a[c] = _mm256_setzero_ps();
            rows_t vrows = rows_from(tab, t0, bs, width);
            for (int64_t t = 0; t < n; t++) {
                const int64_t at = rows_next(&vrows) + off + 8 * c0;
                const __m256 p = _mm256_set1_ps(sc[h * n8 + t]);
                for (int c = 0; c < w; c++)
                    a[c] = _mm256_fmadd_ps(p, load8(vc, kind, at + 8 * c), a[c]);
            }
            for (int c = 0; c < w; c++)
                _mm256_storeu_ps(acc + (int64_t)h * D + 8 * (c0 + c), a[c]);
        }
    }
    free(part);
    free(sc);
}
#endif

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
#if defined(AUG_ATTN16)
        if (D == 32 || D == 64 || D == 128) {
            attend_chunk16(q + b * H * D, kc, vc, kind, tables + b * tstride, t0, t1, H, KVH, D,
                           bs, scale, p, p + H, p + 2 * H);
            continue;
        }
#endif
#if defined(AUG_ATTN8)
        if (D % 8 == 0) {
            attend_chunk8(q + b * H * D, kc, vc, kind, tables + b * tstride, t0, t1, H, KVH, D,
                          bs, scale, p, p + H, p + 2 * H);
            continue;
        }
#endif
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
