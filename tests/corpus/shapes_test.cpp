// A model compiled at one input shape, compiled again at another from the
// graph its passes left (compile_for_shapes): on every corpus model it runs
// bit for bit as the model imported and compiled afresh at that shape, with
// the same implementations, and its layers read the first model's weights in
// place (no second copy). A shape the fused graph cannot take is a GraphError
// naming the node.

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "graph/op_info.hpp"
#include "plugin/api_internal.hpp"
#include "plugin/execution.hpp"
#include "qfuse/error.hpp"
#include "tests/corpus/corpus_util.hpp"
#include "tools/common/models.hpp"

namespace qfuse {
namespace {

namespace fs = std::filesystem;

using corpus::Observed;
using corpus::run;

// The int8 weights (a fused layer's input 1) of `model`'s layers: how many,
// how many in the layout `base`'s layer holds them in, and how many of those
// are `base`'s own bytes.
struct HeldWeights {
  std::size_t weights = 0, same_layout = 0, shared = 0;
};

HeldWeights held_weights(const CompiledModel& model, const CompiledModel& base) {
  const CompiledModel::Impl& m = detail::ImplAccess::of(model);
  const CompiledModel::Impl& b = detail::ImplAccess::of(base);
  HeldWeights h;
  for (const CompiledModel::Impl::KeptConstant& k : m.kept_constants) {
    if (k.input != 1 || graph::op_info(m.ops[k.op]->node().kind).category !=
                            graph::OpCategory::quantized_layer) {
      continue;
    }
    ++h.weights;
    const auto mine = m.ops[k.op]->held_input(k.input);
    for (const CompiledModel::Impl::KeptConstant& j : b.kept_constants) {
      if (j.value.index != k.value.index) continue;
      const auto theirs = b.ops[j.op]->held_input(j.input);
      if (!mine || !theirs || !(mine->desc == theirs->desc)) continue;
      ++h.same_layout;
      h.shared += mine->data == theirs->data;
    }
  }
  return h;
}

// Every input's first dimension (the batch) set to `batch`.
std::map<std::string, Shape> with_batch(const graph::Graph& g, std::int64_t batch) {
  std::map<std::string, Shape> shapes;
  for (const graph::ValueId v : g.inputs()) {
    Shape s = g.value(v).shape;
    s[0] = batch;
    shapes.emplace(g.value(v).name, s);
  }
  return shapes;
}

// The model file with its inputs' and outputs' first dimension symbolic
// ('batch'), as an exporter with a dynamic batch axis writes it.
std::string with_symbolic_batch(const fs::path& file) {
  ::onnx::ModelProto model;
  std::ifstream in(file, std::ios::binary);
  if (!model.ParseFromIstream(&in)) throw IoError("cannot parse " + file.string());
  ::onnx::GraphProto& g = *model.mutable_graph();
  const auto make_symbolic = [](::onnx::ValueInfoProto& vi) {
    auto* shape = vi.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() > 0) shape->mutable_dim(0)->set_dim_param("batch");
  };
  for (auto& vi : *g.mutable_input()) make_symbolic(vi);
  for (auto& vi : *g.mutable_output()) make_symbolic(vi);
  g.clear_value_info();
  return model.SerializeAsString();
}

class ShapesCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(ShapesCorpus, AnotherBatchRunsAsAFreshCompileAtIt) {
  const fs::path file = fs::path(QFUSE_CORPUS_DIR) / (GetParam() + ".onnx");
  const std::string bytes = with_symbolic_batch(file);
  std::map<std::string, Shape> shapes1;
  for (const onnx::InputInfo& in : onnx::list_inputs(file)) {
    shapes1.emplace(in.name, Shape(in.dims.begin(), in.dims.end()));
  }
  graph::Graph g1, g3;
  std::map<std::string, Shape> shapes;
  try {
    g1 = onnx::import_bytes(bytes, {.input_shapes = shapes1}, file.string());
    shapes = with_batch(g1, 3);
    g3 = onnx::import_bytes(bytes, {.input_shapes = shapes}, file.string());
  } catch (const Error& e) {
    GTEST_SKIP() << "the model does not import at batch 3: " << e.what();
  }
  const CompileOptions options{.threads = 2};
  const CompiledModel base = compile_for_any_shapes(g1, options);
  std::optional<CompiledModel> other;
  try {
    other = compile_for_shapes(base, shapes);
  } catch (const Error& e) {
    // Import fixed a dimension the batch changes (a Reshape's target, a
    // Resize's sizes, a Slice's box): refused, naming the node.
    EXPECT_NE(std::string(e.what()).find("node '"), std::string::npos) << e.what();
    GTEST_SKIP() << "refused: " << e.what();
  }
  const std::vector<Tensor> inputs = tools::random_inputs(g3, 5);
  const Observed fresh = run(compile(g3, options), inputs);
  const Observed reshaped = run(*other, inputs);
  EXPECT_EQ(reshaped.outputs, fresh.outputs);
  // A request of the first model given inputs at batch 3 runs at it.
  EXPECT_EQ(run(base, inputs).outputs, fresh.outputs);
  if (reshaped.implementations.size() != fresh.implementations.size()) {
    std::string only;
    for (const std::string& l : fresh.implementations) {
      if (std::find(reshaped.implementations.begin(), reshaped.implementations.end(), l) ==
          reshaped.implementations.end()) {
        only += "\n  fresh only: " + l;
      }
    }
    for (const std::string& l : reshaped.implementations) {
      if (std::find(fresh.implementations.begin(), fresh.implementations.end(), l) ==
          fresh.implementations.end()) {
        only += "\n  reshaped only: " + l;
      }
    }
    FAIL() << "the layers differ:" << only;
  }
  for (std::size_t i = 0; i < fresh.implementations.size(); ++i) {
    EXPECT_EQ(reshaped.implementations[i], fresh.implementations[i]);
  }
  // Where a primitive takes the layout base's took (oneDNN 2.6's
  // brgconv_1x1 may block another way at another batch), it reads base's
  // weights: no second copy.
  const HeldWeights h = held_weights(*other, base);
  EXPECT_EQ(h.shared, h.same_layout);
  if (h.weights > 0) {
    EXPECT_GT(h.same_layout, 0u);
  }
  RecordProperty("weights_in_another_layout", static_cast<int>(h.weights - h.same_layout));
  // And back at the first shape, from the same base: every weight shared.
  const std::vector<Tensor> inputs1 = tools::random_inputs(g1, 6);
  const CompiledModel again = compile_for_shapes(base, shapes1);
  EXPECT_EQ(run(again, inputs1).outputs, run(base, inputs1).outputs);
  const HeldWeights h1 = held_weights(again, base);
  EXPECT_EQ(h1.shared, h1.weights);
}

INSTANTIATE_TEST_SUITE_P(Corpus, ShapesCorpus, ::testing::ValuesIn(corpus::models()),
                         [](const auto& param) { return param.param; });

// The corpus's encoders as PyTorch exported them, batch and sequence left
// symbolic (symbolic/<encoder>_sym_<f32|qdq|dyn>.onnx): one model
// compiled at 1 x 16 runs every other batch and sequence length bit for bit
// as the file imported and compiled at it, and each input shape is traced
// (no dimension is fixed by a constant).
class SymbolicEncoders : public ::testing::TestWithParam<std::string> {};

// Token ids in [1, 511] with padded tails (the mask 0 there), per row.
std::map<std::string, Tensor> token_batch(std::int64_t batch, std::int64_t length, unsigned seed) {
  std::vector<std::int64_t> ids, mask;
  unsigned state = seed * 2654435761u + 1;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t kept = length / 2 + static_cast<std::int64_t>(next() % static_cast<unsigned>(length / 2 + 1));
    for (std::int64_t t = 0; t < length; ++t) {
      mask.push_back(t < std::max<std::int64_t>(kept, 1) ? 1 : 0);
      ids.push_back(mask.back() != 0 ? 1 + static_cast<std::int64_t>(next() % 511) : 0);
    }
  }
  return {{"input_ids", Tensor::from_vector<std::int64_t>({batch, length}, ids)},
          {"attention_mask", Tensor::from_vector<std::int64_t>({batch, length}, mask)}};
}

