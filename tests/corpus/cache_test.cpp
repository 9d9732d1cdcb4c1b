// The compiled-model cache (CompileOptions::cache_dir): every corpus model
// compiled through it, stored on the first compile and loaded on the second,
// must give bit for bit the outputs, implementations and fusion log of a
// compile without it; damaged, truncated, foreign and stale entries are
// compiled afresh and replaced; remembered digests stand only while their
// files keep their stamps; an unwritable directory only warns; threads
// filling one entry at once each get a whole model.

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "graph/onnx/importer.hpp"
#include "graph/openvino/importer.hpp"
#include "plugin/api_internal.hpp"
#include "plugin/model_cache.hpp"
#include "qfuse/onnx.hpp"
#include "qfuse/openvino.hpp"
#include "tests/corpus/corpus_util.hpp"
#include "tools/common/models.hpp"
#include "tools/common/npy.hpp"

namespace qfuse {
namespace {

namespace fs = std::filesystem;

fs::path corpus_file(const std::string& name) { return fs::path(QFUSE_CORPUS_DIR) / name; }

// A fresh, empty directory for one test.
fs::path fresh_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : fs::temp_directory_path().string()) /
                       ("qfuse_cache_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

using corpus::Observed;
using corpus::run;

void expect_same(const Observed& a, const Observed& b) {
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.implementations, b.implementations);
  EXPECT_EQ(a.fusion_log, b.fusion_log);
}

std::size_t entries_in(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".qfc";
  return n;
}

// The files in `dir` and in its digests folder, whose records are files too.
std::size_t files_in(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

// The records of remembered digests in `dir`.
std::size_t records_in(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir / "digests", ec)) n += e.path().extension() == ".qfd";
  return n;
}

// Every corpus model: the ONNX ones, the encoders (transformers/) and the
// OpenVINO IRs, by path under the corpus directory.
std::vector<std::string> cached_models() {
  std::vector<std::string> files;
  for (const std::string& m : corpus::models()) files.push_back(m + ".onnx");
  const fs::path dir(QFUSE_CORPUS_DIR);
  if (fs::is_directory(dir / "transformers")) {
    for (const auto& e : fs::directory_iterator(dir / "transformers")) {
      if (e.path().extension() == ".onnx") files.push_back("transformers/" + e.path().filename().string());
    }
  }
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".xml") files.push_back(e.path().filename().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool is_ir(const fs::path& file) { return file.extension() == ".xml"; }

graph::Graph import_any(const fs::path& file) {
  return is_ir(file) ? openvino::import_file(file) : onnx::import_file(file);
}

CompiledModel compile_any(const fs::path& file, const CompileOptions& options) {
  return is_ir(file) ? compile_openvino(file.string(), {}, options)
                     : compile_onnx(file.string(), {}, options);
}

// The model's inputs from <stem>.<input>.npy where the corpus has them
// (the encoders' token ids), else random.
std::vector<Tensor> inputs_for(const fs::path& file, const graph::Graph& g) {
  std::vector<Tensor> inputs = tools::random_inputs(g, 5);
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    const fs::path npy = file.parent_path() / (file.stem().string() + "." +
                                               g.value(g.inputs()[i]).name + ".npy");
    if (fs::exists(npy)) inputs[i] = tools::read_npy(npy);
  }
  return inputs;
}

class CacheCorpus : public ::testing::TestWithParam<std::string> {};

// Fused, unfused and integer-only: a miss stores, a hit loads, and both run
// as the model compiled without a cache does.
TEST_P(CacheCorpus, AHitRunsAsACompileWithoutTheCache) {
  const fs::path file = corpus_file(GetParam());
  const graph::Graph g = import_any(file);
  const std::vector<Tensor> inputs = inputs_for(file, g);
  const fs::path dir = fresh_dir(file.stem().string());
  for (const CompileOptions& mode : {CompileOptions{.threads = 2},
                                     CompileOptions{.fuse = false, .threads = 2},
                                     CompileOptions{.threads = 2, .integer_only = true}}) {
    const Observed alone = run(compile(g, mode), inputs);
    CompileOptions cached = mode;
    cached.cache_dir = dir.string();
    const CompiledModel miss = compile_any(file, cached);
    EXPECT_EQ(miss.compile_times().cache.rfind("miss, stored ", 0), 0u) << miss.compile_times().cache;
    expect_same(run(miss, inputs), alone);
    const CompiledModel hit = compile_any(file, cached);
    EXPECT_EQ(hit.compile_times().cache.rfind("hit ", 0), 0u) << hit.compile_times().cache;
    // Every weight tensor the entry holds in its primitive's layout is used
    // in place: none is reordered again.
    EXPECT_NE(hit.compile_times().cache.find(" 0 reordered)"), std::string::npos)
        << hit.compile_times().cache;
    expect_same(run(hit, inputs), alone);
  }
  EXPECT_EQ(entries_in(dir), 3u);  // one per mode
  fs::remove_all(dir);
}

