// The Python module attn._attn: attention on NumPy (or any DLPack / buffer
// protocol) arrays of float32, float16 or bfloat16 (ml_dtypes), read and
// written in place through their strides, K and V also as ggml's q8_0 or
// q4_0 blocks (uint8 arrays, k_dtype= / v_dtype= 'q8_0' / 'q4_0'), ggml's
// quantisers, plus the tuning and target APIs.
//
// Arrays are taken untyped and checked here rather than declared as
// ndarray<float>: a typed parameter lets nanobind silently convert (copy) a
// float64 or non-CPU array, and a copy is exactly what this module promises
// never to make.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "attn/attn.h"
#include "attn/serving.h"
#include "attn/tuning.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

// An array of 1..4 dims seen as 4 dims [batch, heads, rows, cols]: missing
// leading dims have extent 1 (and stride 0, which the library accepts as
// broadcast).
struct View4 {
  void* data = nullptr;
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  std::array<int64_t, 4> stride{0, 0, 0, 0};
  size_t ndim = 0;
};

[[noreturn]] void Raise(const std::string& message) { throw nb::value_error(message.c_str()); }

std::string Shape(const View4& v) {
  std::string s = "(";
  for (size_t i = 4 - v.ndim; i < 4; ++i) {
    s += std::to_string(v.shape[i]);
    s += (i + 1 < 4) ? ", " : (v.ndim == 1 ? ",)" : ")");
  }
  return s;
}

// NumPy's spelling of a DLPack dtype, for messages ("float64", "int32").
std::string DtypeName(const nb::dlpack::dtype& dt) {
  static const char* const kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex",
                                       "bool"};
  const std::string base = dt.code < 7 ? kCodes[dt.code] : "code" + std::to_string(dt.code);
  return base + std::to_string(dt.bits) + (dt.lanes > 1 ? "x" + std::to_string(dt.lanes) : "");
}

nb::module_ Numpy() { return nb::module_::import_("numpy"); }

const char* NumpyName(attn::DType dtype) {
  switch (dtype) {
    case attn::DType::kF32: return "float32";
    case attn::DType::kBF16: return "bfloat16";
    case attn::DType::kF16: return "float16";
    case attn::DType::kQ8_0: return "q8_0";
    case attn::DType::kQ4_0: return "q4_0";
  }
  return "?";
}

// The mask and lse are float32 whatever the element types of Q, K, V and O.
template <typename Array>
void RequireFloat32(const char* name, const Array& a) {
  if (a.dtype() != nb::dtype<float>()) {
    throw nb::type_error((std::string("attn: ") + name + " must be float32, got " +
                          DtypeName(a.dtype()) + " (convert with .astype(numpy.float32))")
                             .c_str());
  }
}

template <typename Array>
View4 AsView(const char* name, const Array& a, size_t min_ndim) {
  View4 v;
  v.ndim = a.ndim();
  if (v.ndim < min_ndim || v.ndim > 4) {
    Raise(std::string("attn: ") + name + " must have " + std::to_string(min_ndim) +
          " to 4 dimensions, got " + std::to_string(v.ndim));
  }
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  for (size_t i = 0; i < v.ndim; ++i) {
    v.shape[4 - v.ndim + i] = static_cast<int64_t>(a.shape(i));
    v.stride[4 - v.ndim + i] = a.stride(i);
  }
  return v;
}

// An array with a zero extent gets the library's own message for that field
// ("attn: q_len must be >= 1, got 0"), checked before anything reads its
// strides (an empty array's strides are whatever its producer chose: DLPack
// exporters report 0 or 1 for them). `fields` names shape[-4..-1] of `name`.
void RequireNonEmpty(const char* name, const View4& v, const std::array<const char*, 4>& fields) {
  for (size_t i = 4 - v.ndim; i < 4; ++i) {
    if (v.shape[i] >= 1) continue;
    const std::string got = std::to_string(v.shape[i]);
    throw attn::Error(fields[i], got,
                      std::string("attn: ") + fields[i] + " must be >= 1, got " + got + " (" +
                          name + ".shape[" + std::to_string(static_cast<int>(i) - 4) + "]; " +
                          name + " has shape " + Shape(v) + ")");
  }
}

// The library reads rows as contiguous vectors; a strided last dimension
// would need a copy, which is the caller's decision to make.
void RequireContiguousRows(const char* name, const View4& v) {
  if (v.shape[3] > 1 && v.stride[3] != 1) {
    Raise(std::string("attn: ") + name +
          "'s last dimension must be contiguous (stride 1 element), got stride " +
          std::to_string(v.stride[3]) + "; pass numpy.ascontiguousarray(" + name + ")");
  }
}

// Extent of a broadcastable dim: `want`, or 1 (then read with stride 0).
int64_t BroadcastStride(const char* name, const View4& v, int dim, int64_t want,
                        const char* what) {
  if (v.shape[dim] == want) return v.stride[dim];
  if (v.shape[dim] == 1) return 0;
  Raise(std::string("attn: ") + name + " " + what + " must be " + std::to_string(want) +
        (want == 1 ? "" : " or 1") + ", got " + std::to_string(v.shape[dim]) + " (shape " +
        Shape(v) + ")");
}

void RequireEqual(const char* field, int64_t got, int64_t want, const char* want_what) {
  if (got != want) {
    Raise(std::string("attn: ") + field + " must equal " + want_what + " (" +
          std::to_string(want) + "), got " + std::to_string(got));
  }
}

attn::Causal ParseCausal(const nb::handle& causal) {
  if (causal.is_none()) return attn::Causal::kNone;
  if (nb::isinstance<nb::bool_>(causal)) {
    return nb::cast<bool>(causal) ? attn::Causal::kBottomRight : attn::Causal::kNone;
  }
  if (nb::isinstance<nb::str>(causal)) {
    const std::string s = nb::cast<std::string>(causal);
    if (s == "none") return attn::Causal::kNone;
    if (s == "bottom_right") return attn::Causal::kBottomRight;
    if (s == "top_left") return attn::Causal::kTopLeft;
    Raise("attn: causal must be False, True, 'none', 'bottom_right' or 'top_left', got '" + s +
          "'");
  }
  Raise("attn: causal must be a bool or str, got " +
        nb::cast<std::string>(nb::str(causal.type().attr("__name__"))));
}

// A bfloat16 output is an ml_dtypes.bfloat16 array (NumPy has no bfloat16).
nb::object NumpyEmpty(const std::vector<int64_t>& shape, attn::DType dtype) {
  nb::module_ np = Numpy();
  nb::object type;
  if (dtype == attn::DType::kBF16) {
    try {
      type = nb::module_::import_("ml_dtypes").attr("bfloat16");
    } catch (const nb::python_error&) {
      throw nb::type_error(
          "attn: a bfloat16 output needs the ml_dtypes package (pip install ml_dtypes); or pass "
          "out= (any writable bfloat16 DLPack array) or out_dtype='float32'");
    }
  } else {
    type = np.attr(NumpyName(dtype));
  }
  nb::object dims = nb::cast(shape);  // a list: numpy.empty takes any sequence
  return np.attr("empty")(dims, "dtype"_a = type);
}

// Without conversion: nanobind would otherwise copy an array it cannot take
// as it is (a read-only `out`, say), and the result would go to the copy.
template <typename Array>
Array ToArray(const char* name, const nb::handle& obj, const char* what) {
  Array a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    throw nb::type_error((std::string("attn: ") + name + " must be " + what + ", got " +
                          nb::cast<std::string>(nb::str(obj.type().attr("__name__"))))
                             .c_str());
  }
  return a;
}

constexpr const char* kDtypes = "float32, float16 or bfloat16";

