#include "qfuse/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>

#include "graph/node_queries.hpp"
#include "plugin/api_internal.hpp"

namespace qfuse {
namespace {

// How a value of the fused graph stands for one of the model's.
struct Match {
  std::string fused_name;
  TensorDiff diff;  // name, node, graph_output, quantized filled at build
  // u8/s8 codes of a FakeQuantize: real = (q - lo) * step[c] + ol[c] (or of
  // the model's codes in the other int8 type: step 1, ol its lowest code).
  bool codes = false;
  float lo = 0.0f;
  std::vector<float> step, ol;
  std::vector<float> quantum;  // per channel (size 1 or C); empty: no grid
  // The fused value is the model's transposed back (an operand a MatMul reads
  // by strides, AbsorbedTranspose): the model's = Transpose(fused, perm).
  std::vector<std::int64_t> perm;
  // Accumulated over runs: fused end to end (into `diff`), and each fused
  // layer fed the reference's values (into `isolated`).
  double sab = 0.0, saa = 0.0, sbb = 0.0, see = 0.0;
  std::int64_t equal = 0;
  IsolatedDiff isolated;
  std::int64_t isolated_equal = 0;
};

float at(const std::vector<float>& v, std::size_t c) { return v[v.size() == 1 ? 0 : c]; }

// The quantum of a FakeQuantize's output, per channel (axis 1).
std::optional<std::vector<float>> fq_step(const graph::Graph& g, const graph::Node& fq,
                                          const Shape& shape, std::vector<float>* ol_out) {
  if (shape.size() < 2) return std::nullopt;
  return graph::output_quantum(g, fq, shape, 1, ol_out);
}

// Transpose(x, perm) of any element type, by loops: element k of the result
// (its coordinates by division) comes from the input at those coordinates
// placed by perm.
Tensor permuted(const Tensor& x, const std::vector<std::int64_t>& perm) {
  const Shape& in = x.shape();
  const std::size_t rank = in.size();
  Shape out(rank), in_strides(rank, 1);
  for (std::size_t i = 0; i < rank; ++i) out[i] = in[static_cast<std::size_t>(perm[i])];
  for (std::size_t i = rank; i > 1; --i) in_strides[i - 2] = in_strides[i - 1] * in[i - 1];
  Tensor y(x.type(), out);
  const std::size_t bytes = element_size(x.type());
  const auto* src = static_cast<const std::uint8_t*>(x.raw_data());
  auto* dst = static_cast<std::uint8_t*>(y.raw_data());
  for (std::int64_t k = 0; k < y.size(); ++k) {
    std::int64_t rest = k, from = 0;
    for (std::size_t i = rank; i > 0; --i) {
      from += rest % out[i - 1] * in_strides[static_cast<std::size_t>(perm[i - 1])];
      rest /= out[i - 1];
    }
    std::memcpy(dst + static_cast<std::size_t>(k) * bytes,
                src + static_cast<std::size_t>(from) * bytes, bytes);
  }
  return y;
}

std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& perm) {
  std::vector<std::int64_t> inv(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    inv[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
  }
  return inv;
}

// Adds the difference of the fused value `t` (plain layout) from `ref` (the
// reference's tensor, real values) to the accumulators given; returns how
// many elements are equal (the same code on a grid, else exactly). With
// `products`, also adds the sums of products cosine and SNR are made of.
std::int64_t measure(const Match& m, const Tensor& fused, const Tensor& ref, std::int64_t& elements,
                     double& max_abs, std::int64_t (&lsb)[4], double& max_lsb, double* products) {
  const Tensor moved = m.perm.empty() ? Tensor() : permuted(fused, m.perm);
  const Tensor& t = m.perm.empty() ? fused : moved;
  const Shape& s = t.shape();
  const std::int64_t channels = s.size() > 1 ? s[1] : 1;
  const std::int64_t inner = s.size() > 2 ? element_count(Shape(s.begin() + 2, s.end())) : 1;
  std::int64_t equal = 0;
  for (std::int64_t i = 0; i < t.size(); ++i) {
    const auto c = static_cast<std::size_t>((i / inner) % channels);
    double a = t.as_float(i);
    if (m.codes) a = (a - m.lo) * at(m.step, c) + at(m.ol, c);
    const double b = ref.as_float(i);
    const double e = std::abs(a - b);
    max_abs = std::max(max_abs, e);
    if (products != nullptr) {
      products[0] += a * b;
      products[1] += a * a;
      products[2] += b * b;
      products[3] += e * e;
    }
    if (m.quantum.empty()) {
      equal += a == b ? 1 : 0;
    } else {
      // On the grid, equal means the same code (f32 rounding aside).
      const double q = at(m.quantum, c);
      const double l = q > 0 ? e / q : (e > 0 ? INFINITY : 0.0);
      max_lsb = std::max(max_lsb, l);
      const auto bucket = static_cast<std::size_t>(std::min(std::round(l), 3.0));
      ++lsb[bucket];
      equal += bucket == 0 ? 1 : 0;
    }
  }
  elements += t.size();
  return equal;
}

// Writes the reference's tensor `ref` into the fused value `t` (plain layout)
// in the fused graph's representation: codes of the FakeQuantize,
// q = clamp(round((ref - ol[c]) / step[c]) + lo), or the elements as they
// are. Returns false (and leaves `t` alone) when they cannot stand for it.
bool write_reference(const Match& m, const Tensor& ref, Tensor& t) {
  if (!m.perm.empty()) {
    Match plain = m;
    plain.perm.clear();
    // The fused codes where the reference cannot stand for them stay.
    Tensor moved = permuted(t, m.perm);
    if (!write_reference(plain, ref, moved)) return false;
    const Tensor back = permuted(moved, inverse(m.perm));
    std::memcpy(t.raw_data(), back.raw_data(), t.byte_size());
    return true;
  }
  if (ref.shape() != t.shape()) return false;
  if (!m.codes) {
    if (ref.type() != t.type()) return false;
    std::memcpy(t.raw_data(), ref.raw_data(), t.byte_size());
    return true;
  }
  if (t.type() != ElementType::u8 && t.type() != ElementType::s8) return false;
  const bool s8 = t.type() == ElementType::s8;
  const double lowest = s8 ? -128.0 : 0.0, highest = s8 ? 127.0 : 255.0;
  const Shape& s = t.shape();
  const std::int64_t channels = s.size() > 1 ? s[1] : 1;
  const std::int64_t inner = s.size() > 2 ? element_count(Shape(s.begin() + 2, s.end())) : 1;
  auto* u = static_cast<std::uint8_t*>(t.raw_data());
  auto* v = static_cast<std::int8_t*>(t.raw_data());
  for (std::int64_t i = 0; i < t.size(); ++i) {
    const auto c = static_cast<std::size_t>((i / inner) % channels);
    const double step = at(m.step, c);
    if (step == 0.0) continue;  // every code stands for ol[c]
    const double q = std::clamp(
        std::nearbyint((ref.as_float(i) - static_cast<double>(at(m.ol, c))) / step) + m.lo, lowest,
        highest);
    if (s8) {
      v[i] = static_cast<std::int8_t>(q);
    } else {
      u[i] = static_cast<std::uint8_t>(q);
    }
  }
  return true;
}

// Switches a request's observer and override off on the way out.
struct Unhook {
  InferRequest& request;
  ~Unhook() {
    request.set_value_observer({});
    set_value_override(request, {});
  }
};

}  // namespace

struct Comparison::Impl {
  CompiledModel fused, unfused;
  InferRequest fused_request, unfused_request;
  std::vector<Match> matches;                              // fused execution order
  std::unordered_map<std::string, std::size_t> by_fused;   // fused value name -> match
  std::unordered_map<std::string, std::size_t> by_model;   // model value name -> match
  std::vector<Tensor> reference;                           // by match: the unfused tensor
  std::vector<bool> present;                               // by match: reference[k] holds it
  std::map<std::string, std::string> tensor_aliases;       // the model file's names
  std::vector<Shape> model_shapes;                         // by match
  std::vector<ElementType> model_types;                    // by match

