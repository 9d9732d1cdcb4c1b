// add_codes: Add(Dequantize(a), Dequantize(b)) -> Quantize | quantizing
// Convert becomes one CodeAdd on the codes. Checked against the graph before
// the pass on every pair of codes (256 x 256 elements, so the sixteen-wide
// kernel and its scalar tail both run), bit for bit: u8 + u8 and s8 + u8,
// onto u8 and s8, by ONNX's QuantizeLinear and by a FakeQuantize's ranges,
// and with the dequantizes read elsewhere too. Named negative: operands that
// broadcast stay (refused with the reason).

#include "pass_test_util.hpp"

namespace qfuse::graph {
namespace {

using namespace pass_test;

const Shape kPairs{1, 256, 257};  // a[i] and b[i] run over every pair (and one more row)

struct AddOptions {
  ElementType a_type = ElementType::u8;
  ElementType out_type = ElementType::u8;
  bool by_ranges = false;     // a quantizing Convert instead of a Quantize
  bool shared = false;        // the dequantizes have other readers
  Shape b_shape = kPairs;
};

Graph residual(const AddOptions& o) {
  Graph g;
  Builder b(g);
  const ValueId qa = b.input("a", kPairs, o.a_type);
  const ValueId qb = b.input("b", o.b_shape, ElementType::u8);
  const ValueId da = b.dequantize(qa, {0.0371f}, {o.a_type == ElementType::s8 ? -5.0f : 121.0f}, 1, "dq_a");
  const ValueId db = b.dequantize(qb, {0.0213f}, {7.0f}, 1, "dq_b");
  const ValueId sum = b.binary(OpKind::Add, da, db, "residual");
  if (o.by_ranges) {
    ConvertAttrs c;
    c.to = o.out_type;
    c.input_low = -5.3f;
    c.input_high = 6.1f;
    b.output(b.op(OpKind::Convert, {sum}, c, "quantize"));
  } else {
    QuantizeAttrs q;
    q.to = o.out_type;
    q.scale = {0.0449f};
    q.zero_point = {o.out_type == ElementType::s8 ? 3 : 118};
    b.output(b.op(OpKind::Quantize, {sum}, q, "quantize"));
  }
  if (o.shared) {
    b.output(da);
    b.output(db);
  }
  return g;
}

std::vector<float> run_pairs(const Graph& g, const AddOptions& o) {
  const CompiledModel m = compile(g, {.fuse = false});
  InferRequest r = m.create_infer_request();
  const auto n = static_cast<std::size_t>(element_count(kPairs));
  std::vector<std::uint8_t> a(n), b(static_cast<std::size_t>(element_count(o.b_shape)));
  for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<std::uint8_t>(i / 256);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i % 256);
  if (o.a_type == ElementType::s8) {
    std::vector<std::int8_t> as(n);
    for (std::size_t i = 0; i < n; ++i) as[i] = static_cast<std::int8_t>(a[i]);
    r.set_input("a", Tensor::from_vector<std::int8_t>(kPairs, as));
  } else {
    r.set_input("a", Tensor::from_vector<std::uint8_t>(kPairs, a));
  }
  r.set_input("b", Tensor::from_vector<std::uint8_t>(o.b_shape, b));
  r.infer();
  std::vector<float> out;
  for (const std::string& name : m.output_names()) {
    const Tensor& y = r.output(name);
    for (std::int64_t i = 0; i < y.size(); ++i) out.push_back(y.as_float(i));
  }
  return out;
}

class AddCodes : public ::testing::TestWithParam<AddOptions> {};

TEST_P(AddCodes, OneCodeAddWithTheSameCodes) {
  const AddOptions& o = GetParam();
  Graph g = residual(o);
  const Graph before = g;
  PassContext ctx = context();
  EXPECT_TRUE(add_codes(g, ctx));
  EXPECT_EQ(count(g, OpKind::CodeAdd), 1u);
  EXPECT_EQ(count(g, OpKind::Add), 0u);
  eliminate_dead_nodes(g, ctx);
  EXPECT_EQ(count(g, OpKind::Dequantize), o.shared ? 2u : 0u);
  const std::vector<float> got = run_pairs(g, o), expected = run_pairs(before, o);
  ASSERT_EQ(got.size(), expected.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == expected[i]) continue;
    if (differ++ < 5) {
      ADD_FAILURE() << "a = " << i / 256 << ", b = " << i % 256 << ": " << got[i]
                    << " against " << expected[i];
    }
  }
  EXPECT_EQ(differ, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, AddCodes,
    ::testing::Values(AddOptions{},
                      AddOptions{.a_type = ElementType::s8, .out_type = ElementType::s8},
                      AddOptions{.by_ranges = true},
                      AddOptions{.a_type = ElementType::s8, .out_type = ElementType::s8,
                                 .by_ranges = true},
                      AddOptions{.shared = true}),
    [](const ::testing::TestParamInfo<AddOptions>& p) {
      const AddOptions& o = p.param;
      return std::string(o.a_type == ElementType::s8 ? "s8" : "u8") + "_to_" +
             (o.out_type == ElementType::s8 ? "s8" : "u8") + (o.by_ranges ? "_by_ranges" : "") +
             (o.shared ? "_shared" : "");
    });

TEST(AddCodesNegative, BroadcastOperandsStay) {
  AddOptions o;
  o.b_shape = {1, 256, 1};
  Graph g = residual(o);
  PassContext ctx = context();
  EXPECT_FALSE(add_codes(g, ctx));
  EXPECT_EQ(count(g, OpKind::CodeAdd), 0u);
  ctx.end_phase();
  bool explained = false;
  for (const Refusal& r : ctx.refusals()) explained |= r.reason.find("broadcast") != std::string::npos;
  EXPECT_TRUE(explained);
}

}  // namespace
}  // namespace qfuse::graph