// The element type of an imported array, or a TypeError naming the argument
// and its dtype. bfloat16 arrives as DLPack's bfloat16 from producers that
// export it (PyTorch, JAX); NumPy exports neither DLPack nor a buffer for
// ml_dtypes.bfloat16, which TypedArray reads through a uint16 view instead.
attn::DType ElementType(const char* name, const nb::dlpack::dtype& dt) {
  if (dt == nb::dtype<float>()) return attn::DType::kF32;
  if (dt.lanes == 1 && dt.bits == 16) {
    if (dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) return attn::DType::kF16;
    if (dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat)) {
      return attn::DType::kBF16;
    }
  }
  throw nb::type_error((std::string("attn: ") + name + " must be " + kDtypes + ", got " +
                        DtypeName(dt) + " (convert with .astype(numpy.float32))")
                           .c_str());
}

template <typename Array>
struct Typed {
  Array array;
  attn::DType dtype = attn::DType::kF32;
};

// An array of one of the three element types, without conversion.
template <typename Array>
Typed<Array> TypedArray(const char* name, const nb::handle& obj, const char* what) {
  Typed<Array> t;
  if (nb::try_cast(obj, t.array, /*convert=*/false)) {
    t.dtype = ElementType(name, t.array.dtype());
    return t;
  }
  nb::module_ np = Numpy();
  if (nb::isinstance(obj, np.attr("ndarray"))) {
    const std::string dtype = nb::cast<std::string>(nb::str(obj.attr("dtype").attr("name")));
    if (dtype == "bfloat16") {
      // ml_dtypes.bfloat16: the same memory seen as its bit patterns (a
      // view, not a copy; a read-only array gives a read-only view).
      if (nb::try_cast(obj.attr("view")(np.attr("uint16")), t.array, /*convert=*/false)) {
        t.dtype = attn::DType::kBF16;
        return t;
      }
    } else if (dtype != "float32" && dtype != "float16") {
      // Other dtypes NumPy cannot export (ml_dtypes' float8 types, ...).
      throw nb::type_error((std::string("attn: ") + name + " must be " + kDtypes + ", got " +
                            dtype + " (convert with .astype(numpy.float32))")
                               .c_str());
    }
  }
  return {ToArray<Array>(name, obj, what), attn::DType::kF32};  // raises its TypeError
}

constexpr const char* kInWhat = "a CPU array (NumPy, or any DLPack or buffer-protocol object)";
constexpr const char* kOutWhat = "a writable CPU array (NumPy, or any DLPack or buffer-protocol object)";

// ---- ggml's q8_0 and q4_0 blocks (attn.h DType::kQ8_0, kQ4_0) ------------
// In Python a block tensor is a uint8 array of its bytes: shape (..., n / 32
// * 34) for q8_0, (..., n / 32 * 18) for q4_0, for n elements a row, as
// attn.quantize_q8_0 / quantize_q4_0 return it (and as llama.cpp's cache
// holds it). The library counts elements: the last dimension becomes n
// elements, and every stride (in bytes) must be a whole number of blocks,
// which become 32 elements each.

constexpr int64_t kBlockElements = 32;

// A K / V argument's dtype= keyword: None (the array's own dtype: kF32 is
// returned), 'q8_0' or 'q4_0'.
attn::DType ParseKvDtype(const char* keyword, const nb::handle& obj) {
  if (obj.is_none()) return attn::DType::kF32;
  if (nb::isinstance<nb::str>(obj)) {
    const std::string name = nb::cast<std::string>(obj);
    if (name == "q8_0") return attn::DType::kQ8_0;
    if (name == "q4_0") return attn::DType::kQ4_0;
    Raise(std::string("attn: ") + keyword +
          " must be None (the array's own dtype), 'q8_0' or 'q4_0', got '" + name + "'");
  }
  throw nb::type_error((std::string("attn: ") + keyword + " must be None, 'q8_0' or 'q4_0', got " +
                        nb::cast<std::string>(nb::str(obj.type().attr("__name__"))))
                           .c_str());
}
bool IsBlock(attn::DType t) { return t == attn::DType::kQ8_0 || t == attn::DType::kQ4_0; }

template <typename Array>
void RequireUint8(const char* name, const Array& a, attn::DType type) {
  if (a.dtype() != nb::dtype<uint8_t>()) {
    const std::string t = attn::DTypeName(type);
    throw nb::type_error((std::string("attn: ") + name + " must be a uint8 array of " + t +
                          " blocks (attn.quantize_" + t + "), got " + DtypeName(a.dtype()))
                             .c_str());
  }
}

// A uint8 array of blocks as a typed array; its View4 in elements
// (BlockElements) is what the problem takes.
template <typename Array>
Typed<Array> BlockArray(const char* name, const nb::handle& obj, attn::DType type,
                        const char* what) {
  Typed<Array> t{ToArray<Array>(name, obj, what), type};
  RequireUint8(name, t.array, type);
  return t;
}

// `v` (bytes of blocks of `type`) in elements: the last dimension a whole
// number of blocks, contiguous, and every stride a whole number of blocks.
void BlockElements(const char* name, View4& v, attn::DType type) {
  const int64_t bytes = attn::DTypeBlockBytes(type);
  const std::string t = attn::DTypeName(type), b = std::to_string(bytes);
  if (v.shape[3] % bytes != 0) {
    Raise(std::string("attn: ") + name + "'s last dimension must be a multiple of " + b +
          " bytes (" + t + " blocks of 32 elements), got " + std::to_string(v.shape[3]));
  }
  if (v.shape[3] > 1 && v.stride[3] != 1) {
    Raise(std::string("attn: ") + name + "'s last dimension must be contiguous, got stride " +
          std::to_string(v.stride[3]));
  }
  for (size_t i = 4 - v.ndim; i < 3; ++i) {
    if (v.stride[i] % bytes != 0) {
      Raise(std::string("attn: ") + name + ".strides[" + std::to_string(int(i) - 4) +
            "] must be a multiple of " + b + " bytes (whole " + t + " blocks), got " +
            std::to_string(v.stride[i]));
    }
    v.stride[i] = v.stride[i] / bytes * kBlockElements;
  }
  v.shape[3] = v.shape[3] / bytes * kBlockElements;
  v.stride[3] = 1;
}

// A K / V argument: a float array of one of the three types, or with a
// block type (ParseKvDtype) a uint8 array of blocks.
template <typename Array>
Typed<Array> KvArray(const char* name, const nb::handle& obj, attn::DType block,
                     const char* what) {
  return IsBlock(block) ? BlockArray<Array>(name, obj, block, what)
                        : TypedArray<Array>(name, obj, what);
}

// attn.quantize_q8_0(x) / quantize_q4_0(x): float32 (..., n), n a multiple
// of 32, contiguous last dimension -> a new uint8 array (..., n / 32 *
// block bytes) of ggml's blocks.
nb::object QuantizePy(const nb::handle& x_obj, attn::DType type) {
  const InArray x = ToArray<InArray>("x", x_obj, kInWhat);
  RequireFloat32("x", x);
  if (x.ndim() < 1) Raise("attn: x must have at least one dimension, got 0");
  const size_t nd = x.ndim();
  const int64_t n = int64_t(x.shape(nd - 1));
  const int64_t bytes = attn::DTypeBlockBytes(type);
  if (n % kBlockElements != 0) {
    throw attn::Error("n", std::to_string(n),
                      std::string("attn: n must be a multiple of 32 (") + attn::DTypeName(type) +
                          " blocks of 32 elements), got " + std::to_string(n) + " (x.shape[-1])");
  }
  if (n > 1 && x.stride(nd - 1) != 1) {
    Raise("attn: x's last dimension must be contiguous (stride 1 element), got stride " +
          std::to_string(x.stride(nd - 1)) + "; pass numpy.ascontiguousarray(x)");
  }
  std::vector<int64_t> shape;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < nd; ++i) {
    shape.push_back(int64_t(x.shape(i)));
    rows *= int64_t(x.shape(i));
  }
  shape.push_back(n / kBlockElements * bytes);
  nb::object out_obj = Numpy().attr("empty")(nb::cast(shape), "dtype"_a = "uint8");
  const OutArray out = ToArray<OutArray>("out", out_obj, kOutWhat);
  uint8_t* dst = static_cast<uint8_t*>(out.data());
  const float* base = static_cast<const float*>(x.data());
  // Row by row into the new array (on an error it is dropped unreturned).
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, offset = 0;
    for (size_t i = nd - 1; i-- > 0;) {
      offset += (rest % int64_t(x.shape(i))) * x.stride(i);
      rest /= int64_t(x.shape(i));
    }
    try {
      uint8_t* row = dst + r * (n / kBlockElements * bytes);
      if (type == attn::DType::kQ4_0) {
        attn::QuantizeQ4_0(base + offset, n, row);
      } else {
        attn::QuantizeQ8_0(base + offset, n, row);
      }
    } catch (const attn::Error& e) {
      // The element's index within its row, and which row.
      throw attn::Error(e.field(), e.value(),
                        std::string(e.what()) + " (in row " + std::to_string(r) + " of x)");
    }
  }
  return out_obj;
}

