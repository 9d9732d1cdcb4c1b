// ONNX import: what each tensor's dimensions follow when the inputs' symbolic
// dimensions are bound otherwise than at import.
//
// The importer computes every shape for the sizes the inputs were given, and
// folds what a model computes from shapes (Shape, Gather, Concat, Range, ...)
// into literals. A graph compiled once for every shape must know which of
// those numbers are the inputs' symbolic dimensions, so each operand carries,
// per dimension (and per element of a literal from shapes), a symbol:
//   ""          fixed: the same at every binding;
//   "sequence"  the size of the inputs' symbolic dimension of that name;
//   "?a<US>b"   some other function of the symbolic dimensions a and b.
// The rules below follow each operator's shape function; an operator without
// one makes every output dimension an unknown function of all its inputs'
// symbols, which is always true. A Reshape target that is a copy of the
// input's dimensions (with at most one element left to -1) follows them
// (ReshapeAttrs::spec); an arange of a symbolic length read as Gather
// indices becomes a Slice whose size follows it. Any other literal computed
// from a symbolic dimension that a runtime node reads as a constant fixes
// that dimension, and the model says which node did when asked for another
// size.

#include "graph/onnx/import_internal.hpp"

namespace qfuse::onnx::impl {
namespace {

using Syms = std::vector<std::string>;

constexpr char kUnknown = '?';
constexpr std::size_t kSpelledOut = 4096;
constexpr char kSeparator = '\x1f';

bool fixed(const std::string& s) { return s.empty(); }
bool named(const std::string& s) { return !s.empty() && s[0] != kUnknown; }

void add_deps(const std::string& s, std::set<std::string>& out) {
  if (fixed(s)) return;
  if (named(s)) {
    out.insert(s);
    return;
  }
  std::size_t from = 1;
  while (from <= s.size()) {
    const std::size_t to = std::min(s.find(kSeparator, from), s.size());
    if (to > from) out.insert(s.substr(from, to - from));
    from = to + 1;
  }
}

std::string unknown(const std::set<std::string>& deps) {
  if (deps.empty()) return {};
  std::string s(1, kUnknown);
  for (const std::string& d : deps) s += (s.size() > 1 ? std::string(1, kSeparator) : "") + d;
  return s;
}

std::set<std::string> deps_of(const Syms& syms) {
  std::set<std::string> out;
  for (const std::string& s : syms) add_deps(s, out);
  return out;
}

// Every element an unknown function of `deps` (all fixed without any).
Syms unknown_syms(std::size_t n, const std::set<std::string>& deps) { return Syms(n, unknown(deps)); }

// The symbol of an output dimension of size `size` that several inputs'
// dimensions broadcast to: one of theirs of that size (a size-1 dimension
// broadcast against another takes the other's).
std::string broadcast_sym(const std::vector<std::pair<std::string, std::int64_t>>& candidates,
                          std::int64_t size) {
  std::set<std::string> names, deps;
  for (const auto& [sym, n] : candidates) {
    // A fixed dimension of this size > 1 holds it there: the others broadcast
    // to it or the model is invalid.
    if (n == size && size > 1 && fixed(sym)) return {};
  }
  for (const auto& [sym, n] : candidates) {
    if (n != size || fixed(sym)) continue;
    if (named(sym)) names.insert(sym);
    add_deps(sym, deps);
  }
  if (deps.empty()) return {};
  // Several names of one size > 1 are equal in a valid model; of size 1,
  // the output follows whichever is not 1.
  if (names.size() == 1 && deps.size() == 1) return *names.begin();
  if (!names.empty() && size > 1) return *names.begin();
  return unknown(deps);
}

std::int64_t to_index(double v, std::int64_t n) {
  auto k = static_cast<std::int64_t>(v);
  return k < 0 ? k + n : k;
}

}  // namespace

Syms Importer::dim_syms(const Operand& o) const {
  if (o.dim_syms && o.dim_syms->size() == o.shape.size()) return *o.dim_syms;
  // Untraced: a constant is fixed; anything else may follow any symbol.
  if (o.literal && !o.from_shape) return Syms(o.shape.size());
  std::set<std::string> all;
  for (const graph::ValueId v : graph_.inputs()) {
    for (const std::string& n : graph_.dim_names(v)) {
      if (!n.empty()) all.insert(n);
    }
  }
  return unknown_syms(o.shape.size(), all);
}

Syms Importer::value_syms(const Operand& o) const {
  // The count from the shape: values() would decode a weight not read yet.
  const std::size_t n = o.literal ? sz(element_count(o.literal->shape)) : 0;
  if (o.value_syms && o.value_syms->size() == n) return *o.value_syms;
  // Fixed elements: spelled out for what shape arithmetic reads (a target,
  // indices, axes), not for a weight's millions.
  if (!o.from_shape) return n <= kSpelledOut ? Syms(n) : Syms{};
  Syms dims = dim_syms(o);
  std::set<std::string> all = deps_of(dims);
  for (const graph::ValueId v : graph_.inputs()) {
    for (const std::string& name : graph_.dim_names(v)) {
      if (!name.empty()) all.insert(name);
    }
  }
  return unknown_syms(n, all);
}

void Importer::propagate_symbols(const ::onnx::NodeProto& node) {
  const std::string& op = node.op_type();
  const auto operand = [&](int k) -> const Operand* {
    if (k >= node.input_size() || node.input(k).empty()) return nullptr;
    const auto it = tensors_.find(node.input(k));
    return it == tensors_.end() ? nullptr : &it->second;
  };
  // An initializer nobody decoded yet is a constant of its declared dims.
  const auto dims = [&](int k) -> Syms {
    const Operand* o = operand(k);
    if (o != nullptr) return dim_syms(*o);
    const auto u = k < node.input_size() ? undecoded_.find(node.input(k)) : undecoded_.end();
    return u != undecoded_.end() ? Syms(static_cast<std::size_t>(u->second->dims_size())) : Syms{};
  };
  const auto values = [&](int k) -> Syms {
    const Operand* o = operand(k);
    return o != nullptr ? value_syms(*o) : Syms{};
  };
  // The values of a shape-sized literal (never a weight's).
  const auto literal = [&](int k) -> const Values* {
    const Operand* o = operand(k);
    const bool small = o != nullptr && o->literal &&
                       (o->from_shape || element_count(o->literal->shape) <= i64(kSpelledOut));
    return small ? &o->literal->values() : nullptr;
  };
  std::set<std::string> all_deps;
  for (int k = 0; k < node.input_size(); ++k) {
    const Syms d = dims(k);
    const Syms v = values(k);
    add_deps(unknown(deps_of(d)), all_deps);
    add_deps(unknown(deps_of(v)), all_deps);
  }
  AttrReader a(node, "");
  const auto attr_ints = [&](const char* name) { return a.has(name) ? a.ints(name) : Ints{}; };
  const auto axes_input_or_attr = [&](int k) -> std::optional<Ints> {
    if (a.has("axes")) return a.ints("axes");
    if (const Values* v = literal(k)) {
      Ints axes;
      for (double x : *v) axes.push_back(static_cast<std::int64_t>(x));
      return axes;
    }
    if (operand(k) != nullptr) return std::nullopt;  // runtime axes
    return Ints{};
  };

  static const std::set<std::string> kElementwise = {
      "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Tanh", "Sigmoid", "Relu", "LeakyRelu",
      "Elu", "Selu", "Celu", "Cast", "CastLike", "Where", "Equal", "Less", "Greater", "LessOrEqual",
      "GreaterOrEqual", "Not", "And", "Or", "Xor", "Neg", "Exp", "Log", "Abs", "Reciprocal",
      "Floor", "Ceil", "Round", "Sign", "Clip", "Min", "Max", "Sum", "Mean", "Mod", "Softmax",
      "LogSoftmax", "LayerNormalization", "QuantizeLinear", "DequantizeLinear",
      "DynamicQuantizeLinear", "Identity", "Dropout", "HardSigmoid", "HardSwish", "PRelu",
      "BatchNormalization", "InstanceNormalization", "FakeQuantize", "Gelu", "Softplus",
      "Softsign", "Mish", "IsNaN", "IsInf", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
      "QLinearLeakyRelu", "QLinearSoftmax"};
  static const std::set<std::string> kLayers = {
      "Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "MaxPool", "AveragePool",
      "QLinearAveragePool", "LpPool"};
  static const std::set<std::string> kGlobalPools = {"GlobalAveragePool", "GlobalMaxPool",
                                                     "QLinearGlobalAveragePool"};
  static const std::set<std::string> kReductions = {"ReduceMean", "ReduceSum", "ReduceMax",
                                                    "ReduceMin", "ReduceProd", "ReduceL1",
                                                    "ReduceL2", "ReduceSumSquare"};

  for (int out = 0; out < node.output_size(); ++out) {
    if (node.output(out).empty()) continue;
    const auto it = tensors_.find(node.output(out));
    if (it == tensors_.end()) continue;
    Operand& y = it->second;
    const std::size_t rank = y.shape.size();
    Syms d = unknown_syms(rank, all_deps);  // what no rule below knows better
    const Syms x = dims(0);
    if (op == "Shape" || op == "Size" || op == "Range" || op == "ConstantOfShape" ||
        (op == "DynamicQuantizeLinear" && out > 0)) {
      d.assign(rank, "");
    }
    if (out == 0 && kElementwise.count(op) != 0) {
      for (std::size_t j = 0; j < rank; ++j) {
        std::vector<std::pair<std::string, std::int64_t>> c;
        for (int k = 0; k < node.input_size(); ++k) {
          const Operand* o = operand(k);
          const Syms s = dims(k);
          if (o == nullptr || s.size() != o->shape.size() || rank - j > s.size()) continue;
          const std::size_t at = s.size() - (rank - j);
          c.emplace_back(s[at], o->shape[at]);
        }
        d[j] = broadcast_sym(c, y.shape[j]);
      }
    } else if (out == 0 && (op == "MatMul" || op == "MatMulInteger" || op == "QLinearMatMul")) {
      const int bi = op == "QLinearMatMul" ? 3 : 1;
      const Operand* A = operand(0);
      const Operand* B = operand(bi);
      const Syms as = dims(0), bs = dims(bi);
      if (A != nullptr && B != nullptr && as.size() >= 1 && bs.size() >= 1 &&
          as.size() == A->shape.size() && bs.size() == B->shape.size()) {
        const std::size_t batch = rank - (as.size() > 1 ? 1 : 0) - (bs.size() > 1 ? 1 : 0);
        for (std::size_t j = 0; j < batch; ++j) {
          std::vector<std::pair<std::string, std::int64_t>> c;
          for (const auto& [o, s] : {std::pair{A, &as}, std::pair{B, &bs}}) {
            const std::size_t ob = s->size() >= 2 ? s->size() - 2 : 0;
            if (batch - j > ob) continue;
            const std::size_t at = ob - (batch - j);
            c.emplace_back((*s)[at], o->shape[at]);
          }
          d[j] = broadcast_sym(c, y.shape[j]);
        }
        std::size_t j = batch;
        if (as.size() > 1) d[j++] = as[as.size() - 2];
        if (bs.size() > 1) d[j] = bs.back();
      }
    } else if (out == 0 && (op == "Gemm" || op == "QGemm") && rank == 2) {
      const Syms as = dims(0), bs = dims(op == "QGemm" ? 3 : 1);
      if (as.size() == 2 && bs.size() == 2) {
        d[0] = as[a.i("transA", 0) != 0 ? 1 : 0];
        d[1] = bs[a.i("transB", 0) != 0 ? 0 : 1];
      }
    } else if (out == 0 && kLayers.count(op) != 0 && x.size() == rank && rank >= 3) {
      d[0] = x[0];
      // A convolution's channels are its weights'; a pool keeps its input's.
      const bool pool = op.find("Pool") != std::string::npos;
      d[1] = pool ? x[1] : "";
      for (std::size_t j = 2; j < rank; ++j) d[j] = fixed(x[j]) ? "" : unknown(deps_of({x[j]}));
    } else if (out == 0 && kGlobalPools.count(op) != 0 && x.size() == rank && rank >= 2) {
      d.assign(rank, "");
      d[0] = x[0];
      d[1] = x[1];
    } else if (out == 0 && op == "Gather") {
      const Syms idx = dims(1);
      const std::int64_t axis = a.i("axis", 0) < 0 ? a.i("axis", 0) + i64(x.size()) : a.i("axis", 0);
      if (axis >= 0 && sz(axis) < x.size() && x.size() - 1 + idx.size() == rank) {
        d.assign(x.begin(), x.begin() + axis);
        d.insert(d.end(), idx.begin(), idx.end());
        d.insert(d.end(), x.begin() + axis + 1, x.end());
      }
    } else if (out == 0 && op == "Transpose" && x.size() == rank) {
      Ints perm = attr_ints("perm");
      if (perm.empty()) {
        for (std::size_t j = rank; j-- > 0;) perm.push_back(i64(j));
      }
      if (perm.size() == rank) {
        for (std::size_t j = 0; j < rank; ++j) d[j] = x[sz(perm[j])];
      }
    } else if (out == 0 && op == "Reshape") {
      const Values* target = literal(1);
      const Syms tv = values(1);
      if (target != nullptr && target->size() == rank && tv.size() == rank) {
        const bool allow_zero = a.i("allowzero", 0) != 0;
        const std::set<std::string> from_x = deps_of(x);
        for (std::size_t j = 0; j < rank; ++j) {
          const auto v = static_cast<std::int64_t>((*target)[j]);
          d[j] = !fixed(tv[j])                    ? tv[j]
                 : v == 0 && !allow_zero && j < x.size() ? x[j]
                 : v == -1                         ? unknown(from_x)
                                                   : std::string();
        }
      }
    } else if (out == 0 && op == "Flatten" && rank == 2) {
      std::int64_t axis = a.i("axis", 1);
      if (axis < 0) axis += i64(x.size());
      const Operand* xo = operand(0);
      if (xo != nullptr && axis >= 0 && sz(axis) <= x.size()) {
        for (int half = 0; half < 2; ++half) {
          const std::size_t from = half == 0 ? 0 : sz(axis), to = half == 0 ? sz(axis) : x.size();
          std::set<std::string> deps;
          std::string only;
          std::int64_t fixed_product = 1;
          int symbolic = 0;
          for (std::size_t j = from; j < to; ++j) {
            if (fixed(x[j])) {
              fixed_product *= xo->shape[j];
            } else {
              ++symbolic;
              only = x[j];
              add_deps(x[j], deps);
            }
          }
          d[sz(half)] = symbolic == 1 && fixed_product == 1 && named(only) ? only : unknown(deps);
        }
      }
    } else if (out == 0 && (op == "Unsqueeze" || op == "Squeeze")) {
      const std::optional<Ints> axes = axes_input_or_attr(1);
      const Operand* xo = operand(0);
      if (axes && xo != nullptr) {
        const std::int64_t r = op == "Unsqueeze" ? i64(x.size() + axes->size()) : i64(x.size());
        std::set<std::int64_t> at;
        for (std::int64_t ax : *axes) at.insert(ax < 0 ? ax + r : ax);
        Syms s;
        std::size_t k = 0;
        for (std::int64_t j = 0; j < r; ++j) {
          if (op == "Unsqueeze") {
            s.push_back(at.count(j) != 0 ? std::string() : k < x.size() ? x[k++] : std::string());
          } else if (axes->empty() ? xo->shape[sz(j)] != 1 : at.count(j) == 0) {
            s.push_back(x[sz(j)]);
          }
        }
        if (s.size() == rank) d = s;
      }
    } else if (out == 0 && op == "Concat") {
      std::int64_t axis = a.i("axis", 0);
      if (axis < 0) axis += i64(rank);
      for (std::size_t j = 0; j < rank; ++j) {
        std::vector<std::pair<std::string, std::int64_t>> c;
        std::set<std::string> deps;
        for (int k = 0; k < node.input_size(); ++k) {
          const Operand* o = operand(k);
          const Syms s = dims(k);
          if (o == nullptr || s.size() != rank) continue;
          c.emplace_back(s[j], o->shape[j]);
          add_deps(s[j], deps);
        }
        d[j] = i64(j) == axis ? unknown(deps) : broadcast_sym(c, y.shape[j]);
      }
    } else if (out == 0 && op == "Slice" && x.size() == rank) {
      const Values* starts = literal(1);
      const Values* ends = literal(2);
      const Values* axes = literal(3);
      const Values* steps = literal(4);
      const Syms ev = values(2);
      d = x;
      if (starts != nullptr && ends != nullptr) {
        for (std::size_t k = 0; k < starts->size() && k < ends->size(); ++k) {
          const std::int64_t axis = to_index(axes != nullptr ? (*axes)[k] : double(k), i64(rank));
          if (axis < 0 || sz(axis) >= rank) continue;
          const double step = steps != nullptr && k < steps->size() ? (*steps)[k] : 1.0;
          const bool whole = fixed(ev[k]) && (*ends)[k] >= 0x1p31;
          std::set<std::string> deps;
          add_deps(x[sz(axis)], deps);
          add_deps(values(1)[k], deps);
          add_deps(ev[k], deps);
          const bool from_zero = (*starts)[k] == 0 && step == 1 && fixed(values(1)[k]) &&
                                 (steps == nullptr || deps_of(values(4)).empty());
          d[sz(axis)] = whole && from_zero ? x[sz(axis)]
                        : from_zero && named(ev[k]) ? ev[k]
                                                    : unknown(deps);
        }
      }
    } else if (out == 0 && kReductions.count(op) != 0) {
      const std::optional<Ints> axes = axes_input_or_attr(1);
      const bool keep = a.i("keepdims", 1) != 0;
      if (axes && axes->empty() && a.i("noop_with_empty_axes", 0) != 0) {
        d = x;
      } else if (axes) {
        std::set<std::int64_t> at;
        for (std::int64_t ax : *axes) at.insert(ax < 0 ? ax + i64(x.size()) : ax);
        Syms s;
        for (std::size_t j = 0; j < x.size(); ++j) {
          const bool reduced = at.empty() || at.count(i64(j)) != 0;
          if (!reduced) {
            s.push_back(x[j]);
          } else if (keep) {
            s.emplace_back();
          }
        }
        if (s.size() == rank) d = s;
      }
    } else if (out == 0 && op == "Expand") {
      const Syms tv = values(1);
      const Operand* xo = operand(0);
      const Values* target = literal(1);
      if (xo != nullptr && target != nullptr && tv.size() == target->size()) {
        for (std::size_t j = 0; j < rank; ++j) {
          std::vector<std::pair<std::string, std::int64_t>> c;
          if (rank - j <= x.size()) c.emplace_back(x[x.size() - (rank - j)], xo->shape[x.size() - (rank - j)]);
          if (rank - j <= tv.size()) {
            const std::size_t at = tv.size() - (rank - j);
            c.emplace_back(tv[at], static_cast<std::int64_t>((*target)[at]));
          }
          d[j] = broadcast_sym(c, y.shape[j]);
        }
      }
    } else if (out == 0 && op == "ConstantOfShape") {
      const Syms tv = values(0);
      if (tv.size() == rank) d = tv;
    } else if (out == 0 && op == "Range" && rank == 1) {
      const Values* start = literal(0);
      const Values* delta = literal(2);
      const Syms limit = values(1);
      const bool plain = start != nullptr && delta != nullptr && start->size() == 1 &&
                         delta->size() == 1 && (*start)[0] == 0 && (*delta)[0] == 1 &&
                         deps_of(values(0)).empty() && deps_of(values(2)).empty();
      d[0] = plain && limit.size() == 1 && named(limit[0]) ? limit[0] : unknown(all_deps);
    } else if (op == "Split" && x.size() == rank) {
      std::int64_t axis = a.i("axis", 0);
      if (axis < 0) axis += i64(rank);
      d = x;
      if (axis >= 0 && sz(axis) < rank) d[sz(axis)] = unknown(all_deps);
    }
    y.dim_syms = std::make_shared<const Syms>(std::move(d));
    // An arange: Range(0, n, 1), and what keeps its elements in order.
    const Operand* x0 = operand(0);
    const bool keeps_order = op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
                             op == "Flatten" || op == "Identity" || op == "Cast";
    y.arange = y.literal && ((op == "Range" && named(y.dim_syms->empty() ? "" : (*y.dim_syms)[0])) ||
                             (keeps_order && x0 != nullptr && x0->arange));

    // A literal from shapes: what its elements follow.
    if (!y.literal || !y.from_shape) continue;
    const std::size_t n = y.literal->values().size();
    Syms v = unknown_syms(n, all_deps);
    if (op == "Shape") {
      const std::int64_t r = i64(x.size());
      const auto clampi = [&](std::int64_t e) { return std::clamp(e < 0 ? e + r : e, std::int64_t{0}, r); };
      const std::int64_t start = clampi(a.i("start", 0)), end = clampi(a.i("end", r));
      if (end - start == i64(n)) v.assign(x.begin() + start, x.begin() + end);
    } else if (op == "Range" || op == "ConstantOfShape") {
      v.assign(n, "");  // the elements are fixed; their count is the dimension's
    } else if (op == "Identity" || op == "Cast" || op == "Unsqueeze" || op == "Squeeze" ||
               op == "Reshape" || op == "Flatten" || op == "Transpose") {
      const Syms s = values(0);
      if (s.size() == n && (op != "Transpose" || n <= 1 || deps_of(s).empty())) v = s;
    } else if (op == "Concat") {
      Syms s;
      for (int k = 0; k < node.input_size(); ++k) {
        const Syms e = values(k);
        s.insert(s.end(), e.begin(), e.end());
      }
      if (s.size() == n && y.shape.size() <= 1) v = s;
    } else if (op == "Gather") {
      const Operand* data = operand(0);
      const Values* idx = literal(1);
      const Syms s = values(0);
      // From a fixed position of data of a fixed length (an index from the
      // end of a symbolic length would move).
      if (data != nullptr && data->shape.size() == 1 && idx != nullptr && idx->size() == n &&
          s.size() == sz(data->shape[0]) && deps_of(dims(0)).empty() && deps_of(values(1)).empty()) {
        for (std::size_t k = 0; k < n; ++k) {
          const std::int64_t j = to_index((*idx)[k], data->shape[0]);
          if (j >= 0 && j < data->shape[0]) v[k] = s[sz(j)];
        }
      }
    } else if (op == "Slice") {
      const Operand* data = operand(0);
      const Values* starts = literal(1);
      const Values* ends = literal(2);
      const Values* steps = literal(4);
      const Syms s = values(0);
      if (data != nullptr && data->shape.size() == 1 && starts != nullptr && ends != nullptr &&
          starts->size() == 1 && ends->size() == 1 && s.size() == sz(data->shape[0]) &&
          deps_of(dims(0)).empty() && deps_of(values(1)).empty() && deps_of(values(2)).empty() &&
          deps_of(values(4)).empty()) {
        const std::int64_t len = data->shape[0];
        const double step = steps != nullptr && steps->size() == 1 ? (*steps)[0] : 1.0;
        const auto clampi = [&](double e) {
          const double c = e < 0 ? e + double(len) : e;
          return static_cast<std::int64_t>(std::clamp(c, step > 0 ? 0.0 : -1.0, step > 0 ? double(len) : double(len - 1)));
        };
        Syms picked;
        if (step != 0) {
          for (std::int64_t j = clampi((*starts)[0]), e = clampi((*ends)[0]); step > 0 ? j < e : j > e;
               j += static_cast<std::int64_t>(step)) {
            picked.push_back(s[sz(j)]);
          }
        }
        if (picked.size() == n) v = picked;
      }
    } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
      const Values* A = literal(0);
      const Values* B = literal(1);
      const Syms as = values(0), bs = values(1);
      const bool ok = A != nullptr && B != nullptr && as.size() == A->size() && bs.size() == B->size() &&
                      (A->size() == n || A->size() == 1) && (B->size() == n || B->size() == 1);
      for (std::size_t k = 0; ok && k < n; ++k) {
        const std::size_t i = A->size() == 1 ? 0 : k, j = B->size() == 1 ? 0 : k;
        const double b = (*B)[j], av = (*A)[i];
        const std::string &sa = as[i], &sb = bs[j];
        const bool b_identity = fixed(sb) && (((op == "Add" || op == "Sub") && b == 0) ||
                                              ((op == "Mul" || op == "Div") && b == 1));
        const bool a_identity = fixed(sa) && ((op == "Add" && av == 0) || (op == "Mul" && av == 1));
        std::set<std::string> deps;
        add_deps(sa, deps);
        add_deps(sb, deps);
        v[k] = b_identity ? sa : a_identity ? sb : unknown(deps);
      }
    }
    y.value_syms = std::make_shared<const Syms>(std::move(v));
  }
}

