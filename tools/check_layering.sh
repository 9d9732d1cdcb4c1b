#!/usr/bin/env bash
# The layering rules, checked on the sources:
#   composer/                pure algebra: no oneDNN, nothing from graph/ or plugin/
#   graph/                   nothing from plugin/ (the public headers are "qfuse/...")
#   plugin/include/qfuse/    only other public headers and the standard library
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
[[ $status -eq 0 ]] && echo "layering: composer, graph and the public headers keep their rules"
exit $status