// attn.dequantize_q8_0(blocks) / dequantize_q4_0(blocks): uint8 (..., m),
// m a multiple of the block bytes -> float32 (..., m / bytes * 32), exactly
// the values the kernels read.
nb::object DequantizePy(const nb::handle& blocks_obj, attn::DType type) {
  const InArray b = ToArray<InArray>("blocks", blocks_obj, kInWhat);
  RequireUint8("blocks", b, type);
  if (b.ndim() < 1) Raise("attn: blocks must have at least one dimension, got 0");
  const size_t nd = b.ndim();
  const int64_t m = int64_t(b.shape(nd - 1));
  const int64_t bytes = attn::DTypeBlockBytes(type);
  if (m % bytes != 0) {
    Raise("attn: blocks' last dimension must be a multiple of " + std::to_string(bytes) +
          " bytes, got " + std::to_string(m));
  }
  if (m > 1 && b.stride(nd - 1) != 1) {
    Raise("attn: blocks' last dimension must be contiguous, got stride " +
          std::to_string(b.stride(nd - 1)));
  }
  std::vector<int64_t> shape;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < nd; ++i) {
    shape.push_back(int64_t(b.shape(i)));
    rows *= int64_t(b.shape(i));
  }
  const int64_t n = m / bytes * kBlockElements;
  shape.push_back(n);
  nb::object out_obj = Numpy().attr("empty")(nb::cast(shape), "dtype"_a = "float32");
  const OutArray out = ToArray<OutArray>("out", out_obj, kOutWhat);
  float* dst = static_cast<float*>(out.data());
  const uint8_t* base = static_cast<const uint8_t*>(b.data());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, offset = 0;
    for (size_t i = nd - 1; i-- > 0;) {
      offset += (rest % int64_t(b.shape(i))) * b.stride(i);
      rest /= int64_t(b.shape(i));
    }
    if (type == attn::DType::kQ4_0) {
      attn::DequantizeQ4_0(base + offset, n, dst + r * n);
    } else {
      attn::DequantizeQ8_0(base + offset, n, dst + r * n);
    }
  }
  return out_obj;
}

// out_dtype=: None, a name ("float32"/"f32", "float16"/"f16",
// "bfloat16"/"bf16") or anything numpy.dtype() takes (numpy.float16,
// ml_dtypes.bfloat16, a dtype object).
std::optional<attn::DType> ParseOutDtype(const nb::handle& obj) {
  if (obj.is_none()) return std::nullopt;
  std::string name;
  if (nb::isinstance<nb::str>(obj)) {
    name = nb::cast<std::string>(obj);
  } else {
    try {
      name = nb::cast<std::string>(nb::str(Numpy().attr("dtype")(obj).attr("name")));
    } catch (const nb::python_error&) {
      throw nb::type_error(("attn: out_dtype must be a dtype or its name (" + std::string(kDtypes) +
                            "), got " +
                            nb::cast<std::string>(nb::repr(obj)))
                               .c_str());
    }
  }
  if (name == "float32" || name == "f32") return attn::DType::kF32;
  if (name == "float16" || name == "f16") return attn::DType::kF16;
  if (name == "bfloat16" || name == "bf16") return attn::DType::kBF16;
  throw nb::type_error(
      ("attn: out_dtype must be " + std::string(kDtypes) + ", got " + name).c_str());
}


// The score modifier arguments of attention(), varlen_attention() and
// kvcache_attention(): window (left, right), softcap, sinks (q_heads,) and
// alibi_slopes (q_heads,) or (batch, q_heads) float32 (batch: sequences).
// Holds the arrays while the call reads them.
struct Modifiers {
  attn::Window window;
  float softcap = 0.0f;
  InArray sinks_arr, alibi_arr;
  attn::SinkLogits sinks;
  attn::AlibiSlopes alibi;

  template <class AnyProblem>
  void ApplyTo(AnyProblem& p) const {
    p.window = window;
    p.softcap = softcap;
    p.sinks = sinks;
    p.alibi_slopes = alibi;
  }
};

Modifiers ParseModifiers(const nb::handle& window_obj, float softcap, const nb::handle& sinks_obj,
                         const nb::handle& alibi_obj, int64_t q_heads, int64_t batch) {
  Modifiers m;
  if (!window_obj.is_none()) {
    const auto window = nb::cast<std::pair<int64_t, int64_t>>(window_obj);
    m.window = {window.first, window.second};
  }
  m.softcap = softcap;
  if (!sinks_obj.is_none()) {
    m.sinks_arr = ToArray<InArray>("sinks", sinks_obj, kInWhat);
    RequireFloat32("sinks", m.sinks_arr);
    if (m.sinks_arr.ndim() != 1 || m.sinks_arr.stride(0) != 1) {
      throw attn::Error("sinks", std::to_string(m.sinks_arr.ndim()) + "-d",
                        "attn: sinks must be a contiguous 1-d float32 array of q_heads logits");
    }
    m.sinks = {static_cast<const float*>(m.sinks_arr.data()), int64_t(m.sinks_arr.shape(0))};
  }
  if (!alibi_obj.is_none()) {
    m.alibi_arr = ToArray<InArray>("alibi_slopes", alibi_obj, kInWhat);
    RequireFloat32("alibi_slopes", m.alibi_arr);
    const size_t nd = m.alibi_arr.ndim();
    const int64_t heads = nd >= 1 ? int64_t(m.alibi_arr.shape(nd - 1)) : 0;
    if ((nd != 1 && nd != 2) || heads != q_heads || m.alibi_arr.stride(nd - 1) != 1 ||
        (nd == 2 && int64_t(m.alibi_arr.shape(0)) != batch)) {
      throw attn::Error("alibi_slopes", std::to_string(nd) + "-d",
                        "attn: alibi_slopes must be float32 (q_heads,) or (batch, q_heads), "
                        "last dimension contiguous");
    }
    m.alibi = {static_cast<const float*>(m.alibi_arr.data()),
               nd == 2 ? int64_t(m.alibi_arr.stride(0)) : 0};
  }
  return m;
}

