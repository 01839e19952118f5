// The tuning file's schema (see dispatch/tuning_file.h). TableFields and
// EntryFields list every field once, with its JSON name, member and valid
// range; a Reader visiting them parses and validates, a Writer visiting
// them serialises.
#include "dispatch/tuning_file.h"

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace attn::internal {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Thrown inside ParseTuning only; carries the sentence for *why.
struct BadField {
  std::string why;
};

// A value as it appears in the file, cut short: the wrong value may be a
// whole array or object.
std::string Shown(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

[[noreturn]] void Bad(const std::string& field, const Json& value, const std::string& must) {
  throw BadField{field + " must be " + must + ", got " + Shown(value)};
}

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

double FiniteOrZero(double x) { return std::isfinite(x) ? x : 0.0; }

// Parses the fields of one JSON object, `path` naming it in messages
// ("entries[3].tiles.").
class Reader {
 public:
  Reader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  template <typename T>
  void Int(const char* name, T& x, int64_t lo, int64_t hi) {
    const Json& v = Field(name);
    const std::string must =
        "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!v.is_number_integer()) Bad(path_ + name, v, must);
    // Unsigned values above int64 max would wrap in get<int64_t>().
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) Bad(path_ + name, v, must);
    const int64_t value = v.get<int64_t>();
    if (value < lo || value > hi) Bad(path_ + name, v, must);
    x = T(value);
  }
  // An optional integer; absent: x keeps its default.
  template <typename T>
  void OptionalInt(const char* name, T& x, int64_t lo, int64_t hi) {
    if (object_.find(name) != object_.end()) Int(name, x, lo, hi);
  }
  void Bool(const char* name, bool& x) { x = BoolValue(name, Field(name)); }
  void OptionalBool(const char* name, bool& x) {
    if (const auto it = object_.find(name); it != object_.end()) x = BoolValue(name, *it);
  }
  void String(const char* name, std::string& x) { x = StringValue(name, Field(name)); }
  void OptionalString(const char* name, std::string& x) {
    if (const auto it = object_.find(name); it != object_.end()) x = StringValue(name, *it);
  }
  // An element type by name; absent: float32 (files written before bf16/f16).
  void OptionalDType(const char* name, DType& x) {
    const auto it = object_.find(name);
    if (it == object_.end()) return;
    const std::string text = StringValue(name, *it);
    if (text == "f32") x = DType::kF32;
    else if (text == "bf16") x = DType::kBF16;
    else if (text == "f16") x = DType::kF16;
    else if (text == "q8_0") x = DType::kQ8_0;
    else if (text == "q4_0") x = DType::kQ4_0;
    else Bad(path_ + name, *it, "one of \"f32\", \"bf16\", \"f16\", \"q8_0\", \"q4_0\"");
  }
  // A dot path by name (attn::DotPaths()); absent or "": none.
  void OptionalDotPath(const char* name, std::string& x) {
    const auto it = object_.find(name);
    if (it == object_.end()) return;
    x = StringValue(name, *it);
    if (x.empty()) return;
    std::string names;
    for (const std::string& known : DotPaths()) {
      if (x == known) return;
      names += (names.empty() ? "\"" : ", \"") + known + "\"";
    }
    Bad(path_ + name, *it, "\"\" or one of " + names);
  }
  // Informational numbers: optional, but a present one must be finite.
  void Number(const char* name, double& x) {
    const auto it = object_.find(name);
    if (it == object_.end()) return;
    if (!it->is_number() || !std::isfinite(it->get<double>())) {
      Bad(path_ + name, *it, "a finite number");
    }
    x = it->get<double>();
  }
  void Kernel(const char* name, KernelId& id) {
    const Json& v = Field(name);
    std::string must = "one of ";
    for (const KernelInfo& k : Kernels()) {
      must += std::string(k.id == Kernels().front().id ? "" : ", ") + "\"" + k.name + "\"";
    }
    if (v.is_string()) {
      for (const KernelInfo& k : Kernels()) {
        if (v.get<std::string>() == k.name) {
          id = k.id;
          return;
        }
      }
    }
    Bad(path_ + name, v, must);
  }
  // A nested object; `fields(Reader&)` reads its fields.
  template <typename Fields>
  void Object(const char* name, bool optional, Fields&& fields) {
    const auto it = object_.find(name);
    if (it == object_.end() && optional) return;
    const Json& v = it == object_.end() ? Field(name) : *it;
    if (!v.is_object()) Bad(path_ + name, v, "an object");
    Reader nested(v, path_ + name + ".");
    fields(nested);
  }
  // An optional object of informational numbers by name.
  void NumberMap(const char* name, std::map<std::string, double>& map) {
    Object(name, true, [&](Reader& r) {
      for (auto it = r.object_.begin(); it != r.object_.end(); ++it) {
        r.Number(it.key().c_str(), map[it.key()]);
      }
    });
  }
  // An optional object of informational numbers by thread count.
  void ThreadMap(const char* name, std::map<int, double>& map) {
    Object(name, true, [&](Reader& r) {
      for (auto it = r.object_.begin(); it != r.object_.end(); ++it) {
        const std::string& key = it.key();
        char* end = nullptr;
        const long threads = std::strtol(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || threads < 1 || threads > (1 << 16)) {
          Bad(std::string(name) + " key", Json(key), "a thread count");
        }
        r.Number(key.c_str(), map[int(threads)]);
      }
    });
  }

  const Json& Field(const char* name) const {
    const auto it = object_.find(name);
    if (it == object_.end()) throw BadField{"field " + path_ + name + " is missing"};
    return *it;
  }

 private:
  bool BoolValue(const char* name, const Json& v) const {
    if (!v.is_boolean()) Bad(path_ + name, v, "true or false");
    return v.get<bool>();
  }
  std::string StringValue(const char* name, const Json& v) const {
    if (!v.is_string()) Bad(path_ + name, v, "a string");
    return v.get<std::string>();
  }

  const Json& object_;
  std::string path_;
};

// Writes the same fields, in the order visited.
class Writer {
 public:
  explicit Writer(OrderedJson& object) : object_(object) {}

  template <typename T>
  void Int(const char* name, T& x, int64_t, int64_t) { object_[name] = x; }
  // Written only when set, so a table without it reads as before.
  template <typename T>
  void OptionalInt(const char* name, T& x, int64_t, int64_t) {
    if (x != 0) object_[name] = x;
  }
  void Bool(const char* name, bool& x) { object_[name] = x; }
  void OptionalBool(const char* name, bool& x) { object_[name] = x; }
  void String(const char* name, std::string& x) { object_[name] = x; }
  void OptionalString(const char* name, std::string& x) { object_[name] = x; }
  void OptionalDType(const char* name, DType& x) { object_[name] = DTypeName(x); }
  void OptionalDotPath(const char* name, std::string& x) {
    if (!x.empty()) object_[name] = x;
  }
  void Number(const char* name, double& x) { object_[name] = FiniteOrZero(x); }
  void Kernel(const char* name, KernelId& id) { object_[name] = KernelName(id); }
  template <typename Fields>
  void Object(const char* name, bool, Fields&& fields) {
    OrderedJson nested = OrderedJson::object();
    Writer w(nested);
    fields(w);
    object_[name] = std::move(nested);
  }
  void NumberMap(const char* name, std::map<std::string, double>& map) {
    OrderedJson nested = OrderedJson::object();
    for (const auto& [key, x] : map) nested[key] = FiniteOrZero(x);
    object_[name] = std::move(nested);
  }
  void ThreadMap(const char* name, std::map<int, double>& map) {
    OrderedJson nested = OrderedJson::object();
    for (const auto& [threads, x] : map) nested[std::to_string(threads)] = FiniteOrZero(x);
    object_[name] = std::move(nested);
  }

 private:
  OrderedJson& object_;
};

// ---- the schema: every field once ------------------------------------------

// The table's own fields after "schema" and "schema_version" (which are read
// first: a newer version may rename the rest) and before "entries".
template <typename Visitor>
void TableFields(Visitor& v, TuningTable& t) {
  v.String("library_version", t.library_version);
  v.String("cpu_model", t.cpu_model);
  v.String("target", t.target);
  v.Int("max_threads", t.max_threads, 1, 1 << 16);
  v.Int("heads", t.heads, 1, 1 << 20);
  v.OptionalString("created", t.created);
  v.ThreadMap("peak_gflops", t.peak_gflops);
}

template <typename Visitor>
void EntryFields(Visitor& v, TuningEntry& e) {
  constexpr int64_t kMaxLen = int64_t{1} << 40;
  v.Int("q_len", e.shape.q_len, 1, kMaxLen);
  v.Int("kv_len", e.shape.kv_len, 1, kMaxLen);
  v.Int("head_dim", e.shape.head_dim, 1, kMaxLen);
  v.Bool("causal", e.shape.causal);
  v.Int("threads", e.shape.threads, 1, 1 << 16);
  v.OptionalDType("kv_dtype", e.shape.kv_type);
  v.OptionalDType("q_dtype", e.shape.q_type);
  v.OptionalInt("window", e.shape.window, 0, kMaxLen);  // schema version 2
  v.Kernel("kernel", e.kernel);
  v.OptionalDotPath("dot_path", e.dot_path);
  v.Object("tiles", /*optional=*/false, [&](auto& tiles) {
    tiles.Int("q_block", e.tiles.q_block, 1, kMaxTunedQBlock);
    tiles.Int("kv_block", e.tiles.kv_block, 1, kMaxTunedKvBlock);
    tiles.Int("kv_splits", e.tiles.kv_splits, 1, kMaxTunedKvSplits);
  });
  TunedFigures& f = e.figures;
  v.Object("measured", /*optional=*/true, [&](auto& m) {
    m.Number("seconds", f.seconds);
    m.Number("gflops", f.gflops);
    m.Number("peak_fraction", f.peak_fraction);
    m.Number("default_seconds", f.default_seconds);
    m.Number("naive_seconds", f.naive_seconds);
    m.OptionalBool("naive_extrapolated", f.naive_extrapolated);
    m.Number("speedup_vs_default", f.speedup_vs_default);
    m.Number("speedup_vs_naive", f.speedup_vs_naive);
  });
  v.NumberMap("kernel_gflops", e.kernel_gflops);
}

// ---- reading -----------------------------------------------------------------

TuningTable ParseTable(const Json& j) {
  if (!j.is_object()) Bad("the top level", j, "an object");
  Reader top(j, "");
  TuningTable t;
  const Json& schema = top.Field("schema");
  if (schema != kTuningSchemaName) Bad("schema", schema, std::string("\"") + kTuningSchemaName + "\"");
  // The version before anything else: a newer schema may have renamed fields.
  const Json& version = top.Field("schema_version");
  if (!version.is_number_integer() || version.get<int64_t>() < 1) {
    Bad("schema_version", version, "a positive integer");
  }
  if (version.get<int64_t>() > kTuningSchemaVersion) {
    throw BadField{"its schema_version " + Shown(version) + " is newer than this library reads (" +
                   std::to_string(kTuningSchemaVersion) + "); rerun attn-tune"};
  }
  t.schema_version = int(version.get<int64_t>());
  TableFields(top, t);
  const Json& entries = top.Field("entries");
  if (!entries.is_array()) Bad("entries", entries, "an array");
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string path = "entries[" + std::to_string(i) + "].";
    if (!entries[i].is_object()) Bad(path.substr(0, path.size() - 1), entries[i], "an object");
    Reader reader(entries[i], path);
    TuningEntry e;
    EntryFields(reader, e);
    for (size_t k = 0; k < t.entries.size(); ++k) {
      if (SameShape(t.entries[k].shape, e.shape)) {
        throw BadField{"entries[" + std::to_string(i) + "] repeats the shape of entries[" +
                       std::to_string(k) + "] (" + ShapeText(e.shape) + ")"};
      }
    }
    t.entries.push_back(std::move(e));
  }
  return t;
}

}  // namespace

