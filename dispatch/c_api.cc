// The C API (include/attn/attn_c.h): converts the plain structs to the C++
// ones and turns every exception into a status plus a thread-local message,
// because unwinding through a C (or Rust, or ctypes) caller is undefined.
#include "attn/attn_c.h"

#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <type_traits>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "dispatch/kernel_table.h"

namespace {

thread_local std::string last_error;

attn_status_t Fail(attn_status_t status, std::string message) {
  // Assigning may itself allocate; if it cannot, an empty message is still
  // better than letting bad_alloc escape into C.
  try {
    last_error = std::move(message);
  } catch (...) {
    last_error.clear();
  }
  return status;
}

attn_status_t Ok() {
  last_error.clear();
  return ATTN_OK;
}

attn_status_t InvalidField(const char* field, long long value, const char* why) {
  return Fail(ATTN_INVALID_ARGUMENT, std::string("attn: ") + field + " " + why + ", got " +
                                         std::to_string(value));
}

// Runs `body`, mapping what it throws to a status. attn::Error is the
// library's "bad input" (its "memory" field marks scratch exhaustion).
template <typename F>
attn_status_t Guard(F&& body) {
  try {
    body();
    return Ok();
  } catch (const attn::Error& e) {
    return Fail(e.field() == "memory" ? ATTN_OUT_OF_MEMORY : ATTN_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return Fail(ATTN_OUT_OF_MEMORY, "attn: out of memory, got std::bad_alloc");
  } catch (const std::exception& e) {
    return Fail(ATTN_INTERNAL, std::string("attn: internal error: ") + e.what());
  } catch (...) {
    return Fail(ATTN_INTERNAL, "attn: internal error: unknown exception");
  }
}

// A C caller may store any int in an enum field, but loading a value outside
// the enumerators as the C++ enum type is undefined behaviour (UBSan flags
// it), so the field's bits are read as its underlying integer instead.
template <typename E>
long long RawEnum(const E& field) {
  std::underlying_type_t<E> value;
  std::memcpy(&value, &field, sizeof value);
  return static_cast<long long>(value);
}

// attn::DType has a fixed underlying type (int): every value converts, and
// attn::attention rejects one outside the enumerators, naming the field.
attn::DType ToCxx(const attn_dtype_t& type) {
  return static_cast<attn::DType>(RawEnum(type));
}
attn::ConstTensor ToCxx(const attn_tensor_t& t) {
  return {t.data, t.batch_stride, t.head_stride, t.row_stride, ToCxx(t.dtype)};
}

attn::PackedTensor ToCxx(const attn_packed_tensor_t& t) {
  return {t.data, t.token_stride, t.head_stride, ToCxx(t.dtype)};
}
attn::PackedOutput ToCxx(const attn_packed_out_t& t) {
  return {t.data, t.token_stride, t.head_stride, ToCxx(t.dtype)};
}
attn::PagePool ToCxx(const attn_page_pool_t& t) {
  return {t.data, t.block_stride, t.row_stride, t.head_stride, ToCxx(t.dtype)};
}

// The C causal and options, as attn_attention checks and converts them;
// false (with the status in *status) for a value outside the enums.
bool CausalFromC(const attn_causal_t& field, attn::Causal* causal, attn_status_t* status) {
  const long long value = RawEnum(field);
  if (value < ATTN_CAUSAL_NONE || value > ATTN_CAUSAL_TOP_LEFT) {
    *status = InvalidField("causal", value, "must be 0..2 (attn_causal_t)");
    return false;
  }
  static constexpr attn::Causal kCausal[] = {attn::Causal::kNone, attn::Causal::kBottomRight,
                                             attn::Causal::kTopLeft};
  *causal = kCausal[value];
  return true;
}
bool OptionsFromC(const attn_options_t* co, attn::Options* options, attn_status_t* status) {
  attn_options_t defaults;
  attn_options_init(&defaults);
  const attn_options_t& o = co != nullptr ? *co : defaults;
  if (!attn::internal::KernelFromC(RawEnum(o.kernel), &options->kernel)) {
    *status = InvalidField("kernel", RawEnum(o.kernel), "must name a kernel (attn_kernel_t)");
    return false;
  }
  options->threads = o.threads;
  options->tiles.q_block = o.q_block;
  options->tiles.kv_block = o.kv_block;
  options->tiles.kv_splits = o.kv_splits;
  options->round_inputs_to_bf16 = o.round_inputs_to_bf16 != 0;
  // NULL or "" leaves the choice to attn (attn.h "bf16 dot-product paths");
  // a name that cannot run here is the call's Error (field "dot_path").
  if (o.dot_path != nullptr) options->dot_path = o.dot_path;
  if (o.decode_walk != nullptr) options->decode_walk = o.decode_walk;
  return true;
}

// Pointers into a small interned set, so the C caller gets a string that
// stays valid for the life of the process.
const char* Intern(const std::string& s) {
  static std::mutex mu;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  return names.insert(s).first->c_str();
}

// The score modifier fields, which the C problems of the serving calls
// spell as attn_problem_t does.
template <class CProblem, class Problem>
void SetModifiers(const CProblem& cp, Problem& p) {
  p.window = {cp.window_left, cp.window_right};
  p.softcap = cp.softcap;
  p.sinks = {cp.sinks, cp.sinks_size};
  p.alibi_slopes = {cp.alibi_slopes, cp.alibi_batch_stride};
}
}  // namespace

extern "C" {

void attn_problem_init(attn_problem_t* p) {
  if (p == nullptr) return;
  *p = attn_problem_t{};
  p->batch = p->q_heads = p->kv_heads = 1;
  p->causal = ATTN_CAUSAL_NONE;
  p->mask.col_stride = 1;
  p->lse.row_stride = 1;
  p->window_left = p->window_right = -1;
}

void attn_options_init(attn_options_t* o) {
  if (o == nullptr) return;
  *o = attn_options_t{};
  o->kernel = ATTN_KERNEL_AUTO;
}

attn_status_t attn_attention(const attn_problem_t* cp, const attn_options_t* co) {
  if (cp == nullptr) {
    return Fail(ATTN_INVALID_ARGUMENT, "attn: problem must not be null, got null");
  }
  const long long causal = RawEnum(cp->causal);
  if (causal < ATTN_CAUSAL_NONE || causal > ATTN_CAUSAL_TOP_LEFT) {
    return InvalidField("causal", causal, "must be 0..2 (attn_causal_t)");
  }
  attn::Options opt;
  attn_status_t status = ATTN_OK;
  if (!OptionsFromC(co, &opt, &status)) return status;
  return Guard([&] {
    attn::Problem p;
    p.batch = cp->batch;
    p.q_heads = cp->q_heads;
    p.kv_heads = cp->kv_heads;
    p.q_len = cp->q_len;
    p.kv_len = cp->kv_len;
    p.head_dim = cp->head_dim;
    if (cp->value_dim != 0) p.value_dim = cp->value_dim;
    p.q = ToCxx(cp->q);
    p.k = ToCxx(cp->k);
    p.v = ToCxx(cp->v);
    p.out = {cp->out.data, cp->out.batch_stride, cp->out.head_stride, cp->out.row_stride,
             ToCxx(cp->out.dtype)};
    if (cp->has_scale) p.scale = cp->scale;
    static constexpr attn::Causal kCausal[] = {attn::Causal::kNone, attn::Causal::kBottomRight,
                                               attn::Causal::kTopLeft};
    p.causal = kCausal[causal];
    p.mask = {cp->mask.data, cp->mask.batch_stride, cp->mask.head_stride, cp->mask.row_stride,
              cp->mask.col_stride};
    p.lse = {cp->lse.data, cp->lse.batch_stride, cp->lse.head_stride, cp->lse.row_stride};
    p.window = {cp->window_left, cp->window_right};
    p.softcap = cp->softcap;
    p.sinks = {cp->sinks, cp->sinks_size};
    p.alibi_slopes = {cp->alibi_slopes, cp->alibi_batch_stride};

    attn::attention(p, opt);
  });
}

void attn_varlen_problem_init(attn_varlen_problem_t* p) {
  if (p == nullptr) return;
  *p = attn_varlen_problem_t{};
  p->q_heads = p->kv_heads = 1;
  p->causal = ATTN_CAUSAL_NONE;
  p->lse.head_stride = 1;
  p->window_left = p->window_right = -1;
}

void attn_paged_problem_init(attn_paged_problem_t* p) {
  if (p == nullptr) return;
  *p = attn_paged_problem_t{};
  p->q_heads = p->kv_heads = 1;
  p->causal = ATTN_CAUSAL_NONE;
  p->lse.head_stride = 1;
  p->window_left = p->window_right = -1;
}

attn_status_t attn_varlen_attention(const attn_varlen_problem_t* cp, const attn_options_t* co) {
  if (cp == nullptr) {
    return Fail(ATTN_INVALID_ARGUMENT, "attn: problem must not be null, got null");
  }
  attn_status_t status = ATTN_OK;
  attn::VarlenProblem p;
  attn::Options options;
  if (!CausalFromC(cp->causal, &p.causal, &status)) return status;
  if (!OptionsFromC(co, &options, &status)) return status;
  return Guard([&] {
    p.batch = cp->batch;
    p.q_heads = cp->q_heads;
    p.kv_heads = cp->kv_heads;
    p.head_dim = cp->head_dim;
    if (cp->value_dim != 0) p.value_dim = cp->value_dim;
    p.cu_seqlens_q = cp->cu_seqlens_q;
    p.cu_seqlens_k = cp->cu_seqlens_k;
    p.max_seqlen_q = cp->max_seqlen_q;
    p.max_seqlen_k = cp->max_seqlen_k;
    p.q = ToCxx(cp->q);
    p.k = ToCxx(cp->k);
    p.v = ToCxx(cp->v);
    p.out = ToCxx(cp->out);
    p.lse = {cp->lse.data, cp->lse.token_stride, cp->lse.head_stride};
    if (cp->has_scale) p.scale = cp->scale;
    SetModifiers(*cp, p);
    attn::VarlenAttention(p, options);
  });
}

attn_status_t attn_paged_attention(const attn_paged_problem_t* cp, const attn_options_t* co) {
  if (cp == nullptr) {
    return Fail(ATTN_INVALID_ARGUMENT, "attn: problem must not be null, got null");
  }
  attn_status_t status = ATTN_OK;
  attn::PagedProblem p;
  attn::Options options;
  if (!CausalFromC(cp->causal, &p.causal, &status)) return status;
  if (!OptionsFromC(co, &options, &status)) return status;
  return Guard([&] {
    p.batch = cp->batch;
    p.q_heads = cp->q_heads;
    p.kv_heads = cp->kv_heads;
    p.head_dim = cp->head_dim;
    if (cp->value_dim != 0) p.value_dim = cp->value_dim;
    p.num_blocks = cp->num_blocks;
    p.block_size = cp->block_size;
    p.k_cache = ToCxx(cp->k_cache);
    p.v_cache = ToCxx(cp->v_cache);
    p.block_table = cp->block_table;
    p.max_blocks = cp->max_blocks;
    p.block_table_stride = cp->block_table_stride;
    p.cache_seqlens = cp->cache_seqlens;
    p.q = ToCxx(cp->q);
    p.cu_seqlens_q = cp->cu_seqlens_q;
    p.q_len = cp->q_len;
    p.k_new = ToCxx(cp->k_new);
    p.v_new = ToCxx(cp->v_new);
    p.cu_seqlens_new = cp->cu_seqlens_new;
    p.new_len = cp->new_len;
    p.out = ToCxx(cp->out);
    p.lse = {cp->lse.data, cp->lse.token_stride, cp->lse.head_stride};
    if (cp->has_scale) p.scale = cp->scale;
    SetModifiers(*cp, p);
    attn::PagedAttention(p, options);
  });
}

const char* attn_last_error(void) { return last_error.c_str(); }

attn_status_t attn_load_tuning_file(const char* path) {
  if (path == nullptr) {
    return Fail(ATTN_INVALID_ARGUMENT, "attn: path must not be null, got null");
  }
  std::string warning;
  const attn_status_t status = Guard([&] { warning = attn::LoadTuningFile(path).warning; });
  if (status != ATTN_OK) return status;
  if (!warning.empty()) return Fail(ATTN_INVALID_ARGUMENT, warning);
  return Ok();
}

const char* attn_current_target(void) {
  const char* name = "";
  Guard([&] { name = Intern(attn::CurrentTarget()); });
  return name;
}

attn_status_t attn_force_target(const char* name) {
  if (name == nullptr) {
    return Fail(ATTN_INVALID_ARGUMENT, "attn: target must not be null, got null");
  }
  return Guard([&] { attn::ForceTarget(name); });
}

const char* attn_current_dot_path(void) {
  const char* name = "";
  Guard([&] { name = Intern(attn::CurrentDotPath()); });
  return name;
}

attn_status_t attn_force_dot_path(const char* name) {
  if (name == nullptr) {
    return Fail(ATTN_INVALID_ARGUMENT, "attn: dot_path must not be null, got null");
  }
  return Guard([&] { attn::ForceDotPath(name); });
}

const char* attn_version(void) { return ATTN_VERSION; }

attn_status_t attn_quantize_q8_0(const float* x, int64_t n, void* out) {
  return Guard([&] { attn::QuantizeQ8_0(x, n, out); });
}

attn_status_t attn_dequantize_q8_0(const void* blocks, int64_t n, float* out) {
  return Guard([&] { attn::DequantizeQ8_0(blocks, n, out); });
}

attn_status_t attn_quantize_q4_0(const float* x, int64_t n, void* out) {
  return Guard([&] { attn::QuantizeQ4_0(x, n, out); });
}

attn_status_t attn_dequantize_q4_0(const void* blocks, int64_t n, float* out) {
  return Guard([&] { attn::DequantizeQ4_0(blocks, n, out); });
}

}  // extern "C"
