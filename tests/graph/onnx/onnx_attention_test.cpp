// Attention as one op (plugin/attention_fusion.cpp, qfuse's kernel in
// plugin/executable_ops/attention_op.cpp), on attention blocks as PyTorch
// exports them and ONNX Runtime's quantizers leave them: q, k, v [B, S, H, D]
// transposed heads first (k to [B, H, D, S]), MatMul, Div by sqrt(D), Add of
// the padding mask, Softmax, MatMul with v, transposed back.
//   static QDQ: q, k, v, the probabilities and y quantized (the scores not);
//   dynamic format: all f32.
// Each block runs three ways: fused (one Attention), fused with the option
// off (the scores matmul, the Softmax and the second matmul as three ops) and
// unfused (every ONNX node alone). int8: the Attention's codes are the three
// ops' bits (same arithmetic step by step) and within one code of the unfused
// graph; f32: within float rounding of both. Masks per key and per batch
// (padding that differs by row of the batch), head sizes 16 and 64, key
// counts off the kernel's blocks of 4 and 16, s8 and u8 grids.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/onnx/importer.hpp"
#include "plugin/api_internal.hpp"
#include "tests/graph/onnx/onnx_model_builder.hpp"

namespace qfuse::onnx {
namespace {

using namespace test;  // Model, attr, random_floats

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

struct QGrid {
  int type = kUint8;
  float scale = 0.01f;
  int zero_point = 128;

  void qdq(Model& m, const std::string& x, const std::string& y, const std::string& tag) const {
    m.initializer(tag + "_scale", kFloat, {}, std::vector<float>{scale});
    if (type == kUint8) {
      m.initializer(tag + "_zp", kUint8, {},
                    std::vector<std::uint8_t>{static_cast<std::uint8_t>(zero_point)});
    } else {
      m.initializer(tag + "_zp", kInt8, {},
                    std::vector<std::int8_t>{static_cast<std::int8_t>(zero_point)});
    }
    m.node("QuantizeLinear", {x, tag + "_scale", tag + "_zp"}, {y + "_q"}, tag + "_QuantizeLinear");
    m.node("DequantizeLinear", {y + "_q", tag + "_scale", tag + "_zp"}, {y},
           tag + "_DequantizeLinear");
  }
};

struct Block {
  std::int64_t batch = 1, s = 64, h = 4, d = 16;
  bool quantized = true;
  bool masked = true;
  bool mask_per_batch = false;  // mask [batch, 1, 1, S], else [1, 1, 1, S]
  bool mask_per_query = false;  // mask [1, 1, S, S] (a causal mask), else one row
  bool y_quantized = true;      // int8: y's QDQ (else the block ends in f32)
  QGrid q{kUint8, 0.0085f, 120}, k{kUint8, 0.009f, 131}, v{kUint8, 0.008f, 126},
      p{kUint8, 1.0f / 255.0f, 0}, y{kUint8, 0.004f, 128};

  Dims dims() const { return {batch, s, h, d}; }
  Dims mask_dims() const {
    return {mask_per_batch ? batch : 1, 1, mask_per_query ? s : 1, s};
  }

