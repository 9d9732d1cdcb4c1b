// Reshape, Flatten, Transpose and Concat: pure data movement, compared exactly
// against index arithmetic done in the test.

#include "test_util.hpp"

namespace qfuse::test {
namespace {

using test::PrintTo;

// Tensor of `shape` and `type` whose element i holds a value derived from i
// (distinct within the type's range for small tensors).
Tensor iota_tensor(const Shape& shape, ElementType type) {
  const std::int64_t n = element_count(shape);
  switch (type) {
    case ElementType::s8: {
      std::vector<std::int8_t> v(idx(n));
      for (std::int64_t i = 0; i < n; ++i) v[idx(i)] = static_cast<std::int8_t>(i % 256 - 128);
      return Tensor::from_vector<std::int8_t>(shape, v);
    }
    case ElementType::u8: {
      std::vector<std::uint8_t> v(idx(n));
      for (std::int64_t i = 0; i < n; ++i) v[idx(i)] = static_cast<std::uint8_t>(i % 256);
      return Tensor::from_vector<std::uint8_t>(shape, v);
    }
    case ElementType::s32: {
      std::vector<std::int32_t> v(idx(n));
      for (std::int64_t i = 0; i < n; ++i) v[idx(i)] = static_cast<std::int32_t>(i * 7919 - 50000);
      return Tensor::from_vector<std::int32_t>(shape, v);
    }
    case ElementType::s64: {
      std::vector<std::int64_t> v(idx(n));
      for (std::int64_t i = 0; i < n; ++i) v[idx(i)] = i * 3000000007LL - 50000;
      return Tensor::from_vector<std::int64_t>(shape, v);
    }
    case ElementType::f32: break;
  }
  std::vector<float> v(idx(n));
  for (std::int64_t i = 0; i < n; ++i) v[idx(i)] = static_cast<float>(i) * 0.5f - 3.25f;
  return Tensor::from_vector<float>(shape, v);
}

// ---------------------------------------------------------------- Reshape

struct ReshapeCase {
  std::string name;
  Shape from;
  Shape to;
  ElementType type;
};

class ReshapeTest : public ::testing::TestWithParam<ReshapeCase> {};

TEST_P(ReshapeTest, KeepsElementOrder) {
  const ReshapeCase& c = GetParam();
  const Tensor x = iota_tensor(c.from, c.type);
  const Tensor y = run_op(OpKind::Reshape, {input(x)}, graph::ReshapeAttrs{c.to});
  ASSERT_EQ(y.shape(), c.to);
  ASSERT_EQ(y.type(), c.type);
  EXPECT_TRUE(all_equal(y, to_double(x)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReshapeTest,
    ::testing::Values(ReshapeCase{"merge", {2, 3, 4}, {6, 4}, ElementType::f32},
                      ReshapeCase{"split", {4, 6}, {2, 2, 3, 2}, ElementType::f32},
                      ReshapeCase{"to_1d", {2, 3, 4, 5}, {120}, ElementType::f32},
                      ReshapeCase{"u8", {3, 10}, {5, 6}, ElementType::u8},
                      ReshapeCase{"s8", {2, 8}, {16, 1}, ElementType::s8},
                      ReshapeCase{"s32", {6}, {1, 2, 3}, ElementType::s32}),
    CaseName{});

// ---------------------------------------------------------------- Flatten

struct FlattenCase {
  std::string name;
  Shape x;
  std::int64_t axis;
  Shape expected;
};

class FlattenTest : public ::testing::TestWithParam<FlattenCase> {};

TEST_P(FlattenTest, SplitsAtAxis) {
  const FlattenCase& c = GetParam();
  const Tensor x = iota_tensor(c.x, ElementType::f32);
  const Tensor y = run_op(OpKind::Flatten, {input(x)}, graph::FlattenAttrs{c.axis});
  ASSERT_EQ(y.shape(), c.expected);
  EXPECT_TRUE(all_equal(y, to_double(x)));
}

INSTANTIATE_TEST_SUITE_P(
    Axes, FlattenTest,
    ::testing::Values(FlattenCase{"axis1", {2, 3, 4, 5}, 1, {2, 60}},
                      FlattenCase{"axis0", {2, 3, 4, 5}, 0, {1, 120}},
                      FlattenCase{"axis2", {2, 3, 4, 5}, 2, {6, 20}},
                      FlattenCase{"axis_rank", {2, 3, 4, 5}, 4, {120, 1}},
                      FlattenCase{"axis_minus1", {2, 3, 4, 5}, -1, {24, 5}}),
    CaseName{});

// ---------------------------------------------------------------- Transpose

struct TransposeCase {
  std::string name;
  Shape x;
  graph::Ints perm;  // empty: reverse
  ElementType type;
};

class TransposeTest : public ::testing::TestWithParam<TransposeCase> {};

TEST_P(TransposeTest, PermutesAxes) {
  const TransposeCase& c = GetParam();
  graph::Ints perm = c.perm;
  if (perm.empty()) {
    for (std::size_t i = c.x.size(); i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
  }
  Shape out;
  for (auto p : perm) out.push_back(c.x[idx(p)]);
  const Tensor x = iota_tensor(c.x, c.type);
  const Tensor y = run_op(OpKind::Transpose, {input(x)}, graph::TransposeAttrs{c.perm});
  ASSERT_EQ(y.shape(), out);
  ASSERT_EQ(y.type(), c.type);
  const auto in_strides = strides_of(c.x);
  std::vector<double> expected;
  for (std::int64_t i = 0; i < element_count(out); ++i) {
    const auto pos = unravel(out, i);
    std::int64_t src = 0;
    for (std::size_t d = 0; d < perm.size(); ++d) src += pos[d] * in_strides[idx(perm[d])];
    expected.push_back(static_cast<double>(x.as_float(src)));
  }
  EXPECT_TRUE(all_equal(y, expected));
}

INSTANTIATE_TEST_SUITE_P(
    Perms, TransposeTest,
    ::testing::Values(TransposeCase{"matrix", {5, 7}, {1, 0}, ElementType::f32},
                      TransposeCase{"rank3_rotate", {2, 3, 4}, {2, 0, 1}, ElementType::f32},
                      TransposeCase{"nchw_to_nhwc", {2, 3, 4, 5}, {0, 2, 3, 1}, ElementType::f32},
                      TransposeCase{"nhwc_to_nchw", {2, 4, 5, 3}, {0, 3, 1, 2}, ElementType::f32},
                      TransposeCase{"default_reverses", {2, 3, 4}, {}, ElementType::f32},
                      TransposeCase{"identity", {3, 4}, {0, 1}, ElementType::f32},
                      TransposeCase{"rank5", {2, 3, 2, 4, 3}, {4, 2, 0, 3, 1}, ElementType::f32},
                      TransposeCase{"s8", {3, 4, 5}, {1, 2, 0}, ElementType::s8},
                      TransposeCase{"u8", {4, 6}, {1, 0}, ElementType::u8},
                      TransposeCase{"s32", {2, 3, 4}, {2, 1, 0}, ElementType::s32}),
    CaseName{});

// ---------------------------------------------------------------- Concat

struct ConcatCase {
  std::string name;
  std::vector<Shape> inputs;
  std::int64_t axis;
  ElementType type;
};

class ConcatTest : public ::testing::TestWithParam<ConcatCase> {};

TEST_P(ConcatTest, StacksAlongAxis) {
  const ConcatCase& c = GetParam();
  const auto rank = static_cast<std::int64_t>(c.inputs[0].size());
  const std::size_t axis = idx(c.axis < 0 ? c.axis + rank : c.axis);
  std::vector<Operand> ops;
  std::vector<Tensor> xs;
  Shape out = c.inputs[0];
  out[axis] = 0;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor t = iota_tensor(c.inputs[i], c.type);
    // Make inputs distinguishable from each other.
    if (c.type == ElementType::f32) {
      for (float& v : t.data<float>()) v += 1000.0f * static_cast<float>(i);
    }
    xs.push_back(t);
    ops.push_back(i == 1 ? constant(t) : input(t));
    out[axis] += c.inputs[i][axis];
  }
  const Tensor y = run_op(OpKind::Concat, ops, graph::ConcatAttrs{c.axis});
  ASSERT_EQ(y.shape(), out);
  std::vector<double> expected;
  for (std::int64_t i = 0; i < element_count(out); ++i) {
    auto pos = unravel(out, i);
    std::size_t which = 0;
    while (pos[axis] >= c.inputs[which][axis]) pos[axis] -= c.inputs[which++][axis];
    const auto s = strides_of(c.inputs[which]);
    std::int64_t src = 0;
    for (std::size_t d = 0; d < pos.size(); ++d) src += pos[d] * s[d];
    expected.push_back(static_cast<double>(xs[which].as_float(src)));
  }
  EXPECT_TRUE(all_equal(y, expected));
}

INSTANTIATE_TEST_SUITE_P(
    Axes, ConcatTest,
    ::testing::Values(
        ConcatCase{"axis0", {{1, 3, 4}, {2, 3, 4}}, 0, ElementType::f32},
        ConcatCase{"axis1_channels", {{2, 3, 4, 4}, {2, 5, 4, 4}, {2, 1, 4, 4}}, 1,
                   ElementType::f32},
        ConcatCase{"axis2", {{1, 2, 3, 5}, {1, 2, 4, 5}}, 2, ElementType::f32},
        ConcatCase{"axis3_last", {{1, 2, 3, 2}, {1, 2, 3, 7}}, 3, ElementType::f32},
        ConcatCase{"axis_minus1", {{2, 3}, {2, 4}, {2, 1}}, -1, ElementType::f32},
        ConcatCase{"single_input", {{2, 3}}, 0, ElementType::f32},
        ConcatCase{"u8_channels", {{1, 2, 3, 3}, {1, 4, 3, 3}}, 1, ElementType::u8},
        ConcatCase{"s8_axis0", {{2, 5}, {3, 5}}, 0, ElementType::s8}),
    CaseName{});

// ---------------------------------------------------------------- Slice

struct SliceCase {
  std::string name;
  Shape x;
  graph::Ints begin;
  Shape size;
  ElementType type;
};

class SliceTest : public ::testing::TestWithParam<SliceCase> {};

// Cutting only the last dim (qfuse's row copy) or others (a oneDNN reorder
// from a view): the block the definition names, element by element.
TEST_P(SliceTest, CopiesTheBlock) {
  const SliceCase& c = GetParam();
  const Tensor x = iota_tensor(c.x, c.type);
  const Tensor y = run_op(OpKind::Slice, {input(x)}, graph::SliceAttrs{c.begin, c.size});
  ASSERT_EQ(y.shape(), c.size);
  const auto in_strides = strides_of(c.x);
  std::vector<double> expected;
  for (std::int64_t i = 0; i < element_count(c.size); ++i) {
    const auto pos = unravel(c.size, i);
    std::int64_t src = 0;
    for (std::size_t d = 0; d < pos.size(); ++d) src += (pos[d] + c.begin[d]) * in_strides[d];
    expected.push_back(static_cast<double>(x.as_float(src)));
  }
  EXPECT_TRUE(all_equal(y, expected));
}

INSTANTIATE_TEST_SUITE_P(
    Blocks, SliceTest,
    ::testing::Values(SliceCase{"last_dim_f32", {2, 3, 4, 70}, {0, 0, 0, 3}, {2, 3, 4, 65}, ElementType::f32},
                      SliceCase{"last_dim_u8", {2, 3, 100}, {0, 0, 30}, {2, 3, 67}, ElementType::u8},
                      SliceCase{"last_dim_s8_short", {5, 9}, {0, 8}, {5, 1}, ElementType::s8},
                      SliceCase{"channels_plain", {1, 8, 3, 3}, {0, 4, 0, 0}, {1, 4, 3, 3}, ElementType::f32},
                      SliceCase{"two_dims", {2, 6, 5}, {1, 2, 1}, {1, 3, 4}, ElementType::u8}),
    CaseName{});

}  // namespace
}  // namespace qfuse::test
