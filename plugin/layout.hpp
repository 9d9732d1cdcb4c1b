#pragma once
// Internal: how an activation buffer is stored.

#include <cstdint>

namespace qfuse::plugin {

// Dense C order, or channels last (N, spatial..., C), the layout oneDNN's
// int8 convolutions run fastest on.
enum class Layout : std::uint8_t { plain, channels_last };

}  // namespace qfuse::plugin
