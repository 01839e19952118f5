/* The C API from C: compiled as C (not C++), so that attn_c.h is checked to
 * be valid C and the structs usable without C++ constructors. Results are
 * compared with a scalar double-precision reference written here, not the
 * library's, so the check does not share code with what it checks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn/attn_c.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    ++checks;                                             \
    if (!(cond)) {                                        \
      ++failures;                                         \
      fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                       \
      fputc('\n', stderr);                                \
    }                                                     \
  } while (0)

enum { B = 2, HQ = 4, HKV = 2, TQ = 3, TK = 5, D = 8, DV = 4 };

/* Deterministic pseudo-random values in [-1, 1). */
static float next_value(unsigned* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* Q, K, V, O in [B, T, H, d] (sequence-major) layout to exercise strides. */
static float q[B][TQ][HQ][D], k[B][TK][HKV][D], v[B][TK][HKV][DV];
static float mask[TQ][TK]; /* broadcast over batch and heads */
static float out[B][TQ][HQ][DV], lse[B][HQ][TQ];

static void reference(int b, int h, int i, float scale, double* o, double* l) {
  const int kvh = h / (HQ / HKV);
  double s[TK], m = -INFINITY, sum = 0;
  for (int j = 0; j < TK; ++j) {
    const int visible = j <= (TK - TQ) + i; /* bottom-right causal */
    double dot = 0;
    for (int x = 0; x < D; ++x) dot += (double)q[b][i][h][x] * k[b][j][kvh][x];
    s[j] = visible ? dot * scale + mask[i][j] : -INFINITY;
    if (s[j] > m) m = s[j];
  }
  for (int x = 0; x < DV; ++x) o[x] = 0;
  for (int j = 0; j < TK; ++j) {
    const double p = exp(s[j] - m);
    sum += p;
    for (int x = 0; x < DV; ++x) o[x] += p * v[b][j][kvh][x];
  }
  for (int x = 0; x < DV; ++x) o[x] /= sum;
  *l = m + log(sum);
}

static attn_problem_t make_problem(void) {
  attn_problem_t p;
  attn_problem_init(&p);
  p.batch = B;
  p.q_heads = HQ;
  p.kv_heads = HKV;
  p.q_len = TQ;
  p.kv_len = TK;
  p.head_dim = D;
  p.value_dim = DV;
  p.q = (attn_tensor_t){&q[0][0][0][0], TQ * HQ * D, D, HQ * D};
  p.k = (attn_tensor_t){&k[0][0][0][0], TK * HKV * D, D, HKV * D};
  p.v = (attn_tensor_t){&v[0][0][0][0], TK * HKV * DV, DV, HKV * DV};
  p.out = (attn_out_tensor_t){&out[0][0][0][0], TQ * HQ * DV, DV, HQ * DV};
  p.has_scale = 1;
  p.scale = 0.3f;
  p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  p.mask = (attn_mask_t){&mask[0][0], 0, 0, TK, 1};
  p.lse = (attn_lse_t){&lse[0][0][0], HQ * TQ, TQ, 1};
  return p;
}

static void test_matches_reference(attn_kernel_t kernel) {
  attn_problem_t p = make_problem();
  attn_options_t o;
  attn_options_init(&o);
  o.kernel = kernel;
  o.threads = 2;
  memset(out, 0, sizeof out);
  const attn_status_t st = attn_attention(&p, &o);
  CHECK(st == ATTN_OK, "kernel %d: status %d: %s", (int)kernel, (int)st, attn_last_error());
  CHECK(strcmp(attn_last_error(), "") == 0, "message after success: %s", attn_last_error());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < TQ; ++i) {
        double o_ref[DV], l_ref;
        reference(b, h, i, 0.3f, o_ref, &l_ref);
        for (int x = 0; x < DV; ++x) {
          CHECK(fabs(out[b][i][h][x] - o_ref[x]) < 1e-5, "kernel %d out[%d][%d][%d][%d] = %g, want %g",
                (int)kernel, b, i, h, x, out[b][i][h][x], o_ref[x]);
        }
        CHECK(fabs(lse[b][h][i] - l_ref) < 1e-5, "kernel %d lse[%d][%d][%d] = %g, want %g",
              (int)kernel, b, h, i, lse[b][h][i], l_ref);
      }
}