  std::string model() const {
    Model m(13);
    const auto transpose = [&m](const std::string& from, const std::string& to, Dims perm) {
      attr(m.node("Transpose", {from}, {to}, to + "_Transpose"), "perm", std::move(perm));
    };
    for (const char* name : {"q", "k", "v"}) m.input(name, kFloat, dims());
    std::string qn = "q", kn = "k", vn = "v";
    if (quantized) {
      q.qdq(m, "q", "q_dq", "q");
      k.qdq(m, "k", "k_dq", "k");
      v.qdq(m, "v", "v_dq", "v");
      qn = "q_dq", kn = "k_dq", vn = "v_dq";
    }
    transpose(qn, "q_t", {0, 2, 1, 3});
    transpose(kn, "k_t", {0, 2, 3, 1});
    transpose(vn, "v_t", {0, 2, 1, 3});
    m.node("MatMul", {"q_t", "k_t"}, {"scores"}, "scores_MatMul");
    m.initializer("root_d", kFloat, {}, std::vector<float>{std::sqrt(static_cast<float>(d))});
    m.node("Div", {"scores", "root_d"}, {"scaled"}, "scores_Div");
    std::string x = "scaled";
    if (masked) {
      m.input("mask", kFloat, mask_dims());
      m.node("Add", {"scaled", "mask"}, {"masked"}, "scores_Add");
      x = "masked";
    }
    attr(m.node("Softmax", {x}, {"probs"}, "probs_Softmax"), "axis", std::int64_t{-1});
    std::string pn = "probs";
    if (quantized) {
      p.qdq(m, "probs", "probs_dq", "p");
      pn = "probs_dq";
    }
    m.node("MatMul", {pn, "v_t"}, {"context"}, "context_MatMul");
    transpose("context", "context_t", {0, 2, 1, 3});
    if (quantized && y_quantized) {
      y.qdq(m, "context_t", "y", "y");
    } else {
      m.node("Identity", {"context_t"}, {"y"}, "y_Identity");
    }
    m.output("y", kFloat);
    return m.bytes();
  }

  // Random q, k, v; the mask 0 for the keys kept and -10000 for the padding,
  // a different length per batch row when the mask is per batch.
  std::map<std::string, Tensor> inputs() const {
    std::map<std::string, Tensor> in;
    unsigned seed = 71;
    for (const char* name : {"q", "k", "v"}) {
      in.emplace(name, Tensor::from_vector<float>(
                           dims(), random_floats(sz(batch * s * h * d), -1.0f, 1.1f, seed++)));
    }
    if (masked) {
      const Dims md = mask_dims();
      std::vector<float> mask(sz(md[0] * md[2] * s), 0.0f);
      for (std::int64_t b = 0; b < md[0]; ++b) {
        for (std::int64_t i = 0; i < md[2]; ++i) {
          // Per query: causal (key j > i masked); else the padding of row b.
          const std::int64_t kept = mask_per_query ? i + 1 : std::max<std::int64_t>(1, s - 1 - 3 * b);
          for (std::int64_t j = kept; j < s; ++j) mask[sz((b * md[2] + i) * s + j)] = -10000.0f;
        }
      }
      in.emplace("mask", Tensor::from_vector<float>(md, mask));
    }
    return in;
  }
};

struct Run {
  Tensor y;
  std::vector<LayerInfo> layers;
  std::vector<std::string> log;

