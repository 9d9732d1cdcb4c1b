// qfuse: run, benchmark and inspect models from the command line.

#include <iostream>

#include "qfuse/error.hpp"
#include "tools/qfuse/cli.hpp"

namespace qfuse::cli {
namespace {

constexpr const char* kCacheDirHelp =
    "compiled-model cache: a model file compiled before with the same options is loaded from "
    "DIR without importing it again (default: QFUSE_CACHE_DIR, else none)";

constexpr const char* kShapeHelp =
    "bind an ONNX input's symbolic dimensions, e.g. image=1x3x320x320 (comma-separated for "
    "several inputs)";

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"run",
       "qfuse run [MODEL] [--inputs DIR] [--outputs DIR] [--unfused | --integer-only] [--attention-as-three-ops] [--threads N] [--repeat N] "
       "[--shape NAME=DIMS] [--cache-dir DIR]",
       "run a model once (plus --repeat timed runs) and print its outputs and timing",
       {{"--inputs", true, "directory of <input>.npy files (default: deterministic random)"},
        {"--outputs", true, "directory to write <output>.npy files to (names percent-encoded, "
                            "/ as %2F)"},
        {"--unfused", false, "run every node alone in f32 (the reference)"},
        {"--attention-as-three-ops", false,
         "run attention's scores matmul, Softmax and second matmul as three ops (fused mode; "
         "default: one Attention op)"},
        {"--threads", true, "OpenMP threads (default: all cores)"},
        {"--integer-only", false, "requantize fused layers and int8 average pools in integer arithmetic"},
        {"--repeat", true, "timed runs after the first (default 10)"},
        {"--cache-dir", true, kCacheDirHelp},
        {"--shape", true, kShapeHelp},
        {"--html", true, "bundled Fashion-MNIST models: where to write the per-layer report "
                         "(default: build/reports/qfuse_report_<model>.html for the build tree's CLI, "
                         "else the temporary directory)"}},
       1,
       run_command},
      {"bench",
       "qfuse bench [MODEL] [--unfused | --integer-only] [--attention-as-three-ops] [--threads N] [--requests R] [--time S] [--json F] "
       "[--per-layer] [--isa ISA] [--shape NAME=DIMS] [--cache-dir DIR] "
       "[--shapes NAME=DIMS,NAME=DIMS... [--against-fixed]]",
       "measure latency (median) and throughput with R parallel requests",
       {{"--unfused", false, "benchmark the unfused reference path"},
        {"--attention-as-three-ops", false,
         "run attention's scores matmul, Softmax and second matmul as three ops (fused mode; "
         "default: one Attention op)"},
        {"--integer-only", false, "requantize fused layers and int8 average pools in integer arithmetic"},
        {"--threads", true, "threads in total (default: all cores), split across requests"},
        {"--requests", true, "parallel inference requests (default 1)"},
        {"--time", true, "seconds to run (default 3)"},
        {"--json", true, "write the results as JSON to this file"},
        {"--per-layer", false,
         "time every executed node (request 0) and print them sorted, with GOPS for layers"},
        {"--isa", true,
         "cap oneDNN's instruction set: avx512_core_amx, avx512_core_vnni, avx512_core, avx2, ... "
         "(default: all the machine has)"},
        {"--shape", true, kShapeHelp},
        {"--cache-dir", true, kCacheDirHelp},
        {"--shapes", true,
         "sweep input shapes in one process: x=1x3x224x224,x=8x3x224x224 (a name given again "
         "starts the next shapes); the model is compiled at the first and, from it, at each "
         "other (weights prepared once), every one kept; prints each one's compile, first "
         "inference, median latency and the peak RSS so far"},
        {"--against-fixed", false,
         "with --shapes: then time each shape against the model compiled for it alone"}},
       1,
       bench_command},
      {"compare",
       "qfuse compare [MODEL] [--inputs DIR | --random SEED | --images N] [--json F] [--html F] "
       "[--allow-residual-round-drop] [--integer-only] [--reference DIR] [--shape NAME=DIMS] "
       "[--cache-dir DIR]",
       "run fused and unfused on the same inputs; report each output and each fused layer's "
       "output in LSB, equal share, cosine and SNR, propagated and isolated (each fused layer "
       "fed the unfused path's inputs) (exit 3 if an output is off by > 1 LSB)",
       {{"--inputs", true, "directory of <input>.npy files"},
        {"--random", true, "seed of the random inputs (default 0; bundled Fashion-MNIST models: "
                           "the test images unless --inputs or --random)"},
        {"--images", true, "bundled Fashion-MNIST models: how many test images (default 10000)"},
        {"--allow-residual-round-drop", false, "fuse with that numerics-changing option"},
        {"--integer-only", false, "requantize fused layers and int8 average pools in integer arithmetic"},
        {"--json", true, "write the report as JSON"},
        {"--html", true, "write the report as an HTML page"},
        {"--reference", true,
         "compare fused and unfused with tensors computed elsewhere on the --inputs (ONNX "
         "Runtime's: bench/peers/against_ort.py): DIR holds <tensor>.npy by the model file's "
         "tensor names, percent-encoded (/ as %2F)"},
        {"--shape", true, kShapeHelp},
        {"--cache-dir", true,
         "compile fused and unfused through the compiled-model cache in DIR (not with "
         "--integer-only or --reference)"}},
       1,
       compare_command},
      {"dump",
       "qfuse dump [MODEL] [--summary] [--unfused | --integer-only] [--attention-as-three-ops] [--dot F] [--shape NAME=DIMS]",
       "print the compiled graph, each layer with its implementation and post-ops, and "
       "every fusion refusal with its reason",
       {{"--summary", false, "print only the coverage per op type and the refusals"},
        {"--unfused", false, "show the unfused graph"},
        {"--attention-as-three-ops", false,
         "run attention's scores matmul, Softmax and second matmul as three ops (fused mode; "
         "default: one Attention op)"},
        {"--integer-only", false, "requantize fused layers and int8 average pools in integer arithmetic"},
        {"--dot", true, "also write the graph as Graphviz DOT to this file"},
        {"--shape", true, kShapeHelp}},
       1,
       dump_command},
      {"export",
       "qfuse export MODEL OUT.onnx [--shape NAME=DIMS]",
       "write the model as imported (unfused: its own arithmetic) as plain ONNX, FakeQuantize "
       "as QuantizeLinear / DequantizeLinear where its grid is u8's, so that ONNX Runtime runs it",
       {{"--shape", true, kShapeHelp}},
       2,
       export_plain_command},
      {"export-prequantized",
       "qfuse export-prequantized MODEL OUT.onnx [--shape NAME=DIMS]",
       "write the integer-only mode's fused graph as a pre-quantized ONNX model (ConvInteger / "
       "MatMulInteger + Add(int32 bias) + Cast + Mul(M0) + Mul(2^-N) + QuantizeLinear(1, 0))",
       {{"--shape", true, kShapeHelp}},
       2,
       export_command},
      {"cache",
       "qfuse cache ls|clear [--cache-dir DIR]",
       "list the compiled-model cache's entries (model, size, what they were compiled with), "
       "or remove them all",
       {{"--cache-dir", true, "the cache directory (default: QFUSE_CACHE_DIR)"}},
       1,
       cache_command},
      {"conformance",
       "qfuse conformance DIR [--unfused] [--filter TEXT] [--verbose]",
       "run ONNX's backend node tests in DIR (one model.onnx + test_data_set_* per test) "
       "whose operators qfuse imports; ends with 'N passed, M failed, K skipped'",
       {{"--unfused", false, "run every node alone in f32 (the reference)"},
        {"--filter", true, "only tests whose name contains TEXT"},
        {"--verbose", false, "list every skipped test with its reason"}},
       1,
       conformance_command},
  };
  return kCommands;
}

