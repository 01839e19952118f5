/**
 * @file attn_c.h
 * @brief The C API of attn: plain structs and status codes over attn.h.
 *
 * For C programs and for any language with a C foreign-function interface
 * (Rust, Python ctypes, Go cgo, ...). Every function returns a status and
 * never lets a C++ exception escape; after a failure attn_last_error()
 * describes it, naming the bad field and its value exactly as the C++ API
 * does (for example "attn: kv_heads must divide q_heads (8), got 3").
 *
 * The structs mirror attn::Problem and attn::Options field by field; start
 * from attn_problem_init() / attn_options_init() so that fields added in a
 * later version get their defaults. Strides are in elements, not bytes.
 *
 * Link: libattn.a is C++ with OpenMP, so link a C program with the C++
 * driver or add the C++ runtime (`pkg-config --libs attn` lists it; with
 * CMake, enable CXX in the project and link attn::attn).
 */
#ifndef ATTN_ATTN_C_H_
#define ATTN_ATTN_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every C API call. */
typedef enum attn_status_t {
  ATTN_OK = 0,               /**< success */
  ATTN_INVALID_ARGUMENT = 1, /**< a field is invalid; nothing was written */
  ATTN_OUT_OF_MEMORY = 2,    /**< scratch memory could not be allocated */
  ATTN_INTERNAL = 3          /**< a bug in attn; please report the message */
} attn_status_t;

/** Causal masking; see attn::Causal. */
typedef enum attn_causal_t {
  ATTN_CAUSAL_NONE = 0,
  /** Query i sees keys j <= (kv_len - q_len) + i (KV-cache alignment). */
  ATTN_CAUSAL_BOTTOM_RIGHT = 1,
  /** Query i sees keys j <= i (PyTorch's is_causal=True). */
  ATTN_CAUSAL_TOP_LEFT = 2
} attn_causal_t;

/** Kernel choice; see attn::KernelId. */
typedef enum attn_kernel_t {
  ATTN_KERNEL_AUTO = 0, /**< the tuning table's choice, else the default rule */
  ATTN_KERNEL_NAIVE = 1,
  ATTN_KERNEL_BLOCKED = 2,
  ATTN_KERNEL_STREAMING = 3,
  ATTN_KERNEL_PARALLEL = 4
} attn_kernel_t;

/** Element type of Q, K, V and O; see attn::DType. 0 (the default) is f32. */
typedef enum attn_dtype_t {
  ATTN_F32 = 0,  /**< IEEE binary32 */
  ATTN_BF16 = 1, /**< bfloat16 (uint16_t bit patterns) */
  ATTN_F16 = 2,  /**< IEEE binary16 (uint16_t bit patterns, or _Float16) */
  /** ggml's q8_0 blocks, K and V only (llama.cpp's block_q8_0: 32 elements
   * in 34 bytes, a binary16 scale then 32 int8). Rows (head_dim, value_dim)
   * and strides are multiples of 32 elements; an offset of e elements is
   * e / 32 * 34 bytes. */
  ATTN_Q8_0 = 3,
  /** ggml's q4_0 blocks, K and V only (llama.cpp's block_q4_0: 32 elements
   * in 18 bytes, a binary16 scale d then 16 bytes, low nibbles elements
   * 0-15, high nibbles 16-31, each (n - 8) * d). Rows and strides as q8_0's;
   * an offset of e elements is e / 32 * 18 bytes. */
  ATTN_Q4_0 = 4
} attn_dtype_t;

/** Read-only tensor [batch, heads, rows, cols], cols contiguous, of element
 * type dtype (strides in elements). */
typedef struct attn_tensor_t {
  const void* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
  attn_dtype_t dtype;
} attn_tensor_t;

/** Writable tensor (the output), same layout rules as attn_tensor_t. */
typedef struct attn_out_tensor_t {
  void* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
  attn_dtype_t dtype;
} attn_out_tensor_t;

/** Additive mask M[b][h][i][j]; data NULL means none; strides may be 0. */
typedef struct attn_mask_t {
  const float* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
  int64_t col_stride;
} attn_mask_t;

