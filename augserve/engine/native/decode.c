/* The elementwise pieces of a decode step and a Llama-family step of every layer. */
#include "native.h"

/* ---- elementwise ------------------------------------------------------------------ */
static inline void rmsnorm_row(const float *v, const float *w, float *y, int64_t D, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < D; j++) ss += v[j] * v[j];
    const float inv = 1.0f / sqrtf(ss / (float)D + eps);
    for (int64_t j = 0; j < D; j++) y[j] = w[j] * (v[j] * inv);
}

void aug_rmsnorm(const float *x, const float *w, float *y, int64_t M, int64_t D, float eps) {
    for (int64_t r = 0; r < M; r++) rmsnorm_row(x + r * D, w, y + r * D, D, eps);
}

/* The steps between a layer's products, each a loop over the batch's rows that the
 * threads share (a step of B > 1 rows; one row stays on the calling thread): with one
 * thread running them the others wait in the product's barrier (docs/engine-quant.md). */

/* x += add (unless NULL); h = rmsnorm(x) w; h into int8 activations xa. */
static void resid_norm_quant(float *x, const float *add, const float *w, float *h, int64_t B,
                             int64_t D, float eps, void *xa, int nt) {
    const acts a = acts_at(xa, B, D);
#pragma omp parallel for num_threads(nt) if (B > 1) schedule(static)
    for (int64_t r = 0; r < B; r++) {
        float *v = x + r * D;
        if (add)
            for (int64_t j = 0; j < D; j++) v[j] += add[r * D + j];
        rmsnorm_row(v, w, h + r * D, D, eps);
        aug_quantize_row(h + r * D, D, a, r);
    }
}

/* act = silu(gate) * up; act into int8 activations xa. */
static void silu_mul_quant(const float *gu, float *act, int64_t B, int64_t I, void *xa, int nt) {
    const acts a = acts_at(xa, B, I);
#pragma omp parallel for num_threads(nt) if (B > 1) schedule(static)
    for (int64_t r = 0; r < B; r++) {
        const float *g = gu + r * 2 * I, *u = g + I;
        float *o = act + r * I;
#pragma omp simd
        for (int64_t j = 0; j < I; j++) o[j] = g[j] / (1.0f + exp_approx(-g[j])) * u[j];
        aug_quantize_row(o, I, a, r);
    }
}

static void quant_rows(const float *x, int64_t B, int64_t K, void *xa, int nt) {
    const acts a = acts_at(xa, B, K);
#pragma omp parallel for num_threads(nt) if (B > 1) schedule(static)
    for (int64_t r = 0; r < B; r++) aug_quantize_row(x + r * K, K, a, r);
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
    return floats * 4 + acts_bytes(B, widest) + 64;
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
        /* the previous layer's down projection joins the residual stream here */
        resid_norm_quant(x, l ? tmp : NULL, L->in_norm, h, B, hid, md->eps, xa, nt);
        qmatmul(&L->qkv, xa, qkv, B, nt);
#pragma omp parallel for num_threads(nt) if (B > 1) schedule(static)
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
        quant_rows(ao, B, hd, xa, nt);
        qmatmul(&L->o, xa, tmp, B, nt);
        resid_norm_quant(x, tmp, L->post_norm, h, B, hid, md->eps, xa, nt);
        qmatmul(&L->gate_up, xa, gu, B, nt);
        silu_mul_quant(gu, act, B, I, xa, nt);
        qmatmul(&L->down, xa, tmp, B, nt);
    }
    if (md->n_layers > 0)
        for (int64_t i = 0; i < B * hid; i++) x[i] += tmp[i];
    aug_rmsnorm(x, md->final_norm, out, B, hid, md->eps);
}