std::vector<Tensor> in_order(const CompiledModel& m, const std::map<std::string, Tensor>& feeds) {
  std::vector<Tensor> out;
  for (const std::string& name : m.input_names()) out.push_back(feeds.at(name));
  return out;
}

TEST_P(SymbolicEncoders, EveryBatchAndSequenceRunsAsAFreshCompileAtIt) {
  const fs::path file = fs::path(QFUSE_CORPUS_DIR) / "symbolic" / (GetParam() + ".onnx");
  if (!fs::exists(file)) GTEST_SKIP() << file << " is not built";
  const auto at = [](std::int64_t b, std::int64_t s) {
    return std::map<std::string, Shape>{{"input_ids", {b, s}}, {"attention_mask", {b, s}}};
  };
  const graph::Graph g1 = onnx::import_file(file.string(), {.input_shapes = at(1, 16)});
  for (const graph::ValueId v : g1.inputs()) {
    EXPECT_EQ(g1.dim_names(v), (std::vector<std::string>{"batch", "sequence"})) << g1.value(v).name;
  }
  const CompileOptions options{.threads = 2};
  const CompiledModel base = compile_for_any_shapes(g1, options);
  unsigned seed = 1;
  for (const auto& [b, s] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {1, 32}, {2, 64}, {3, 128}, {1, 7}, {4, 16}}) {
    SCOPED_TRACE(std::to_string(b) + " x " + std::to_string(s));
    const graph::Graph g = onnx::import_file(file.string(), {.input_shapes = at(b, s)});
    const CompiledModel fresh = compile(g, options);
    const std::map<std::string, Tensor> feeds = token_batch(b, s, seed++);
    const Observed want = run(fresh, in_order(fresh, feeds));
    EXPECT_EQ(run(compile_for_shapes(base, at(b, s)), in_order(base, feeds)).outputs, want.outputs);
    // A request of the first model given them runs at that shape too.
    EXPECT_EQ(run(base, in_order(base, feeds)).outputs, want.outputs);
    ASSERT_EQ(want.outputs.size(), 1u);
    EXPECT_EQ(want.outputs[0].size(), static_cast<std::size_t>(b * 4) * sizeof(float));
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, SymbolicEncoders,
                         ::testing::Values("encoder_erf_op13_sym_f32", "encoder_erf_op13_sym_qdq",
                                           "encoder_erf_op13_sym_dyn", "encoder_tanh_op13_sym_qdq",
                                           "encoder_tanh_op13_sym_dyn", "encoder_erf_op17_sym_qdq",
                                           "encoder_erf_op17_sym_dyn"),
                         [](const auto& param) { return param.param; });