nb::object Attention(const nb::handle& q_obj, const nb::handle& k_obj, const nb::handle& v_obj,
                     const nb::handle& causal, std::optional<float> scale,
                     const nb::handle& mask_obj, const std::string& kernel, int threads,
                     bool return_lse, const nb::handle& out_obj_in,
                     const nb::handle& out_dtype_obj, bool round_inputs_to_bf16,
                     const nb::handle& window_obj, float softcap, const nb::handle& sinks_obj,
                     const nb::handle& alibi_obj, const nb::handle& k_dtype_obj,
                     const nb::handle& v_dtype_obj, const std::string& dot_path,
                     const std::string& decode_walk) {
  const attn::DType k_block = ParseKvDtype("k_dtype", k_dtype_obj),
                    v_block = ParseKvDtype("v_dtype", v_dtype_obj);
  const Typed<InArray> q_in = TypedArray<InArray>("q", q_obj, kInWhat);
  const Typed<InArray> k_in = KvArray<InArray>("k", k_obj, k_block, kInWhat);
  const Typed<InArray> v_in = KvArray<InArray>("v", v_obj, v_block, kInWhat);
  const std::optional<attn::DType> out_dtype = ParseOutDtype(out_dtype_obj);
  View4 q = AsView("q", q_in.array, 2), k = AsView("k", k_in.array, 2),
        v = AsView("v", v_in.array, 2);
  RequireNonEmpty("q", q, {"batch", "q_heads", "q_len", "head_dim"});
  RequireNonEmpty("k", k, {"batch", "kv_heads", "kv_len", "head_dim"});
  RequireNonEmpty("v", v, {"batch", "kv_heads", "kv_len", "value_dim"});
  RequireContiguousRows("q", q);
  // A block array's bytes as elements (its last dimension n / 32 * 34 or
  // 18 bytes).
  if (IsBlock(k_block)) BlockElements("k", k, k_block);
  if (IsBlock(v_block)) BlockElements("v", v, v_block);
  RequireContiguousRows("k", k);
  RequireContiguousRows("v", v);

  attn::Problem p;
  p.batch = q.shape[0];
  p.q_heads = q.shape[1];
  p.q_len = q.shape[2];
  p.head_dim = q.shape[3];
  p.kv_heads = k.shape[1];
  p.kv_len = k.shape[2];
  p.value_dim = v.shape[3];
  RequireEqual("k.shape[-1] (head_dim)", k.shape[3], p.head_dim, "q.shape[-1]");
  RequireEqual("v.shape[-2] (kv_len)", v.shape[2], p.kv_len, "k.shape[-2]");
  RequireEqual("v.shape[-3] (kv_heads)", v.shape[1], p.kv_heads, "k.shape[-3]");
  // Batch broadcasts like NumPy: a K/V batch of 1 is shared by every query batch.
  const int64_t k_batch = BroadcastStride("k", k, 0, p.batch, "batch (shape[-4])");
  const int64_t v_batch = BroadcastStride("v", v, 0, p.batch, "batch (shape[-4])");
  p.q = {q.data, q.stride[0], q.stride[1], q.stride[2], q_in.dtype};
  p.k = {k.data, k_batch, k.stride[1], k.stride[2], k_in.dtype};
  p.v = {v.data, v_batch, v.stride[1], v.stride[2], v_in.dtype};
  p.scale = scale;
  p.causal = ParseCausal(causal);

  // Score modifiers (FlashAttention's conventions; attn.h).
  const Modifiers mods = ParseModifiers(window_obj, softcap, sinks_obj, alibi_obj, p.q_heads,
                                        p.batch);
  mods.ApplyTo(p);

  InArray mask_arr;
  if (!mask_obj.is_none()) {
    mask_arr = ToArray<InArray>("mask", mask_obj, kInWhat);
    RequireFloat32("mask", mask_arr);
    const View4 m = AsView("mask", mask_arr, 2);
    p.mask.data = static_cast<const float*>(m.data);
    p.mask.batch_stride = BroadcastStride("mask", m, 0, p.batch, "batch (shape[-4])");
    p.mask.head_stride = BroadcastStride("mask", m, 1, p.q_heads, "heads (shape[-3])");
    p.mask.row_stride = BroadcastStride("mask", m, 2, p.q_len, "rows (shape[-2])");
    p.mask.col_stride = BroadcastStride("mask", m, 3, p.kv_len, "columns (shape[-1])");
  }

  // Outputs keep q's leading dims, so a 2-D (T, d) call returns (T, d_v).
  std::vector<int64_t> out_shape, lse_shape;
  for (size_t i = 4 - q.ndim; i < 3; ++i) lse_shape.push_back(q.shape[i]);
  out_shape = lse_shape;
  out_shape.push_back(*p.value_dim);

  nb::object out_obj;
  OutArray out_arr;
  attn::DType o_dtype;
  View4 o;
  if (!out_obj_in.is_none()) {
    Typed<OutArray> out_in = TypedArray<OutArray>("out", out_obj_in, kOutWhat);
    out_arr = out_in.array;
    o_dtype = out_in.dtype;
    if (out_dtype && *out_dtype != o_dtype) {
      Raise(std::string("attn: out_dtype (") + NumpyName(*out_dtype) + ") must match out's dtype (" +
            NumpyName(o_dtype) + "), or be left out");
    }
    o = AsView("out", out_arr, 2);
    bool same = o.ndim == q.ndim;
    for (size_t i = 0; same && i < out_shape.size(); ++i) {
      same = o.shape[4 - q.ndim + i] == out_shape[i];
    }
    if (!same) {
      View4 want;
      want.ndim = q.ndim;
      for (size_t i = 0; i < out_shape.size(); ++i) want.shape[4 - q.ndim + i] = out_shape[i];
      Raise("attn: out must have shape " + Shape(want) + ", got " + Shape(o));
    }
    // After the shape: an empty out of the wrong shape is named by its shape.
    RequireContiguousRows("out", o);
    out_obj = nb::borrow(out_obj_in);
  } else {
    // By default the output has q's element type.
    o_dtype = out_dtype.value_or(q_in.dtype);
    out_obj = NumpyEmpty(out_shape, o_dtype);
    out_arr = TypedArray<OutArray>("out", out_obj, kOutWhat).array;
    o = AsView("out", out_arr, 2);
  }
  p.out = {o.data, o.stride[0], o.stride[1], o.stride[2], o_dtype};

  nb::object lse_obj;
  OutArray lse_arr;
  if (return_lse) {
    lse_obj = NumpyEmpty(lse_shape, attn::DType::kF32);
    lse_arr = ToArray<OutArray>("lse", lse_obj, kOutWhat);
    const View4 l = AsView("lse", lse_arr, 1);
    // lse is [.., rows] with no column: its dims sit one place to the right.
    p.lse = {static_cast<float*>(l.data), l.stride[1], l.stride[2], l.stride[3]};
  }

  attn::Options options;
  options.kernel = attn::ParseKernel(kernel);
  options.threads = threads;
  options.round_inputs_to_bf16 = round_inputs_to_bf16;
  options.dot_path = dot_path;
  options.decode_walk = decode_walk;
  {
    // The arrays stay referenced by the ndarray handles above, so the
    // kernels may run without the GIL (other Python threads keep going).
    nb::gil_scoped_release release;
    attn::attention(p, options);
  }
  if (return_lse) return nb::make_tuple(out_obj, lse_obj);
  return out_obj;
}

// ---- Serving calls (attn/serving.h), FlashAttention's conventions ---------

// An int32 array of `ndim` dims (offsets, lengths, a block table), copied:
// these are a few integers per sequence, not tensors.
std::vector<int32_t> Int32Array(const char* name, const nb::handle& obj, size_t ndim,
                                std::vector<int64_t>* shape) {
  const InArray a = ToArray<InArray>(name, obj, kInWhat);
  if (a.dtype() != nb::dtype<int32_t>()) {
    throw nb::type_error((std::string("attn: ") + name + " must be int32, got " +
                          DtypeName(a.dtype()) + " (convert with .astype(numpy.int32))")
                             .c_str());
  }
  if (a.ndim() != ndim) {
    Raise(std::string("attn: ") + name + " must have " + std::to_string(ndim) +
          " dimension(s), got " + std::to_string(a.ndim()));
  }
  shape->clear();
  for (size_t i = 0; i < ndim; ++i) shape->push_back(int64_t(a.shape(i)));
  const int64_t rows = ndim == 2 ? (*shape)[0] : 1, cols = ndim == 2 ? (*shape)[1] : (*shape)[0];
  const int64_t row_stride = ndim == 2 ? a.stride(0) : 0, col_stride = a.stride(ndim - 1);
  std::vector<int32_t> values(size_t(rows * cols));
  const int32_t* data = static_cast<const int32_t*>(a.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) values[size_t(r * cols + c)] = data[r * row_stride + c * col_stride];
  return values;
}

