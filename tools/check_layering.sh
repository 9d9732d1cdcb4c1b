#!/usr/bin/env bash
# The layering rules, checked on the sources:
#   composer/                pure algebra: no oneDNN, nothing from graph/ or plugin/
#   graph/                   nothing from plugin/ (the public headers are "qfuse/...")
#   plugin/include/qfuse/    only other public headers and the standard library
#   graph/passes/            its headers (pattern.hpp, passes.hpp) are the passes' own:
#                            the plugin, tools, importers and exporter ask graph/node_queries.hpp
#   plugin/                  nothing from tools/ (the report library is plugin/report/)
#   graph/ builds            no plugin/ source and no oneDNN in graph/'s CMake files
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
check() {  # description, grep pattern, paths...
  local what=$1 pattern=$2
  shift 2
  local hits
  hits=$(grep -rnE "$pattern" "$@" || true)
  if [[ -n "$hits" ]]; then
    echo "layering: $what"
    echo "$hits"
    status=1
  fi
}
check "composer/ includes oneDNN, graph/ or plugin/" \
  '#include [<"](oneapi/dnnl|dnnl|graph/|plugin/)' composer
check "graph/ includes plugin/ internals" '#include "plugin/' graph
check "a public header includes a non-public header" \
  '#include "([^q]|q[^f]|qf[^u]|qfu[^s]|qfus[^e]|qfuse[^/])' plugin/include/qfuse
check "the passes' internals (graph/passes/) used outside graph/passes" \
  '#include "graph/passes/' --include='*.cpp' --include='*.hpp' plugin tools graph/onnx graph/openvino \
  composer bench
check "plugin/ includes tools/" '#include "tools/' plugin
check "graph/'s CMake builds plugin/ sources or links oneDNN" \
  '^[^#]*(plugin/[a-z_]+\.(cpp|hpp)|DNNL::)' --include=CMakeLists.txt graph composer
[[ $status -eq 0 ]] && echo "layering: composer, graph, the passes and the public headers keep their rules"
exit $status