/** Optional log-sum-exp output lse[b][h][i]; data NULL means not wanted. */
typedef struct attn_lse_t {
  float* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
} attn_lse_t;

/** One attention problem; the C form of attn::Problem. */
typedef struct attn_problem_t {
  int64_t batch;     /**< default 1 */
  int64_t q_heads;   /**< default 1 */
  int64_t kv_heads;  /**< default 1; must divide q_heads */
  int64_t q_len;     /**< T_q */
  int64_t kv_len;    /**< T_k */
  int64_t head_dim;  /**< d of Q and K */
  int64_t value_dim; /**< d_v of V and O; 0 means head_dim */
  attn_tensor_t q;   /**< [batch, q_heads, q_len, head_dim] */
  attn_tensor_t k;   /**< [batch, kv_heads, kv_len, head_dim] */
  attn_tensor_t v;   /**< [batch, kv_heads, kv_len, value_dim] */
  attn_out_tensor_t out; /**< [batch, q_heads, q_len, value_dim] */
  float scale;       /**< used when has_scale is non-zero */
  int has_scale;     /**< 0: scale = 1/sqrt(head_dim) */
  attn_causal_t causal;
  attn_mask_t mask;
  attn_lse_t lse;
  /** Score modifiers (attn.h "Score modifiers", FlashAttention's
   * conventions): a sliding window of window_left / window_right keys around
   * each row's diagonal (-1, the default: unbounded); softcap (0: none);
   * sinks[q_heads] logits that join each row's normaliser (NULL: none;
   * sinks_size must be q_heads); alibi_slopes[b * alibi_batch_stride + h]
   * (NULL: none; stride 0 or >= q_heads). */
  int64_t window_left;
  int64_t window_right;
  float softcap;
  const float* sinks;
  int64_t sinks_size;
  const float* alibi_slopes;
  int64_t alibi_batch_stride;
} attn_problem_t;

/** Run options; the C form of attn::Options. */
typedef struct attn_options_t {
  attn_kernel_t kernel; /**< default ATTN_KERNEL_AUTO */
  int threads;          /**< 0: OpenMP's default */
  int q_block;          /**< tile overrides; 0 = the default for the shape */
  int kv_block;
  int kv_splits;
  /** Nonzero: round float32 / f16 q, k, v to bf16 first and compute with the
   * bf16 dot-product paths (attn::Options::round_inputs_to_bf16); default 0. */
  int round_inputs_to_bf16;
  /** The bf16 dot-product path of this call (attn::Options::dot_path:
   * "widen", "avx512bf16", "amx", "bfdot", "avx512bf16-emulated", ...; see
   * attn_force_dot_path); NULL or "": attn's choice. A name that cannot run
   * here fails the call with ATTN_INVALID_ARGUMENT. */
  const char* dot_path;
  /** The decode walk the narrow views try first (attn::Options::decode_walk:
   * "row", "pipelined", "tiled", "pair-row", "pair-tiled", "amx-tiles");
   * NULL or "": the table's order. An unknown name fails the call with
   * ATTN_INVALID_ARGUMENT. */
  const char* decode_walk;
} attn_options_t;

/** Sets every field to its default (batch = heads = 1, mask col_stride 1,
 * lse row_stride 1, window -1 / -1, every dtype ATTN_F32, everything else
 * 0/NULL). */
void attn_problem_init(attn_problem_t* problem);
/** Sets every field to its default (auto kernel, default threads/tiles). */
void attn_options_init(attn_options_t* options);

/** Computes attention. options may be NULL (defaults). On any status other
 * than ATTN_OK nothing was written to out or lse. */
attn_status_t attn_attention(const attn_problem_t* problem, const attn_options_t* options);

/** The message of the last failed call on this thread ("" after a call that
 * succeeded). The pointer is valid until the next attn_* call on the thread. */
const char* attn_last_error(void);

/** Loads a tuning file for ATTN_KERNEL_AUTO (see attn/tuning.h). A bad file
 * is not an error: it is ignored and the default rule stays in use, with
 * the reason in attn_last_error(); returns ATTN_OK when the table loaded and
 * ATTN_INVALID_ARGUMENT when it was ignored. */