// A packed [tokens, heads, cols] view of a 3-D array (q8_0: its bytes as
// elements).
attn::PackedTensor Packed3(const char* name, const Typed<InArray>& t, View4* v) {
  *v = AsView(name, t.array, 3);
  if (v->ndim != 3) {
    Raise(std::string("attn: ") + name + " must have 3 dimensions (total_tokens, heads, d), got " +
          std::to_string(v->ndim));
  }
  if (IsBlock(t.dtype)) BlockElements(name, *v, t.dtype);
  RequireContiguousRows(name, *v);
  return {v->data, v->stride[1], v->stride[2], t.dtype};
}

// A [batch, seqlen, heads, cols] array as packed tokens: sequence b's token
// r is token b * seqlen + r, which needs batch stride = seqlen * token stride.
void RequireBatchPacked(const char* name, const View4& v) {
  if (v.shape[0] > 1 && v.shape[1] > 0 && v.stride[0] != v.shape[1] * v.stride[1]) {
    Raise(std::string("attn: ") + name + " must have batch stride = seqlen x token stride (" +
          std::to_string(v.shape[1] * v.stride[1]) + " elements), got " +
          std::to_string(v.stride[0]) + "; pass a contiguous array");
  }
}

// out: the caller's (its shape checked) or a new array of `shape`.
nb::object OutputArray(const nb::handle& out_obj_in, const std::vector<int64_t>& shape,
                       attn::DType default_dtype, const nb::handle& out_dtype_obj, OutArray* arr,
                       attn::DType* dtype, View4* o) {
  const std::optional<attn::DType> out_dtype = ParseOutDtype(out_dtype_obj);
  nb::object out_obj;
  if (!out_obj_in.is_none()) {
    Typed<OutArray> t = TypedArray<OutArray>("out", out_obj_in, kOutWhat);
    *arr = t.array;
    *dtype = t.dtype;
    if (out_dtype && *out_dtype != *dtype) {
      Raise(std::string("attn: out_dtype (") + NumpyName(*out_dtype) + ") must match out's dtype (" +
            NumpyName(*dtype) + "), or be left out");
    }
    *o = AsView("out", *arr, shape.size());
    bool same = o->ndim == shape.size();
    for (size_t i = 0; same && i < shape.size(); ++i) same = o->shape[4 - shape.size() + i] == shape[i];
    if (!same) {
      View4 want;
      want.ndim = shape.size();
      for (size_t i = 0; i < shape.size(); ++i) want.shape[4 - shape.size() + i] = shape[i];
      Raise("attn: out must have shape " + Shape(want) + ", got " + Shape(*o));
    }
    RequireContiguousRows("out", *o);
    out_obj = nb::borrow(out_obj_in);
  } else {
    *dtype = out_dtype.value_or(default_dtype);
    out_obj = NumpyEmpty(shape, *dtype);
    *arr = TypedArray<OutArray>("out", out_obj, kOutWhat).array;
    *o = AsView("out", *arr, shape.size());
  }
  return out_obj;
}

nb::object VarlenAttentionPy(const nb::handle& q_obj, const nb::handle& k_obj,
                             const nb::handle& v_obj, const nb::handle& cu_q_obj,
                             const nb::handle& cu_k_obj, int64_t max_seqlen_q,
                             int64_t max_seqlen_k, std::optional<float> softmax_scale,
                             const nb::handle& causal, bool return_softmax_lse,
                             const std::string& kernel, int threads, const nb::handle& out_obj_in,
                             const nb::handle& out_dtype_obj, const nb::handle& k_dtype_obj,
                             const nb::handle& v_dtype_obj, const nb::handle& window_obj,
                             float softcap, const nb::handle& sinks_obj,
                             const nb::handle& alibi_obj) {
  const attn::DType k_block = ParseKvDtype("k_dtype", k_dtype_obj),
                    v_block = ParseKvDtype("v_dtype", v_dtype_obj);
  const Typed<InArray> q_in = TypedArray<InArray>("q", q_obj, kInWhat);
  const Typed<InArray> k_in = KvArray<InArray>("k", k_obj, k_block, kInWhat);
  const Typed<InArray> v_in = KvArray<InArray>("v", v_obj, v_block, kInWhat);
  View4 q, k, v;
  attn::VarlenProblem p;
  p.q = Packed3("q", q_in, &q);
  p.k = Packed3("k", k_in, &k);
  p.v = Packed3("v", v_in, &v);
  std::vector<int64_t> shape_q, shape_k;
  const std::vector<int32_t> cu_q = Int32Array("cu_seqlens_q", cu_q_obj, 1, &shape_q);
  const std::vector<int32_t> cu_k = Int32Array("cu_seqlens_k", cu_k_obj, 1, &shape_k);
  if (cu_q.size() < 2) {
    Raise("attn: cu_seqlens_q must have batch + 1 >= 2 entries, got " + std::to_string(cu_q.size()));
  }
  RequireEqual("len(cu_seqlens_k)", int64_t(cu_k.size()), int64_t(cu_q.size()), "len(cu_seqlens_q)");
  // The arrays hold exactly the tokens the offsets count (nothing read past them).
  RequireEqual("cu_seqlens_q[-1]", cu_q.back(), q.shape[1], "q.shape[0] (total_q)");
  RequireEqual("cu_seqlens_k[-1]", cu_k.back(), k.shape[1], "k.shape[0] (total_k)");
  RequireEqual("v.shape[0]", v.shape[1], k.shape[1], "k.shape[0]");
  RequireEqual("v.shape[1] (kv_heads)", v.shape[2], k.shape[2], "k.shape[1]");
  RequireEqual("k.shape[2] (head_dim)", k.shape[3], q.shape[3], "q.shape[2]");
  p.batch = int64_t(cu_q.size()) - 1;
  p.q_heads = q.shape[2];
  p.kv_heads = k.shape[2];
  p.head_dim = q.shape[3];
  p.value_dim = v.shape[3];
  p.cu_seqlens_q = cu_q.data();
  p.cu_seqlens_k = cu_k.data();
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.scale = softmax_scale;
  p.causal = ParseCausal(causal);
  const Modifiers mods = ParseModifiers(window_obj, softcap, sinks_obj, alibi_obj, p.q_heads,
                                        p.batch);
  mods.ApplyTo(p);

  OutArray out_arr;
  attn::DType o_dtype;
  View4 o;
  nb::object out_obj = OutputArray(out_obj_in, {q.shape[1], p.q_heads, *p.value_dim}, q_in.dtype,
                                   out_dtype_obj, &out_arr, &o_dtype, &o);
  p.out = {o.data, o.stride[1], o.stride[2], o_dtype};
  nb::object lse_obj;
  OutArray lse_arr;
  if (return_softmax_lse) {
    // Written as [total_q, heads]; returned as FlashAttention's (heads, total_q) view.
    lse_obj = NumpyEmpty({q.shape[1], p.q_heads}, attn::DType::kF32);
    lse_arr = ToArray<OutArray>("lse", lse_obj, kOutWhat);
    p.lse = {static_cast<float*>(lse_arr.data()), int64_t(p.q_heads), 1};
  }
  attn::Options options;
  options.kernel = attn::ParseKernel(kernel);
  options.threads = threads;
  {
    nb::gil_scoped_release release;
    attn::VarlenAttention(p, options);
  }
  if (return_softmax_lse) return nb::make_tuple(out_obj, lse_obj.attr("T"));
  return out_obj;
}

