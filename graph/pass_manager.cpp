#include "graph/pass_manager.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "graph/passes/passes.hpp"
#include "qfuse/error.hpp"

namespace qfuse::graph {

PassContext::PassContext(PassOptions options, LayerOracle oracle)
    : options_(options), oracle_(std::move(oracle)) {
  // The backend decides what runs as one primitive; the passes never guess.
  if (!oracle_) throw std::invalid_argument("PassContext: no layer oracle (the backend's check)");
}

std::optional<std::string> PassContext::check_layer(const Graph& g, const Node& node,
                                                    const Shape& output_shape) const {
  return oracle_(g, node, output_shape);
}

void PassContext::log(std::string_view pass, const std::string& message) {
  ++rewrites_;
  lines_.push_back(std::string(pass) + ": " + message);
  spdlog::info("{}: {}", pass, message);
}

void PassContext::reject(std::string_view pass, const std::string& node,
                         const std::string& reason) {
  Refusal r{std::string(pass), node, reason};
  if (std::find(round_refusals_.begin(), round_refusals_.end(), r) != round_refusals_.end()) return;
  spdlog::debug("{}: refused '{}': {}", pass, node, reason);
  round_refusals_.push_back(std::move(r));
}

void PassContext::begin_round() { round_refusals_.clear(); }

void PassContext::end_phase() {
  for (Refusal& r : round_refusals_) refusals_.push_back(std::move(r));
  round_refusals_.clear();
}

namespace {

// Canonical forms: what exporters write in several ways becomes one.
constexpr std::array<PassEntry, 7> kCanonicalize{{
    {"recognize_dequantize", recognize_dequantize},
    {"choose_code_type", choose_code_type},
    {"recognize_activations", recognize_activations},
    {"fold_batch_norm", fold_batch_norm},
    {"fuse_bias", fuse_bias},
    {"fold_into_fake_quantize_ranges", fold_into_fake_quantize_ranges},
    {"hoist_fake_quantize", hoist_fake_quantize},
}};
// Weights and biases: constant FakeQuantize -> s8 weights, constant bias
// expressions -> f32 constants; weight dequantizes stay for the layers.
constexpr std::array<PassEntry, 2> kLower{{
    {"quantize_weights", quantize_weights},
    {"lower_bias", lower_bias},
}};
constexpr std::array<PassEntry, 11> kFuse{{
    {"fold_mask_into_softmax", fold_mask_into_softmax},  // before a layer takes the Add
    {"split_fake_quantize", split_fake_quantize},
    {"lookup_elementwise", lookup_elementwise},
    {"fold_quantize_into_gelu", fold_quantize_into_gelu},  // before a layer takes the Gelu
    {"hoist_data_movement_above_dequantize", hoist_data_movement_above_dequantize},
    {"requantize_avg_pool", requantize_avg_pool},
    {"eliminate_dead_nodes", eliminate_dead_nodes},
    {"fuse_dynamic_quantized_layer", fuse_dynamic_quantized_layer},
    {"fuse_dequantize_into_layer", fuse_dequantize_into_layer},
    {"fuse_post_op_chain", fuse_post_op_chain},
    {"eliminate_dead_nodes", eliminate_dead_nodes},
}};
// What no layer took: quantizations as one pass each (inside the Softmax
// or LayerNorm before them where the backend can), constant expressions
// evaluated once, and scales and shifts after the f32 layers (whose weights
// are constant by now) folded into their weights and biases.
constexpr std::array<PassEntry, 11> kFold{{
    {"quantize_by_convert", quantize_by_convert},
    {"quantize_channel_gate", quantize_channel_gate},
    {"add_codes", add_codes},
    {"recognize_channel_shuffle", recognize_channel_shuffle},
    {"fold_quantize_into_softmax", fold_quantize_into_softmax},
    {"fold_quantize_into_layer_norm", fold_quantize_into_layer_norm},
    {"eliminate_dead_nodes", eliminate_dead_nodes},  // before folding what nobody reads
    {"fold_constants", fold_constants},
    {"fold_scale_into_layer", fold_scale_into_layer},
    {"fuse_bias", fuse_bias},
    {"eliminate_dead_nodes", eliminate_dead_nodes},
}};

}  // namespace

std::span<const PassPhase> fusion_phases() {
  static constexpr std::array<PassPhase, 4> kPhases{{
      {"canonicalize", kCanonicalize},
      {"lower", kLower},
      {"fuse", kFuse},
      {"fold", kFold},
  }};
  return kPhases;
}

bool run_passes(Graph& graph, PassContext& ctx, std::span<const PassEntry> passes) {
#ifndef NDEBUG
  const bool verify_each = true;
#else
  const bool verify_each = ctx.options().verify_each_pass;
#endif
  // Each application rewrites one match, so a pass runs until it reports no
  // change, and the table again until a whole round changes nothing. The
  // bounds only guard against a rewrite cycle; every rewrite keeps the graph
  // correct, so hitting one is reported and compilation goes on.
  bool changed_any = false;
  constexpr int kMaxRounds = 16;
  for (int round = 0; round < kMaxRounds; ++round) {
    ctx.begin_round();
    bool changed_round = false;
    for (const PassEntry& pass : passes) {
      std::size_t applied = 0;
      while (pass.run(graph, ctx)) {
        changed_round = true;
        if (verify_each) {
          try {
            verify(graph);
          } catch (const GraphError& e) {
            throw GraphError("after pass " + std::string(pass.name) + ": " + e.what());
          }
        }
        if (++applied > 4 * (graph.node_capacity() + 16)) {
          spdlog::warn("pass {} still rewrites after {} applications; stopping it", pass.name,
                       applied);
          break;
        }
      }
    }
    changed_any |= changed_round;
    if (!changed_round) {
      ctx.end_phase();
      return changed_any;
    }
  }
  ctx.end_phase();
  spdlog::warn("fusion passes still change the graph after {} rounds; stopping", kMaxRounds);
  return changed_any;
}

bool run_fusion_passes(Graph& graph, PassContext& ctx) {
  bool changed = false;
  for (const PassPhase& phase : fusion_phases()) changed |= run_passes(graph, ctx, phase.passes);
  return changed;
}

}  // namespace qfuse::graph
