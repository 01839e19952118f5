/* The C API from C: compiled as C (not C++), so that attn_c.h is checked to
 * be valid C and the structs usable without C++ constructors. Results are
 * compared with a scalar double-precision reference written here, not the
 * library's, so the check does not share code with what it checks. */
#include <math.h>
#include <stdint.h>
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

/* Q, K, V, O in [B, T, H, d] (sequence-major) layout to exercise strides.
 * The 16-bit tests store the same tensors as bit patterns in q16..out16. */
static float q[B][TQ][HQ][D], k[B][TK][HKV][D], v[B][TK][HKV][DV];
static float mask[TQ][TK]; /* broadcast over batch and heads */
static float out[B][TQ][HQ][DV], lse[B][HQ][TQ];
static uint16_t q16[B][TQ][HQ][D], k16[B][TK][HKV][D], v16[B][TK][HKV][DV];
static uint16_t out16[B][TQ][HQ][DV];

/* bfloat16 and float16 bit patterns, written here independently of the
 * library: rounding to nearest, ties to even (rint in the default rounding
 * mode), for finite values (all these tests use). */
static uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16_bits(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
static uint16_t f16_bits(float x) {
  const uint16_t sign = signbit(x) ? 0x8000u : 0u;
  double a = fabs((double)x);
  int e;
  if (a < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)rint(ldexp(a, 24))); /* subnormal */
  const double f = frexp(a, &e) * 2.0;                /* a = f * 2^(e-1), 1 <= f < 2 */
  double m = rint((f - 1.0) * 1024.0);
  if (m == 1024.0) m = 0.0, ++e;                      /* rounded up to the next power of 2 */
  if (e - 1 + 15 >= 31) return (uint16_t)(sign | 0x7C00u); /* overflow: inf */
  return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)m);
}
static float from_f16_bits(uint16_t h) {
  const int ex = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double a = ex == 0 ? ldexp(m, -24) : ex == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, ex - 25);
  return (float)((h & 0x8000u) ? -a : a);
}

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
  p.q = (attn_tensor_t){&q[0][0][0][0], TQ * HQ * D, D, HQ * D, ATTN_F32};
  p.k = (attn_tensor_t){&k[0][0][0][0], TK * HKV * D, D, HKV * D, ATTN_F32};
  p.v = (attn_tensor_t){&v[0][0][0][0], TK * HKV * DV, DV, HKV * DV, ATTN_F32};
  p.out = (attn_out_tensor_t){&out[0][0][0][0], TQ * HQ * DV, DV, HQ * DV, ATTN_F32};
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

static uint16_t to_bits(attn_dtype_t t, float x) { return t == ATTN_BF16 ? bf16_bits(x) : f16_bits(x); }
static float from_bits(attn_dtype_t t, uint16_t h) {
  return t == ATTN_BF16 ? from_bf16_bits(h) : from_f16_bits(h);
}
static const char* dtype_name(attn_dtype_t t) {
  return t == ATTN_F32 ? "f32" : t == ATTN_BF16 ? "bf16" : "f16";
}

/* A 16-bit input: its bit patterns go to bits[], and x[] is overwritten with
 * the value they hold (what the double reference then reads). */
static void round_to(attn_dtype_t t, float* x, uint16_t* bits, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    bits[i] = to_bits(t, x[i]);
    x[i] = from_bits(t, bits[i]);
  }
}

/* q, k, v and out in the given element types (f32 ones use the float
 * arrays), every kernel, checked against the double reference over the
 * same rounded inputs. Bound: the f32 tests' 1e-5 for float32 accumulation,
 * plus for a 16-bit output one rounding to nearest, at most u * |out|
 * (u = 2^-8 for bf16, 2^-11 for f16). */