nb::object KvcacheAttentionPy(const nb::handle& q_obj, const nb::handle& k_cache_obj,
                              const nb::handle& v_cache_obj, const nb::handle& k_obj,
                              const nb::handle& v_obj, const nb::handle& cache_seqlens_obj,
                              const nb::handle& block_table_obj,
                              std::optional<float> softmax_scale, const nb::handle& causal,
                              bool return_softmax_lse, const std::string& kernel, int threads,
                              const nb::handle& out_obj_in, const nb::handle& out_dtype_obj,
                              const nb::handle& cache_dtype_obj, const nb::handle& window_obj,
                              float softcap, const nb::handle& sinks_obj,
                              const nb::handle& alibi_obj) {
  const attn::DType cache_block = ParseKvDtype("cache_dtype", cache_dtype_obj);
  const bool append = !k_obj.is_none() || !v_obj.is_none();
  if (append && (k_obj.is_none() || v_obj.is_none())) {
    Raise("attn: k and v must be given together (the new tokens' keys and values), got only " +
          std::string(k_obj.is_none() ? "v" : "k"));
  }
  const Typed<InArray> q_in = TypedArray<InArray>("q", q_obj, kInWhat);
  const View4 q = AsView("q", q_in.array, 4);
  if (q.ndim != 4) Raise("attn: q must have 4 dimensions (batch, seqlen_q, heads, d), got " + std::to_string(q.ndim));
  RequireContiguousRows("q", q);
  RequireBatchPacked("q", q);
  // The pools are written when appending: then they must be writable arrays.
  Typed<OutArray> kc_out, vc_out;
  Typed<InArray> kc_in, vc_in;
  View4 kc, vc;
  attn::DType kc_type, vc_type;
  if (append) {
    kc_out = KvArray<OutArray>("k_cache", k_cache_obj, cache_block, kOutWhat);
    vc_out = KvArray<OutArray>("v_cache", v_cache_obj, cache_block, kOutWhat);
    kc = AsView("k_cache", kc_out.array, 4);
    vc = AsView("v_cache", vc_out.array, 4);
    kc_type = kc_out.dtype;
    vc_type = vc_out.dtype;
  } else {
    kc_in = KvArray<InArray>("k_cache", k_cache_obj, cache_block, kInWhat);
    vc_in = KvArray<InArray>("v_cache", v_cache_obj, cache_block, kInWhat);
    kc = AsView("k_cache", kc_in.array, 4);
    vc = AsView("v_cache", vc_in.array, 4);
    kc_type = kc_in.dtype;
    vc_type = vc_in.dtype;
  }
  if (kc.ndim != 4 || vc.ndim != 4) {
    Raise("attn: k_cache and v_cache must have 4 dimensions (num_blocks, block_size, kv_heads, d)");
  }
  // Block pools: their bytes as elements (the last dimension d / 32 * 34
  // or 18 bytes).
  if (IsBlock(cache_block)) {
    BlockElements("k_cache", kc, cache_block);
    BlockElements("v_cache", vc, cache_block);
  }
  RequireContiguousRows("k_cache", kc);
  RequireContiguousRows("v_cache", vc);
  for (int i = 0; i < 3; ++i) {
    RequireEqual(("v_cache.shape[" + std::to_string(i) + "]").c_str(), vc.shape[i], kc.shape[i],
                 ("k_cache.shape[" + std::to_string(i) + "]").c_str());
  }
  RequireEqual("k_cache.shape[3] (head_dim)", kc.shape[3], q.shape[3], "q.shape[3]");

  attn::PagedProblem p;
  p.batch = q.shape[0];
  p.q_heads = q.shape[2];
  p.kv_heads = kc.shape[2];
  p.head_dim = q.shape[3];
  p.value_dim = vc.shape[3];
  p.num_blocks = kc.shape[0];
  p.block_size = kc.shape[1];
  p.k_cache = {kc.data, kc.stride[0], kc.stride[1], kc.stride[2], kc_type};
  p.v_cache = {vc.data, vc.stride[0], vc.stride[1], vc.stride[2], vc_type};
  p.q = {q.data, q.stride[1], q.stride[2], q_in.dtype};
  p.q_len = q.shape[1];
  const Modifiers mods = ParseModifiers(window_obj, softcap, sinks_obj, alibi_obj, p.q_heads,
                                        p.batch);
  mods.ApplyTo(p);

  std::vector<int32_t> table, seqlens;
  std::vector<int64_t> shape;
  if (block_table_obj.is_none()) {
    // A dense cache (batch, seqlen_cache, kv_heads, d): one page per sequence.
    RequireEqual("k_cache.shape[0] (batch, without block_table)", kc.shape[0], p.batch,
                 "q.shape[0]");
    for (int64_t b = 0; b < p.batch; ++b) table.push_back(int32_t(b));
    p.max_blocks = 1;
  } else {
    table = Int32Array("block_table", block_table_obj, 2, &shape);
    RequireEqual("block_table.shape[0]", shape[0], p.batch, "q.shape[0] (batch)");
    p.max_blocks = shape[1];
  }
  p.block_table = table.data();
  if (cache_seqlens_obj.is_none()) {
    if (!block_table_obj.is_none()) Raise("attn: cache_seqlens is required with block_table");
    seqlens.assign(size_t(p.batch), int32_t(kc.shape[1]));  // the whole dense cache
  } else if (nb::isinstance<nb::int_>(cache_seqlens_obj)) {
    seqlens.assign(size_t(p.batch), nb::cast<int32_t>(cache_seqlens_obj));
  } else {
    seqlens = Int32Array("cache_seqlens", cache_seqlens_obj, 1, &shape);
    RequireEqual("cache_seqlens.shape[0]", shape[0], p.batch, "q.shape[0] (batch)");
  }
  p.cache_seqlens = seqlens.data();

  Typed<InArray> kn_in, vn_in;
  if (append) {
    kn_in = TypedArray<InArray>("k", k_obj, kInWhat);
    vn_in = TypedArray<InArray>("v", v_obj, kInWhat);
    const View4 kn = AsView("k", kn_in.array, 4), vn = AsView("v", vn_in.array, 4);
    if (kn.ndim != 4 || vn.ndim != 4) Raise("attn: k and v must have 4 dimensions (batch, seqlen_new, kv_heads, d)");
    RequireContiguousRows("k", kn);
    RequireContiguousRows("v", vn);
    RequireBatchPacked("k", kn);
    RequireBatchPacked("v", vn);
    RequireEqual("k.shape[0] (batch)", kn.shape[0], p.batch, "q.shape[0]");
    RequireEqual("v.shape[0] (batch)", vn.shape[0], kn.shape[0], "k.shape[0]");
    RequireEqual("v.shape[1] (seqlen_new)", vn.shape[1], kn.shape[1], "k.shape[1]");
    RequireEqual("k.shape[2] (kv_heads)", kn.shape[2], p.kv_heads, "k_cache.shape[2]");
    RequireEqual("v.shape[2] (kv_heads)", vn.shape[2], p.kv_heads, "v_cache.shape[2]");
    RequireEqual("k.shape[3] (head_dim)", kn.shape[3], p.head_dim, "k_cache.shape[3]");
    RequireEqual("v.shape[3] (value_dim)", vn.shape[3], *p.value_dim, "v_cache.shape[3]");
    p.k_new = {kn.data, kn.stride[1], kn.stride[2], kn_in.dtype};
    p.v_new = {vn.data, vn.stride[1], vn.stride[2], vn_in.dtype};
    p.new_len = kn.shape[1];
  }
  p.scale = softmax_scale;
  p.causal = ParseCausal(causal);

  OutArray out_arr;
  attn::DType o_dtype;
  View4 o;
  nb::object out_obj = OutputArray(out_obj_in, {p.batch, p.q_len, p.q_heads, *p.value_dim},
                                   q_in.dtype, out_dtype_obj, &out_arr, &o_dtype, &o);
  RequireBatchPacked("out", o);
  p.out = {o.data, o.stride[1], o.stride[2], o_dtype};
  nb::object lse_obj;
  OutArray lse_arr;
  if (return_softmax_lse) {
    lse_obj = NumpyEmpty({p.batch * p.q_len, p.q_heads}, attn::DType::kF32);
    lse_arr = ToArray<OutArray>("lse", lse_obj, kOutWhat);
    p.lse = {static_cast<float*>(lse_arr.data()), int64_t(p.q_heads), 1};
  }
  attn::Options options;
  options.kernel = attn::ParseKernel(kernel);
  options.threads = threads;
  {
    nb::gil_scoped_release release;
    attn::PagedAttention(p, options);
  }
  if (return_softmax_lse) {
    // FlashAttention's (batch, heads, seqlen_q): a view of the [tokens, heads] rows.
    nb::object view = lse_obj.attr("reshape")(p.batch, p.q_len, p.q_heads).attr("transpose")(0, 2, 1);
    return nb::make_tuple(out_obj, view);
  }
  return out_obj;
}

