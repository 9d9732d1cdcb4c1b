#pragma once
// Returning freed heap memory to the system after a phase that allocates
// large transient buffers (import, compile).

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace qfuse {

// glibc keeps freed memory in the process (the dynamic mmap threshold grows
// after a large block is freed, so the next large buffers come from the heap
// and their holes stay resident): without this a later phase's peak counts
// the earlier phase's garbage. malloc_trim(0) gives every free page back. A
// no-op with other C libraries.
inline void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace qfuse