attn_status_t attn_load_tuning_file(const char* path);

/** The SIMD target the kernels use now (e.g. "AVX2", "NEON"). Static string. */
const char* attn_current_target(void);
/** Forces a SIMD target for the process ("" or "auto": the best supported). */
attn_status_t attn_force_target(const char* name);

/** The bf16 dot-product path all-bf16 calls take now (ATTN_DOT_PATH,
 * attn_force_dot_path, or the default). Static string. */
const char* attn_current_dot_path(void);
/** Forces a bf16 dot-product path for the process (attn::ForceDotPath: "" or
 * "auto" the default, never an emulation; "widen" turns the bf16 paths off).
 * ATTN_INVALID_ARGUMENT for an unknown name or one that cannot run here. */
attn_status_t attn_force_dot_path(const char* name);

/** The library version, e.g. "0.1.0". Static string. */
const char* attn_version(void);

/** ggml's q8_0 quantiser (attn::QuantizeQ8_0, its quantize_row_q8_0_ref):
 * n floats (a multiple of 32, finite, each block's max |x| / 127 within
 * binary16's range) into n / 32 * 34 bytes at out. Nothing is written on
 * any status other than ATTN_OK. */
attn_status_t attn_quantize_q8_0(const float* x, int64_t n, void* out);
/** The values of n elements (a multiple of 32) of q8_0 blocks: out[i] =
 * int8 * scale, exactly. */
attn_status_t attn_dequantize_q8_0(const void* blocks, int64_t n, float* out);
/** ggml's q4_0 quantiser (attn::QuantizeQ4_0, its quantize_row_q4_0_ref):
 * n floats (a multiple of 32, finite, each block's max |x| / 8 within
 * binary16's range) into n / 32 * 18 bytes at out. Nothing is written on
 * any status other than ATTN_OK. */
attn_status_t attn_quantize_q4_0(const float* x, int64_t n, void* out);
/** The values of n elements (a multiple of 32) of q4_0 blocks: out[i] =
 * (nibble - 8) * scale, exactly. */
attn_status_t attn_dequantize_q4_0(const void* blocks, int64_t n, float* out);

/* ---- Serving calls: variable-length batches and paged KV caches ----------
 * The C forms of attn::VarlenProblem / attn::PagedProblem (attn/serving.h,
 * where every convention is stated): FlashAttention's flash_attn_varlen_func
 * and flash_attn_with_kvcache. Start from the _init functions. */

/** Packed tensor [tokens, heads, cols], cols contiguous (strides in elements). */
typedef struct attn_packed_tensor_t {
  const void* data;
  int64_t token_stride;
  int64_t head_stride;
  attn_dtype_t dtype;
} attn_packed_tensor_t;

/** Writable packed tensor (the output). */
typedef struct attn_packed_out_t {
  void* data;
  int64_t token_stride;
  int64_t head_stride;
  attn_dtype_t dtype;
} attn_packed_out_t;

/** Optional packed lse[token][head] (float32); data NULL means not wanted. */
typedef struct attn_packed_lse_t {
  float* data;
  int64_t token_stride;
  int64_t head_stride;
} attn_packed_lse_t;