// onnx::list_inputs reads a model's inputs from the wire format, skipping
// its initializers' data: on every corpus model, the inputs protobuf's full
// parse gives (graph inputs that are no initializer), with their types and
// dimensions.
TEST(ListInputs, EveryCorpusModelAgreesWithAFullParse) {
  for (const std::string& m : cached_models()) {
    if (is_ir(m)) continue;
    const fs::path file = corpus_file(m);
    ::onnx::ModelProto model;
    std::ifstream in(file, std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&in)) << m;
    std::set<std::string> initializers;
    for (const auto& t : model.graph().initializer()) initializers.insert(t.name());
    std::vector<std::string> want;
    for (const auto& vi : model.graph().input()) {
      if (!initializers.count(vi.name())) want.push_back(vi.name() + " " + std::to_string(vi.type().tensor_type().elem_type()) + " " + std::to_string(vi.type().tensor_type().shape().dim_size()));
    }
    std::vector<std::string> got;
    for (const onnx::InputInfo& i : onnx::list_inputs(file)) {
      got.push_back(i.name + " " + std::to_string(i.onnx_type) + " " + std::to_string(i.dims.size()));
    }
    EXPECT_EQ(got, want) << m;
  }
  // A truncated model is an error, not a partial list.
  const fs::path dir = fresh_dir("list_inputs");
  const fs::path cut = dir / "cut.onnx";
  fs::copy_file(corpus_file("torch_qat_resnet8.onnx"), cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  EXPECT_THROW(onnx::list_inputs(cut), GraphError);
  fs::remove_all(dir);
}

TEST(CacheCorpusModels, TheEncodersAndIrsAreThere) {
  std::size_t encoders = 0, irs = 0;
  for (const std::string& m : cached_models()) {
    encoders += m.rfind("transformers/", 0) == 0;
    irs += is_ir(m);
  }
  EXPECT_GE(encoders, 6u);
  EXPECT_EQ(irs, 4u);
}

INSTANTIATE_TEST_SUITE_P(Corpus, CacheCorpus, ::testing::ValuesIn(cached_models()),
                         [](const auto& p) {
                           std::string name = p.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CacheCorpus);

TEST(Cache, AnOpenVinoIrHitRunsAsACompileWithoutTheCache) {
  const fs::path xml = corpus_file("ov_resnet_block.xml");
  const graph::Graph g = openvino::import_file(xml);
  const std::vector<Tensor> inputs = tools::random_inputs(g, 5);
  const fs::path dir = fresh_dir("openvino");
  const Observed alone = run(compile(g, {.threads = 2}), inputs);
  const CompileOptions cached{.threads = 2, .cache_dir = dir.string()};
  expect_same(run(compile_openvino(xml.string(), {}, cached), inputs), alone);
  const CompiledModel hit = compile_openvino(xml.string(), {}, cached);
  EXPECT_EQ(hit.compile_times().cache.rfind("hit ", 0), 0u) << hit.compile_times().cache;
  expect_same(run(hit, inputs), alone);
  // The .bin is part of the key: other weights, another entry.
  const fs::path copy = dir / "copy";
  fs::create_directories(copy);
  fs::copy_file(xml, copy / "m.xml");
  fs::copy_file(corpus_file("ov_resnet_block.bin"), copy / "m.bin");
  {
    std::fstream bin(copy / "m.bin", std::ios::in | std::ios::out | std::ios::binary);
    bin.seekp(static_cast<std::streamoff>(fs::file_size(copy / "m.bin") / 2));
    bin.put('\x5a');
  }
  const CompiledModel other = compile_openvino((copy / "m.xml").string(), {}, cached);
  EXPECT_EQ(other.compile_times().cache.rfind("miss", 0), 0u) << other.compile_times().cache;
  fs::remove_all(dir);
}

// The model every damage test uses, and its outputs compiled without a cache.
struct Reference {
  fs::path file = corpus_file("torch_qat_resnet8.onnx");
  graph::Graph g = onnx::import_file(file);
  std::vector<Tensor> inputs = tools::random_inputs(g, 9);
  Observed alone = run(compile(g, {.threads = 2}), inputs);
};

// `from` written to `to` with every initializer's raw bytes in `data` beside
// it (ONNX's external data: location, offset, length).
void save_with_external_data(const fs::path& from, const fs::path& to, const std::string& data) {
  ::onnx::ModelProto model;
  {
    std::ifstream in(from, std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&in));
  }
  std::ofstream bytes(to.parent_path() / data, std::ios::binary);
  std::int64_t offset = 0;
  for (::onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer()) {
    if (!t.has_raw_data() || t.raw_data().empty()) continue;
    const std::string raw = t.raw_data();
    bytes.write(raw.data(), static_cast<std::streamsize>(raw.size()));
    t.clear_raw_data();
    t.set_data_location(::onnx::TensorProto_DataLocation_EXTERNAL);
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"location", data},
                               {"offset", std::to_string(offset)},
                               {"length", std::to_string(raw.size())}}) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    offset += static_cast<std::int64_t>(raw.size());
  }
  std::ofstream out(to, std::ios::binary);
  ASSERT_TRUE(model.SerializeToOstream(&out));
  ASSERT_GT(offset, 0);
}