void print_usage(std::ostream& os) {
  os << "usage: qfuse <command> [args]\n\n"
        "MODEL is an .onnx file, an OpenVINO IR .xml (its weights in the .bin beside it) or a "
        "bundled model name (default: 'default').\n\ncommands:\n";
  for (const Command& c : commands()) os << "  " << c.name << "\t" << c.summary << '\n';
}

void print_command_usage(std::ostream& os, const Command& c) {
  os << "usage: " << c.synopsis << "\n\n" << c.summary << "\n";
  for (const OptionSpec& o : c.options) os << "  " << o.name << "\t" << o.help << '\n';
}

}  // namespace
}  // namespace qfuse::cli

int main(int argc, char** argv) {
  using namespace qfuse::cli;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const Command* command = nullptr;
  for (const Command& c : commands()) {
    if (c.name == name) command = &c;
  }
  if (command == nullptr) {
    std::cerr << "qfuse: unknown command '" << name << "'\n\n";
    print_usage(std::cerr);
    return 2;
  }
  const std::vector<std::string> rest(argv + 2, argv + argc);
  for (const std::string& a : rest) {
    if (a == "--help" || a == "-h") {
      print_command_usage(std::cout, *command);
      return 0;
    }
  }
  try {
    const Args args(rest, command->options, command->max_positional);
    return command->run(args);
  } catch (const UsageError& e) {
    std::cerr << "qfuse " << name << ": " << e.what() << "\n\n";
    print_command_usage(std::cerr, *command);
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "qfuse " << name << ": error: " << e.what() << '\n';
    return 1;
  }
}
