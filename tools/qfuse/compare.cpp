// qfuse compare: the fused and the unfused path on the same inputs, tensor by
// tensor (qfuse::Comparison): every graph output and every activation a fused
// layer writes, with differences in quanta of its FakeQuantize, equal share,
// cosine and SNR, propagated (fused end to end) and isolated (each fused
// layer fed the reference's values: its own error); as a table, JSON and a
// self-contained HTML page with an SVG plot of the error per tensor in
// execution order.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "plugin/api_internal.hpp"
#ifdef QFUSE_HAVE_ONNX
#include "graph/onnx/importer.hpp"
#endif
#include "plugin/report/compare_report.hpp"
#include "tools/common/fashion_mnist.hpp"
#include "tools/common/models.hpp"
#include "tools/common/npy.hpp"
#include "tools/qfuse/cli.hpp"

namespace qfuse::cli {
namespace {

namespace fs = std::filesystem;

// qfuse compare MODEL --inputs DIR --reference DIR: fused and unfused, each
// against the tensors in the reference directory (by the model's tensor names).
int compare_with_reference(const Args& args, const std::string& model_name,
                           const CompileOptions& options, const std::string& reference_dir) {
  const auto input_dir = args.value("--inputs");
  if (!input_dir) throw UsageError("compare --reference needs the --inputs the reference ran on");
  const Model model = make_model(load_model(model_name, shape_bindings(args, model_name)));
  std::map<std::string, Tensor> inputs, reference;
  for (const TensorInfo& in : model.inputs()) {
    inputs[in.name] = tools::read_npy(tools::npy_path(*input_dir, in.name));
  }
  if (!fs::is_directory(reference_dir)) {
    throw IoError("compare --reference " + reference_dir + ": not a directory");
  }
  for (const auto& e : fs::directory_iterator(reference_dir)) {
    if (e.path().extension() != ".npy") continue;
    reference[tools::tensor_name_of(e.path().stem().string())] = tools::read_npy(e.path());
  }
  CompileOptions unfused = options;
  unfused.fuse = false;
  Comparison fused_cmp(model, options);
  Comparison unfused_cmp(model, unfused, unfused);
  const std::size_t used = fused_cmp.run_against(inputs, reference);
  unfused_cmp.run_against(inputs, reference);
  std::cout << "model " << model_name << ": " << reference.size() << " reference tensors in "
            << reference_dir << ", " << used << " of them compared; inputs from " << *input_dir
            << "\n\nfused against the reference:\n";
  const std::vector<TensorDiff> fused = fused_cmp.tensors();
  report::print_compare_table(std::cout, fused);
  std::cout << "\nunfused against the reference:\n";
  const std::vector<TensorDiff> unfused_diffs = unfused_cmp.tensors();
  report::print_compare_table(std::cout, unfused_diffs);
  const std::string desc = "the inputs in " + *input_dir + "; reference " + reference_dir;
  if (auto path = args.value("--json")) {
    auto out = report::create_report_file(*path);
    report::write_compare_json(out, model_name, desc, fused, fused_cmp.fused().layers(), &unfused_diffs);
  }
  return 0;
}

}  // namespace

int compare_command(const Args& args) {
  const std::string model_name = args.positional().empty() ? "default" : args.positional()[0];
  CompileOptions options;
  options.allow_residual_round_drop = args.flag("--allow-residual-round-drop");
  if (auto dir = args.value("--reference")) return compare_with_reference(args, model_name, options, *dir);
  std::string inputs_desc;
  std::optional<Comparison> cmp;
  // --integer-only: the integer-only mode against the unfused path and
  // against the float-scale fused path, on the same inputs.
  const bool integer = args.flag("--integer-only");
  std::optional<Comparison> int_vs_unfused, int_vs_float;
  CompileOptions integer_options = options;
  integer_options.integer_only = true;
  const auto make = [&](const Model& model) {
    cmp.emplace(model, options);
    if (integer) {
      int_vs_unfused.emplace(model, integer_options);
      int_vs_float.emplace(model, integer_options, options);
    }
  };
  const auto run = [&](const std::map<std::string, Tensor>& inputs) {
    cmp->run(inputs);
    if (integer) {
      int_vs_unfused->run(inputs);
      int_vs_float->run(inputs);
    }
  };
  const auto bundled = tools::fashion_mnist::find_bundled_model(model_name);
  if (bundled && !args.value("--inputs") && !args.value("--random") && !args.flag("--shape")) {
#ifdef QFUSE_HAVE_ONNX
    // The bundled Fashion-MNIST models: the test images, 100 per inference.
    namespace fm = tools::fashion_mnist;
    const int images = std::clamp(args.int_value("--images", 10000), 100, 10000) / 100 * 100;
    const fm::TestSet set = fm::load_test_set();
    const bool noisy = bundled->task == fm::Task::denoise;
    const Tensor x = noisy ? fm::noisy(set.images) : set.images;
    make(make_model(onnx::import_file(bundled->onnx_file(), {.input_shapes = {{"input", {100, 1, 28, 28}}}})));
    for (int first = 0; first < images; first += 100) {
      Tensor batch(ElementType::f32, {100, 1, 28, 28});
      std::copy_n(x.data<float>().data() + static_cast<std::size_t>(first) * 784, 100 * 784,
                  batch.data<float>().data());
      run({{"input", batch}});
    }
    inputs_desc = std::to_string(images) + " Fashion-MNIST test images" +
                  (noisy ? " with noise" : "");
#endif
  } else if (integer) {
    make(make_model(load_model(model_name, shape_bindings(args, model_name))));
  } else {
    // Fused and unfused each compiled from the model's files, so that the
    // compiled-model cache (--cache-dir, QFUSE_CACHE_DIR) serves both.
    CompileOptions fused = options, unfused = options;
    fused.cache_dir = unfused.cache_dir = args.value("--cache-dir").value_or("");
    fused.fuse = true;
    unfused.fuse = false;
    const std::map<std::string, Shape> shapes = shape_bindings(args, model_name);
    cmp.emplace(compile_model(model_name, shapes, fused),
                compile_model(model_name, shapes, unfused));
    for (const auto& [what, model] :
         {std::pair{"fused", &cmp->fused()}, {"unfused", &cmp->unfused()}}) {
      if (!model->compile_times().cache.empty()) {
        std::cout << "cache (" << what << "): " << model->compile_times().cache << '\n';
      }
    }
  }
  if (!bundled || args.value("--inputs") || args.value("--random") || args.flag("--shape")) {
    std::map<std::string, Tensor> inputs;
    if (auto dir = args.value("--inputs")) {
      for (const std::string& name : cmp->unfused().input_names()) {
        inputs[name] = tools::read_npy(tools::npy_path(*dir, name));
      }
      inputs_desc = "the inputs in " + *dir;
    } else {
      const auto seed = static_cast<unsigned>(args.int_value("--random", 0));
      const std::vector<Tensor> random = tools::random_inputs(executed_graph(cmp->unfused()), seed);
      for (std::size_t i = 0; i < random.size(); ++i) inputs[cmp->unfused().input_names()[i]] = random[i];
      inputs_desc = "random inputs (seed " + std::to_string(seed) + ")";
    }
    run(inputs);
  }
  const std::vector<TensorDiff> tensors = cmp->tensors();
  const std::vector<LayerInfo> layers = cmp->fused().layers();
  std::size_t int8_layers = 0;
  for (const LayerInfo& l : layers) int8_layers += is_int8_layer_op(l.op) ? 1 : 0;
  std::cout << "model " << model_name << ": fused " << layers.size() << " nodes (" << int8_layers
            << " int8 layers), unfused " << cmp->unfused().layers().size() << " nodes; "
            << inputs_desc << (options.allow_residual_round_drop ? "; allow_residual_round_drop" : "")
            << "\n";
  report::print_compare_table(std::cout, tensors);
  if (integer) report::print_integer_table(std::cout, *int_vs_unfused, tensors, int_vs_float->tensors());
  bool within_one_lsb = true;
  for (const TensorDiff& t : tensors) {
    if (t.graph_output && t.quantized && (t.lsb[2] + t.lsb[3]) > 0) within_one_lsb = false;
  }
  if (auto path = args.value("--json")) {
    auto out = report::create_report_file(*path);
    report::write_compare_json(out, model_name, inputs_desc, tensors, layers);
  }
  if (auto path = args.value("--html")) {
    auto out = report::create_report_file(*path);
    report::write_compare_html(out, model_name, inputs_desc, tensors, layers);
    std::cout << "report: " << *path << '\n';
  }
  return within_one_lsb ? 0 : 3;
}

}  // namespace qfuse::cli
