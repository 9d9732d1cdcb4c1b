#include "composer/chain_key.hpp"

#include <cstring>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace qfuse::composer {

namespace {

// Every field of the chain and the options as bytes: equal keys, equal inputs.
class Key {
 public:
  template <typename T>
    requires std::is_trivially_copyable_v<T>
  void put(const T& v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    s_.append(bytes, sizeof(T));
  }
  void put(const std::vector<float>& v) {
    put(v.size());
    if (!v.empty()) s_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

}  // namespace

std::string chain_key(const PostOpChain& chain, const ComposeOptions& options) {
  Key k;
  k.put(options.allow_residual_round_drop);
  k.put(options.fixed_point_eta);
  k.put(chain.channels);
  k.put(chain.dst_type);
  k.put(chain.anchor);
  k.put(chain.steps.size());
  for (const Step& step : chain.steps) {
    k.put(step.index());
    std::visit(
        [&k](const auto& s) {
          using T = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<T, Scale> || std::is_same_v<T, Shift>) {
            k.put(s.values);
          } else if constexpr (std::is_same_v<T, Clip>) {
            k.put(s.lo);
            k.put(s.hi);
          } else if constexpr (std::is_same_v<T, Eltwise>) {
            k.put(s.alg);
            k.put(s.alpha);
            k.put(s.beta);
          } else if constexpr (std::is_same_v<T, Sum>) {
            k.put(s.input);
            k.put(s.scale);
            k.put(s.data_type);
          } else if constexpr (std::is_same_v<T, Binary>) {
            k.put(s.alg);
            k.put(s.input);
            k.put(s.broadcast);
            k.put(s.data_type);
          } else if constexpr (std::is_same_v<T, FakeQuantize>) {
            k.put(s.input_low);
            k.put(s.input_high);
            k.put(s.output_low);
            k.put(s.output_high);
            k.put(s.levels);
          } else if constexpr (std::is_same_v<T, Quantize>) {
            k.put(s.scale);
            k.put(s.zero_point);
            k.put(s.lo);
            k.put(s.hi);
          } else {
            static_assert(std::is_same_v<T, Round>, "a step without its fields in the key");
          }
        },
        step);
  }
  return k.take();
}

}  // namespace qfuse::composer