fs::path only_entry(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".qfc") return e.path();
  }
  return {};
}

// One bit of the byte at `where` (a fraction of the file's size) flipped.
void flip_byte(const fs::path& file, double where) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = static_cast<std::streamoff>(static_cast<double>(fs::file_size(file)) * where);
  f.seekg(at);
  const char c = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x10));
}

// Each damage: the next compile says why it compiled afresh, runs right, and
// leaves a whole entry that the compile after it hits.
void expect_damage_recovered(const std::string& name,
                             const std::function<void(const fs::path& entry)>& damage) {
  const Reference ref;
  const fs::path dir = fresh_dir(name);
  const CompileOptions cached{.threads = 2, .cache_dir = dir.string()};
  compile_onnx(ref.file.string(), {}, cached);
  const fs::path entry = only_entry(dir);
  ASSERT_FALSE(entry.empty());
  damage(entry);
  const CompiledModel again = compile_onnx(ref.file.string(), {}, cached);
  EXPECT_EQ(again.compile_times().cache.rfind("miss, stored ", 0), 0u) << again.compile_times().cache;
  expect_same(run(again, ref.inputs), ref.alone);
  const CompiledModel hit = compile_onnx(ref.file.string(), {}, cached);
  EXPECT_EQ(hit.compile_times().cache.rfind("hit ", 0), 0u) << hit.compile_times().cache;
  expect_same(run(hit, ref.inputs), ref.alone);
  fs::remove_all(dir);
}

TEST(Cache, ADamagedEntryIsCompiledAfresh) {
  // One bit in every 4 KiB page of the contents, one page at a time would
  // take long; a byte in the middle (the weights) and one in the graph's
  // last bytes are each caught by the checksum.
  for (const double where : {0.5, 0.999}) {
    expect_damage_recovered("damaged", [where](const fs::path& entry) { flip_byte(entry, where); });
  }
}

TEST(Cache, ATruncatedEntryIsCompiledAfresh) {
  expect_damage_recovered("truncated", [](const fs::path& entry) {
    fs::resize_file(entry, fs::file_size(entry) - 100);
  });
  expect_damage_recovered("header_only", [](const fs::path& entry) { fs::resize_file(entry, 30); });
  expect_damage_recovered("empty", [](const fs::path& entry) { fs::resize_file(entry, 0); });
}

TEST(Cache, AnEntryOfAnotherFormatIsCompiledAfresh) {
  expect_damage_recovered("format", [](const fs::path& entry) {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);  // the format number, after the magic
    f.put('\x7f');
  });
}

TEST(Cache, AChangedExternalDataFileMakesTheEntryStale) {
  // The model with its weights in an external data file.
  const Reference ref;
  const fs::path dir = fresh_dir("external");
  const fs::path model_dir = dir / "model";
  fs::create_directories(model_dir);
  save_with_external_data(ref.file, model_dir / "m.onnx", "m.data");
  const CompileOptions cached{.threads = 2, .cache_dir = (dir / "cache").string()};
  const fs::path m = model_dir / "m.onnx";
  expect_same(run(compile_onnx(m.string(), {}, cached), ref.inputs), ref.alone);
  EXPECT_EQ(compile_onnx(m.string(), {}, cached).compile_times().cache.rfind("hit ", 0), 0u);
  // The .onnx file unchanged (the same key), its weights changed.
  {
    std::fstream data(model_dir / "m.data", std::ios::in | std::ios::out | std::ios::binary);
    data.seekg(0);
    const char c = static_cast<char>(data.get());
    data.seekp(0);
    data.put(static_cast<char>(c ^ 0x40));
  }
  const CompiledModel stale = compile_onnx(m.string(), {}, cached);
  EXPECT_EQ(stale.compile_times().cache.rfind("miss, stored ", 0), 0u) << stale.compile_times().cache;
  EXPECT_EQ(entries_in(dir / "cache"), 1u);  // replaced
  const Observed changed = run(stale, ref.inputs);
  const graph::Graph g = onnx::import_file(m);
  expect_same(changed, run(compile(g, {.threads = 2}), ref.inputs));
  fs::remove_all(dir);
}

