// Imports an ONNX model, compiles it, runs one batch with the host's own
// buffers bound (no copies) and prints what each layer became.
#include <cstdio>
#include <exception>
#include <vector>

#include <qfuse/onnx.hpp>
#include <qfuse/qfuse.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx\n", argv[0]);
    return 2;
  }
  try {
    qfuse::OnnxOptions options;
    for (const qfuse::OnnxInput& in : qfuse::list_onnx_inputs(argv[1])) {
      qfuse::Shape shape;
      for (std::int64_t d : in.dims) shape.push_back(d < 0 ? 1 : d);  // batch 1
      options.input_shapes[in.name] = shape;
    }
    const qfuse::CompiledModel model = qfuse::compile(qfuse::import_onnx(argv[1], options));
    for (const qfuse::LayerInfo& l : model.layers()) {
      std::printf("%-32s %-24s %-10s %-28s %zu post-ops\n", l.node.c_str(), l.op.c_str(),
                  l.precision.c_str(), l.implementation.c_str(), l.post_op_list.size());
    }
    qfuse::InferRequest request = model.create_infer_request();
    std::vector<std::vector<float>> inputs, outputs;
    for (const qfuse::TensorInfo& in : model.inputs()) {
      std::vector<float>& x = inputs.emplace_back(static_cast<std::size_t>(qfuse::element_count(in.shape)));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 255) / 255.0f;
      request.bind_input(in.name, in.type, in.shape, x.data());
    }
    for (const qfuse::TensorInfo& out : model.outputs()) {
      std::vector<float>& y = outputs.emplace_back(static_cast<std::size_t>(qfuse::element_count(out.shape)));
      request.bind_output(out.name, out.type, out.shape, y.data());
    }
    request.infer();
    const std::vector<float>& y = outputs.at(0);
    std::size_t best = 0;
    for (std::size_t i = 1; i < y.size(); ++i) best = y[i] > y[best] ? i : best;
    std::printf("output '%s': %zu values, argmax %zu (%.4f)\n", model.outputs()[0].name.c_str(),
                y.size(), best, static_cast<double>(y[best]));
  } catch (const qfuse::Error& e) {
    std::fprintf(stderr, "qfuse: %s\n", e.what());
    return 1;
  }
  return 0;
}
