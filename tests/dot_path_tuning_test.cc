// The bf16 dot path as a per-call choice (issue 23, "the tuner's candidates
// include the real paths the CPU has"): Options::dot_path, a tuning entry's
// dot_path that `auto` follows for all-bf16 calls, and attn-tune's
// candidates on every hardware path. The emulated paths stand in for the
// hardware ones where a test must run on every CPU (they run the same
// kernels over the portable instruction layer).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "dispatch/dot_path.h"
#include "dispatch/tuning.h"
#include "reference/reference.h"
#include "tests/test_util.h"
#include "tools/tune/grid.h"
#include "tools/tune/shape_tuner.h"

namespace attn {
namespace {

using internal::TuningEntry;
using internal::TuningTable;
using test::MakeProblem;
using test::OwnedProblem;
using test::Shape;

constexpr const char* kEmulatedBf16 = "avx512bf16-emulated";

TuningTable TableWith(const TuningEntry& e) {
  TuningTable t;
  t.library_version = internal::LibraryVersion();
  t.cpu_model = internal::CpuModel();
  t.target = CurrentTarget();
  t.max_threads = 2;
  t.heads = 1;
  t.entries.push_back(e);
  return t;
}

// 64 x 64, d = 32, one thread, Q/K/V bf16: the streaming kernel on the
// emulated AVX512-BF16 path with 32 x 32 tiles.
TuningEntry AllBf16Entry() {
  TuningEntry e;
  e.shape.q_len = e.shape.kv_len = 64;
  e.shape.head_dim = 32;
  e.shape.threads = 1;
  e.shape.kv_type = e.shape.q_type = DType::kBF16;
  e.kernel = KernelId::kStreaming;
  e.tiles = Tiles{32, 32, 1};
  e.dot_path = kEmulatedBf16;
  return e;
}

Shape AllBf16Shape(DType q_type = DType::kBF16) {
  Shape s;
  s.tq = s.tk = 64;
  s.d = 32;
  s.q_type = q_type;
  s.k_type = s.v_type = DType::kBF16;
  return s;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "attn_dot_path_test_" + std::to_string(getpid()) + "_" + name;
}

class DotPathTable : public ::testing::Test {
 protected:
  void SetUp() override {
    ClearTuning();
    ForceDotPath("auto");
  }
  void TearDown() override {
    ClearTuning();
    ForceDotPath("auto");
  }
  // Writes and loads a table holding `e`.
  void Load(const TuningEntry& e) {
    path_ = TempPath("table.json");
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << internal::SerializeTuning(TableWith(e));
    ASSERT_TRUE(LoadTuningFile(path_).loaded);
  }
  ~DotPathTable() override {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  std::string path_;
};

TEST(DotPathTuningFile, QTypeAndDotPathRoundTripAndABadPathIsNamed) {
  std::string why;
  const std::string text = internal::SerializeTuning(TableWith(AllBf16Entry()));
  std::optional<TuningTable> back = internal::ParseTuning(text, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->entries[0].shape.q_type, DType::kBF16);
  EXPECT_EQ(back->entries[0].dot_path, kEmulatedBf16);

  // A float32 entry writes no dot_path and reads back without one.
  TuningEntry plain = AllBf16Entry();
  plain.shape.q_type = plain.shape.kv_type = DType::kF32;
  plain.dot_path = "";
  const std::string plain_text = internal::SerializeTuning(TableWith(plain));
  EXPECT_EQ(plain_text.find("dot_path"), std::string::npos) << plain_text;
  back = internal::ParseTuning(plain_text, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->entries[0].dot_path, "");
  EXPECT_EQ(back->entries[0].shape.q_type, DType::kF32);

  std::string bad = text;
  bad.replace(bad.find(kEmulatedBf16), std::string(kEmulatedBf16).size(), "vdpbf16ps");
  EXPECT_FALSE(internal::ParseTuning(bad, &why));
  EXPECT_NE(why.find("dot_path"), std::string::npos) << why;
  EXPECT_NE(why.find("vdpbf16ps"), std::string::npos) << why;
}

// The entry's path is what an all-bf16 `auto` call runs: the same output,
// bit for bit, as asking for that path and those tiles explicitly, and not
// the widened output.
TEST_F(DotPathTable, AnAllBf16EntrysDotPathIsWhatAutoRuns) {
  Load(AllBf16Entry());
  OwnedProblem owned = MakeProblem(AllBf16Shape());
  Options o;
  o.threads = 1;
  const AutoChoice c = ExplainChoice(owned.problem, o);
  EXPECT_EQ(c.source, "table");
  EXPECT_EQ(c.dot_path, kEmulatedBf16);
  EXPECT_NE(c.path.find("(dot path avx512bf16-emulated)"), std::string::npos) << c.path;
  EXPECT_NE(c.reason.find("on dot path avx512bf16-emulated"), std::string::npos) << c.reason;
  EXPECT_TRUE(c.dot_product_row);
  // The naive kernel has no bf16 dot-product row: it widens on any path,
  // and the tuner reads that here rather than from the path's text.
  Options naive = o;
  naive.kernel = KernelId::kNaive;
  naive.dot_path = kEmulatedBf16;
  EXPECT_FALSE(ExplainChoice(owned.problem, naive).dot_product_row);

  owned.ClearOutputs();
  attention(owned.problem, o);
  const std::vector<float> from_table = owned.out;

  Options explicit_path;
  explicit_path.kernel = KernelId::kStreaming;
  explicit_path.threads = 1;
  explicit_path.tiles = Tiles{32, 32, 1};
  explicit_path.dot_path = kEmulatedBf16;
  owned.ClearOutputs();
  attention(owned.problem, explicit_path);
  EXPECT_EQ(owned.out, from_table);

  explicit_path.dot_path = "widen";
  owned.ClearOutputs();
  attention(owned.problem, explicit_path);
  EXPECT_NE(owned.out, from_table) << "the widened path rounds no P: its output differs";
}

// Options::dot_path and ForceDotPath fix the path: the entry's kernel and
// tiles still apply, its path does not, and the reason says so.
TEST_F(DotPathTable, AnExplicitPathWinsOverTheEntrys) {
  Load(AllBf16Entry());
  OwnedProblem owned = MakeProblem(AllBf16Shape());
  Options o;
  o.threads = 1;
  o.dot_path = "widen";
  AutoChoice c = ExplainChoice(owned.problem, o);
  EXPECT_EQ(c.source, "table");
  EXPECT_EQ(c.kernel, KernelId::kStreaming);
  EXPECT_EQ(c.dot_path, "widen");
  EXPECT_EQ(c.path.find("dot path"), std::string::npos) << c.path;
  EXPECT_NE(c.reason.find("as fixed by Options::dot_path"), std::string::npos) << c.reason;

  o.dot_path = "";
  ForceDotPath("widen");
  c = ExplainChoice(owned.problem, o);
  EXPECT_EQ(c.dot_path, "widen");
  ForceDotPath("amx-emulated");
  c = ExplainChoice(owned.problem, o);
  EXPECT_EQ(c.dot_path, "amx-emulated");
  EXPECT_NE(c.path.find("AMX"), std::string::npos) << c.path;
}

// Only all-bf16 calls have a dot path: a float32 Q with a bf16 cache is a
// different key (no entry here) and names none.
TEST_F(DotPathTable, OnlyAllBf16CallsUseTheEntryOrNameAPath) {
  Load(AllBf16Entry());
  OwnedProblem owned = MakeProblem(AllBf16Shape(DType::kF32));
  Options o;
  o.threads = 1;
  const AutoChoice c = ExplainChoice(owned.problem, o);
  EXPECT_EQ(c.source, "default");
  EXPECT_EQ(c.dot_path, "");
  EXPECT_NE(c.path.find("widened to float32 exactly"), std::string::npos) << c.path;
}

// An entry whose path cannot run now (AMX where this process has none) falls
// back to the default rule, saying why.
TEST_F(DotPathTable, AnEntryOnAPathThatCannotRunHereFallsBackToTheDefault) {
  if (!internal::AmxUnavailable().empty()) {
    TuningEntry e = AllBf16Entry();
    e.dot_path = "amx";
    Load(e);
    OwnedProblem owned = MakeProblem(AllBf16Shape());
    Options o;
    o.threads = 1;
    const AutoChoice c = ExplainChoice(owned.problem, o);
    EXPECT_EQ(c.source, "default");
    EXPECT_NE(c.reason.find("ran dot path amx, which cannot run now"), std::string::npos)
        << c.reason;
  } else {
    GTEST_SKIP() << "this process can run AMX, so an amx entry runs (the other tests cover that)";
  }
}

TEST(DotPathOption, AnUnknownOrUnrunnableNameIsAnErrorAndNothingIsWritten) {
  for (DType q_type : {DType::kBF16, DType::kF32}) {
    OwnedProblem owned = MakeProblem(AllBf16Shape(q_type));
    std::vector<std::string> bad = {"vdpbf16ps"};
    if (!internal::AmxUnavailable().empty()) bad.push_back("amx");
    for (const std::string& name : bad) {
      SCOPED_TRACE(name + " q=" + DTypeName(q_type));
      owned.ClearOutputs();
      const std::vector<float> before = owned.out;
      Options o;
      o.dot_path = name;
      try {
        attention(owned.problem, o);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.field(), "dot_path");
        EXPECT_EQ(e.value(), name);
      }
      EXPECT_EQ(owned.out, before);
    }
  }
}

// A valid path on a call that is not all-bf16 changes nothing: the exact
// widening, bit for bit.
TEST(DotPathOption, IsIgnoredByACallThatIsNotAllBf16) {
  OwnedProblem owned = MakeProblem(AllBf16Shape(DType::kF32));
  Options o;
  o.kernel = KernelId::kStreaming;
  attention(owned.problem, o);
  const std::vector<float> widened = owned.out;
  o.dot_path = kEmulatedBf16;
  owned.ClearOutputs();
  attention(owned.problem, o);
  EXPECT_EQ(owned.out, widened);
}

// attn-tune's candidates for an all-bf16 shape: every kernel and tile
// choice on widen and on each hardware dot path this CPU has, never an
// emulated one, the default first on the default rule's path.
TEST(DotPathTuner, AnAllBf16ShapeHasCandidatesOnEveryHardwarePath) {
  ClearTuning();
  attn_tune::TuneShape shape{64, 64, 64, false, 1};
  shape.kv_type = shape.q_type = DType::kBF16;
  const std::vector<attn_tune::AttnCandidate> candidates =
      attn_tune::EnumerateCandidates(shape, 1, true, false);
  ASSERT_FALSE(candidates.empty());
  std::set<std::string> paths;
  std::set<std::string> labels;
  for (const attn_tune::AttnCandidate& c : candidates) {
    paths.insert(c.dot_path);
    EXPECT_TRUE(labels.insert(c.Label()).second) << "duplicate " << c.Label();
    // Only kernels with a dot-product row run a dot path; blocked has none.
    if (c.dot_path != "widen") {
      EXPECT_EQ(c.kernel, KernelId::kStreaming) << c.Label();
    }
  }
  std::set<std::string> hardware{"widen"};
  for (const std::string& p : SupportedDotPaths()) {
    if (p.find("-emulated") == std::string::npos) hardware.insert(p);
  }
  EXPECT_EQ(paths, hardware);
  Options o;
  o.threads = 1;
  const AutoChoice def = ExplainChoice(attn_tune::ShapeOnly(shape, 1), o);
  EXPECT_TRUE(candidates[0].is_default);
  EXPECT_EQ(candidates[0].dot_path, def.dot_path);

  // A float32 shape's candidates name no path.
  for (const attn_tune::AttnCandidate& c :
       attn_tune::EnumerateCandidates(attn_tune::TuneShape{64, 64, 64, false, 1}, 1, true, false)) {
    EXPECT_EQ(c.dot_path, "") << c.Label();
  }
}

// The check holds a dot-path candidate to the path's bound (P rounded to
// bf16), a widened one to the float32 bound, and still rejects a dot-path
// kernel that drops a key; the winner's path goes into the table entry.
TEST(DotPathTuner, TheCheckUsesThePathsBoundAndTheEntryRecordsThePath) {
  attn_tune::TuneShape shape{64, 64, 64, false, 1};
  shape.kv_type = shape.q_type = DType::kBF16;
  std::vector<attn_tune::AttnCandidate> candidates;
  candidates.push_back({KernelId::kStreaming, Tiles{32, 64, 1}, true, {}, "widen"});
  candidates.push_back({KernelId::kStreaming, Tiles{32, 64, 1}, false, {}, kEmulatedBf16});
  attn_tune::AttnCandidate blind{KernelId::kStreaming, Tiles{32, 64, 1}, false, {}, kEmulatedBf16};
  blind.run = [](const Problem& p, const Options& o) {
    Problem fewer = p;  // the last key dropped
    fewer.kv_len = p.kv_len - 1;
    attention(fewer, o);
  };
  candidates.push_back(blind);
  const attn_tune::ShapeResult r = attn_tune::TuneOneShape(
      shape, {}, candidates, [](const attn_tune::AttnCandidate& c) {
        return c.dot_path == "widen" ? 2e-3 : 1e-3;  // the dot path is faster
      });
  ASSERT_EQ(r.tuning.candidates.size(), 3u);
  EXPECT_NE(r.tuning.candidates[0].verdict, attn_tune::Verdict::kWrong)
      << r.tuning.candidates[0].reason;
  EXPECT_NE(r.tuning.candidates[1].verdict, attn_tune::Verdict::kWrong)
      << r.tuning.candidates[1].reason;
  EXPECT_EQ(r.tuning.candidates[2].verdict, attn_tune::Verdict::kWrong);
  EXPECT_NE(r.tuning.candidates[2].reason.find("P rounded to bf16"), std::string::npos)
      << r.tuning.candidates[2].reason;
  ASSERT_EQ(r.tuning.winner, 1);
  const TuningEntry e = attn_tune::ToEntry(r, 100.0);
  EXPECT_EQ(e.dot_path, kEmulatedBf16);
  EXPECT_EQ(e.shape.q_type, DType::kBF16);
  EXPECT_EQ(e.shape.kv_type, DType::kBF16);
}

// Held to the float32 bound, the emulated dot path fails on the same shape:
// the looser bound is needed, and only dot-path candidates get it.
TEST(DotPathTuner, AWidenedCandidateIsHeldToTheFloat32Bound) {
  attn_tune::TuneShape shape{64, 64, 64, false, 1};
  shape.kv_type = shape.q_type = DType::kBF16;
  // Labelled widen, run on the emulated dot path: judged by the float32 bound.
  attn_tune::AttnCandidate mislabelled{KernelId::kStreaming, Tiles{32, 64, 1}, true, {}, "widen"};
  mislabelled.run = [](const Problem& p, const Options& o) {
    Options dot = o;
    dot.dot_path = kEmulatedBf16;
    attention(p, dot);
  };
  const attn_tune::ShapeResult r = attn_tune::TuneOneShape(
      shape, {}, {mislabelled}, [](const attn_tune::AttnCandidate&) { return 1e-3; });
  EXPECT_EQ(r.tuning.candidates[0].verdict, attn_tune::Verdict::kWrong);
}

}  // namespace
}  // namespace attn
