// Dequantize against its definition (graph/ops.hpp): y = (f32(x) - z) * s,
// the subtraction and the product each rounded to f32, z and s one value or
// one per index of `axis`. The reference is a naive loop over the flat index
// in the test; results must be equal bit for bit. Sizes cover the op's
// per-task split (16K values) and its row form (the axis innermost).

#include <random>

#include "test_util.hpp"

namespace qfuse::test {
namespace {

template <typename T>
Tensor random_codes(const Shape& shape, unsigned seed, std::int32_t lo, std::int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(lo, hi);
  std::vector<T> v(idx(element_count(shape)));
  for (T& c : v) c = static_cast<T>(d(rng));
  return Tensor::from_vector<T>(shape, std::move(v));
}

std::vector<float> expected(const Tensor& x, const graph::DequantizeAttrs& a) {
  std::vector<float> e(idx(x.size()));
  for (std::int64_t i = 0; i < x.size(); ++i) {
    std::size_t c = 0;
    if (!a.per_tensor()) c = idx(unravel(x.shape(), i)[idx(a.axis)]);
    const float z = a.zero_point[a.zero_point.size() == 1 ? 0 : c];
    const float s = a.scale[a.scale.size() == 1 ? 0 : c];
    const float centred = x.as_float(i) - z;
    e[idx(i)] = centred * s;
  }
  return e;
}

void expect_dequantized(const Tensor& x, const graph::DequantizeAttrs& a) {
  const Tensor y = run_op(OpKind::Dequantize, {input(x)}, a);
  ASSERT_EQ(y.type(), ElementType::f32);
  ASSERT_EQ(y.shape(), x.shape());
  const std::vector<float> e = expected(x, a);
  for (std::int64_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(y.data<float>()[idx(i)], e[idx(i)]) << index_string(x.shape(), i);
  }
}

std::vector<float> ramp(std::int64_t n, float first, float step) {
  std::vector<float> v(idx(n));
  for (std::int64_t c = 0; c < n; ++c) v[idx(c)] = first + step * static_cast<float>(c);
  return v;
}

TEST(Dequantize, PerTensorU8S8S32) {
  // 70,000 values: several tasks, the last one short.
  const Shape big{1, 7, 100, 100};
  expect_dequantized(random_codes<std::uint8_t>(big, 1, 0, 255), {{0.0371f}, {131.0f}, 1});
  expect_dequantized(random_codes<std::int8_t>(big, 2, -128, 127), {{0.0059f}, {0.0f}, 1});
  expect_dequantized(random_codes<std::int32_t>({37}, 3, -(1 << 20), 1 << 20),
                     {{1.7e-5f}, {0.0f}, 0});
  // A split FakeQuantize's fractional zero point rounds in the subtraction.
  expect_dequantized(random_codes<std::uint8_t>({3, 5, 7}, 4, 0, 255), {{0.3f}, {12.3456f}, 1});
}

TEST(Dequantize, PerChannelAlongEachAxis) {
  const Shape shape{2, 6, 5, 3};
  const Tensor x = random_codes<std::uint8_t>(shape, 5, 0, 255);
  for (std::int64_t axis = 0; axis < 4; ++axis) {
    const std::int64_t n = shape[idx(axis)];
    expect_dequantized(x, {ramp(n, 0.01f, 0.003f), ramp(n, 3.0f, 7.0f), axis});
    // Scale per channel, zero point per tensor, and the reverse.
    expect_dequantized(x, {ramp(n, 0.01f, 0.003f), {17.0f}, axis});
    expect_dequantized(x, {{0.02f}, ramp(n, 3.0f, 7.0f), axis});
  }
  // The weights' form: s8 codes, a scale per output channel on axis 0.
  const Tensor w = random_codes<std::int8_t>({64, 3, 3, 3}, 6, -128, 127);
  expect_dequantized(w, {ramp(64, 0.001f, 0.0001f), {0.0f}, 0});
  // The last axis innermost over many rows (the row form, several tasks).
  const Tensor rows = random_codes<std::int8_t>({3000, 40}, 7, -128, 127);
  expect_dequantized(rows, {ramp(40, 0.5f, -0.01f), ramp(40, -5.0f, 0.25f), 1});
}

TEST(Dequantize, ValidationNamesTheProblem) {
  const Tensor x = random_codes<std::uint8_t>({2, 3}, 8, 0, 255);
  const auto refused = [&](const graph::DequantizeAttrs& a, const std::string& what) {
    try {
      run_op(OpKind::Dequantize, {input(x)}, a);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const GraphError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("Dequantize node 'node'"), std::string::npos) << message;
      EXPECT_NE(message.find(what), std::string::npos) << message;
    }
  };
  refused({{0.1f, 0.2f, 0.3f, 0.4f}, {0.0f}, 0}, "one per index of axis 0");
  refused({{0.1f, 0.2f, 0.3f}, {0.0f}, 2}, "axis 2 is not a dimension");
  refused({{std::numeric_limits<float>::infinity()}, {0.0f}, 1}, "scale inf is not finite");
  refused({{0.1f}, {std::nanf("")}, 1}, "is not finite");
  const Tensor f = filled({2}, {1.0f, 2.0f});
  try {
    run_op(OpKind::Dequantize, {input(f)}, graph::DequantizeAttrs{});
    ADD_FAILURE() << "accepted an f32 input";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("reads u8, s8 or s32 codes (got f32)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace qfuse::test
