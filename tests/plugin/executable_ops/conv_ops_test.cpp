// Convolution and Deconvolution against direct loops in double.
// Tolerance: 1e-5 * sum |terms| (+1e-6), where the terms are the bias and every
// product x * w that reaches the output element.

#include <array>

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using test::PrintTo;

using graph::ConvAttrs;
using graph::DeconvAttrs;

struct Expected {
  Shape shape;
  std::vector<double> values;
  std::vector<double> tolerance;
};

// Spatial dims of `shape` (N, C, s...) right-aligned into 3, padded with `fill`.
std::array<std::int64_t, 3> spatial3(const Shape& shape, std::int64_t fill) {
  std::array<std::int64_t, 3> r{fill, fill, fill};
  const std::size_t sp = shape.size() - 2;
  for (std::size_t i = 0; i < sp; ++i) r[3 - sp + i] = shape[2 + i];
  return r;
}

std::array<std::int64_t, 3> attr3(const graph::Ints& v, std::int64_t fill) {
  std::array<std::int64_t, 3> r{fill, fill, fill};
  for (std::size_t i = 0; i < v.size(); ++i) r[3 - v.size() + i] = v[i];
  return r;
}

Expected conv_reference(const Tensor& x, const Tensor& w, const Tensor* b, const ConvAttrs& a) {
  const std::int64_t n_batch = x.shape()[0], ic = x.shape()[1], oc = w.shape()[0];
  const std::int64_t groups = a.groups, icg = ic / groups, ocg = oc / groups;
  const auto in = spatial3(x.shape(), 1);
  const auto k = spatial3(w.shape(), 1);
  const auto s = attr3(a.strides, 1), d = attr3(a.dilations, 1);
  const auto pb = attr3(a.pads_begin, 0), pe = attr3(a.pads_end, 0);
  std::array<std::int64_t, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    out[i] = (in[i] + pb[i] + pe[i] - ((k[i] - 1) * d[i] + 1)) / s[i] + 1;
  }
  Expected e;
  e.shape = {n_batch, oc};
  for (std::size_t i = 3 - (x.shape().size() - 2); i < 3; ++i) e.shape.push_back(out[i]);
  const auto xs = x.data<float>();
  const auto ws = w.data<float>();
  for (std::int64_t n = 0; n < n_batch; ++n) {
    for (std::int64_t o = 0; o < oc; ++o) {
      const std::int64_t g = o / ocg;
      for (std::int64_t z = 0; z < out[0]; ++z) {
        for (std::int64_t y = 0; y < out[1]; ++y) {
          for (std::int64_t xo = 0; xo < out[2]; ++xo) {
            double acc = b ? static_cast<double>(b->data<float>()[idx(o)]) : 0.0;
            double mag = std::fabs(acc);
            for (std::int64_t c = 0; c < icg; ++c) {
              for (std::int64_t kz = 0; kz < k[0]; ++kz) {
                const std::int64_t iz = z * s[0] - pb[0] + kz * d[0];
                if (iz < 0 || iz >= in[0]) continue;
                for (std::int64_t ky = 0; ky < k[1]; ++ky) {
                  const std::int64_t iy = y * s[1] - pb[1] + ky * d[1];
                  if (iy < 0 || iy >= in[1]) continue;
                  for (std::int64_t kx = 0; kx < k[2]; ++kx) {
                    const std::int64_t ix = xo * s[2] - pb[2] + kx * d[2];
                    if (ix < 0 || ix >= in[2]) continue;
                    const std::int64_t xi =
                        (((n * ic + g * icg + c) * in[0] + iz) * in[1] + iy) * in[2] + ix;
                    const std::int64_t wi = (((o * icg + c) * k[0] + kz) * k[1] + ky) * k[2] + kx;
                    const double t =
                        static_cast<double>(xs[idx(xi)]) * static_cast<double>(ws[idx(wi)]);
                    acc += t;
                    mag += std::fabs(t);
                  }
                }
              }
            }
            e.values.push_back(acc);
            e.tolerance.push_back(1e-5 * mag + 1e-6);
          }
        }
      }
    }
  }
  return e;
}