int SchemaVersionFor(const TuningTable& table) {
  for (const TuningEntry& e : table.entries) {
    if (e.shape.window != 0) return 2;
  }
  return 1;
}

std::string SerializeTuning(const TuningTable& table) {
  TuningTable t = table;  // the visitors take fields by reference
  OrderedJson j;
  j["schema"] = kTuningSchemaName;
  j["schema_version"] = SchemaVersionFor(t);
  Writer top(j);
  TableFields(top, t);
  OrderedJson entries = OrderedJson::array();
  for (TuningEntry& e : t.entries) {
    OrderedJson o;
    Writer w(o);
    EntryFields(w, e);
    entries.push_back(std::move(o));
  }
  j["entries"] = std::move(entries);
  return j.dump(2) + "\n";
}

std::optional<TuningTable> ParseTuning(const std::string& text, std::string* why) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.g. "... parse error at line 12, column 3: syntax error while parsing
    // object - unexpected end of input" for a truncated file.
    *why = std::string("it is not valid JSON: ") + e.what();
    return std::nullopt;
  }
  try {
    return ParseTable(j);
  } catch (const BadField& bad) {
    *why = bad.why;
  } catch (const Json::exception& e) {  // defensive: a type our checks missed
    *why = std::string("unexpected content: ") + e.what();
  }
  return std::nullopt;
}

std::string CheckTuningMachine(const TuningTable& t, const std::string& cpu_model,
                               const std::string& target) {
  if (t.cpu_model != cpu_model) {
    return "it was made on CPU " + Quoted(t.cpu_model) + ", not on this " + Quoted(cpu_model);
  }
  if (t.target != target) {
    return "it was made for SIMD target " + Quoted(t.target) + ", not for this process's " +
           Quoted(target);
  }
  return "";
}

}  // namespace attn::internal