static void test_16bit(attn_dtype_t tq, attn_dtype_t tkv, attn_dtype_t tout) {
  static float q0[B][TQ][HQ][D], k0[B][TK][HKV][D], v0[B][TK][HKV][DV];
  memcpy(q0, q, sizeof q);
  memcpy(k0, k, sizeof k);
  memcpy(v0, v, sizeof v);
  if (tq != ATTN_F32) round_to(tq, &q[0][0][0][0], &q16[0][0][0][0], sizeof q / sizeof(float));
  if (tkv != ATTN_F32) {
    round_to(tkv, &k[0][0][0][0], &k16[0][0][0][0], sizeof k / sizeof(float));
    round_to(tkv, &v[0][0][0][0], &v16[0][0][0][0], sizeof v / sizeof(float));
  }
  const double u = tout == ATTN_BF16 ? ldexp(1.0, -8) : tout == ATTN_F16 ? ldexp(1.0, -11) : 0.0;
  for (int kernel = ATTN_KERNEL_AUTO; kernel <= ATTN_KERNEL_PARALLEL; ++kernel) {
    attn_problem_t p = make_problem();
    if (tq != ATTN_F32) p.q.data = q16, p.q.dtype = tq;
    if (tkv != ATTN_F32) p.k.data = k16, p.k.dtype = tkv, p.v.data = v16, p.v.dtype = tkv;
    if (tout != ATTN_F32) p.out.data = out16, p.out.dtype = tout;
    attn_options_t o;
    attn_options_init(&o);
    o.kernel = (attn_kernel_t)kernel;
    o.threads = 2;
    memset(out, 0, sizeof out);
    memset(out16, 0xFF, sizeof out16); /* NaN in both types until written */
    const attn_status_t st = attn_attention(&p, &o);
    CHECK(st == ATTN_OK, "q %s kv %s out %s kernel %d: status %d: %s", dtype_name(tq),
          dtype_name(tkv), dtype_name(tout), kernel, (int)st, attn_last_error());
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < HQ; ++h)
        for (int i = 0; i < TQ; ++i) {
          double o_ref[DV], l_ref;
          reference(b, h, i, 0.3f, o_ref, &l_ref);
          for (int x = 0; x < DV; ++x) {
            const double got =
                tout == ATTN_F32 ? out[b][i][h][x] : from_bits(tout, out16[b][i][h][x]);
            CHECK(fabs(got - o_ref[x]) <= 1e-5 + u * fabs(o_ref[x]),
                  "q %s kv %s out %s kernel %d out[%d][%d][%d][%d] = %.9g, want %.9g",
                  dtype_name(tq), dtype_name(tkv), dtype_name(tout), kernel, b, i, h, x, got,
                  o_ref[x]);
          }
          CHECK(fabs(lse[b][h][i] - l_ref) < 1e-5, "q %s kv %s out %s kernel %d lse = %g, want %g",
                dtype_name(tq), dtype_name(tkv), dtype_name(tout), kernel, lse[b][h][i], l_ref);
        }
  }
  memcpy(q, q0, sizeof q);
  memcpy(k, k0, sizeof k);
  memcpy(v, v0, sizeof v);
}

