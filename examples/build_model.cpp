// A quantized convolution built in code: input quantized to u8, weights to
// s8, bias, relu, output quantized. compile() fuses it into one int8
// primitive; the program prints the plan and compares with the f32 reference.
#include <cmath>
#include <cstdio>
#include <vector>

#include <qfuse/qfuse.hpp>

int main() {
  const int c = 16, o = 32, h = 14, w = 14;
  std::vector<float> weights(static_cast<std::size_t>(o * c * 9)), bias(static_cast<std::size_t>(o));
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(static_cast<float>(i)) * 0.2f;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * static_cast<float>(i);

  qfuse::ModelBuilder b;
  const auto x = b.input("x", {1, c, h, w});
  const auto xq = b.fake_quantize(x, 0.0f, 1.0f, 0.0f, 1.0f, 256);
  const auto wt = b.constant("w", qfuse::Tensor::from_vector<float>({o, c, 3, 3}, weights));
  const auto wq = b.fake_quantize(wt, -0.2f, 0.2f, -0.2f, 0.2f, 255);
  const auto bt = b.constant("b", qfuse::Tensor::from_vector<float>({o}, bias));
  const auto y = b.convolution(xq, wq, bt, {.pads_begin = {1, 1}, .pads_end = {1, 1}});
  b.output(b.fake_quantize(b.unary(qfuse::UnaryOp::relu, y), 0.0f, 4.0f, 0.0f, 4.0f, 256, "y"));
  const qfuse::Model model = b.build();

  qfuse::Tensor input(qfuse::ElementType::f32, {1, c, h, w});
  for (std::int64_t i = 0; i < input.size(); ++i) {
    input.data<float>()[static_cast<std::size_t>(i)] = static_cast<float>(i % 97) / 97.0f;
  }
  double worst = 0.0;
  std::vector<float> reference;
  for (bool fuse : {false, true}) {
    const qfuse::CompiledModel compiled = qfuse::compile(model, {.fuse = fuse});
    qfuse::InferRequest request = compiled.create_infer_request();
    request.set_input("x", input);
    request.infer();
    const qfuse::Tensor& out = request.output("y");
    if (!fuse) {
      reference.assign(out.data<float>().begin(), out.data<float>().end());
      continue;
    }
    for (const qfuse::LayerInfo& l : compiled.layers()) {
      std::printf("%s %s %s: %s\n", l.node.c_str(), l.precision.c_str(), l.implementation.c_str(),
                  l.post_ops.c_str());
    }
    for (std::size_t i = 0; i < reference.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(out.data<float>()[i]) - reference[i]));
    }
  }
  const double quantum = 4.0 / 255.0;
  std::printf("fused vs unfused: max difference %.3g LSB\n", worst / quantum);
  return worst <= quantum * 1.001 ? 0 : 1;
}
