#pragma once
// Turns a fuzzer's bytes into bounded choices. Reading past the end gives
// zeros, so every input, however short, describes one case.
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace qfuse::fuzz {

class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint64_t bits(int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | (pos_ < size_ ? data_[pos_++] : 0u);
    return v;
  }
  // Uniform enough in [lo, hi] for a fuzzer.
  template <class T>
  T in_range(T lo, T hi) {
    const auto span = static_cast<std::uint64_t>(static_cast<std::int64_t>(hi) -
                                                 static_cast<std::int64_t>(lo));
    const int bytes = span < 256 ? 1 : span < 65536 ? 2 : 4;
    return static_cast<T>(static_cast<std::int64_t>(lo) +
                          static_cast<std::int64_t>(bits(bytes) % (span + 1)));
  }
  bool flag() { return (bits(1) & 1u) != 0; }
  float real(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(bits(2)) / 65535.0f;
  }
  template <class T>
  T pick(std::initializer_list<T> options) {
    return options.begin()[in_range<std::size_t>(0, options.size() - 1)];
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace qfuse::fuzz