/* The encoders above agree with values whose patterns are known. */
static void test_bit_helpers(void) {
  CHECK(bf16_bits(1.0f) == 0x3F80 && f16_bits(1.0f) == 0x3C00, "1.0");
  CHECK(bf16_bits(-2.5f) == 0xC020 && f16_bits(-2.5f) == 0xC100, "-2.5");
  CHECK(f16_bits(65504.0f) == 0x7BFF && f16_bits(1e6f) == 0x7C00, "f16 max / overflow");
  CHECK(f16_bits(ldexpf(1.0f, -24)) == 0x0001, "f16 smallest subnormal");
  CHECK(bf16_bits(1.0f + ldexpf(1.0f, -8)) == 0x3F80, "bf16 tie to even (down)");
  CHECK(bf16_bits(1.0f + 3 * ldexpf(1.0f, -8)) == 0x3F82, "bf16 tie to even (up)");
  CHECK(f16_bits(1.0f + ldexpf(1.0f, -11)) == 0x3C00, "f16 tie to even (down)");
  CHECK(f16_bits(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3C02, "f16 tie to even (up)");
  CHECK(from_f16_bits(0x3555) == (float)(1365.0 / 4096.0), "f16 decode %g", from_f16_bits(0x3555));
  CHECK(from_bf16_bits(0xC020) == -2.5f, "bf16 decode");
}

/* An element type outside attn_dtype_t is refused by name; nothing written. */
static void test_invalid_dtype(void) {
  attn_problem_t p = make_problem();
  p.q.dtype = (attn_dtype_t)7;
  for (float* x = &out[0][0][0][0]; x < &out[0][0][0][0] + sizeof out / sizeof(float); ++x) *x = 42.0f;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "q dtype 7 accepted");
  CHECK(strstr(attn_last_error(), "q.dtype") != NULL && strstr(attn_last_error(), "7") != NULL,
        "message: %s", attn_last_error());
  printf("c_api_test: expected error: %s\n", attn_last_error());
  int untouched = 1;
  for (const float* x = &out[0][0][0][0]; x < &out[0][0][0][0] + sizeof out / sizeof(float); ++x)
    untouched &= *x == 42.0f;
  CHECK(untouched, "out written on error");

  p = make_problem();
  p.out.data = out16;
  p.out.dtype = (attn_dtype_t)7;
  memset(out16, 0x5A, sizeof out16);
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "out dtype 7 accepted");
  CHECK(strstr(attn_last_error(), "out.dtype") != NULL, "message: %s", attn_last_error());
  int clean = 1;
  for (const uint16_t* x = &out16[0][0][0][0]; x < &out16[0][0][0][0] + sizeof out16 / 2; ++x)
    clean &= *x == 0x5A5A;
  CHECK(clean, "out16 written on error");
}

/* ggml's q8_0 K and V from C: attn_quantize_q8_0 on a block whose bytes
 * are known (amax 127: scale 1.0 = 0x3C00, q = roundf(x), halves away
 * from zero), then a GQA decode over q8_0 K/V against a double-precision
 * reference that decodes the blocks itself (q * binary16 scale), and the
 * errors: Q cannot be q8_0, head_dim must be a multiple of 32. */