/** A variable-length batch; see attn::VarlenProblem. */
typedef struct attn_varlen_problem_t {
  int64_t batch;     /**< sequences; the offsets have batch + 1 entries */
  int64_t q_heads;   /**< default 1 */
  int64_t kv_heads;  /**< default 1; must divide q_heads */
  int64_t head_dim;
  int64_t value_dim; /**< 0 means head_dim */
  const int32_t* cu_seqlens_q; /**< cumulative query offsets, from 0, non-decreasing */
  const int32_t* cu_seqlens_k; /**< cumulative key offsets */
  int64_t max_seqlen_q;        /**< > 0: every T_q must be <= it; 0: not checked */
  int64_t max_seqlen_k;
  attn_packed_tensor_t q;      /**< [total_q, q_heads, head_dim] */
  attn_packed_tensor_t k;      /**< [total_k, kv_heads, head_dim] */
  attn_packed_tensor_t v;      /**< [total_k, kv_heads, value_dim] */
  attn_packed_out_t out;       /**< [total_q, q_heads, value_dim] */
  attn_packed_lse_t lse;       /**< optional [total_q, q_heads] */
  float scale;
  int has_scale;               /**< 0: scale = 1/sqrt(head_dim) */
  attn_causal_t causal;        /**< per sequence, on its own T_q and T_k */
  /** Score modifiers, per sequence on its own T_q and T_k (attn_problem_t's
   * fields; attn::VarlenProblem): window -1 / -1 (the default) unbounded,
   * softcap 0 none, sinks[q_heads] (NULL: none),
   * alibi_slopes[b * alibi_batch_stride + h] (NULL: none; b the sequence). */
  int64_t window_left;
  int64_t window_right;
  float softcap;
  const float* sinks;
  int64_t sinks_size;
  const float* alibi_slopes;
  int64_t alibi_batch_stride;
} attn_varlen_problem_t;

/** A page pool [num_blocks, block_size, kv_heads, cols]; see attn::PagePool. */
typedef struct attn_page_pool_t {
  void* data; /**< written only when new tokens are appended */
  int64_t block_stride;
  int64_t row_stride;
  int64_t head_stride;
  attn_dtype_t dtype;
} attn_page_pool_t;

/** Attention over a paged KV cache; see attn::PagedProblem. */
typedef struct attn_paged_problem_t {
  int64_t batch;
  int64_t q_heads;   /**< default 1 */
  int64_t kv_heads;  /**< default 1 */
  int64_t head_dim;
  int64_t value_dim; /**< 0 means head_dim */
  int64_t num_blocks;
  int64_t block_size;
  attn_page_pool_t k_cache;
  attn_page_pool_t v_cache;
  const int32_t* block_table;  /**< [batch, max_blocks] (row stride block_table_stride) */
  int64_t max_blocks;
  int64_t block_table_stride;  /**< 0: max_blocks */
  const int32_t* cache_seqlens; /**< [batch] tokens already cached */
  attn_packed_tensor_t q;       /**< [total_q, q_heads, head_dim] */
  const int32_t* cu_seqlens_q;  /**< NULL: q_len queries per sequence */
  int64_t q_len;
  attn_packed_tensor_t k_new;   /**< optional new tokens appended first */
  attn_packed_tensor_t v_new;
  const int32_t* cu_seqlens_new; /**< NULL: new_len new tokens per sequence */
  int64_t new_len;
  attn_packed_out_t out;        /**< [total_q, q_heads, value_dim] */
  attn_packed_lse_t lse;        /**< optional [total_q, q_heads] */
  float scale;
  int has_scale;
  attn_causal_t causal;
  /** Score modifiers, per sequence on its own T_q and T_k (attn_problem_t's
   * fields; attn::PagedProblem): window -1 / -1 (the default) unbounded,
   * softcap 0 none, sinks[q_heads] (NULL: none),
   * alibi_slopes[b * alibi_batch_stride + h] (NULL: none; b the sequence). */
  int64_t window_left;
  int64_t window_right;
  float softcap;
  const float* sinks;
  int64_t sinks_size;
  const float* alibi_slopes;
  int64_t alibi_batch_stride;
} attn_paged_problem_t;

/** Defaults: heads 1, lse head_stride 1, window -1 / -1, every dtype
 * ATTN_F32, the rest 0/NULL. */
void attn_varlen_problem_init(attn_varlen_problem_t* problem);
void attn_paged_problem_init(attn_paged_problem_t* problem);

/** attn::VarlenAttention. On any status other than ATTN_OK nothing was written. */
attn_status_t attn_varlen_attention(const attn_varlen_problem_t* problem,
                                    const attn_options_t* options);
/** attn::PagedAttention (append, then attention). On any status other than
 * ATTN_OK nothing was written: not the output, the lse or the pool. */
attn_status_t attn_paged_attention(const attn_paged_problem_t* problem,
                                   const attn_options_t* options);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* ATTN_ATTN_C_H_ */