static void test_invalid_field(void) {
  attn_problem_t p = make_problem();
  p.kv_heads = 3;
  for (int x = 0; x < DV; ++x) out[0][0][0][x] = 42.0f;
  const attn_status_t st = attn_attention(&p, NULL);
  CHECK(st == ATTN_INVALID_ARGUMENT, "status %d", (int)st);
  CHECK(strcmp(attn_last_error(), "attn: kv_heads must divide q_heads (4), got 3") == 0,
        "message: %s", attn_last_error());
  CHECK(out[0][0][0][0] == 42.0f, "out written on error: %g", out[0][0][0][0]);

  p = make_problem();
  p.k.data = NULL;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "null k accepted");
  CHECK(strcmp(attn_last_error(), "attn: k.data must not be null, got null") == 0, "message: %s",
        attn_last_error());

  p = make_problem();
  p.causal = (attn_causal_t)7;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "causal 7 accepted");
  CHECK(strcmp(attn_last_error(), "attn: causal must be 0..2 (attn_causal_t), got 7") == 0,
        "message: %s", attn_last_error());

  attn_options_t o;
  attn_options_init(&o);
  o.kernel = (attn_kernel_t)9;
  p = make_problem();
  CHECK(attn_attention(&p, &o) == ATTN_INVALID_ARGUMENT, "kernel 9 accepted");
  CHECK(strcmp(attn_last_error(), "attn: kernel must name a kernel (attn_kernel_t), got 9") == 0,
        "message: %s", attn_last_error());

  CHECK(attn_attention(NULL, NULL) == ATTN_INVALID_ARGUMENT, "null problem accepted");
  CHECK(strstr(attn_last_error(), "problem must not be null") != NULL, "message: %s",
        attn_last_error());

  CHECK(attn_force_target("NOPE") == ATTN_INVALID_ARGUMENT, "target NOPE accepted");
  CHECK(strstr(attn_last_error(), "NOPE") != NULL, "message: %s", attn_last_error());
}

static void test_tuning_file_errors_are_statuses(void) {
  /* A missing file is ignored by the library (defaults stay): a status and a
   * message naming the path, never a crash or an exception. */
  const char* path = "/nonexistent/attn-tuning.json";
  CHECK(attn_load_tuning_file(path) == ATTN_INVALID_ARGUMENT, "missing file accepted");
  CHECK(strstr(attn_last_error(), path) != NULL, "message: %s", attn_last_error());
}

int main(void) {
  unsigned state = 12345u;
  for (float* x = &q[0][0][0][0]; x < &q[0][0][0][0] + sizeof q / sizeof(float); ++x) *x = next_value(&state);
  for (float* x = &k[0][0][0][0]; x < &k[0][0][0][0] + sizeof k / sizeof(float); ++x) *x = next_value(&state);
  for (float* x = &v[0][0][0][0]; x < &v[0][0][0][0] + sizeof v / sizeof(float); ++x) *x = next_value(&state);
  for (int i = 0; i < TQ; ++i)
    for (int j = 0; j < TK; ++j) mask[i][j] = (i + j) % 3 == 0 ? -0.5f : 0.25f;

  test_matches_reference(ATTN_KERNEL_AUTO);
  test_matches_reference(ATTN_KERNEL_NAIVE);
  test_matches_reference(ATTN_KERNEL_STREAMING);
  test_matches_reference(ATTN_KERNEL_PARALLEL);
  test_invalid_field();
  test_tuning_file_errors_are_statuses();
  CHECK(strlen(attn_version()) > 0, "empty version");
  CHECK(strlen(attn_current_target()) > 0, "empty target");

  printf("c_api_test on %s: %d checks, %d failed\n", attn_current_target(), checks, failures);
  return failures == 0 ? 0 : 1;
}
