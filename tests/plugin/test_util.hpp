#pragma once
// Shared helpers of the operator tests: run one node through the unfused
// runtime, make seeded random tensors, and compare results element by
// element with the index of every mismatch in the failure message.
//
// Expected values never come from qfuse: each test computes them with its own
// naive loops (usually in double).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/builder.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse::test {

using graph::Attributes;
using graph::NoAttrs;
using graph::OpKind;

// One operand of the node under test: a graph input (fed through set_input)
// or a constant baked into the graph.
struct Operand {
  Tensor tensor;
  bool is_constant = false;
};

inline Operand input(Tensor t) { return {std::move(t), false}; }
inline Operand constant(Tensor t) { return {std::move(t), true}; }

// Builds `x0, x1, ... -> kind -> y`, compiles it with default options
// (unfused), runs one inference and returns a copy of the output.
inline Tensor run_op(OpKind kind, const std::vector<Operand>& operands,
                     Attributes attrs = NoAttrs{}) {
  graph::Graph g;
  graph::Builder b(g);
  std::vector<graph::ValueId> ids;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    std::string name = "x";  // appended: GCC 12 at -O3 warns (restrict) on "x" + to_string
    name += std::to_string(i);
    const Operand& o = operands[i];
    ids.push_back(o.is_constant ? b.constant(name, o.tensor)
                                : b.input(name, o.tensor.shape(), o.tensor.type()));
  }
  const graph::ValueId y = b.op(kind, ids, std::move(attrs), "node");
  b.output(y);
  const CompiledModel model = compile(g, {.fuse = false});
  InferRequest request = model.create_infer_request();
  for (std::size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].is_constant) request.set_input(std::string("x").append(std::to_string(i)), operands[i].tensor);
  }
  request.infer();
  return request.output(g.value(y).name);
}

inline std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

inline Tensor random_tensor(const Shape& shape, std::mt19937& rng, float lo = -1.0f,
                            float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(idx(element_count(shape)));
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector<float>(shape, std::move(v));
}

inline Tensor filled(const Shape& shape, std::vector<float> values) {
  return Tensor::from_vector<float>(shape, std::move(values));
}

inline std::vector<double> to_double(const Tensor& t) {
  std::vector<double> v(idx(t.size()));
  for (std::int64_t i = 0; i < t.size(); ++i) v[idx(i)] = static_cast<double>(t.as_float(i));
  return v;
}

// "[n,c,h,w]" position of flat index i in a C-ordered tensor of `shape`.
inline std::string index_string(const Shape& shape, std::int64_t i) {
  std::vector<std::int64_t> pos(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    pos[d] = shape[d] == 0 ? 0 : i % shape[d];
    i = shape[d] == 0 ? 0 : i / shape[d];
  }
  return to_string(Shape(pos.begin(), pos.end()));
}

// Distance in units in the last place between two floats (same sign line).
inline std::int64_t ulp_distance(float a, float b) {
  if (a == b) return 0;
  auto key = [](float f) {
    std::int32_t i = 0;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? std::int64_t{std::numeric_limits<std::int32_t>::min()} - i : std::int64_t{i};
  };
  const std::int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// Every element equal (NaN equals NaN; -0 equals +0 unless `check_sign_of_zero`).
inline ::testing::AssertionResult all_equal(const Tensor& got, const std::vector<double>& expected,
                                            bool check_sign_of_zero = false) {
  if (static_cast<std::int64_t>(expected.size()) != got.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " (expected "
                                         << expected.size() << ")";
  }
  std::ostringstream os;
  os.precision(10);
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got.as_float(i));
    const double e = expected[idx(i)];
    bool ok = g == e || (std::isnan(g) && std::isnan(e));
    if (ok && check_sign_of_zero && g == 0.0) ok = std::signbit(g) == std::signbit(e);
    if (!ok && bad++ < 10) {
      os << "\n  at " << i << " " << index_string(got.shape(), i) << ": got " << g
         << ", expected " << e;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size()
                                       << " elements differ (exact comparison)" << os.str();
}

// |got - expected| <= tol[i] for every element.
inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& expected,
                                            const std::vector<double>& tol) {
  if (static_cast<std::int64_t>(expected.size()) != got.size() || tol.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " (expected "
                                         << expected.size() << ", tolerances " << tol.size()
                                         << ")";
  }
  std::ostringstream os;
  os.precision(9);
  std::int64_t bad = 0;
  double worst = 0.0;
  for (std::int64_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got.as_float(i));
    const double e = expected[idx(i)];
    const double err = std::fabs(g - e);
    const bool ok = err <= tol[idx(i)];  // false for NaN
    if (!ok) {
      worst = std::max(worst, err);
      if (bad++ < 10) {
        os << "\n  at " << i << " " << index_string(got.shape(), i) << ": got " << g
           << ", expected " << e << " (error " << err << " > tolerance " << tol[idx(i)] << ")";
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size()
                                       << " elements outside tolerance, worst error " << worst
                                       << os.str();
}

// Tolerance rel * |expected| + abs for every element.
inline std::vector<double> relative_tolerance(const std::vector<double>& expected, double rel,
                                              double abs) {
  std::vector<double> tol(expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) tol[i] = rel * std::fabs(expected[i]) + abs;
  return tol;
}

// Tolerance of `ulps` float ulps around each expected value (plus `abs`).
inline std::vector<double> ulp_tolerance(const std::vector<double>& expected, int ulps,
                                         double abs = 0.0) {
  std::vector<double> tol(expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto f = static_cast<float>(expected[i]);
    const float next = std::nextafter(std::fabs(f), std::numeric_limits<float>::infinity());
    tol[i] = ulps * static_cast<double>(next - std::fabs(f)) + abs;
  }
  return tol;
}

// Test-name generator for parameter structs with a `name` member.
struct CaseName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& param_info) const {
    return param_info.param.name;
  }
};

// Prints parameter structs by their `name` in test listings and failures
// (bring into a file's unnamed namespace with `using test::PrintTo;`).
template <class T>
  requires requires(const T& t) { std::string(t.name); }
void PrintTo(const T& value, std::ostream* os) {
  *os << value.name;
}

// Row-major strides of a shape.
inline std::vector<std::int64_t> strides_of(const Shape& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// Numpy broadcast of two shapes (the test's own, independent of qfuse).
inline Shape broadcast(const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const std::int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    out[i] = std::max(da, db);
  }
  return out;
}

// Flat index into a tensor of `shape` (right-aligned, size-1 dims broadcast)
// for the multi-index `pos` of a tensor of rank pos.size().
inline std::int64_t broadcast_offset(const Shape& shape, const std::vector<std::int64_t>& pos) {
  const std::size_t lead = pos.size() - shape.size();
  std::int64_t off = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    off = off * shape[d] + (shape[d] == 1 ? 0 : pos[d + lead]);
  }
  return off;
}

// Multi-index of flat index i in a C-ordered tensor of `shape`.
inline std::vector<std::int64_t> unravel(const Shape& shape, std::int64_t i) {
  std::vector<std::int64_t> pos(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    pos[d] = i % shape[d];
    i /= shape[d];
  }
  return pos;
}

}  // namespace qfuse::test