enum { Q8_T = 7, Q8_D = 64, Q8_HQ = 4, Q8_HKV = 2 };
static void test_q8_0(void) {
  float block[32] = {127.0f, -63.5f, 2.5f, -0.4f};
  unsigned char bytes[34];
  memset(bytes, 0xEE, sizeof bytes);
  CHECK(attn_quantize_q8_0(block, 32, bytes) == ATTN_OK, "quantize: %s", attn_last_error());
  CHECK(bytes[0] == 0x00 && bytes[1] == 0x3C, "scale bytes %02x %02x", bytes[0], bytes[1]);
  CHECK((signed char)bytes[2] == 127 && (signed char)bytes[3] == -64 && (signed char)bytes[4] == 3 &&
            (signed char)bytes[5] == 0 && bytes[6] == 0,
        "q %d %d %d %d", (signed char)bytes[2], (signed char)bytes[3], (signed char)bytes[4],
        (signed char)bytes[5]);
  float back[32];
  CHECK(attn_dequantize_q8_0(bytes, 32, back) == ATTN_OK && back[1] == -64.0f, "dequantize");
  memset(bytes, 0xEE, sizeof bytes);
  CHECK(attn_quantize_q8_0(block, 31, bytes) == ATTN_INVALID_ARGUMENT && bytes[0] == 0xEE,
        "n = 31: %s", attn_last_error());
  CHECK(strstr(attn_last_error(), "n must be a multiple of 32") != NULL, "message: %s",
        attn_last_error());

  static float qf[Q8_HQ][Q8_D], kf[Q8_HKV][Q8_T][Q8_D], vf[Q8_HKV][Q8_T][Q8_D], o[Q8_HQ][Q8_D];
  static unsigned char k8[Q8_HKV * Q8_T * Q8_D / 32 * 34], v8[Q8_HKV * Q8_T * Q8_D / 32 * 34];
  unsigned state = 99u;
  for (float* x = &qf[0][0]; x < &qf[0][0] + sizeof qf / sizeof(float); ++x) *x = next_value(&state);
  for (float* x = &kf[0][0][0]; x < &kf[0][0][0] + sizeof kf / sizeof(float); ++x) *x = next_value(&state);
  for (float* x = &vf[0][0][0]; x < &vf[0][0][0] + sizeof vf / sizeof(float); ++x) *x = next_value(&state);
  CHECK(attn_quantize_q8_0(&kf[0][0][0], Q8_HKV * Q8_T * Q8_D, k8) == ATTN_OK, "quantize K");
  CHECK(attn_quantize_q8_0(&vf[0][0][0], Q8_HKV * Q8_T * Q8_D, v8) == ATTN_OK, "quantize V");
  attn_problem_t p;
  attn_problem_init(&p);
  p.q_heads = Q8_HQ;
  p.kv_heads = Q8_HKV;
  p.q_len = 1;
  p.kv_len = Q8_T;
  p.head_dim = Q8_D;
  p.q = (attn_tensor_t){&qf[0][0], Q8_HQ * Q8_D, Q8_D, Q8_D, ATTN_F32};
  p.k = (attn_tensor_t){k8, Q8_HKV * Q8_T * Q8_D, Q8_T * Q8_D, Q8_D, ATTN_Q8_0};
  p.v = (attn_tensor_t){v8, Q8_HKV * Q8_T * Q8_D, Q8_T * Q8_D, Q8_D, ATTN_Q8_0};
  p.out = (attn_out_tensor_t){&o[0][0], Q8_HQ * Q8_D, Q8_D, Q8_D, ATTN_F32};
  CHECK(attn_attention(&p, NULL) == ATTN_OK, "q8_0 decode: %s", attn_last_error());
  double worst = 0.0;
  for (int h = 0; h < Q8_HQ; ++h) {
    const int g = h / (Q8_HQ / Q8_HKV);
    double s[Q8_T], m = -INFINITY, sum = 0.0, acc[Q8_D] = {0};
    for (int j = 0; j < Q8_T; ++j) {
      double dot = 0.0;
      for (int c = 0; c < Q8_D; ++c) {
        const int e = (g * Q8_T + j) * Q8_D + c;
        const unsigned char* b = k8 + e / 32 * 34;
        dot += qf[h][c] * (signed char)b[2 + e % 32] * from_f16_bits((uint16_t)(b[0] | b[1] << 8));
      }
      s[j] = dot / sqrt((double)Q8_D);
      if (s[j] > m) m = s[j];
    }
    for (int j = 0; j < Q8_T; ++j) {
      const double w = exp(s[j] - m);
      sum += w;
      for (int c = 0; c < Q8_D; ++c) {
        const int e = (g * Q8_T + j) * Q8_D + c;
        const unsigned char* b = v8 + e / 32 * 34;
        acc[c] += w * (signed char)b[2 + e % 32] * from_f16_bits((uint16_t)(b[0] | b[1] << 8));
      }
    }
    for (int c = 0; c < Q8_D; ++c) {
      const double diff = fabs(o[h][c] - acc[c] / sum);
      if (diff > worst) worst = diff;
    }
  }
  /* float32 arithmetic on exact inputs: a few ulps of |out| <= 1. */
  CHECK(worst < 1e-5, "q8_0 decode off by %g", worst);
  p.q.dtype = ATTN_Q8_0;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "q8_0 Q accepted");
  CHECK(strstr(attn_last_error(), "q.dtype") != NULL, "message: %s", attn_last_error());
  p.q.dtype = ATTN_F32;
  p.head_dim = 48;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "head_dim 48 accepted");
  CHECK(strstr(attn_last_error(), "head_dim must be a multiple of 32") != NULL, "message: %s",
        attn_last_error());
}