// How a hit checked its files: "K of N files checked by remembered digests".
std::string digests_used(const CompiledModel& m) {
  const std::string& cache = m.compile_times().cache;
  EXPECT_EQ(cache.rfind("hit ", 0), 0u) << cache;
  const std::size_t at = cache.find("; ");
  const std::size_t end = cache.find(" files checked by remembered digests");
  return at == std::string::npos || end == std::string::npos ? cache
                                                            : cache.substr(at + 2, end - at - 2);
}

TEST(Cache, RememberedDigestsStandWhileTheirFilesKeepTheirStamps) {
  const Reference ref;
  const fs::path dir = fresh_dir("digests");
  if (!plugin::remembers_digests_on(dir)) {
    GTEST_SKIP() << dir << " is on a file system whose stamps the cache does not trust";
  }
  const fs::path model = dir / "model.onnx";
  const CompileOptions cached{.threads = 2, .cache_dir = (dir / "cache").string()};
  const auto compile_cached = [&] { return compile_onnx(model.string(), {}, cached); };
  fs::copy_file(ref.file, model);
  EXPECT_EQ(compile_cached().compile_times().cache.rfind("miss, stored ", 0), 0u);
  // Files written within the last two seconds are read every time: a second
  // write in the same tick of the file system's clock could keep the stamp.
  // (The model written again: the compile before may have taken that long.)
  fs::copy_file(ref.file, model, fs::copy_options::overwrite_existing);
  EXPECT_EQ(digests_used(compile_cached()), "0 of 2");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_EQ(digests_used(compile_cached()), "0 of 2");  // read, then remembered
  const CompiledModel warm = compile_cached();
  EXPECT_EQ(digests_used(warm), "2 of 2");
  expect_same(run(warm, ref.inputs), ref.alone);

  // Damaged records are not used: the files are read again. (The byte is
  // in the digest: the record's checksum, not its stamp, catches it.)
  std::size_t records = 0;
  for (const auto& e : fs::directory_iterator(dir / "cache" / "digests")) {
    ASSERT_EQ(e.path().extension(), ".qfd");
    flip_byte(e.path(), 0.8);
    ++records;
  }
  EXPECT_EQ(records, 2u);
  EXPECT_EQ(digests_used(compile_cached()), "0 of 2");
  EXPECT_EQ(digests_used(compile_cached()), "2 of 2");  // remembered again

  // A model file written again has a new stamp: it is read (the same bytes,
  // the same entry), the entry's digest still stands.
  fs::copy_file(ref.file, model, fs::copy_options::overwrite_existing);
  EXPECT_EQ(digests_used(compile_cached()), "1 of 2");

  // A damaged entry has a new stamp too: its checksum is read and fails.
  flip_byte(only_entry(dir / "cache"), 0.5);
  const CompiledModel afresh = compile_cached();
  EXPECT_EQ(afresh.compile_times().cache.rfind("miss, stored ", 0), 0u)
      << afresh.compile_times().cache;
  expect_same(run(afresh, ref.inputs), ref.alone);

  // Clearing the cache removes the records with the entries.
  EXPECT_EQ(plugin::clear_cache(dir / "cache"), 1u);
  EXPECT_FALSE(fs::exists(dir / "cache" / "digests"));
  fs::remove_all(dir);
}

TEST(Cache, AnUnwritableDirectoryIsAWarningNotAFailure) {
  const Reference ref;
  const fs::path dir = fresh_dir("unwritable");
  // Under a regular file: no directory can be made there, even by root.
  const fs::path blocker = dir / "file";
  std::ofstream(blocker) << "not a directory";
  const CompileOptions cached{.threads = 2, .cache_dir = (blocker / "cache").string()};
  const CompiledModel model = compile_onnx(ref.file.string(), {}, cached);
  EXPECT_EQ(model.compile_times().cache.rfind("miss, not stored (", 0), 0u)
      << model.compile_times().cache;
  expect_same(run(model, ref.inputs), ref.alone);
  fs::remove_all(dir);
}