std::optional<Ints> Importer::traced_reshape_spec(const Operand& x, const Operand& target,
                                                  bool allow_zero) const {
  const Syms in = dim_syms(x);
  const Syms tv = value_syms(target);
  const Values& t = target.literal->values();
  // A target whose length (the output's rank) follows a symbol cannot.
  if (tv.size() != t.size() || !deps_of(dim_syms(target)).empty()) return std::nullopt;
  Ints spec;
  int rest = 0;
  for (std::size_t k = 0; k < t.size(); ++k) {
    const auto v = static_cast<std::int64_t>(t[k]);
    if (fixed(tv[k])) {
      if (v == -1) ++rest;
      spec.push_back(v == 0 && allow_zero ? std::int64_t{1} : v);
      continue;
    }
    const auto j = named(tv[k]) ? std::find(in.begin(), in.end(), tv[k]) : in.end();
    if (j != in.end()) {
      const auto from = static_cast<std::int64_t>(j - in.begin());
      spec.push_back(from == i64(k) ? 0 : -2 - from);
    } else {
      spec.push_back(-1);
      ++rest;
    }
  }
  if (rest > 1 || (allow_zero && std::find(t.begin(), t.end(), 0.0) != t.end())) return std::nullopt;
  return spec;
}

std::optional<std::pair<std::string, std::size_t>> Importer::symbolic_arange(const Operand& idx) const {
  if (!idx.literal || !idx.from_shape || !idx.arange || !symbolic_) return std::nullopt;
  const Syms dims = dim_syms(idx);
  const Syms vals = value_syms(idx);
  if (!deps_of(vals).empty()) return std::nullopt;
  std::optional<std::size_t> along;
  for (std::size_t j = 0; j < dims.size(); ++j) {
    if (fixed(dims[j]) && idx.shape[j] == 1) continue;
    if (along || !named(dims[j])) return std::nullopt;
    along = j;
  }
  if (!along) return std::nullopt;
  const Values& v = idx.literal->values();
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (v[k] != static_cast<double>(k)) return std::nullopt;
  }
  return std::make_pair(dims[*along], *along);
}