/* ggml's q4_0 blocks through the C API: the quantiser on a block worked out
 * by hand (max 8: d = -1, nibble = trunc(8.5 - x), element 16 in byte 0's
 * high nibble), and a decode over q4_0 K and V against the same problem
 * on the float32 values the blocks decode to. */
static void test_q4_0(void) {
  float block[32] = {8.0f, -4.0f, 2.0f, -7.9f};
  block[16] = -2.0f;
  unsigned char bytes[18];
  CHECK(attn_quantize_q4_0(block, 32, bytes) == ATTN_OK, "quantize: %s", attn_last_error());
  CHECK(bytes[0] == 0x00 && bytes[1] == 0xBC && bytes[2] == 0xA0 && bytes[3] == 0x8C &&
            bytes[4] == 0x86 && bytes[5] == 0x8F && bytes[17] == 0x88,
        "q4_0 bytes %02x %02x %02x %02x %02x %02x", bytes[0], bytes[1], bytes[2], bytes[3],
        bytes[4], bytes[5]);
  float back[32];
  CHECK(attn_dequantize_q4_0(bytes, 32, back) == ATTN_OK && back[0] == 8.0f &&
            back[3] == -7.0f && back[16] == -2.0f,
        "dequantize");
  CHECK(attn_quantize_q4_0(block, 16, bytes) == ATTN_INVALID_ARGUMENT, "n = 16 accepted");

  enum { HQ = 4, HKV = 2, T = 40, D = 64 };
  static float qf[HQ][D], kf[HKV * T * D], vf[HKV * T * D], o4[HQ][D], o32[HQ][D];
  static unsigned char k4[HKV * T * D / 32 * 18], v4[HKV * T * D / 32 * 18];
  unsigned state = 7u;
  for (float* x = &qf[0][0]; x < &qf[0][0] + HQ * D; ++x) *x = next_value(&state);
  for (int i = 0; i < HKV * T * D; ++i) kf[i] = next_value(&state), vf[i] = next_value(&state);
  CHECK(attn_quantize_q4_0(kf, HKV * T * D, k4) == ATTN_OK, "quantize K");
  CHECK(attn_quantize_q4_0(vf, HKV * T * D, v4) == ATTN_OK, "quantize V");
  attn_problem_t p;
  attn_problem_init(&p);
  p.q_heads = HQ;
  p.kv_heads = HKV;
  p.q_len = 1;
  p.kv_len = T;
  p.head_dim = D;
  p.q = (attn_tensor_t){&qf[0][0], HQ * D, D, D, ATTN_F32};
  p.k = (attn_tensor_t){k4, HKV * T * D, T * D, D, ATTN_Q4_0};
  p.v = (attn_tensor_t){v4, HKV * T * D, T * D, D, ATTN_Q4_0};
  p.out = (attn_out_tensor_t){&o4[0][0], HQ * D, D, D, ATTN_F32};
  CHECK(attn_attention(&p, NULL) == ATTN_OK, "q4_0 decode: %s", attn_last_error());
  CHECK(attn_dequantize_q4_0(k4, HKV * T * D, kf) == ATTN_OK, "dequantize K");
  CHECK(attn_dequantize_q4_0(v4, HKV * T * D, vf) == ATTN_OK, "dequantize V");
  p.k = (attn_tensor_t){kf, HKV * T * D, T * D, D, ATTN_F32};
  p.v = (attn_tensor_t){vf, HKV * T * D, T * D, D, ATTN_F32};
  p.out = (attn_out_tensor_t){&o32[0][0], HQ * D, D, D, ATTN_F32};
  CHECK(attn_attention(&p, NULL) == ATTN_OK, "f32 decode: %s", attn_last_error());
  double worst = 0.0;
  for (int h = 0; h < HQ; ++h) {
    for (int c = 0; c < D; ++c) {
      /* Written as test_q8_0's loop: aarch64 GCC 12's vectoriser fails on
       * a fmax reduction here (an internal compiler error). */
      const double diff = fabs((double)o4[h][c] - o32[h][c]);
      if (diff > worst) worst = diff;
    }
  }
  /* The same values in float32, summed in another order: a few ulps. */
  CHECK(worst < 1e-5, "q4_0 decode off by %g from its values in f32", worst);
  p.q.dtype = ATTN_Q4_0;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "q4_0 Q accepted");
  CHECK(strstr(attn_last_error(), "q.dtype") != NULL, "message: %s", attn_last_error());
}