TEST(Cache, ThreadsFillingOneEntryAtOnceEachGetAWholeModel) {
  const Reference ref;
  const fs::path dir = fresh_dir("concurrent");
  const CompileOptions cached{.threads = 1, .cache_dir = dir.string()};
  constexpr int kThreads = 4, kRounds = 3;
  std::vector<std::string> problems(kThreads);
  const Observed alone = run(compile(ref.g, {.threads = 1}), ref.inputs);
  for (int round = 0; round < kRounds; ++round) {
    plugin::clear_cache(dir);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          const Observed r = run(compile_onnx(ref.file.string(), {}, cached), ref.inputs);
          if (r.outputs != alone.outputs) problems[static_cast<std::size_t>(t)] += "outputs differ; ";
        } catch (const std::exception& e) {
          problems[static_cast<std::size_t>(t)] += e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(entries_in(dir), 1u);
    // No temporary file left behind (the corpus file's digest may be
    // remembered; the entry's, just written, is not).
    EXPECT_EQ(files_in(dir), 1u + records_in(dir));
    const CompiledModel hit = compile_onnx(ref.file.string(), {}, cached);
    EXPECT_EQ(hit.compile_times().cache.rfind("hit ", 0), 0u) << hit.compile_times().cache;
    EXPECT_EQ(run(hit, ref.inputs).outputs, alone.outputs);
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(problems[static_cast<std::size_t>(t)], "") << t;
  fs::remove_all(dir);
}

TEST(Cache, OptionsAreInTheKey) {
  const Reference ref;
  const fs::path dir = fresh_dir("options");
  for (const CompileOptions& o :
       {CompileOptions{.threads = 1}, CompileOptions{.threads = 2},
        CompileOptions{.allow_residual_round_drop = true, .threads = 2},
        CompileOptions{.threads = 2, .integer_only = true, .integer_eta = 1.0 / 4096}}) {
    CompileOptions cached = o;
    cached.cache_dir = dir.string();
    EXPECT_EQ(compile_onnx(ref.file.string(), {}, cached).compile_times().cache.rfind("miss", 0), 0u);
  }
  EXPECT_EQ(entries_in(dir), 4u);
  // Shapes bound at import are in it too.
  const fs::path dyn = corpus_file("ppocr_cls_qdq.onnx");
  CompileOptions cached{.threads = 2, .cache_dir = dir.string()};
  compile_onnx(dyn.string(), {}, cached);
  EXPECT_EQ(compile_onnx(dyn.string(), {}, cached).compile_times().cache.rfind("hit", 0), 0u);
  EXPECT_EQ(entries_in(dir), 5u);
  const auto listed = plugin::list_cache(dir);
  EXPECT_EQ(listed.size(), 5u);
  for (const auto& e : listed) EXPECT_EQ(e.problem, "") << e.file;
  EXPECT_EQ(plugin::clear_cache(dir), 5u);
  EXPECT_EQ(files_in(dir), 0u);
  fs::remove_all(dir);
}

// An entry written for a model named by a relative path is a hit from
// another working directory: it checks its files by absolute path.
TEST(Cache, AnEntryIsAHitFromAnotherWorkingDirectory) {
  const Reference ref;
  const fs::path dir = fresh_dir("working_directory");
  fs::copy_file(ref.file, dir / "m.onnx");
  const fs::path before = fs::current_path();
  const CompileOptions cached{.threads = 2, .cache_dir = (dir / "cache").string()};
  fs::current_path(dir);
  const std::string first = compile_onnx("m.onnx", {}, cached).compile_times().cache;
  fs::current_path(fs::temp_directory_path());
  const CompiledModel second = compile_onnx((dir / "m.onnx").string(), {}, cached);
  fs::current_path(before);
  EXPECT_EQ(first.rfind("miss, stored ", 0), 0u) << first;
  EXPECT_EQ(second.compile_times().cache.rfind("hit ", 0), 0u) << second.compile_times().cache;
  expect_same(run(second, ref.inputs), ref.alone);
  fs::remove_all(dir);
}

TEST(Cache, QfuseCacheDirFromTheEnvironment) {
  const Reference ref;
  const fs::path dir = fresh_dir("environment");
  ::setenv("QFUSE_CACHE_DIR", dir.c_str(), 1);
  const CompiledModel miss = compile_onnx(ref.file.string(), {}, {.threads = 2});
  const CompiledModel hit = compile_onnx(ref.file.string(), {}, {.threads = 2});
  ::unsetenv("QFUSE_CACHE_DIR");
  EXPECT_EQ(miss.compile_times().cache.rfind("miss, stored ", 0), 0u);
  EXPECT_EQ(hit.compile_times().cache.rfind("hit ", 0), 0u);
  EXPECT_EQ(compile_onnx(ref.file.string(), {}, {.threads = 2}).compile_times().cache, "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qfuse
