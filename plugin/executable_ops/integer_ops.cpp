// Integer-only mode's own executable nodes (the fused layers' integer
// requantization lives in quantized_layer.cpp).

#include <sstream>

#include "plugin/executable_ops/integer_kernels.hpp"
#include "plugin/executable_ops/ops.hpp"

namespace qfuse::plugin {
namespace {

class IntegerAvgPoolOp final : public ExecutableOp {
 public:
  IntegerAvgPoolOp(const graph::Node& node, const IntegerAvgPool::Geometry& g, float out_scale,
                   float out_shift, double eta)
      : ExecutableOp(node), pool_(g, out_scale, out_shift, eta) {}

  void execute(ExecContext& ctx) const override {
    pool_.run(ctx.in(node().inputs[0]).raw_data(), ctx.out(node().outputs[0]).raw_data());
  }
  std::string implementation() const override { return "qfuse:integer_avg_pool"; }
  std::string post_ops() const override {
    std::ostringstream os;
    os << "integer: int32 window sum * fixed-point scale / count (up to "
       << pool_.max_multiplier_bits() << "-bit multiplier, relative error "
       << pool_.relative_error() << ")";
    return os.str();
  }

 private:
  IntegerAvgPool pool_;
};

}  // namespace

std::unique_ptr<ExecutableOp> make_integer_avg_pool(const graph::Graph& graph,
                                                    const graph::Node& node,
                                                    const LayoutOf& layout_of, double eta,
                                                    std::string& why) {
  const graph::Value& x = graph.value(node.inputs[0]);
  const graph::Value& y = graph.value(node.outputs[0]);
  const auto& a = node.attr<graph::PoolAttrs>();
  const bool int8 = [](ElementType t) { return t == ElementType::u8 || t == ElementType::s8; }(
                        x.type) &&
                    (y.type == ElementType::u8 || y.type == ElementType::s8);
  if (!int8) {
    why = "not an 8-bit pool";
    return nullptr;
  }
  if (x.shape.size() != 4) {
    why = "a pool over " + std::to_string(x.shape.size() - 2) + " spatial dims (2 supported)";
    return nullptr;
  }
  for (const std::int64_t d : a.dilations) {
    if (d != 1) {
      why = "a dilated window";
      return nullptr;
    }
  }
  // 1x1 outputs and inputs read the same either way.
  const bool spatial_in = x.shape[2] * x.shape[3] > 1, spatial_out = y.shape[2] * y.shape[3] > 1;
  if ((spatial_in && layout_of(node.inputs[0]) != Layout::channels_last) ||
      (spatial_out && layout_of(node.outputs[0]) != Layout::channels_last)) {
    why = "a plain (not channels-last) layout";
    return nullptr;
  }
  IntegerAvgPool::Geometry g;
  g.n = x.shape[0];
  g.c = x.shape[1];
  g.ih = x.shape[2];
  g.iw = x.shape[3];
  g.oh = y.shape[2];
  g.ow = y.shape[3];
  g.kh = a.kernel[0];
  g.kw = a.kernel[1];
  g.sh = a.strides[0];
  g.sw = a.strides[1];
  g.ph = a.pads_begin[0];
  g.pw = a.pads_begin[1];
  g.exclude_pad = a.exclude_pad;
  g.src_signed = x.type == ElementType::s8;
  g.dst_signed = y.type == ElementType::s8;
  return std::make_unique<IntegerAvgPoolOp>(node, g, a.out_scale, a.out_shift, eta);
}

}  // namespace qfuse::plugin