std::string CausalName(attn::Causal c) {
  switch (c) {
    case attn::Causal::kNone: return "none";
    case attn::Causal::kBottomRight: return "bottom_right";
    case attn::Causal::kTopLeft: return "top_left";
  }
  return "?";
}

}  // namespace

NB_MODULE(_attn, m) {
  m.doc() = "attn: SIMD CPU kernels for scaled dot-product attention";
  // attn::Error is "bad input": a ValueError carrying the library's message
  // (it names the field and the bad value).
  nb::exception<attn::Error>(m, "Error", PyExc_ValueError);

  m.def("attention", &Attention, "q"_a, "k"_a, "v"_a, nb::kw_only(), "causal"_a = false,
        "scale"_a = nb::none(), "mask"_a = nb::none(), "kernel"_a = "auto", "threads"_a = 0,
        "return_lse"_a = false, "out"_a = nb::none(), "out_dtype"_a = nb::none(),
        "round_inputs_to_bf16"_a = false, "window"_a = nb::none(), "softcap"_a = 0.0f,
        "sinks"_a = nb::none(), "alibi_slopes"_a = nb::none(), "k_dtype"_a = nb::none(),
        "v_dtype"_a = nb::none(), "dot_path"_a = "", "decode_walk"_a = "",
        R"(softmax(q @ k.T * scale + mask) @ v, in place on the caller's arrays.

q: (..., Tq, d), k: (..., Tk, d), v: (..., Tk, dv) with ... = [batch,] heads
(2 to 4 dims). k and v may have fewer heads than q (grouped-query attention:
their head count must divide q's) and a batch of 1 (shared). Any strides
work (transposed views such as x.transpose(0, 2, 1, 3) of a [B, T, H, d]
array are read in place) as long as the last dimension is contiguous.

Element types: q, k, v and out are each float32, float16 or bfloat16
(ml_dtypes.bfloat16, or a DLPack bfloat16 tensor), independently; nothing
is converted or copied. The kernels widen 16-bit inputs exactly, compute in
float32 and round a 16-bit output once (to nearest even).
k_dtype / v_dtype: None (the array's dtype), 'q8_0' or 'q4_0': k (or v) is
then a uint8 array of ggml's q8_0 blocks, (..., Tk, d / 32 * 34) bytes, or
q4_0 blocks, (..., Tk, d / 32 * 18) bytes, as attn.quantize_q8_0 /
quantize_q4_0 return them or a llama.cpp cache holds them (d a multiple of
32, strides whole blocks); decoded exactly (int8, or nibble - 8, times the
block's float16 scale) by every kernel. q and out are never a block type.

causal: False/'none', True/'bottom_right' (query i sees keys up to
Tk - Tq + i: the KV-cache alignment), or 'top_left' (PyTorch's is_causal).
scale: default 1/sqrt(d). mask: additive float32, broadcastable to
(batch, heads, Tq, Tk); -inf hides a key. kernel: 'auto' or a name of
attn.kernels() (fastest first). threads: 0 = OpenMP's default.
out: optional array of the output's shape (any of the three types) to write
into. out_dtype: the element type of a new output ('float32', 'float16',
'bfloat16', numpy.float16, ml_dtypes.bfloat16, ...); default q's dtype.
round_inputs_to_bf16: opt in to bf16 arithmetic for float32 / float16 q, k,
v (rounded to bf16 first, then the bf16 dot-product path in force); without
it no input is ever rounded.
dot_path: the bf16 dot-product path of this call (a name of
attn.supported_dot_paths(): 'widen', 'avx512bf16', 'amx', an emulated one,
...); '' (default): attn.current_dot_path() / the tuning table. A name that
cannot run here raises attn.Error.
decode_walk: the decode walk views of few query rows try first ('row',
'pipelined', 'tiled', 'pair-row', 'pair-tiled', 'amx-tiles'; for tests and
tuning: every walk stays within the same bound); '' (default): the walk
table's order. attn.explain(...).decode_walk names the walk that runs.
window: (left, right) sliding window after causal alignment, -1 unbounded
(FlashAttention's window_size). softcap: logits become softcap *
tanh(s / softcap) (0: none). sinks: float32 (q_heads,) logits that join each
row's softmax and add no value (lse counts them). alibi_slopes: float32
(q_heads,) or (batch, q_heads); bias -slope * |i + Tk - Tq - j|.

Returns out, or (out, lse) with return_lse=True (lse: float32 (..., Tq), the
natural log-sum-exp of each row's scores). Raises attn.Error (a ValueError)
naming the bad field and value; TypeError naming the argument for an array
of another dtype (float64, int, ...).)");

  m.def("varlen_attention", &VarlenAttentionPy, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a,
        "cu_seqlens_k"_a, "max_seqlen_q"_a, "max_seqlen_k"_a, nb::kw_only(),
        "softmax_scale"_a = nb::none(), "causal"_a = false, "return_softmax_lse"_a = false,
        "kernel"_a = "auto", "threads"_a = 0, "out"_a = nb::none(), "out_dtype"_a = nb::none(),
        "k_dtype"_a = nb::none(), "v_dtype"_a = nb::none(), "window"_a = nb::none(),
        "softcap"_a = 0.0f, "sinks"_a = nb::none(), "alibi_slopes"_a = nb::none(),
        R"(Attention over a variable-length batch, as flash_attn_varlen_func.

q: (total_q, heads, d), k: (total_k, kv_heads, d), v: (total_k, kv_heads, dv):
the tokens of all sequences packed one after the other. cu_seqlens_q /
cu_seqlens_k: int32 (batch + 1,) cumulative offsets from 0 (sequence b is
tokens cu[b]:cu[b+1]); the last entry must equal the token count.
max_seqlen_q / max_seqlen_k: bounds every length must meet (0: unchecked).
causal: True/'bottom_right' (per sequence: the last query sees every key),
'top_left' or False. A sequence with queries but no keys gets output 0 and
lse -inf. Element types, kernel, threads, out, out_dtype, k_dtype and
v_dtype as attention() (q8_0 k / v: uint8 (total_k, kv_heads, d / 32 * 34);
q4_0: d / 32 * 18).
window, softcap, sinks as attention(), per sequence on its own lengths;
alibi_slopes float32 (heads,) or (batch, heads), one row per sequence. With
sinks, a row that sees no key gets lse sink[h].
Returns out (total_q, heads, dv), or (out, lse) with return_softmax_lse=True
(lse float32 (heads, total_q), FlashAttention's layout).)");
  m.def("kvcache_attention", &KvcacheAttentionPy, "q"_a, "k_cache"_a, "v_cache"_a,
        "k"_a = nb::none(), "v"_a = nb::none(), nb::kw_only(), "cache_seqlens"_a = nb::none(),
        "block_table"_a = nb::none(), "softmax_scale"_a = nb::none(), "causal"_a = false,
        "return_softmax_lse"_a = false, "kernel"_a = "auto", "threads"_a = 0,
        "out"_a = nb::none(), "out_dtype"_a = nb::none(), "cache_dtype"_a = nb::none(),
        "window"_a = nb::none(), "softcap"_a = 0.0f, "sinks"_a = nb::none(),
        "alibi_slopes"_a = nb::none(),
        R"(Attention over a (paged) KV cache, as flash_attn_with_kvcache.

q: (batch, seqlen_q, heads, d). With block_table (int32 (batch, max_blocks)):
k_cache / v_cache are page pools (num_blocks, block_size, kv_heads, d / dv),
sequence b's token t in block block_table[b, t // block_size], read in
place; without it: dense caches (batch, seqlen_cache, kv_heads, d).
cache_seqlens: int or int32 (batch,): tokens already cached (required with
block_table; default the whole dense cache). k, v: optional new tokens
(batch, seqlen_new, kv_heads, d / dv), written into the cache at positions
cache_seqlens[b]: (the pools are modified in place) before attention over
cache_seqlens[b] + seqlen_new keys. causal: True/'bottom_right' aligns the
last query with the last key. cache_dtype: None (the pools' dtype) or
'q8_0' or 'q4_0': k_cache and v_cache are uint8 pools of ggml's blocks
(num_blocks, block_size, kv_heads, d / 32 * 34, or * 18 for q4_0); new k,
v (float arrays) are quantised into them as attn.quantize_q8_0 /
quantize_q4_0 do. window, softcap, sinks,
alibi_slopes ((heads,) or (batch, heads)) as varlen_attention(), per
sequence on its cache_seqlens[b] + seqlen_new keys. Returns out (batch,
seqlen_q, heads, dv), or (out, lse) with return_softmax_lse=True (lse
float32 (batch, heads, seqlen_q)).)");

  m.def("quantize_q8_0", [](const nb::handle& x) { return QuantizePy(x, attn::DType::kQ8_0); },
        "x"_a,
        R"(ggml's q8_0 quantiser (quantize_row_q8_0_ref) on float32 x (..., n).

n must be a multiple of 32. Per block of 32 values: d = max|x| / 127, q =
roundf(x / d) (halves away from zero; 0 when d = 0), d stored as float16
(to nearest even). Returns a new uint8 array (..., n / 32 * 34): each block
is d's 2 bytes (little-endian) then the 32 int8 q's, the layout llama.cpp's
KV cache holds and attention(k_dtype='q8_0') reads. Raises attn.Error for
n not a multiple of 32 or a value that is not finite or too large for a
float16 scale (|x| >= 65520 * 127).)");
  m.def("dequantize_q8_0",
        [](const nb::handle& b) { return DequantizePy(b, attn::DType::kQ8_0); }, "blocks"_a,
        "float32 (..., m / 34 * 32) values of uint8 q8_0 blocks (..., m): int8 times the "
        "block's float16 scale, exactly the values the kernels read.");
  m.def("quantize_q4_0", [](const nb::handle& x) { return QuantizePy(x, attn::DType::kQ4_0); },
        "x"_a,
        R"(ggml's q4_0 quantiser (quantize_row_q4_0_ref) on float32 x (..., n).

n must be a multiple of 32. Per block of 32 values: max = the value of
largest magnitude (the first of ties), d = max / -8, nibble = min(15,
trunc(x / d + 8.5)) (x times 1 / d in float32; 8 when d = 0), d stored as
float16 (to nearest even). Returns a new uint8 array (..., n / 32 * 18):
each block is d's 2 bytes (little-endian) then 16 bytes, elements 0-15 in
the low nibbles and 16-31 in the high ones, the layout llama.cpp's q4_0 KV
cache holds and attention(k_dtype='q4_0') reads. Raises attn.Error for n
not a multiple of 32 or a value that is not finite or too large for a
float16 scale (|x| >= 65520 * 8).)");
  m.def("dequantize_q4_0",
        [](const nb::handle& b) { return DequantizePy(b, attn::DType::kQ4_0); }, "blocks"_a,
        "float32 (..., m / 18 * 32) values of uint8 q4_0 blocks (..., m): (nibble - 8) times "
        "the block's float16 scale, exactly the values the kernels read.");

  nb::class_<attn::TuningStatus>(m, "TuningStatus")
      .def_ro("loaded", &attn::TuningStatus::loaded)
      .def_ro("path", &attn::TuningStatus::path)
      .def_ro("entries", &attn::TuningStatus::entries)
      .def_ro("warning", &attn::TuningStatus::warning)
      .def("__repr__", [](const attn::TuningStatus& s) {
        return "TuningStatus(loaded=" + std::string(s.loaded ? "True" : "False") + ", path='" +
               s.path + "', entries=" + std::to_string(s.entries) + ", warning='" + s.warning +
               "')";
      });
  nb::class_<attn::AutoChoice>(m, "AutoChoice")
      .def_prop_ro("kernel", [](const attn::AutoChoice& c) { return attn::KernelName(c.kernel); })
      .def_prop_ro("q_block", [](const attn::AutoChoice& c) { return c.tiles.q_block; })
      .def_prop_ro("kv_block", [](const attn::AutoChoice& c) { return c.tiles.kv_block; })
      .def_prop_ro("kv_splits", [](const attn::AutoChoice& c) { return c.tiles.kv_splits; })
      .def_ro("threads", &attn::AutoChoice::threads)
      .def_ro("source", &attn::AutoChoice::source)
      .def_ro("reason", &attn::AutoChoice::reason)
      .def_ro("path", &attn::AutoChoice::path)
      .def_ro("dot_path", &attn::AutoChoice::dot_path)
      .def_ro("decode_walk", &attn::AutoChoice::decode_walk)
      .def("__repr__", [](const attn::AutoChoice& c) {
        return std::string("AutoChoice(kernel='") + attn::KernelName(c.kernel) +
               "', q_block=" + std::to_string(c.tiles.q_block) +
               ", kv_block=" + std::to_string(c.tiles.kv_block) +
               ", kv_splits=" + std::to_string(c.tiles.kv_splits) +
               ", threads=" + std::to_string(c.threads) + ", source='" + c.source +
               "', decode_walk='" + c.decode_walk + "')";
      });

  m.def("load_tuning_file", &attn::LoadTuningFile, "path"_a,
        "Makes kernel='auto' follow this attn-tune file. A bad or foreign file is ignored "
        "(defaults stay; results never change): check the returned status's warning.");
  m.def("current_tuning", &attn::CurrentTuning, "The active tuning table (loads it at first use).");
  m.def("clear_tuning", &attn::ClearTuning, "Drops the active table: 'auto' uses the default rule.");
  m.def("default_tuning_path", &attn::DefaultTuningPath,
        "$XDG_CACHE_HOME/attn/tuning.json, else ~/.cache/attn/tuning.json ('' if neither is set).");
  m.def(
      "explain",
      [](int64_t q_len, int64_t kv_len, int64_t head_dim, const nb::handle& causal, int threads) {
        return attn::ExplainChoice(q_len, kv_len, head_dim, ParseCausal(causal), threads);
      },
      "q_len"_a, "kv_len"_a, "head_dim"_a, nb::kw_only(), "causal"_a = false, "threads"_a = 0,
      "What kernel='auto' runs for a shape (one head), and why.");

  m.def("compiled_targets", &attn::CompiledTargets, "SIMD targets compiled into the library.");
  m.def("supported_targets", &attn::SupportedTargets, "Compiled targets this CPU can run.");
  m.def("current_target", &attn::CurrentTarget, "The SIMD target the kernels use now.");
  m.def("force_target", &attn::ForceTarget, "name"_a,
        "Forces a SIMD target for the process ('' or 'auto': the best supported).");
  m.def("dot_paths", &attn::DotPaths,
        "Every bf16 dot-product path: 'widen', 'avx512bf16', 'avx512bf16-emulated', 'amx', "
        "'amx-emulated'.");
  m.def("supported_dot_paths", &attn::SupportedDotPaths, "The dot paths that can run here now.");
  m.def("current_dot_path", &attn::CurrentDotPath,
        "The path all-bf16 q, k, v take now (ATTN_DOT_PATH, force_dot_path, or the default).");
  m.def("force_dot_path", &attn::ForceDotPath, "name"_a,
        "Forces a bf16 dot-product path for the process ('' or 'auto': the default).");
  m.def(
      "kernels",
      [] {
        nb::list names;
        for (const attn::KernelInfo& k : attn::Kernels()) names.append(k.name);
        return names;
      },
      "The kernels' names, in the kernel table's order (fastest first; 'naive', the simple "
      "reference, last). 'auto' is not one: it picks among them.");
  m.attr("CAUSAL_MODES") = nb::make_tuple(CausalName(attn::Causal::kNone),
                                          CausalName(attn::Causal::kBottomRight),
                                          CausalName(attn::Causal::kTopLeft));
}
