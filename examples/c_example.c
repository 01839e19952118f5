/* attn from C: two query heads sharing one KV head, through attn_c.h.
 * Build with CMake (link attn::attn; enable CXX in the project) or with
 * pkg-config:  cc c_example.c $(pkg-config --cflags --libs attn) */
#include <attn/attn_c.h>
#include <stdio.h>

enum { T = 4, D = 8 };

int main(void) {
  float q[2][T][D], k[T][D], v[T][D], out[2][T][D];
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < D; ++j) {
      q[0][i][j] = q[1][i][j] = 0.1f * (float)(i - j);
      k[i][j] = 0.05f * (float)(i + j);
      v[i][j] = (float)i; /* row i of V holds the value i */
    }

  attn_problem_t p;
  attn_problem_init(&p); /* defaults: batch 1, 1 head, no mask, ... */
  p.q_heads = 2;
  p.kv_heads = 1;
  p.q_len = p.kv_len = T;
  p.head_dim = D;
  /* {data, batch_stride, head_stride, row_stride}, in elements */
  p.q = (attn_tensor_t){&q[0][0][0], 2 * T * D, T * D, D};
  p.k = (attn_tensor_t){&k[0][0], T * D, T * D, D};
  p.v = (attn_tensor_t){&v[0][0], T * D, T * D, D};
  p.out = (attn_out_tensor_t){&out[0][0][0], 2 * T * D, T * D, D};
  p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;

  if (attn_attention(&p, NULL) != ATTN_OK) {
    fprintf(stderr, "%s\n", attn_last_error());
    return 1;
  }
  /* Query 0 sees only key 0 (value 0); later queries average over more rows. */
  printf("c_example: attn %s on %s, out[head 1][row i][0] =", attn_version(),
         attn_current_target());
  for (int i = 0; i < T; ++i) printf(" %.3f", out[1][i][0]);
  printf("\n");

  p.kv_heads = 3; /* invalid on purpose: the message names the field and value */
  if (attn_attention(&p, NULL) != ATTN_INVALID_ARGUMENT) return 1;
  printf("c_example: expected error: %s\n", attn_last_error());
  return out[1][0][0] == 0.0f ? 0 : 1;
}
