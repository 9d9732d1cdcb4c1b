#include "plugin/dnnl_utils.hpp"

#include <omp.h>

#include <unordered_map>
#include <vector>

namespace qfuse::plugin {

std::unique_lock<std::recursive_mutex> convolution_descriptor_lock() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

dnnl::memory::data_type to_dnnl(ElementType type) {
  switch (type) {
    case ElementType::f32: return dnnl::memory::data_type::f32;
    case ElementType::s8: return dnnl::memory::data_type::s8;
    case ElementType::u8: return dnnl::memory::data_type::u8;
    case ElementType::s32: return dnnl::memory::data_type::s32;
    case ElementType::s64: break;  // oneDNN 2.6 has no 64-bit integers: qfuse's loops read them
  }
  return dnnl::memory::data_type::undef;
}

dnnl::algorithm binary_algorithm(graph::OpKind kind) {
  using graph::OpKind;
  switch (kind) {
    case OpKind::Add: return dnnl::algorithm::binary_add;
    case OpKind::Subtract: return dnnl::algorithm::binary_sub;
    case OpKind::Multiply: return dnnl::algorithm::binary_mul;
    case OpKind::Divide: return dnnl::algorithm::binary_div;
    case OpKind::Minimum: return dnnl::algorithm::binary_min;
    case OpKind::Maximum: return dnnl::algorithm::binary_max;
    default: return dnnl::algorithm::undef;
  }
}

dnnl::memory::dims plain_strides(const dnnl::memory::dims& dims) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims, ElementType type) {
  return dnnl::memory::desc(dims, to_dnnl(type), plain_strides(dims));
}

dnnl::memory::desc permuted_desc(const Shape& stored, const std::vector<int>& perm,
                                 ElementType type) {
  const dnnl::memory::dims stored_dims(stored.begin(), stored.end());
  const dnnl::memory::dims stored_strides = plain_strides(stored_dims);
  dnnl::memory::dims dims(perm.size()), strides(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    dims[i] = stored_dims[static_cast<std::size_t>(perm[i])];
    strides[i] = stored_strides[static_cast<std::size_t>(perm[i])];
  }
  return dnnl::memory::desc(dims, to_dnnl(type), strides);
}

dnnl::memory::dims to_dnnl_dilations(const graph::Ints& dilations) {
  dnnl::memory::dims d;
  for (auto x : dilations) d.push_back(x - 1);
  return d;
}

Shape pad_rank(const Shape& shape, std::size_t rank) {
  Shape out(rank - shape.size(), 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

void reorder_at_compile(const dnnl::engine& engine, const dnnl::memory& src,
                        const dnnl::memory& dst) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{threads};
  dnnl::stream s(engine);
  dnnl::reorder(src, dst).execute(s, const_cast<dnnl::memory&>(src), const_cast<dnnl::memory&>(dst));
  s.wait();
}

Tensor held_constant(const dnnl::engine& engine, const dnnl::memory& held,
                     const dnnl::memory::desc& plain, const graph::Value& value) {
  Tensor t(value.type, value.shape);
  reorder_at_compile(engine, held, dnnl::memory(plain, engine, t.raw_data()));
  return t;
}

bool kernel_is_stride(const graph::DeconvAttrs& a, const Shape& weights) {
  if (a.groups != 1 || weights.size() != 4 || a.strides.size() != 2) return false;
  for (std::size_t i = 0; i < 2; ++i) {
    if (a.strides[i] != weights[2 + i] || (!a.dilations.empty() && a.dilations[i] != 1) ||
        (!a.pads_begin.empty() && a.pads_begin[i] != 0) ||
        (!a.pads_end.empty() && a.pads_end[i] != 0) ||
        (!a.output_padding.empty() && a.output_padding[i] != 0)) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<const dnnl::memory::desc> shared_desc(const dnnl::memory::desc& md) {
  // Buckets by a hash of the fields that tell descriptors apart; candidates
  // compared with oneDNN's equality. Expired entries go when their bucket
  // is next visited, and all of them every 4096 insertions.
  static std::mutex mutex;
  static std::unordered_map<std::size_t, std::vector<std::weak_ptr<const dnnl::memory::desc>>> pool;
  static std::size_t insertions = 0;
  const dnnl_memory_desc_t& d = md.data;
  std::size_t h = std::hash<int>{}(d.ndims) * 31 + static_cast<std::size_t>(d.data_type);
  for (int i = 0; i < d.ndims && i < DNNL_MAX_NDIMS; ++i) {
    h = h * 1000003u + static_cast<std::size_t>(d.dims[i]);
    if (d.format_kind == dnnl_blocked) h = h * 31u + static_cast<std::size_t>(d.format_desc.blocking.strides[i]);
  }
  h = h * 31u + static_cast<std::size_t>(d.format_kind);
  const std::lock_guard<std::mutex> lock(mutex);
  auto& bucket = pool[h];
  std::erase_if(bucket, [](const auto& w) { return w.expired(); });
  for (const auto& w : bucket) {
    if (auto held = w.lock(); held && *held == md) return held;
  }
  auto made = std::make_shared<const dnnl::memory::desc>(md);
  bucket.push_back(made);
  if (++insertions % 4096 == 0) {
    for (auto& [key, entries] : pool) {
      std::erase_if(entries, [](const auto& w) { return w.expired(); });
    }
    std::erase_if(pool, [](const auto& entry) { return entry.second.empty(); });
  }
  return made;
}

}  // namespace qfuse::plugin