  void run_fused();

  Impl(CompiledModel f, CompiledModel u)
      : fused(std::move(f)), unfused(std::move(u)),
        fused_request(fused.create_infer_request()),
        unfused_request(unfused.create_infer_request()) {}
};

namespace {

CompileOptions with_fuse(CompileOptions o, bool fuse) {
  o.fuse = fuse;
  return o;
}

}  // namespace

Comparison::Comparison(const Model& model, const CompileOptions& fused_options)
    : Comparison(model, with_fuse(fused_options, true), with_fuse(fused_options, false)) {}

Comparison::Comparison(const Model& model, const CompileOptions& options,
                       const CompileOptions& reference)
    : Comparison(compile(model_graph(model), options), compile(model_graph(model), reference)) {}

Comparison::Comparison(CompiledModel fused, CompiledModel unfused) {
  impl_ = std::make_unique<Impl>(std::move(fused), std::move(unfused));
  const graph::Graph& fg = executed_graph(impl_->fused);
  const graph::Graph& ug = executed_graph(impl_->unfused);
  std::unordered_map<std::string, graph::ValueId> model_values;
  for (std::uint32_t i = 0; i < ug.value_count(); ++i) {
    const graph::Value& v = ug.value(graph::ValueId{i});
    if (v.producer.valid()) model_values.emplace(v.name, graph::ValueId{i});
  }
  // Operands MatMuls read by strides through a Transpose they took in: the
  // value the Transpose read stands for the model's value, transposed.
  std::unordered_map<std::string, const AbsorbedTranspose*> through;
  for (const AbsorbedTranspose& t : absorbed_transposes(impl_->fused)) through.emplace(t.input, &t);
  // The model's value the fused value `fv` stands for, read as `name` of
  // shape `shape`: its Match (model name in diff.name), or nullopt.
  const auto match = [&](const graph::Value& fv, const std::string& name,
                         const Shape& shape) -> std::optional<Match> {
    Match m;
    m.fused_name = fv.name;
    std::string model_name = name;
    auto it = model_values.find(model_name);
    if (it == model_values.end() || ug.value(it->second).type != fv.type) {
      // Codes a fused layer writes: "<FakeQuantize output>/to_u8" or "/to_s8";
      // or codes data movement carries where the model quantizes only after
      // it (the fused graph moved the quantize above the Transpose): those
      // of the FakeQuantize that alone reads the model's value.
      const auto same_name = it;
      for (const char* suffix : {"/to_u8", "/to_s8"}) {
        if (name.ends_with(suffix)) model_name = name.substr(0, name.size() - 6);
      }
      it = model_values.find(model_name);
      if (model_name == name && same_name != model_values.end() &&
          fv.type != ElementType::f32 && ug.value(same_name->second).type == ElementType::f32) {
        // A chain of them (FQa -> FQb, as PyTorch FX writes around a
        // Dropout) holds the last one's codes: the fused graph dropped or
        // moved the others.
        graph::ValueId v = same_name->second;
        for (;;) {
          const auto readers = ug.consumers(v);
          if (readers.size() != 1 || ug.node(readers[0]).kind != graph::OpKind::FakeQuantize ||
              ug.node(readers[0]).inputs[0] != v) {
            break;
          }
          v = ug.node(readers[0]).outputs[0];
        }
        if (v != same_name->second) {
          model_name = ug.value(v).name;
          it = model_values.find(model_name);
        }
      }
      if (it == model_values.end() || fv.type == ElementType::f32) return std::nullopt;
      m.lo = fv.type == ElementType::s8 ? -128.0f : 0.0f;
      if (const graph::Value& model_value = ug.value(it->second);
          model_value.type == ElementType::u8 || model_value.type == ElementType::s8) {
        // The model's own codes stored as the other int8 type (a Q/DQ pair's
        // codes shifted by 128): code = q - lo + the model type's lowest.
        m.step = {1.0f};
        m.ol = {model_value.type == ElementType::s8 ? -128.0f : 0.0f};
      } else {
        const graph::Node* fq = graph::producer_of(ug, it->second, graph::OpKind::FakeQuantize);
        if (fq == nullptr) return std::nullopt;
        auto step = fq_step(ug, *fq, shape, &m.ol);
        if (!step) return std::nullopt;
        m.step = *step;
      }
      m.codes = true;
    } else if (const graph::Node* fq =
                   graph::producer_of(ug, it->second, graph::OpKind::FakeQuantize)) {
      if (auto step = fq_step(ug, *fq, shape, nullptr)) m.quantum = *step;
    } else if (const graph::Node* dq =
                   graph::producer_of(ug, it->second, graph::OpKind::Dequantize)) {
      // A dequantized grid: its quantum is the scale (per tensor, or per
      // channel along axis 1).
      const auto& a = dq->attr<graph::DequantizeAttrs>();
      if (a.per_tensor() || (a.axis == 1 && shape.size() > 1)) m.quantum = a.scale;
    } else if (fv.type == ElementType::u8 || fv.type == ElementType::s8) {
      m.quantum = {1.0f};  // codes in both graphs
    }
    if (ug.value(it->second).shape != shape) return std::nullopt;
    m.diff.name = model_name;
    m.diff.graph_output = ug.is_graph_output(it->second);
    return m;
  };
  for (graph::NodeId id : fg.topological_order()) {
    const graph::Node& n = fg.node(id);
    for (graph::ValueId out : n.outputs) {
      const graph::Value& fv = fg.value(out);
      std::optional<Match> found = match(fv, fv.name, fv.shape);
      if (const auto t = through.find(fv.name); !found && t != through.end()) {
        Shape shape(t->second->perm.size());
        for (std::size_t i = 0; i < shape.size() && shape.size() == fv.shape.size(); ++i) {
          shape[i] = fv.shape[static_cast<std::size_t>(t->second->perm[i])];
        }
        found = match(fv, t->second->output, shape);
        if (found) found->perm = t->second->perm;
      }
      if (!found || impl_->by_model.count(found->diff.name)) continue;
      Match& m = *found;
      const std::string model_name = m.diff.name;
      const graph::ValueId model_value = model_values.at(model_name);
      if (m.codes) m.quantum = m.step;
      for (float& q : m.quantum) q = std::abs(q);
      m.diff.node = n.name;
      m.diff.quantized = !m.quantum.empty();
      impl_->by_fused.emplace(fv.name, impl_->matches.size());
      impl_->by_model.emplace(model_name, impl_->matches.size());
      impl_->model_shapes.push_back(ug.value(model_value).shape);
      impl_->model_types.push_back(ug.value(model_value).type);
      impl_->matches.push_back(std::move(m));
    }
  }
  impl_->reference.resize(impl_->matches.size());
  impl_->present.assign(impl_->matches.size(), false);
  impl_->tensor_aliases = ug.tensor_aliases();
}

Comparison::~Comparison() = default;
Comparison::Comparison(Comparison&&) noexcept = default;
Comparison& Comparison::operator=(Comparison&&) noexcept = default;

const CompiledModel& Comparison::fused() const { return impl_->fused; }
const CompiledModel& Comparison::unfused() const { return impl_->unfused; }

void Comparison::run(const std::map<std::string, Tensor>& inputs) {
  Impl& im = *impl_;
  for (const auto& [name, t] : inputs) {
    im.fused_request.set_input(name, t);
    im.unfused_request.set_input(name, t);
  }
  {
    const Unhook unhook{im.unfused_request};
    im.present.assign(im.matches.size(), false);
    im.unfused_request.set_value_observer([&im](const std::string& name, const Tensor& t) {
      if (const auto it = im.by_model.find(name); it != im.by_model.end()) {
        im.reference[it->second] = t;
        im.present[it->second] = true;
      }
    });
    im.unfused_request.infer();
  }
  im.run_fused();
}

std::size_t Comparison::run_against(const std::map<std::string, Tensor>& inputs,
                                    const std::map<std::string, Tensor>& reference) {
  Impl& im = *impl_;
  for (const auto& [name, t] : inputs) im.fused_request.set_input(name, t);
  im.present.assign(im.matches.size(), false);
  std::size_t used = 0;
  for (const auto& [file_name, t] : reference) {
    const auto alias = im.tensor_aliases.find(file_name);
    const auto it = im.by_model.find(alias == im.tensor_aliases.end() ? file_name : alias->second);
    if (it == im.by_model.end()) continue;
    const std::size_t k = it->second;
    if (t.shape() != im.model_shapes[k] || t.type() != im.model_types[k]) continue;
    im.reference[k] = t;
    im.present[k] = true;
    ++used;
  }
  im.run_fused();
  return used;
}

void Comparison::Impl::run_fused() {
  Impl& im = *this;
  // Propagated: the fused graph end to end.
  {
    const Unhook unhook{im.fused_request};
    im.fused_request.set_value_observer([&im](const std::string& name, const Tensor& t) {
      const auto it = im.by_fused.find(name);
      if (it == im.by_fused.end() || !im.present[it->second]) return;
      Match& m = im.matches[it->second];
      double products[4] = {0.0, 0.0, 0.0, 0.0};
      m.equal += measure(m, t, im.reference[it->second], m.diff.elements, m.diff.max_abs, m.diff.lsb,
                         m.diff.max_lsb, products);
      m.sab += products[0];
      m.saa += products[1];
      m.sbb += products[2];
      m.see += products[3];
    });
    im.fused_request.infer();
  }
  // Isolated: the same, each compared value then replaced by the reference's
  // (the observer sees what the fused node computed, the override replaces it
  // before any later node reads it).
  {
    const Unhook unhook{im.fused_request};
    im.fused_request.set_value_observer([&im](const std::string& name, const Tensor& t) {
      const auto it = im.by_fused.find(name);
      if (it == im.by_fused.end() || !im.present[it->second]) return;
      Match& m = im.matches[it->second];
      IsolatedDiff& d = m.isolated;
      m.isolated_equal +=
          measure(m, t, im.reference[it->second], d.elements, d.max_abs, d.lsb, d.max_lsb, nullptr);
    });
    set_value_override(im.fused_request, [&im](const std::string& name, Tensor& t) {
      const auto it = im.by_fused.find(name);
      if (it == im.by_fused.end() || !im.present[it->second]) return false;
      return write_reference(im.matches[it->second], im.reference[it->second], t);
    });
    im.fused_request.infer();
  }
}

namespace {

// The shares, cosine and SNR from the counts and sums.
void finish(TensorDiff& d) {
  const DiffSums& s = d.sums;
  d.equal_share = d.elements > 0 ? static_cast<double>(s.equal) / static_cast<double>(d.elements) : 0.0;
  d.cosine = s.fused_sq > 0 && s.ref_sq > 0 ? s.fused_ref / std::sqrt(s.fused_sq * s.ref_sq)
                                            : (s.fused_sq == s.ref_sq ? 1.0 : 0.0);
  d.snr_db = s.diff_sq > 0 ? 10.0 * std::log10(s.ref_sq / s.diff_sq)
                           : std::numeric_limits<double>::infinity();
  d.isolated.equal_share = d.isolated.elements > 0 ? static_cast<double>(s.isolated_equal) /
                                                         static_cast<double>(d.isolated.elements)
                                                   : 0.0;
}

}  // namespace

std::vector<TensorDiff> Comparison::tensors() const {
  std::vector<TensorDiff> out;
  for (const Match& m : impl_->matches) {
    TensorDiff d = m.diff;
    if (d.elements == 0) continue;
    d.isolated = m.isolated;
    d.sums = {.equal = m.equal, .isolated_equal = m.isolated_equal, .fused_ref = m.sab,
              .fused_sq = m.saa, .ref_sq = m.sbb, .diff_sq = m.see};
    finish(d);
    out.push_back(std::move(d));
  }
  return out;
}

void Comparison::clear() {
  for (Match& m : impl_->matches) {
    const TensorDiff kept = m.diff;
    m.diff = {.name = kept.name, .node = kept.node, .graph_output = kept.graph_output,
              .quantized = kept.quantized};
    m.sab = m.saa = m.sbb = m.see = 0.0;
    m.equal = 0;
    m.isolated = {};
    m.isolated_equal = 0;
  }
}

void merge(std::vector<TensorDiff>& into, const std::vector<TensorDiff>& more) {
  std::unordered_map<std::string, std::size_t> at;
  for (std::size_t i = 0; i < into.size(); ++i) at.emplace(into[i].name, i);
  for (const TensorDiff& b : more) {
    const auto it = at.find(b.name);
    if (it == at.end()) {
      at.emplace(b.name, into.size());
      into.push_back(b);
      continue;
    }
    TensorDiff& a = into[it->second];
    a.elements += b.elements;
    a.max_abs = std::max(a.max_abs, b.max_abs);
    a.max_lsb = std::max(a.max_lsb, b.max_lsb);
    IsolatedDiff& ai = a.isolated;
    const IsolatedDiff& bi = b.isolated;
    ai.elements += bi.elements;
    ai.max_abs = std::max(ai.max_abs, bi.max_abs);
    ai.max_lsb = std::max(ai.max_lsb, bi.max_lsb);
    for (int k = 0; k < 4; ++k) {
      a.lsb[k] += b.lsb[k];
      ai.lsb[k] += bi.lsb[k];
    }
    DiffSums& s = a.sums;
    s.equal += b.sums.equal;
    s.isolated_equal += b.sums.isolated_equal;
    s.fused_ref += b.sums.fused_ref;
    s.fused_sq += b.sums.fused_sq;
    s.ref_sq += b.sums.ref_sq;
    s.diff_sq += b.sums.diff_sq;
    finish(a);
  }
}

std::vector<TensorDiff> compare(const Model& model, const std::map<std::string, Tensor>& inputs,
                                const CompileOptions& fused_options) {
  Comparison c(model, fused_options);
  c.run(inputs);
  return c.tensors();
}

}  // namespace qfuse