TEST(CompileForShapes, NamesTheInputThatDoesNotFit) {
  graph::Graph g;
  const graph::ValueId x = g.add_input("x", {1, 4});
  g.mark_output(g.node(g.add_node(graph::OpKind::Relu, "r", {x})).outputs[0]);
  const CompiledModel base = compile_for_any_shapes(g);
  EXPECT_THROW(
      {
        try {
          compile_for_shapes(base, {{"y", {2, 4}}});
        } catch (const GraphError& e) {
          EXPECT_NE(std::string(e.what()).find("no input 'y'"), std::string::npos) << e.what();
          throw;
        }
      },
      GraphError);
  EXPECT_THROW(
      {
        try {
          compile_for_shapes(base, {{"x", {2, 4, 1}}});
        } catch (const GraphError& e) {
          EXPECT_NE(std::string(e.what()).find("input 'x' has rank 2"), std::string::npos)
              << e.what();
          throw;
        }
      },
      GraphError);
  // A model compiled for one shape only cannot.
  EXPECT_THROW(compile_for_shapes(compile(g), {{"x", {2, 4}}}), Error);
  // Any batch of the elementwise graph works.
  const CompiledModel two = compile_for_shapes(base, {{"x", {2, 4}}});
  InferRequest r = two.create_infer_request();
  r.set_input("x", Tensor::from_vector<float>({2, 4}, {-1, 2, -3, 4, 5, -6, 7, -8}));
  r.infer();
  const Tensor y = r.output(two.output_names()[0]);
  ASSERT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(std::vector<float>(y.data<float>().begin(), y.data<float>().end()),
            (std::vector<float>{0, 2, 0, 4, 5, 0, 7, 0}));
}

}  // namespace
}  // namespace qfuse
