#pragma once
// Internal: layout changes of 1-byte tensors between plain (N, C, spatial...)
// and channels last (N, spatial..., C), the reorders at the edges of int8
// layers. oneDNN 2.6's reorder moves u8 NCHW <-> NHWC at 7-8 GB/s on a Xeon
// core pair; a 16x16 SSE2 block transpose on the whole team is several times
// faster.

#include <cstdint>

namespace qfuse::plugin {

// dst[b][c][r] = src[b][r][c] for `batches` matrices of rows x cols bytes.
void transpose_bytes(const std::uint8_t* src, std::uint8_t* dst, std::int64_t batches,
                     std::int64_t rows, std::int64_t cols);

// One tensor's layout change, plain <-> channels last, of 1-byte elements.
struct ByteLayoutChange {
  std::int64_t batches = 0;
  std::int64_t channels = 0;
  std::int64_t spatial = 0;  // product of the spatial dims
  bool to_channels_last = true;

  void run(const void* src, void* dst) const {
    const auto* s = static_cast<const std::uint8_t*>(src);
    auto* d = static_cast<std::uint8_t*>(dst);
    if (to_channels_last) {
      transpose_bytes(s, d, batches, channels, spatial);
    } else {
      transpose_bytes(s, d, batches, spatial, channels);
    }
  }
};

}  // namespace qfuse::plugin