// Transposed convolution as a scatter: input element i of channel c adds
// x * w[c, oc_in_group, k] to output position i * stride - pad_begin + k * dilation.
Expected deconv_reference(const Tensor& x, const Tensor& w, const Tensor* b,
                          const DeconvAttrs& a) {
  const std::int64_t n_batch = x.shape()[0], ic = x.shape()[1];
  const std::int64_t groups = a.groups, icg = ic / groups, ocg = w.shape()[1];
  const std::int64_t oc = ocg * groups;
  const auto in = spatial3(x.shape(), 1);
  const auto k = spatial3(w.shape(), 1);
  const auto s = attr3(a.strides, 1), d = attr3(a.dilations, 1);
  const auto pb = attr3(a.pads_begin, 0), pe = attr3(a.pads_end, 0);
  const auto op = attr3(a.output_padding, 0);
  std::array<std::int64_t, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    out[i] = (in[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - pb[i] - pe[i] + op[i];
  }
  Expected e;
  e.shape = {n_batch, oc};
  for (std::size_t i = 3 - (x.shape().size() - 2); i < 3; ++i) e.shape.push_back(out[i]);
  const std::int64_t total = n_batch * oc * out[0] * out[1] * out[2];
  e.values.assign(idx(total), 0.0);
  std::vector<double> mag(idx(total), 0.0);
  const auto xs = x.data<float>();
  const auto ws = w.data<float>();
  auto out_index = [&](std::int64_t n, std::int64_t o, std::int64_t z, std::int64_t y,
                       std::int64_t xo) {
    return (((n * oc + o) * out[0] + z) * out[1] + y) * out[2] + xo;
  };
  for (std::int64_t n = 0; n < n_batch; ++n) {
    for (std::int64_t c = 0; c < ic; ++c) {
      const std::int64_t g = c / icg;
      for (std::int64_t z = 0; z < in[0]; ++z) {
        for (std::int64_t y = 0; y < in[1]; ++y) {
          for (std::int64_t xi = 0; xi < in[2]; ++xi) {
            const double xv = xs[idx((((n * ic + c) * in[0] + z) * in[1] + y) * in[2] + xi)];
            for (std::int64_t og = 0; og < ocg; ++og) {
              for (std::int64_t kz = 0; kz < k[0]; ++kz) {
                const std::int64_t oz = z * s[0] - pb[0] + kz * d[0];
                if (oz < 0 || oz >= out[0]) continue;
                for (std::int64_t ky = 0; ky < k[1]; ++ky) {
                  const std::int64_t oy = y * s[1] - pb[1] + ky * d[1];
                  if (oy < 0 || oy >= out[1]) continue;
                  for (std::int64_t kx = 0; kx < k[2]; ++kx) {
                    const std::int64_t ox = xi * s[2] - pb[2] + kx * d[2];
                    if (ox < 0 || ox >= out[2]) continue;
                    const std::int64_t wi = (((c * ocg + og) * k[0] + kz) * k[1] + ky) * k[2] + kx;
                    const double t = xv * static_cast<double>(ws[idx(wi)]);
                    const auto oi = idx(out_index(n, g * ocg + og, oz, oy, ox));
                    e.values[oi] += t;
                    mag[oi] += std::fabs(t);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  for (std::int64_t i = 0; i < total; ++i) {
    if (b) {
      const std::int64_t o = (i / (out[0] * out[1] * out[2])) % oc;
      const double bv = b->data<float>()[idx(o)];
      e.values[idx(i)] += bv;
      mag[idx(i)] += std::fabs(bv);
    }
  }
  for (double m : mag) e.tolerance.push_back(1e-5 * m + 1e-6);
  return e;
}

struct ConvCase {
  std::string name;
  Shape x;
  Shape w;
  bool bias;
  ConvAttrs attrs;
  bool weights_as_input = false;
};

class ConvolutionTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvolutionTest, MatchesDirectLoops) {
  const ConvCase& c = GetParam();
  std::mt19937 rng(1234);
  const Tensor x = random_tensor(c.x, rng);
  const Tensor w = random_tensor(c.w, rng);
  const Tensor b = random_tensor({c.w[0]}, rng);
  std::vector<Operand> ops{input(x), c.weights_as_input ? input(w) : constant(w)};
  if (c.bias) ops.push_back(constant(b));
  const Tensor y = run_op(OpKind::Convolution, ops, c.attrs);
  const Expected e = conv_reference(x, w, c.bias ? &b : nullptr, c.attrs);
  ASSERT_EQ(y.shape(), e.shape);
  EXPECT_TRUE(all_close(y, e.values, e.tolerance));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvolutionTest,
    ::testing::Values(
        ConvCase{"conv1d_pad1_bias", {2, 3, 11}, {4, 3, 3}, true, {{1}, {1}, {1}, {1}, 1}},
        ConvCase{"conv1d_groups2_stride2_dil2_asym",
                 {1, 4, 16}, {6, 2, 5}, false, {{2}, {2}, {3}, {1}, 2}},
        ConvCase{"conv2d_3x3_pad1_bias", {1, 3, 8, 8}, {5, 3, 3, 3}, true,
                 {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}},
        ConvCase{"conv2d_strides_asym_pads", {2, 4, 9, 7}, {8, 4, 3, 2}, true,
                 {{2, 3}, {1, 1}, {0, 1}, {2, 0}, 1}},
        ConvCase{"conv2d_dilated", {1, 3, 10, 10}, {4, 3, 3, 3}, false,
                 {{1, 1}, {2, 3}, {2, 1}, {1, 2}, 1}},
        ConvCase{"conv2d_groups2_bias", {1, 6, 7, 7}, {4, 3, 3, 3}, true,
                 {{1, 1}, {1, 1}, {0, 0}, {0, 0}, 2}},
        ConvCase{"conv2d_depthwise_stride2", {2, 8, 6, 6}, {8, 1, 3, 3}, true,
                 {{2, 2}, {1, 1}, {1, 1}, {1, 1}, 8}},
        ConvCase{"conv2d_depthwise_multiplier2", {1, 4, 5, 5}, {8, 1, 3, 3}, false,
                 {{1, 1}, {1, 1}, {1, 0}, {0, 1}, 4}},
        ConvCase{"conv2d_1x1", {1, 16, 4, 4}, {8, 16, 1, 1}, true,
                 {{1, 1}, {1, 1}, {0, 0}, {0, 0}, 1}},
        ConvCase{"conv2d_kernel_equals_padded_input", {1, 2, 3, 3}, {2, 2, 5, 5}, true,
                 {{1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}},
        ConvCase{"conv2d_weights_as_input", {1, 3, 6, 5}, {4, 3, 3, 3}, true,
                 {{1, 2}, {1, 1}, {1, 1}, {0, 1}, 1}, true},
        ConvCase{"conv3d_pad1_bias", {1, 2, 5, 6, 7}, {3, 2, 3, 3, 3}, true,
                 {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1}},
        ConvCase{"conv3d_groups_strides_dil_asym", {1, 4, 6, 5, 4}, {4, 2, 2, 3, 2}, false,
                 {{2, 1, 2}, {1, 2, 1}, {1, 0, 0}, {0, 2, 1}, 2}}),
    CaseName{});

struct DeconvCase {
  std::string name;
  Shape x;
  Shape w;
  bool bias;
  DeconvAttrs attrs;
};

class DeconvolutionTest : public ::testing::TestWithParam<DeconvCase> {};

TEST_P(DeconvolutionTest, MatchesScatterLoops) {
  const DeconvCase& c = GetParam();
  std::mt19937 rng(4321);
  const Tensor x = random_tensor(c.x, rng);
  const Tensor w = random_tensor(c.w, rng);
  const Tensor b = random_tensor({c.w[1] * c.attrs.groups}, rng);
  std::vector<Operand> ops{input(x), constant(w)};
  if (c.bias) ops.push_back(constant(b));
  const Tensor y = run_op(OpKind::Deconvolution, ops, c.attrs);
  const Expected e = deconv_reference(x, w, c.bias ? &b : nullptr, c.attrs);
  ASSERT_EQ(y.shape(), e.shape);
  EXPECT_TRUE(all_close(y, e.values, e.tolerance));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeconvolutionTest,
    ::testing::Values(
        DeconvCase{"deconv1d_stride2_bias", {1, 3, 5}, {3, 4, 3}, true, {{2}, {1}, {0}, {0}, {0}, 1}},
        DeconvCase{"deconv2d_pad1", {1, 4, 4, 4}, {4, 2, 3, 3}, false,
                   {{1, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, 1}},
        DeconvCase{"deconv2d_stride2_pad1_bias", {2, 3, 5, 4}, {3, 5, 4, 4}, true,
                   {{2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, 1}},
        DeconvCase{"deconv2d_stride2_output_padding", {1, 2, 4, 4}, {2, 3, 3, 3}, true,
                   {{2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}},
        DeconvCase{"deconv2d_output_padding_beyond_pads_end", {1, 2, 3, 3}, {2, 2, 3, 3}, true,
                   {{2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 0}, 1}},
        DeconvCase{"deconv2d_groups2_asym_pads_bias", {1, 4, 5, 5}, {4, 3, 3, 3}, true,
                   {{2, 2}, {1, 1}, {0, 1}, {1, 0}, {0, 0}, 2}},
        DeconvCase{"deconv2d_depthwise_stride2", {1, 3, 4, 4}, {3, 1, 2, 2}, false,
                   {{2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, 3}},
        DeconvCase{"deconv2d_dilated", {1, 2, 4, 4}, {2, 2, 3, 3}, true,
                   {{1, 1}, {2, 2}, {1, 0}, {0, 1}, {0, 0}, 1}},
        DeconvCase{"deconv2d_mixed_strides_output_padding", {1, 3, 4, 5}, {3, 2, 3, 2}, true,
                   {{3, 2}, {1, 1}, {1, 0}, {0, 1}, {2, 1}, 1}},
        DeconvCase{"deconv3d_stride2_bias", {1, 2, 3, 3, 3}, {2, 3, 2, 2, 2}, true,
                   {{2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, 1}},
        // Kernel == stride: a 1x1 convolution and a pixel shuffle.
        DeconvCase{"deconv2d_kernel_is_stride_bias_batch2", {2, 3, 4, 5}, {3, 4, 2, 2}, true,
                   {{2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, 1}},
        DeconvCase{"deconv2d_kernel_is_stride_3x2", {1, 5, 3, 4}, {5, 2, 3, 2}, false,
                   {{3, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, 1}},
        DeconvCase{"deconv2d_kernel_is_stride_one_output_channel", {1, 24, 6, 6}, {24, 1, 2, 2},
                   true, {{2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, 1}}),
    CaseName{});

// Kernel == stride between two f32 convolutions: source and destination are
// channels last, and the pixel shuffle writes that layout.
TEST(Deconvolution, KernelIsStrideBetweenConvolutionsMatchesLoops) {
  std::mt19937 rng(99);
  const Tensor x = random_tensor({2, 3, 5, 4}, rng);
  const Tensor w1 = random_tensor({8, 3, 1, 1}, rng);
  const Tensor w2 = random_tensor({8, 6, 2, 2}, rng);  // deconvolution [IC, OC, kh, kw]
  const Tensor b2 = random_tensor({6}, rng);
  const Tensor w3 = random_tensor({4, 6, 1, 1}, rng);
  const ConvAttrs one{{1, 1}, {1, 1}, {0, 0}, {0, 0}, 1};
  const DeconvAttrs up{{2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, 1};
  graph::Graph g;
  graph::Builder b(g);
  const graph::ValueId in = b.input("x", x.shape());
  const graph::ValueId c1 = b.op(OpKind::Convolution, {in, b.constant("w1", w1)}, one, "conv1");
  const graph::ValueId d = b.op(OpKind::Deconvolution,
                                {c1, b.constant("w2", w2), b.constant("b2", b2)}, up, "up");
  const graph::ValueId c3 = b.op(OpKind::Convolution, {d, b.constant("w3", w3)}, one, "conv3");
  b.output(c3);
  const CompiledModel model = compile(g, {.fuse = false});
  bool shuffled = false;
  for (const LayerInfo& l : model.layers()) {
    if (l.node == "up") shuffled = l.implementation.find("pixel shuffle") != std::string::npos;
  }
  EXPECT_TRUE(shuffled);
  InferRequest request = model.create_infer_request();
  request.set_input("x", x);
  request.infer();
  const auto as_tensor = [](const Expected& e) {
    std::vector<float> v(e.values.begin(), e.values.end());
    return Tensor::from_vector<float>(e.shape, v);
  };
  const Tensor r1 = as_tensor(conv_reference(x, w1, nullptr, one));
  const Tensor r2 = as_tensor(deconv_reference(r1, w2, &b2, up));
  const Expected e = conv_reference(r2, w3, nullptr, one);
  const Tensor& y = request.output(g.value(c3).name);
  ASSERT_EQ(y.shape(), e.shape);
  EXPECT_TRUE(all_close(y, e.values, relative_tolerance(e.values, 1e-5, 1e-5)));
}

}  // namespace
}  // namespace qfuse::test