  std::size_t count(const std::string& op) const {
    return static_cast<std::size_t>(std::count_if(layers.begin(), layers.end(),
                                                  [&](const LayerInfo& l) { return l.op == op; }));
  }
  std::string describe() const {
    std::string s = "layers:";
    for (const LayerInfo& l : layers)
      s += "\n  " + l.node + " " + l.op + " (" + l.implementation + ")";
    s += "\nlog:";
    for (const std::string& line : log) {
      if (line.find("attention") != std::string::npos) s += "\n  " + line;
    }
    return s;
  }
};

Run run(const graph::Graph& g, CompileOptions options, const std::map<std::string, Tensor>& in) {
  const CompiledModel model = compile(g, options);
  InferRequest r = model.create_infer_request();
  for (const auto& [name, t] : in) r.set_input(name, t);
  r.infer();
  return {r.output("y"), model.layers(), model.fusion_log()};
}

// Why this CPU keeps the three ops (its kernel's ISA), else "".
std::string cpu_refusal(const Run& fused) {
  for (const std::string& line : fused.log) {
    if (line.find("fuse_attention") == 0 && line.find("needs AVX-512") != std::string::npos)
      return line;
  }
  return "";
}

// Runs `block` three ways and checks what the file's comment says.
void expect_attention_matches(const Block& block, const std::string& what) {
  const graph::Graph g = import_bytes(block.model());
  const auto in = block.inputs();
  const Run fused = run(g, {}, in);
  const Run three = run(g, {.fuse_attention = false}, in);
  const Run unfused = run(g, {.fuse = false}, in);
  if (const std::string why = cpu_refusal(fused); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(fused.count("Attention"), 1u) << what << "\n" << fused.describe();
  EXPECT_EQ(fused.count("Softmax"), 0u) << what << "\n" << fused.describe();
  EXPECT_EQ(three.count("Attention"), 0u) << what << "\n" << three.describe();
  for (const LayerInfo& l : fused.layers) {
    if (l.op == "Attention") {
      EXPECT_EQ(l.implementation, block.quantized ? "qfuse:attention_vnni" : "qfuse:attention_f32")
          << what;
    }
  }
  const Tensor& a = fused.y;
  ASSERT_EQ(a.shape(), three.y.shape()) << what;
  ASSERT_EQ(a.shape(), unfused.y.shape()) << what;
  ASSERT_EQ(a.shape(), (Shape{block.batch, block.s, block.h, block.d})) << what;
  const std::size_t n = sz(a.size());
  const float* f = a.data<float>().data();
  const float* t = three.y.data<float>().data();
  const float* u = unfused.y.data<float>().data();
  if (block.quantized && block.y_quantized) {
    // y is dequantized codes: compare the codes.
    const auto code = [&](float x) { return static_cast<int>(std::nearbyint(x / block.y.scale)); };
    std::size_t same_as_three = 0, equal = 0, far = 0;
    int lo = 1 << 20, hi = -(1 << 20);
    for (std::size_t i = 0; i < n; ++i) {
      same_as_three += code(f[i]) == code(t[i]);
      const int diff = std::abs(code(f[i]) - code(u[i]));
      equal += diff == 0;
      far += diff > 1;
      lo = std::min(lo, code(f[i]));
      hi = std::max(hi, code(f[i]));
    }
    EXPECT_GT(hi - lo, 20) << what << ": the codes barely vary";
    EXPECT_EQ(same_as_three, n) << what << ": the Attention's codes against the three ops'";
    EXPECT_EQ(far, 0u) << what << ": codes more than one off the unfused graph's";
    EXPECT_GE(static_cast<double>(equal), 0.99 * static_cast<double>(n))
        << what << ": " << equal << " of " << n << " codes equal to the unfused graph's";
    return;
  }
  double worst_three = 0.0, worst_unfused = 0.0, top = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    top = std::max(top, std::fabs(static_cast<double>(u[i])));
    worst_three = std::max(worst_three, std::fabs(static_cast<double>(f[i]) - t[i]));
    worst_unfused = std::max(worst_unfused, std::fabs(static_cast<double>(f[i]) - u[i]));
  }
  EXPECT_GT(top, 0.05) << what;
  if (block.quantized) {
    // int8 with an f32 y: the same bits as the three ops' second matmul; a
    // probability one code off the unfused graph's moves y by p's step
    // times a value.
    EXPECT_EQ(worst_three, 0.0) << what;
  } else {
    EXPECT_LE(worst_three, 2e-6) << what;
  }
  EXPECT_LE(worst_unfused, block.quantized ? 2.0 * block.p.scale * 1.1 : 2e-6) << what;
}

TEST(OnnxAttention, StaticQdqEncoderBlockIsOneOpWithTheThreeOpsCodes) {
  expect_attention_matches(Block{}, "s 64, h 4, d 16");
}

TEST(OnnxAttention, StaticQdqKeyCountsOffTheKernelsBlocks) {
  for (const std::int64_t s : {1, 3, 24, 37, 77}) {
    Block b;
    b.s = s;
    b.h = 2;
    expect_attention_matches(b, "s " + std::to_string(s));
  }
}

TEST(OnnxAttention, StaticQdqHeadSize64AndBertLikeShape) {
  Block b;
  b.s = 128;
  b.h = 3;
  b.d = 64;
  expect_attention_matches(b, "s 128, h 3, d 64");
}

TEST(OnnxAttention, StaticQdqMaskPerBatchRow) {
  Block b;
  b.batch = 3;
  b.s = 20;
  b.mask_per_batch = true;
  expect_attention_matches(b, "batch 3, padding per row");
}

TEST(OnnxAttention, StaticQdqCausalMaskPerQuery) {
  Block b;
  b.s = 40;
  b.mask_per_query = true;
  expect_attention_matches(b, "causal mask [1, 1, S, S]");
  b.quantized = false;
  expect_attention_matches(b, "f32, causal mask [1, 1, S, S]");
}

TEST(OnnxAttention, StaticQdqWithoutMaskOneHead) {
  Block b;
  b.masked = false;
  b.h = 1;
  b.s = 33;
  expect_attention_matches(b, "no mask, one head");
}

TEST(OnnxAttention, StaticQdqSignedGridsAndZeroPoints) {
  Block b;
  b.q = {kInt8, 0.0085f, -3};
  b.k = {kInt8, 0.009f, 5};
  b.v = {kUint8, 0.008f, 0};
  b.y = {kInt8, 0.004f, 2};
  expect_attention_matches(b, "s8 q, k and y; u8 v with zero point 0");
  b.p = {kInt8, 1.0f / 127.0f, 0};  // symmetric activations: s8 probabilities
  b.v = {kUint8, 0.008f, 131};
  b.s = 37;
  expect_attention_matches(b, "s8 probabilities, 37 keys");
  b.s = 64;
  b.p = {kUint8, 1.0f / 255.0f, 0};
  b.q = {kUint8, 0.0085f, 255};
  b.k = {kUint8, 0.009f, 0};
  b.v = {kInt8, 0.008f, -128};
  b.y = {kUint8, 0.004f, 3};
  expect_attention_matches(b, "zero points at the types' limits");
}

TEST(OnnxAttention, StaticQdqEndingInF32) {
  Block b;
  b.y_quantized = false;
  b.s = 29;
  expect_attention_matches(b, "y f32");
}

TEST(OnnxAttention, DynamicFormatF32BlockIsOneOpWithinFloatRounding) {
  Block b;
  b.quantized = false;
  expect_attention_matches(b, "f32, s 64, h 4, d 16");
  b.s = 37;
  b.batch = 2;
  b.mask_per_batch = true;
  expect_attention_matches(b, "f32, s 37, batch 2, padding per row");
  b.s = 5;
  b.d = 24;  // features not a multiple of 16
  b.masked = false;
  expect_attention_matches(b, "f32, d 24, no mask");
  // Query blocks of 8 and 4 rows with two full blocks of values.
  b.s = 12;
  b.d = 32;
  b.masked = true;
  expect_attention_matches(b, "f32, s 12, d 32");
}

// The log says why a block keeps its three ops; the graph computes the same.
void expect_three_ops(const Block& block, const std::string& reason) {
  const graph::Graph g = import_bytes(block.model());
  const auto in = block.inputs();
  const Run fused = run(g, {}, in);
  if (!cpu_refusal(fused).empty()) GTEST_SKIP() << cpu_refusal(fused);
  EXPECT_EQ(fused.count("Attention"), 0u) << fused.describe();
  EXPECT_EQ(fused.count("Softmax"), 1u) << fused.describe();
  bool said = false;
  for (const std::string& line : fused.log) {
    said = said || (line.find("fuse_attention") == 0 && line.find(reason) != std::string::npos);
  }
  EXPECT_TRUE(said) << "no log line with '" << reason << "'\n" << fused.describe();
}

TEST(OnnxAttentionNegative, Int8HeadSizeNotAMultipleOf4KeepsThreeOps) {
  Block b;
  b.d = 6;
  b.s = 16;
  expect_three_ops(b, "head size of 6");
}

// BERT-base's heads at 128 keys (64 KiB of keys and values, over L1) and at
// 384 (the scores through memory between the three ops): one op.
TEST(OnnxAttention, DynamicFormatBertHeadsAreOneOp) {
  Block b;
  b.quantized = false;
  b.s = 128;
  b.d = 64;
  b.h = 2;
  expect_attention_matches(b, "f32, s 128, d 64");
}

TEST(OnnxAttention, DynamicFormatLongSequenceIsOneOp) {
  Block b;
  b.quantized = false;
  b.s = 384;
  b.d = 64;
  b.h = 2;
  expect_attention_matches(b, "f32, s 384, d 64");
}

}  // namespace
}  // namespace qfuse::onnx