void Importer::fix_symbols_read_as_constants(const ::onnx::NodeProto& node) {
  // A fold's literal outputs carry the symbols on (their own readers decide).
  bool runtime_output = false;
  for (const std::string& name : node.output()) {
    const auto it = name.empty() ? tensors_.end() : tensors_.find(name);
    runtime_output = runtime_output || (it != tensors_.end() && !it->second.literal);
  }
  if (!runtime_output) return;
  for (int k = 0; k < node.input_size(); ++k) {
    if (node.input(k).empty() || (k < 64 && (symbolic_inputs_ >> k & 1) != 0)) continue;
    const auto it = tensors_.find(node.input(k));
    if (it == tensors_.end() || !it->second.literal || !it->second.from_shape) continue;
    Syms syms = dim_syms(it->second);
    const Syms v = value_syms(it->second);
    syms.insert(syms.end(), v.begin(), v.end());
    fix_symbols(syms, label() + " reads input " + std::to_string(k) + " ('" + node.input(k) +
                          "'), computed from the input shapes, as a constant");
  }
}

void Importer::fix_symbols(const std::vector<std::string>& syms, const std::string& reason) {
  for (const std::string& s : deps_of(syms)) fixed_symbols_.emplace(s, reason);
}

}  // namespace qfuse::onnx::impl
