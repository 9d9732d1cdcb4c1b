#pragma once
// Internal: how compile() stores each activation, plain or channels last.

#include <vector>

#include "graph/graph.hpp"
#include "plugin/layout.hpp"

namespace qfuse::plugin {

// By ValueId: the layout of each value's buffer (layout_plan.cpp says which
// values are stored channels last, and why).
std::vector<Layout> plan_layouts(const graph::Graph& g);

}  // namespace qfuse::plugin
