#!/usr/bin/env bash
# Lists the dynamic symbols each shared library defines and fails on any that
# is not qfuse's API: C++ symbols in namespace qfuse (internal ones are
# compiled hidden, so none of qfuse::graph / composer / plugin / onnx /
# openvino may appear),
# their typeinfo and vtables, and the C API's qfuse_* functions.
set -euo pipefail
status=0
for lib in "$@"; do
  all=$(nm -D --defined-only "$lib" | awk '{print $3}')
  count=$(printf '%s\n' "$all" | grep -c . || true)
  bad=$(printf '%s\n' "$all" | grep -v -E '^(_ZN5qfuse|_ZNK5qfuse|_ZT[ISV]N5qfuse|_ZN5qfuse|qfuse_|_ZNSt6vectorIN5qfuse)' \
        | grep -v -E '^(_Z[A-Za-z0-9_]*5qfuse6Tensor)' || true)
  internal=$(printf '%s\n' "$all" | c++filt | grep -E 'qfuse::(graph|composer|plugin|onnx|openvino|tools)::' || true)
  if [[ -n "$bad" || -n "$internal" ]]; then
    echo "$lib exports symbols outside the API:"
    printf '%s\n' "$bad" "$internal" | grep . | c++filt | head -40
    status=1
  else
    echo "$lib: $count symbols, all API"
  fi
done
exit $status
