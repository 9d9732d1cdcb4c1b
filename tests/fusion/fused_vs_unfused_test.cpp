// Fused versus unfused on generated quantized layers: the same graph and
// input run through the int8 fusion (one oneDNN primitive per layer) and
// through the f32 reference; both outputs are compared in LSB of the output
// FakeQuantize's quantum. A rewrite may move a rounding by at most 1 LSB, and
// only on a handful of elements near a rounding tie.

#include <gtest/gtest.h>

#include "fusion_test_util.hpp"

namespace qfuse::test::fusion {
namespace {

LayerCase conv2d(std::string name, Ints kernel, std::int64_t ic = 8, std::int64_t oc = 16,
                 Shape spatial = {12, 12}) {
  LayerCase c;
  c.name = std::move(name);
  c.kind = LayerKind::conv;
  c.input = {1, ic};
  c.input.insert(c.input.end(), spatial.begin(), spatial.end());
  c.out_channels = oc;
  c.kernel = std::move(kernel);
  return c;
}

LayerCase padded(LayerCase c, std::int64_t pad) {
  const std::size_t n = c.kernel.size();
  c.pads_begin = Ints(n, pad);
  c.pads_end = Ints(n, pad);
  return c;
}

LayerCase with(LayerCase c, auto&& change) {
  change(c);
  return c;
}

std::vector<LayerCase> layer_cases() {
  std::vector<LayerCase> v;
  unsigned seed = 100;
  auto add = [&](LayerCase c) {
    c.seed = seed++;
    v.push_back(std::move(c));
  };
  // Convolution geometries.
  add(conv2d("Conv1x1_U8_PerChannel_Bias", {1, 1}));
  add(with(padded(conv2d("Conv3x3Pad1_U8_PerTensor_NoBias", {3, 3}), 1), [](LayerCase& c) {
    c.per_channel_weights = false;
    c.bias = false;
  }));
  add(with(padded(conv2d("Conv3x3Pad1_S8_PerChannel_Relu", {3, 3}), 1), [](LayerCase& c) {
    c.input_quant = Quant::s8;
    c.tail = Tail::relu;
    c.output_quant = Quant::u8;
  }));
  add(with(padded(conv2d("Conv3x3Pad1_AsymInput_SrcZeroPoint", {3, 3}), 1),
           [](LayerCase& c) { c.input_quant = Quant::asym; }));
  add(with(conv2d("Conv1x1_AsymInput_NoPad", {1, 1}), [](LayerCase& c) {
    c.input_quant = Quant::asym;
    c.per_channel_weights = false;
  }));
  add(with(padded(conv2d("Conv3x3Stride2", {3, 3}, 8, 16, {13, 13}), 1),
           [](LayerCase& c) { c.strides = {2, 2}; }));
  add(with(padded(conv2d("Conv3x3Dilation2", {3, 3}), 2), [](LayerCase& c) {
    c.dilations = {2, 2};
    c.input_quant = Quant::s8;
  }));
  add(with(padded(conv2d("Conv3x3Grouped4", {3, 3}, 16, 16), 1), [](LayerCase& c) { c.groups = 4; }));
  add(with(padded(conv2d("Conv3x3Depthwise", {3, 3}, 16, 16), 1), [](LayerCase& c) {
    c.groups = 16;
    c.tail = Tail::relu;
    c.output_quant = Quant::u8;
  }));
  add(with(padded(conv2d("Conv3x3DepthwiseStride2_S8", {3, 3}, 16, 16, {14, 14}), 1),
           [](LayerCase& c) {
             c.groups = 16;
             c.strides = {2, 2};
             c.input_quant = Quant::s8;
           }));
  add(padded(conv2d("Conv1D_K3Pad1", {3}, 8, 16, {40}), 1));
  add(with(conv2d("Conv1D_K5Stride2_S8", {5}, 8, 16, {41}), [](LayerCase& c) {
    c.strides = {2};
    c.input_quant = Quant::s8;
  }));
  add(padded(conv2d("Conv3D_K3Pad1", {3, 3, 3}, 4, 8, {6, 6, 6}), 1));
  add(with(conv2d("Conv3D_K1_AsymInput", {1, 1, 1}, 8, 8, {4, 5, 6}),
           [](LayerCase& c) { c.input_quant = Quant::asym; }));
  add(with(padded(conv2d("Conv3x3_Weights256Levels", {3, 3}), 1),
           [](LayerCase& c) { c.weight_levels = 256; }));
  add(with(conv2d("Conv1x1_AsymOutput", {1, 1}), [](LayerCase& c) { c.output_quant = Quant::asym; }));
  // Activations and constants between the FakeQuantize nodes.
  add(with(padded(conv2d("Conv_FqReluFq", {3, 3}), 1), [](LayerCase& c) {
    c.tail = Tail::fq_relu_fq;
    c.output_quant = Quant::u8;
  }));
  // alpha = 0.1 is not exact in f32: on integer levels it puts many values
  // within f32 rounding of a tie (the near-tie rule below covers them).
  add(with(padded(conv2d("Conv_FqLeakyReluFq", {3, 3}), 1),
           [](LayerCase& c) { c.tail = Tail::fq_leaky_relu_fq; }));
  add(with(padded(conv2d("Conv_FqLeakyRelu025Fq", {3, 3}), 1),
           [](LayerCase& c) { c.tail = Tail::fq_leaky_relu_quarter_fq; }));
  add(with(padded(conv2d("Conv_Clamp", {3, 3}), 1), [](LayerCase& c) { c.tail = Tail::clamp; }));
  add(with(padded(conv2d("Conv_FqSigmoidFq", {3, 3}), 1), [](LayerCase& c) {
    c.tail = Tail::fq_sigmoid_fq;
    c.output_quant = Quant::u8;
  }));
  add(with(padded(conv2d("Conv_FqTanhFq", {3, 3}), 1), [](LayerCase& c) { c.tail = Tail::fq_tanh_fq; }));
  add(with(padded(conv2d("Conv_BatchNorm", {3, 3}), 1), [](LayerCase& c) { c.tail = Tail::batch_norm; }));
  add(with(padded(conv2d("Conv_BatchNormNegativeGamma_NoBias", {3, 3}), 1), [](LayerCase& c) {
    c.tail = Tail::batch_norm_negative;
    c.bias = false;
  }));
  add(with(conv2d("Conv_ChannelMulAdd", {1, 1}), [](LayerCase& c) { c.tail = Tail::channel_mul_add; }));
  add(with(padded(conv2d("Conv_ChannelMulAddSigned", {3, 3}), 1),
           [](LayerCase& c) { c.tail = Tail::channel_mul_add_signed; }));
  // Residual blocks: the sum post-op reads the block input, int8 destination.
  add(with(padded(conv2d("Conv_Residual_S8", {3, 3}, 16, 16), 1), [](LayerCase& c) {
    c.input_quant = Quant::s8;
    c.tail = Tail::residual;
    c.next_layer = true;
  }));
  add(with(padded(conv2d("Conv_Residual_AsymInput", {3, 3}, 16, 16), 1), [](LayerCase& c) {
    c.input_quant = Quant::asym;
    c.output_quant = Quant::asym;
    c.tail = Tail::residual;
    c.next_layer = true;
  }));
  add(with(padded(conv2d("Conv_Residual_AfterFusedLayer", {3, 3}, 16, 16), 1), [](LayerCase& c) {
    c.input_quant = Quant::s8;
    c.pre_layer = true;
    c.tail = Tail::residual;
    c.next_layer = true;
  }));
  add(with(padded(conv2d("Conv_FqReluFqS8_IntoNextLayer", {3, 3}), 1), [](LayerCase& c) {
    c.tail = Tail::fq_relu_fq;  // the s8 range starts below 0: the relu stays a post-op
    c.output_quant = Quant::s8;
    c.next_layer = true;
  }));
  add(with(padded(conv2d("Conv_FqSigmoidFq_IntoNextLayer", {3, 3}), 1), [](LayerCase& c) {
    c.tail = Tail::fq_sigmoid_fq;
    c.output_quant = Quant::u8;
    c.next_layer = true;
  }));
  add(with(padded(conv2d("Conv_FqReluFq_IntoNextLayer", {3, 3}), 1), [](LayerCase& c) {
    c.tail = Tail::fq_relu_fq;
    c.output_quant = Quant::u8;
    c.next_layer = true;
  }));
  // Power-of-two scales: exact pre-FQ values, a share of them on ties.
  add(with(padded(conv2d("Conv3x3_Pow2Scales_Ties_U8", {3, 3}), 1),
           [](LayerCase& c) { c.power_of_two_scales = true; }));
  add(with(conv2d("Conv1x1_Pow2Scales_Ties_S8_NoBias", {1, 1}), [](LayerCase& c) {
    c.power_of_two_scales = true;
    c.input_quant = Quant::s8;
    c.bias = false;
  }));
  add(with(padded(conv2d("Conv3x3_Pow2Scales_Ties_Asym_PerTensor", {3, 3}), 1), [](LayerCase& c) {
    c.power_of_two_scales = true;
    c.input_quant = Quant::asym;
    c.per_channel_weights = false;
  }));
  add(with(padded(conv2d("Conv3x3_Pow2Scales_Ties_FqReluFq_IntoNextLayer", {3, 3}), 1),
           [](LayerCase& c) {
             c.power_of_two_scales = true;
             c.tail = Tail::fq_relu_fq;
             c.output_quant = Quant::u8;
             c.next_layer = true;
           }));
  add(with(padded(conv2d("Conv3x3_Pow2Scales_Ties_Residual_S8", {3, 3}, 16, 16), 1),
           [](LayerCase& c) {
             c.power_of_two_scales = true;
             c.input_quant = Quant::s8;
             c.tail = Tail::residual;
             c.next_layer = true;
           }));
  // Fully connected: y = x W^T + b.
  auto fc = [](std::string name, std::int64_t rows, std::int64_t k, std::int64_t oc) {
    LayerCase c;
    c.name = std::move(name);
    c.kind = LayerKind::fc;
    c.input = {rows, k};
    c.out_channels = oc;
    return c;
  };
  add(fc("FC_U8_PerChannel_Bias", 8, 64, 32));
  add(with(fc("FC_S8_PerTensor_NoBias_Relu", 8, 48, 24), [](LayerCase& c) {
    c.input_quant = Quant::s8;
    c.per_channel_weights = false;
    c.bias = false;
    c.tail = Tail::relu;
    c.output_quant = Quant::u8;
  }));
  add(with(fc("FC_AsymInput_Pow2Scales_Ties", 16, 64, 32), [](LayerCase& c) {
    c.input_quant = Quant::asym;
    c.power_of_two_scales = true;
  }));
  add(with(fc("FC_BatchNorm_IntoNextLayer", 8, 64, 32), [](LayerCase& c) {
    c.tail = Tail::batch_norm;
    c.next_layer = true;
  }));
  add(with(fc("FC_U8_Pow2Scales_Ties_IntoNextLayer", 16, 64, 32), [](LayerCase& c) {
    c.power_of_two_scales = true;
    c.tail = Tail::fq_relu_fq;
    c.output_quant = Quant::u8;
    c.next_layer = true;
  }));
  // MatMul: batched activations x constant 2D weights.
  auto mm = [](std::string name, Shape input, std::int64_t n) {
    LayerCase c;
    c.name = std::move(name);
    c.kind = LayerKind::matmul;
    c.input = std::move(input);
    c.out_channels = n;
    return c;
  };
  add(mm("MatMul_Batched_U8_PerChannel_Bias", {2, 6, 32}, 16));
  add(with(mm("MatMul_Batched_TransposeB_S8_PerTensor", {3, 5, 24}, 16), [](LayerCase& c) {
    c.transpose_b = true;
    c.input_quant = Quant::s8;
    c.per_channel_weights = false;
    c.bias = false;
  }));
  add(with(mm("MatMul_Batched_AsymInput_FqReluFq", {2, 8, 32}, 16), [](LayerCase& c) {
    c.input_quant = Quant::asym;
    c.tail = Tail::fq_relu_fq;
    c.output_quant = Quant::u8;
  }));
  add(with(mm("MatMul_Batched_Pow2Scales_Ties_S8", {2, 8, 32}, 16), [](LayerCase& c) {
    c.power_of_two_scales = true;
    c.input_quant = Quant::s8;
  }));
  // Deconvolution, stride 2.
  auto deconv = [](std::string name, Ints kernel, std::int64_t pad, std::int64_t out_pad) {
    LayerCase c;
    c.name = std::move(name);
    c.kind = LayerKind::deconv;
    c.input = {1, 8, 6, 6};
    c.out_channels = 8;
    c.kernel = kernel;
    c.strides = {2, 2};
    c.pads_begin = {pad, pad};
    c.pads_end = {pad, pad};
    c.output_padding = {out_pad, out_pad};
    return c;
  };
  add(deconv("Deconv3x3Stride2_Pad1_OutPad1", {3, 3}, 1, 1));
  add(with(deconv("Deconv2x2Stride2_S8_Relu_PerTensor", {2, 2}, 0, 0), [](LayerCase& c) {
    c.input_quant = Quant::s8;
    c.per_channel_weights = false;
    c.tail = Tail::relu;
    c.output_quant = Quant::u8;
  }));
  // Kernel == stride with few output channels: a 1x1 convolution and a pixel
  // shuffle (a detector's upsampling to its map; kh != kw; per-channel steps
  // repeated over the kernel positions; batch 2 with a source zero point).
  add(with(deconv("Deconv2x2Stride2_OneChannel_Sigmoid", {2, 2}, 0, 0), [](LayerCase& c) {
    c.input = {1, 24, 5, 7};
    c.out_channels = 1;
    c.tail = Tail::fq_sigmoid_fq;
    c.output_quant = Quant::u8;
  }));
  add(with(deconv("Deconv3x2Stride3x2_Batch2_AsymInput_ChannelMulAdd", {3, 2}, 0, 0),
           [](LayerCase& c) {
             c.input = {2, 8, 4, 5};
             c.out_channels = 3;
             c.strides = {3, 2};
             c.input_quant = Quant::asym;
             c.tail = Tail::channel_mul_add_signed;
           }));
  add(with(deconv("Deconv2x2Stride2_FiveChannels_IntoNextLayer", {2, 2}, 0, 0), [](LayerCase& c) {
    c.out_channels = 5;
    c.tail = Tail::fq_relu_fq;
    c.output_quant = Quant::u8;
    c.next_layer = true;
  }));
  add(with(deconv("Deconv4x4Stride2_Pad1_Pow2Scales_Ties", {4, 4}, 1, 0),
           [](LayerCase& c) { c.power_of_two_scales = true; }));
  add(with(deconv("Deconv3x3Stride2_OutPad1_AsymInput_IntoNextLayer", {3, 3}, 1, 1),
           [](LayerCase& c) {
             c.input_quant = Quant::asym;
             c.tail = Tail::fq_relu_fq;
             c.output_quant = Quant::u8;
             c.next_layer = true;
           }));
  return v;
}

std::string case_name(const ::testing::TestParamInfo<LayerCase>& info) { return info.param.name; }

class FusedVersusUnfused : public ::testing::TestWithParam<LayerCase> {};

TEST_P(FusedVersusUnfused, QuantizedOutputsAgreeWithinOneLsb) {
  const LayerCase& c = GetParam();
  const Model m = ModelBuilder::build(c);
  const CompiledModel fused = compile(m.graph, {.fuse = true});
  const CompiledModel unfused = compile(m.graph, {.fuse = false});
  const Tensor yf = run(fused, m.input, m.x, m.output);
  const Tensor yu = run(unfused, m.input, m.x, m.output);
  ASSERT_EQ(yf.shape(), yu.shape());

  // Rounding ties the reference met at the output FakeQuantize.
  const Model probe = ModelBuilder::build(c, /*expose_pre_fq=*/true);
  Tensor pre;
  {
    const CompiledModel pm = compile(probe.graph, {.fuse = false});
    InferRequest r = pm.create_infer_request();
    r.set_input(probe.input, probe.x);
    r.infer();
    pre = r.output(probe.pre_fq_output);
  }
  const std::int64_t ties = count_ties(pre, probe.out_range);

  const Comparison cmp = compare_quantized(yf, yu, m.out_range, &pre);
  const auto layers = quantized_layers(fused);
  std::string impl;
  for (const LayerInfo& l : layers) impl += (impl.empty() ? "" : " + ") + l.implementation;
  std::cout << std::left << "[ config   ] " << std::setw(50) << c.name << " elements " << std::setw(6)
            << cmp.elements << " equal " << std::fixed << std::setprecision(3)
            << 100.0 * cmp.equal_fraction() << "% 1-LSB " << cmp.one_lsb << " max " << cmp.max_diff
            << " ties " << ties << " near-ties " << cmp.near_ties << " (equal "
            << cmp.equal_at_near_ties << ") impl " << (impl.empty() ? "(none)" : impl) << "\n";
  RecordProperty("elements", static_cast<int>(cmp.elements));
  RecordProperty("equal", static_cast<int>(cmp.equal));
  RecordProperty("one_lsb", static_cast<int>(cmp.one_lsb));
  RecordProperty("max_diff", static_cast<int>(cmp.max_diff));
  RecordProperty("output_ties", static_cast<int>(ties));
  RecordProperty("implementation", impl);

  EXPECT_EQ(cmp.off_grid, 0) << "outputs not on the output FakeQuantize grid";
  EXPECT_LE(cmp.max_diff, 1) << cmp.first_diffs << describe_layers(fused);
  EXPECT_GE(cmp.equal_fraction_off_ties(), 0.999) << cmp.first_diffs << describe_layers(fused);

  // Structure: one int8 layer per convolution / FC / deconvolution / matmul,
  // and nothing but int8 layers once the input has been quantized (and the
  // table an activation after a 256-level grid becomes: a Lookup of codes).
  EXPECT_EQ(static_cast<int>(layers.size()), expected_quantized_layers(c)) << describe_layers(fused);
  bool seen_layer = false;
  for (const LayerInfo& l : fused.layers()) {
    seen_layer = seen_layer || is_quantized_op(l.op);
    if (seen_layer) {
      EXPECT_TRUE(is_quantized_op(l.op) || (l.op == "Lookup" && l.precision == "int8"))
          << "leftover " << l.op << " '" << l.node << "'"
                                         << describe_layers(fused);
    }
  }
  // The layer under test ends in an int8 destination when a fused layer reads it.
  if (c.next_layer) {
    const auto it = std::find_if(layers.begin(), layers.end(),
                                 [](const LayerInfo& l) { return l.node == "layer"; });
    ASSERT_NE(it, layers.end()) << describe_layers(fused);
    const std::string dst = c.output_quant == Quant::s8 ? "| s8" : "| u8";
    EXPECT_TRUE(it->post_ops.ends_with(dst)) << it->post_ops;
  }
}

// Every fused layer runs as an int8 oneDNN implementation, not a reference one.
TEST_P(FusedVersusUnfused, FusedLayersUseInt8Implementations) {
  const LayerCase& c = GetParam();
  const Model m = ModelBuilder::build(c);
  const CompiledModel fused = compile(m.graph, {.fuse = true});
  const auto layers = quantized_layers(fused);
  EXPECT_EQ(static_cast<int>(layers.size()), expected_quantized_layers(c)) << describe_layers(fused);
  for (const LayerInfo& l : layers) {
    EXPECT_TRUE(is_int8_implementation(l.implementation))
        << l.op << " '" << l.node << "' runs as '" << l.implementation << "'";
  }
}

// conv -> FQ(s8, [-1, 1)) -> Relu -> FQ(u8, [0, 3]) -> conv: the u8 range
// reaches past the first FakeQuantize's top, so its clip at oh must survive
// as a post-op (the u8 saturation alone would let values up to 3 through).
void run_clip_chain(double final_range) {
  graph::Graph g;
  Builder b(g);
  const Shape shape{1, 8, 8, 8};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f), dx(-0.2f, 3.7f);
  auto fq_w = [&](const std::string& name, Shape ws) {
    std::vector<float> w(at(element_count(ws)));
    for (float& e : w) e = d(rng);
    return b.fake_quantize(b.constant(name, ws, w), -0.5f, 0.5f, -0.5f, 0.5f, 255, name + ".q");
  };
  const ValueId x = b.input("x", shape);
  const ValueId xq = b.fake_quantize(x, 0.0f, 3.5f, 0.0f, 3.5f, 256, "x.q");
  const graph::ConvAttrs pad1{.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {1, 1},
                              .pads_end = {1, 1}, .groups = 1};
  const graph::ConvAttrs one{.strides = {1, 1}, .dilations = {1, 1}, .pads_begin = {0, 0},
                             .pads_end = {0, 0}, .groups = 1};
  ValueId y = b.convolution(xq, fq_w("w1", {8, 8, 3, 3}), std::nullopt, pad1, "layer");
  y = b.fake_quantize(y, -128.0f / 127.0f, 1.0f, -128.0f / 127.0f, 1.0f, 256, "mid.q");
  y = b.fake_quantize(b.relu(y), 0.0f, 3.0f, 0.0f, 3.0f, 256, "out.q");
  y = b.convolution(y, fq_w("w2", {8, 8, 1, 1}), std::nullopt, one, "next");
  const ValueId pre_fq = y;
  const FqRange out = make_range(Quant::s8, final_range / 127.0);
  y = b.fake_quantize(y, out.il, out.ih, out.il, out.ih, 256, "final.q");
  b.output(y);
  std::vector<float> xv(at(element_count(shape)));
  for (float& e : xv) e = dx(rng);
  const Tensor xt = Tensor::from_vector<float>(shape, xv);
  const CompiledModel fused = compile(g, {.fuse = true});
  graph::Graph probe = g;
  probe.mark_output(pre_fq);
  const Tensor pre = run(compile(probe, {.fuse = false}), "x", xt, g.value(pre_fq).name);
  const Comparison cmp = compare_quantized(run(fused, "x", xt, g.value(y).name),
                                           run(compile(g, {.fuse = false}), "x", xt, g.value(y).name),
                                           out, &pre);
  std::cout << "[ chain    ] final range " << final_range << ": equal " << cmp.equal << "/"
            << cmp.elements << ", near-ties " << cmp.near_ties << " (equal "
            << cmp.equal_at_near_ties << ")\n";
  EXPECT_EQ(quantized_layers(fused).size(), 2u) << describe_layers(fused);
  EXPECT_LE(cmp.max_diff, 1) << cmp.first_diffs << describe_layers(fused);
  EXPECT_GE(cmp.equal_fraction_off_ties(), 0.999) << cmp.first_diffs << describe_layers(fused);
}

TEST(FusedVersusUnfusedChain, ClipOfFirstFakeQuantizeSurvivesWhenTheSecondRangeIsWider) {
  run_clip_chain(2.03);
}

// The same chain with the final range +-2: the first layer saturates most
// values at the mid range's top (u8 85), so ~10% of the final pre-FQ values
// sit on a rounding tie in real arithmetic. The reference rounds them from
// (x - il) * 255 / (ih - il) with il = -128 * 2/127 and ih = 127 * 2/127
// stored as f32 (just below the tie), the fused chain from 1/Si and Zi in f32
// (on it): 1 LSB apart on such elements, equal everywhere else.
TEST(FusedVersusUnfusedChain, NearTiesOfNonRepresentableOutputScaleDifferOnlyAtThoseTies) {
  run_clip_chain(2.0);
}

INSTANTIATE_TEST_SUITE_P(Layers, FusedVersusUnfused, ::testing::ValuesIn(layer_cases()), case_name);

}  // namespace
}  // namespace qfuse::test::fusion
