/* Decode attention over the paged KV cache, in place. */
#include "native.h"

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
