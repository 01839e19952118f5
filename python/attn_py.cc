// The Python module attn._attn: attention on NumPy (or any DLPack / buffer
// protocol) arrays of float32, float16 or bfloat16 (ml_dtypes), read and
// written in place through their strides, plus the tuning and target APIs.
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

constexpr const char* kInWhat = "a CPU array (NumPy, or any DLPack or buffer-protocol object)";
constexpr const char* kOutWhat = "a writable CPU array (NumPy, or any DLPack or buffer-protocol object)";

nb::object Attention(const nb::handle& q_obj, const nb::handle& k_obj, const nb::handle& v_obj,
                     const nb::handle& causal, std::optional<float> scale,
                     const nb::handle& mask_obj, const std::string& kernel, int threads,
                     bool return_lse, const nb::handle& out_obj_in,
                     const nb::handle& out_dtype_obj, bool round_inputs_to_bf16,
                     const nb::handle& window_obj, float softcap, const nb::handle& sinks_obj,
                     const nb::handle& alibi_obj) {
  const Typed<InArray> q_in = TypedArray<InArray>("q", q_obj, kInWhat);
  const Typed<InArray> k_in = TypedArray<InArray>("k", k_obj, kInWhat);
  const Typed<InArray> v_in = TypedArray<InArray>("v", v_obj, kInWhat);
  const std::optional<attn::DType> out_dtype = ParseOutDtype(out_dtype_obj);
  const View4 q = AsView("q", q_in.array, 2), k = AsView("k", k_in.array, 2),
              v = AsView("v", v_in.array, 2);
  RequireNonEmpty("q", q, {"batch", "q_heads", "q_len", "head_dim"});
  RequireNonEmpty("k", k, {"batch", "kv_heads", "kv_len", "head_dim"});
  RequireNonEmpty("v", v, {"batch", "kv_heads", "kv_len", "value_dim"});
  RequireContiguousRows("q", q);
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
  if (!window_obj.is_none()) {
    const auto window = nb::cast<std::pair<int64_t, int64_t>>(window_obj);
    p.window = {window.first, window.second};
  }
  p.softcap = softcap;
  InArray sinks_arr, alibi_arr;
  if (!sinks_obj.is_none()) {
    sinks_arr = ToArray<InArray>("sinks", sinks_obj, kInWhat);
    RequireFloat32("sinks", sinks_arr);
    if (sinks_arr.ndim() != 1 || sinks_arr.stride(0) != 1) {
      throw attn::Error("sinks", std::to_string(sinks_arr.ndim()) + "-d",
                        "attn: sinks must be a contiguous 1-d float32 array of q_heads logits");
    }
    p.sinks = {static_cast<const float*>(sinks_arr.data()), int64_t(sinks_arr.shape(0))};
  }
  if (!alibi_obj.is_none()) {
    alibi_arr = ToArray<InArray>("alibi_slopes", alibi_obj, kInWhat);
    RequireFloat32("alibi_slopes", alibi_arr);
    const size_t nd = alibi_arr.ndim();
    const int64_t heads = nd >= 1 ? int64_t(alibi_arr.shape(nd - 1)) : 0;
    if ((nd != 1 && nd != 2) || heads != p.q_heads || alibi_arr.stride(nd - 1) != 1 ||
        (nd == 2 && int64_t(alibi_arr.shape(0)) != p.batch)) {
      throw attn::Error("alibi_slopes", std::to_string(nd) + "-d",
                        "attn: alibi_slopes must be float32 (q_heads,) or (batch, q_heads), "
                        "last dimension contiguous");
    }
    p.alibi_slopes = {static_cast<const float*>(alibi_arr.data()),
                      nd == 2 ? int64_t(alibi_arr.stride(0)) : 0};
  }


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
  {
    // The arrays stay referenced by the ndarray handles above, so the
    // kernels may run without the GIL (other Python threads keep going).
    nb::gil_scoped_release release;
    attn::attention(p, options);
  }
  if (return_lse) return nb::make_tuple(out_obj, lse_obj);
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
        "sinks"_a = nb::none(), "alibi_slopes"_a = nb::none(),
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
window: (left, right) sliding window after causal alignment, -1 unbounded
(FlashAttention's window_size). softcap: logits become softcap *
tanh(s / softcap) (0: none). sinks: float32 (q_heads,) logits that join each
row's softmax and add no value (lse counts them). alibi_slopes: float32
(q_heads,) or (batch, q_heads); bias -slope * |i + Tk - Tq - j|.


Returns out, or (out, lse) with return_lse=True (lse: float32 (..., Tq), the
natural log-sum-exp of each row's scores). Raises attn.Error (a ValueError)
naming the bad field and value; TypeError naming the argument for an array
of another dtype (float64, int, ...).)");

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
      .def("__repr__", [](const attn::AutoChoice& c) {
        return std::string("AutoChoice(kernel='") + attn::KernelName(c.kernel) +
               "', q_block=" + std::to_string(c.tiles.q_block) +
               ", kv_block=" + std::to_string(c.tiles.kv_block) +
               ", kv_splits=" + std::to_string(c.tiles.kv_splits) +
               ", threads=" + std::to_string(c.threads) + ", source='" + c.source + "')";
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