static void test_tuning_file_errors_are_statuses(void) {
  /* A missing file is ignored by the library (defaults stay): a status and a
   * message naming the path, never a crash or an exception. */
  const char* path = "/nonexistent/attn-tuning.json";
  CHECK(attn_load_tuning_file(path) == ATTN_INVALID_ARGUMENT, "missing file accepted");
  CHECK(strstr(attn_last_error(), path) != NULL, "message: %s", attn_last_error());
}

/* round_inputs_to_bf16: 0 after attn_options_init; set, the float32 inputs
 * are rounded to bf16 first, which moves the result by about bf16's
 * precision (2^-8 relative) and no more. */
static void test_round_inputs_to_bf16(void) {
  attn_options_t o;
  attn_options_init(&o);
  CHECK(o.round_inputs_to_bf16 == 0, "round_inputs_to_bf16 defaults to %d", o.round_inputs_to_bf16);
  attn_problem_t p = make_problem();
  memset(out, 0, sizeof out);
  CHECK(attn_attention(&p, &o) == ATTN_OK, "exact call: %s", attn_last_error());
  static float exact[B][TQ][HQ][DV];
  memcpy(exact, out, sizeof out);
  o.round_inputs_to_bf16 = 1;
  memset(out, 0, sizeof out);
  CHECK(attn_attention(&p, &o) == ATTN_OK, "rounded call: %s", attn_last_error());
  double most = 0.0;
  for (const float *a = &out[0][0][0][0], *e = &exact[0][0][0][0];
       a < &out[0][0][0][0] + sizeof out / sizeof(float); ++a, ++e) {
    const double diff = fabs((double)*a - (double)*e);
    if (diff > most) most = diff;
  }
  CHECK(most > 0.0, "rounding the inputs changed nothing");
  CHECK(most < 0.05, "rounding the inputs moved an output by %g", most);
}

/* Score modifiers through the C fields: defaults change nothing (window
 * -1 / -1); a window, sinks and a bad cap reach the library (the C++ tests
 * check the arithmetic). */
static void test_score_modifiers(void) {
  attn_problem_t p;
  attn_problem_init(&p);
  CHECK(p.window_left == -1 && p.window_right == -1, "window defaults %lld %lld",
        (long long)p.window_left, (long long)p.window_right);
  CHECK(p.softcap == 0.0f && p.sinks == NULL && p.alibi_slopes == NULL, "modifier defaults");
  p = make_problem();
  memset(out, 0, sizeof out);
  CHECK(attn_attention(&p, NULL) == ATTN_OK, "plain: %s", attn_last_error());
  static float plain[B][TQ][HQ][DV];
  memcpy(plain, out, sizeof out);
  static const float sinks[HQ] = {0.0f};
  p.sinks = sinks;
  p.sinks_size = HQ;
  p.window_left = 1;
  CHECK(attn_attention(&p, NULL) == ATTN_OK, "modified: %s", attn_last_error());
  CHECK(memcmp(plain, out, sizeof out) != 0, "the window and sinks changed nothing");
  p.softcap = -1.0f;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "softcap -1 accepted");
  CHECK(strstr(attn_last_error(), "softcap") != NULL, "message: %s", attn_last_error());
  p.softcap = 0.0f;
  p.sinks_size = HQ + 1;
  CHECK(attn_attention(&p, NULL) == ATTN_INVALID_ARGUMENT, "sinks_size accepted");
  CHECK(strstr(attn_last_error(), "sinks.size") != NULL, "message: %s", attn_last_error());
}

