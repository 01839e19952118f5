/* The serving calls of the C API (attn_varlen_attention,
 * attn_paged_attention) from C: attn_c.h's additions are valid C, and each
 * call equals dense attn_attention calls on the same sequences (the dense
 * call is tested against the float64 reference in c_api_test.c and the
 * kernel tests), within float rounding of a different summation order;
 * with the score modifiers too, each sequence's dense call given the same
 * window, softcap, sinks and its own ALiBi slopes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn/attn_c.h"

static int failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      ++failures;                                                     \
      fprintf(stderr, "%s:%d: FAILED %s (%s)\n", __FILE__, __LINE__, #cond, \
              attn_last_error());                                     \
    }                                                                 \
  } while (0)

enum { H = 2, D = 8, BS = 4 };

static float value(int i) { return (float)sin(0.37 * i + 0.1); }

/* Score modifiers of a dense call (NULL: none). */
typedef struct mods_t {
  int64_t window_left, window_right;
  float softcap;
  const float* sinks;   /* [H] */
  const float* slopes;  /* [H]: this sequence's */
} mods_t;

/* Sequence keys [0, tk) of one head group, dense [tk][H][D]: out of one
 * dense call, rows [tq][H][D]. */
static void dense_with(const float* q, const float* k, const float* v, int tq, int tk,
                       const mods_t* m, float* out) {
  attn_problem_t p;
  attn_problem_init(&p);
  if (m) {
    p.window_left = m->window_left;
    p.window_right = m->window_right;
    p.softcap = m->softcap;
    p.sinks = m->sinks;
    p.sinks_size = m->sinks ? H : 0;
    p.alibi_slopes = m->slopes;
  }
  p.q_heads = p.kv_heads = H;
  p.q_len = tq;
  p.kv_len = tk;
  p.head_dim = D;
  p.q = (attn_tensor_t){q, 0, D, H * D, ATTN_F32};
  p.k = (attn_tensor_t){k, 0, D, H * D, ATTN_F32};
  p.v = (attn_tensor_t){v, 0, D, H * D, ATTN_F32};
  p.out = (attn_out_tensor_t){out, 0, D, H * D, ATTN_F32};
  p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  CHECK(attn_attention(&p, NULL) == ATTN_OK);
}

static void dense(const float* q, const float* k, const float* v, int tq, int tk, float* out) {
  dense_with(q, k, v, tq, tk, NULL, out);
}

static float max_diff(const float* a, const float* b, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = fmaxf(m, fabsf(a[i] - b[i]));
  return m;
}

