#pragma once

#include <cstdint>

namespace qfuse::plugin {

// body(i) for i in [0, count): on the calling request's OpenMP team when
// `parallel`, else a plain loop on this thread. An OpenMP region that its if
// clause makes serial still costs about 0.25 us under libgomp (a team of one
// is made and joined), which is a quarter of a 1K-element op; the transformer
// encoders run dozens of such ops per inference.
template <typename Body>
void parallel_for(bool parallel, std::int64_t count, Body&& body) {
  if (!parallel || count < 2) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) body(i);
}

}  // namespace qfuse::plugin