/* The bf16 dot-product path from C: per call (attn_options_t.dot_path) and
 * for the process (attn_force_dot_path), on the float32 problem rounded to
 * bf16 (round_inputs_to_bf16), which is what the bf16 paths take. The
 * emulated AVX512-BF16 path rounds P to bf16 and widen does not, so their
 * outputs differ; the forced path gives the per-call path's bits. */
static void test_dot_path(void) {
  attn_options_t o;
  attn_options_init(&o);
  CHECK(o.dot_path == NULL, "dot_path defaults to %s", o.dot_path);
  o.round_inputs_to_bf16 = 1;
  attn_problem_t p = make_problem();
  static float widened[B][TQ][HQ][DV], emulated[B][TQ][HQ][DV];
  o.dot_path = "widen";
  CHECK(attn_attention(&p, &o) == ATTN_OK, "widen: %s", attn_last_error());
  memcpy(widened, out, sizeof out);
  o.dot_path = "avx512bf16-emulated";
  CHECK(attn_attention(&p, &o) == ATTN_OK, "emulated: %s", attn_last_error());
  memcpy(emulated, out, sizeof out);
  CHECK(memcmp(widened, emulated, sizeof out) != 0, "dot_path changed nothing");

  o.dot_path = "NOPE";
  memset(out, 0x7F, sizeof out);
  static float sentinel[B][TQ][HQ][DV];
  memcpy(sentinel, out, sizeof out);
  CHECK(attn_attention(&p, &o) == ATTN_INVALID_ARGUMENT, "dot_path NOPE accepted");
  CHECK(strstr(attn_last_error(), "dot path must be one of") != NULL &&
            strstr(attn_last_error(), "NOPE") != NULL,
        "message: %s", attn_last_error());
  CHECK(memcmp(out, sentinel, sizeof out) == 0, "a refused call wrote the output");

  CHECK(attn_force_dot_path(NULL) == ATTN_INVALID_ARGUMENT, "null dot path accepted");
  CHECK(attn_force_dot_path("NOPE") == ATTN_INVALID_ARGUMENT, "dot path NOPE accepted");
  CHECK(attn_force_dot_path("avx512bf16-emulated") == ATTN_OK, "force: %s", attn_last_error());
  CHECK(strcmp(attn_current_dot_path(), "avx512bf16-emulated") == 0, "current: %s",
        attn_current_dot_path());
  o.dot_path = NULL;
  CHECK(attn_attention(&p, &o) == ATTN_OK, "forced: %s", attn_last_error());
  CHECK(memcmp(out, emulated, sizeof out) == 0, "the forced path is not the per-call one");
  CHECK(attn_force_dot_path("auto") == ATTN_OK, "auto: %s", attn_last_error());
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
  test_bit_helpers();
  test_16bit(ATTN_BF16, ATTN_BF16, ATTN_BF16);
  test_16bit(ATTN_F16, ATTN_F16, ATTN_F16);
  test_16bit(ATTN_F32, ATTN_F16, ATTN_BF16); /* mixed: each tensor its own type */
  test_16bit(ATTN_BF16, ATTN_F16, ATTN_F32);
  test_invalid_dtype();
  test_round_inputs_to_bf16();
  test_dot_path();
  test_score_modifiers();
  test_q8_0();
  test_q4_0();
  test_tuning_file_errors_are_statuses();
  CHECK(strlen(attn_version()) > 0, "empty version");
  CHECK(strlen(attn_current_target()) > 0, "empty target");

  printf("c_api_test on %s: %d checks, %d failed\n", attn_current_target(), checks, failures);
  return failures == 0 ? 0 : 1;
}