int main(void) {
  /* Varlen: sequences (T_q, T_k) = (3, 5) and (2, 9). */
  const int32_t cu_q[3] = {0, 3, 5}, cu_k[3] = {0, 5, 14};
  float q[5 * H * D], k[14 * H * D], v[14 * H * D], out[5 * H * D], want[5 * H * D];
  for (int i = 0; i < 5 * H * D; ++i) q[i] = value(i);
  for (int i = 0; i < 14 * H * D; ++i) {
    k[i] = value(1000 + i);
    v[i] = value(3000 + i);
  }
  attn_varlen_problem_t vp;
  attn_varlen_problem_init(&vp);
  vp.batch = 2;
  vp.q_heads = vp.kv_heads = H;
  vp.head_dim = D;
  vp.cu_seqlens_q = cu_q;
  vp.cu_seqlens_k = cu_k;
  vp.q = (attn_packed_tensor_t){q, H * D, D, ATTN_F32};
  vp.k = (attn_packed_tensor_t){k, H * D, D, ATTN_F32};
  vp.v = (attn_packed_tensor_t){v, H * D, D, ATTN_F32};
  vp.out = (attn_packed_out_t){out, H * D, D, ATTN_F32};
  vp.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  CHECK(attn_varlen_attention(&vp, NULL) == ATTN_OK);
  dense(q, k, v, 3, 5, want);
  dense(q + 3 * H * D, k + 5 * H * D, v + 5 * H * D, 2, 9, want + 3 * H * D);
  CHECK(max_diff(out, want, 5 * H * D) < 1e-6f);

  /* Score modifiers per sequence: a window of 2 keys left of the diagonal,
   * softcap, one sink (head 1: none) and per-sequence slopes (stride H). */
  const float sinks[H] = {0.5f, -INFINITY}, slopes[2 * H] = {0.1f, 0.3f, 0.05f, 0.2f};
  vp.window_left = 2;
  vp.softcap = 0.5f;
  vp.sinks = sinks;
  vp.sinks_size = H;
  vp.alibi_slopes = slopes;
  vp.alibi_batch_stride = H;
  CHECK(attn_varlen_attention(&vp, NULL) == ATTN_OK);
  mods_t m0 = {2, -1, 0.5f, sinks, slopes}, m1 = {2, -1, 0.5f, sinks, slopes + H};
  dense_with(q, k, v, 3, 5, &m0, want);
  dense_with(q + 3 * H * D, k + 5 * H * D, v + 5 * H * D, 2, 9, &m1, want + 3 * H * D);
  CHECK(max_diff(out, want, 5 * H * D) < 1e-6f);
  dense(q, k, v, 3, 5, want);
  CHECK(max_diff(out, want, 3 * H * D) > 1e-3f); /* the modifiers changed the result */
  vp.window_left = -2;
  CHECK(attn_varlen_attention(&vp, NULL) == ATTN_INVALID_ARGUMENT);
  CHECK(strstr(attn_last_error(), "window.left") != NULL);
  attn_varlen_problem_init(&vp);
  CHECK(vp.window_left == -1 && vp.window_right == -1 && vp.sinks == NULL);
  vp.batch = 2;
  vp.q_heads = vp.kv_heads = H;
  vp.head_dim = D;
  vp.cu_seqlens_q = cu_q;
  vp.q = (attn_packed_tensor_t){q, H * D, D, ATTN_F32};
  vp.k = (attn_packed_tensor_t){k, H * D, D, ATTN_F32};
  vp.v = (attn_packed_tensor_t){v, H * D, D, ATTN_F32};
  vp.out = (attn_packed_out_t){out, H * D, D, ATTN_F32};

  /* A decreasing offset is named, and nothing is written. */
  const int32_t bad_k[3] = {0, 5, 4};
  vp.cu_seqlens_k = bad_k;
  memset(out, 0, sizeof out);
  CHECK(attn_varlen_attention(&vp, NULL) == ATTN_INVALID_ARGUMENT);
  CHECK(strstr(attn_last_error(), "cu_seqlens_k[2]") != NULL);
  CHECK(out[0] == 0.0f);

  /* Paged: sequence 0's 9 keys in blocks 3, 0, 2 (of 4-token pages), one
   * decode query, one new token appended (the 10th key, into block 2). */
  float k_pool[4 * BS * H * D], v_pool[4 * BS * H * D], keys[10 * H * D], vals[10 * H * D];
  const int32_t table[3] = {3, 0, 2}, cache[1] = {9};
  for (int t = 0; t < 10; ++t) {
    for (int i = 0; i < H * D; ++i) {
      keys[t * H * D + i] = value(5000 + t * H * D + i);
      vals[t * H * D + i] = value(7000 + t * H * D + i);
    }
  }
  for (int i = 0; i < 4 * BS * H * D; ++i) k_pool[i] = v_pool[i] = NAN;  /* unused: never read */
  for (int t = 0; t < 9; ++t) {
    memcpy(&k_pool[(table[t / BS] * BS + t % BS) * H * D], &keys[t * H * D], sizeof(float) * H * D);
    memcpy(&v_pool[(table[t / BS] * BS + t % BS) * H * D], &vals[t * H * D], sizeof(float) * H * D);
  }
  attn_paged_problem_t pp;
  attn_paged_problem_init(&pp);
  pp.batch = 1;
  pp.q_heads = pp.kv_heads = H;
  pp.head_dim = D;
  pp.num_blocks = 4;
  pp.block_size = BS;
  pp.k_cache = (attn_page_pool_t){k_pool, BS * H * D, H * D, D, ATTN_F32};
  pp.v_cache = (attn_page_pool_t){v_pool, BS * H * D, H * D, D, ATTN_F32};
  pp.block_table = table;
  pp.max_blocks = 3;
  pp.cache_seqlens = cache;
  pp.q = (attn_packed_tensor_t){q, H * D, D, ATTN_F32};
  pp.q_len = 1;
  pp.k_new = (attn_packed_tensor_t){&keys[9 * H * D], H * D, D, ATTN_F32};
  pp.v_new = (attn_packed_tensor_t){&vals[9 * H * D], H * D, D, ATTN_F32};
  pp.new_len = 1;
  pp.out = (attn_packed_out_t){out, H * D, D, ATTN_F32};
  pp.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  CHECK(attn_paged_attention(&pp, NULL) == ATTN_OK);
  dense(q, keys, vals, 1, 10, want);
  CHECK(max_diff(out, want, H * D) < 1e-6f);
  CHECK(k_pool[(2 * BS + 1) * H * D] == keys[9 * H * D]);  /* appended: block 2, slot 1 */

  /* A sliding window of 3 keys and sinks over the pages (the append runs
   * again: the same token into the same slot). */
  pp.window_left = 3;
  pp.sinks = sinks;
  pp.sinks_size = H;
  CHECK(attn_paged_attention(&pp, NULL) == ATTN_OK);
  mods_t mp = {3, -1, 0.0f, sinks, NULL};
  dense_with(q, keys, vals, 1, 10, &mp, want);
  CHECK(max_diff(out, want, H * D) < 1e-6f);
  pp.sinks_size = 1;
  CHECK(attn_paged_attention(&pp, NULL) == ATTN_INVALID_ARGUMENT);
  CHECK(strstr(attn_last_error(), "sinks.size") != NULL);
  pp.sinks_size = H;

  /* A length beyond the table's pages is named. */
  const int32_t too_long[1] = {12};
  pp.cache_seqlens = too_long;
  CHECK(attn_paged_attention(&pp, NULL) == ATTN_INVALID_ARGUMENT);
  CHECK(strstr(attn_last_error(), "cache_seqlens[0]") != NULL);

  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("serving C API: all checks passed\n");
  return 0;
}
