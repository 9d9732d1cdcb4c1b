// The bad-input corpus: every case in cases.tsv (a malformed model from
// models/, written by make_cases.py: .onnx, or an OpenVINO IR's .xml with its
// .bin, or one built here, or a valid model fed
// a wrong input) must fail at its stage with its error type and a message
// containing the expected text; never crash (the sanitizer build runs this
// too) and never run silently. "ok" cases must import, compile and run.
//
// QFUSE_BAD_INPUTS_PRINT=1 prints what each case does instead of checking.

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/builder.hpp"
#include "graph/onnx/importer.hpp"
#include "graph/openvino/importer.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::test {
namespace {

struct Case {
  std::string name, file, feed, stage, error, message;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> load_cases() {
  std::ifstream in(QFUSE_BAD_INPUTS_DIR "/cases.tsv");
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, '\t')) f.push_back(field);
    f.resize(6);
    cases.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
  }
  return cases;
}

// Models the ONNX format cannot express (FakeQuantize is not an ONNX op).
const std::map<std::string, std::function<graph::Graph()>>& built_models() {
  static const std::map<std::string, std::function<graph::Graph()>> models = {
      {"fq_levels_1", [] {
         graph::Graph g;
         graph::Builder b(g);
         b.output(b.fake_quantize(b.input("x", {1, 4}), 0.0f, 1.0f, 0.0f, 1.0f, 1, "fq"));
         return g;
       }},
      {"fq_levels_0", [] {
         graph::Graph g;
         graph::Builder b(g);
         b.output(b.fake_quantize(b.input("x", {1, 4}), 0.0f, 1.0f, 0.0f, 1.0f, 0, "fq"));
         return g;
       }},
      {"fq_range_nan", [] {
         graph::Graph g;
         graph::Builder b(g);
         b.output(b.fake_quantize(b.input("x", {1, 4}), 0.0f, std::nanf(""), 0.0f, 1.0f, 256, "fq"));
         return g;
       }},
      {"fq_per_channel_size", [] {
         graph::Graph g;
         graph::Builder b(g);
         const auto x = b.input("x", {1, 4, 2, 2});
         const auto lo = b.constant("lo", {1, 3, 1, 1}, {0, 0, 0});
         const auto hi = b.constant("hi", {1, 3, 1, 1}, {1, 1, 1});
         b.output(b.fake_quantize(x, lo, hi, lo, hi, 256, "fq"));
         return g;
       }},
  };
  return models;
}

// "x:f32:1x3x8x8" -> the input to set; "-" -> each input as declared, zeros.
void feed(InferRequest& request, const CompiledModel& model, const std::string& spec) {
  if (spec.empty() || spec == "-") {
    for (const TensorInfo& t : model.inputs()) request.set_input(t.name, Tensor(t.type, t.shape));
    return;
  }
  std::stringstream ss(spec);
  std::string name, type, dims;
  std::getline(ss, name, ':');
  std::getline(ss, type, ':');
  std::getline(ss, dims, ':');
  Shape shape;
  std::stringstream ds(dims);
  std::string d;
  while (std::getline(ds, d, 'x')) shape.push_back(std::stoll(d));
  const ElementType t = type == "u8" ? ElementType::u8 : type == "s8" ? ElementType::s8 : ElementType::f32;
  request.set_input(name, Tensor(t, shape));
}

std::string error_type(const std::exception& e) {
  if (dynamic_cast<const GraphError*>(&e)) return "GraphError";
  if (dynamic_cast<const UnsupportedError*>(&e)) return "UnsupportedError";
  if (dynamic_cast<const CompileError*>(&e)) return "CompileError";
  if (dynamic_cast<const InferenceError*>(&e)) return "InferenceError";
  if (dynamic_cast<const IoError*>(&e)) return "IoError";
  return "std::exception";  // anything else is a bug: qfuse throws its own types
}

struct Outcome {
  std::string stage = "ok", error, message;
};

Outcome run_case(const Case& c, bool fuse) {
  Outcome o;
  std::string stage = "import";
  try {
    graph::Graph g;
    if (c.file.rfind("built:", 0) == 0) {
      g = built_models().at(c.file.substr(6))();
    } else if (c.file.ends_with(".xml")) {
      g = openvino::import_file(std::string(QFUSE_BAD_INPUTS_DIR "/models/") + c.file);
    } else {
      g = onnx::import_file(std::string(QFUSE_BAD_INPUTS_DIR "/models/") + c.file);
    }
    stage = "compile";
    const CompiledModel model = compile(g, {.fuse = fuse});
    stage = "infer";
    InferRequest request = model.create_infer_request();
    feed(request, model, c.feed);
    request.infer();
    for (const TensorInfo& t : model.outputs()) (void)request.output(t.name);
  } catch (const std::exception& e) {
    o.stage = stage;
    o.error = error_type(e);
    o.message = e.what();
  }
  return o;
}

class BadInputs : public ::testing::TestWithParam<Case> {};

TEST_P(BadInputs, FailsClearlyAtItsStage) {
  const Case& c = GetParam();
  for (bool fuse : {true, false}) {
    const Outcome o = run_case(c, fuse);
    if (std::getenv("QFUSE_BAD_INPUTS_PRINT") != nullptr) {
      std::printf("%s\t%s\t%s\t%s\t%s\t%s\n", c.name.c_str(), fuse ? "fused" : "unfused",
                  o.stage.c_str(), o.error.c_str(), c.feed.c_str(), o.message.c_str());
      continue;
    }
    SCOPED_TRACE(c.name + (fuse ? " (fused)" : " (unfused)") + ": " + o.message);
    EXPECT_EQ(o.stage, c.stage);
    if (c.stage == "ok") continue;
    EXPECT_EQ(o.error, c.error);
    EXPECT_NE(o.message.find(c.message), std::string::npos)
        << "expected the message to contain: " << c.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadInputs, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

TEST(BadInputsCorpus, HasAtLeastFortyCases) { EXPECT_GE(load_cases().size(), 40u); }

}  // namespace
}  // namespace qfuse::test
