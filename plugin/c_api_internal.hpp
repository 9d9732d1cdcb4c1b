#pragma once
// Internal: what the C API's two libraries share. libqfuse defines the C API;
// libqfuse_onnx defines its import functions and reports errors through
// set_last_error, which libqfuse exports for it (the one thread-local message
// qfuse_last_error() reads).

#include <exception>
#include <new>
#include <stdexcept>
#include <cstddef>
#include <string>
#include <vector>

#include "qfuse/export.hpp"
#include "qfuse/qfuse.hpp"
#include "qfuse/qfuse_c.h"

struct qfuse_model {
  qfuse::Model model;
};

struct qfuse_compiled_model {
  qfuse::CompiledModel model;
  std::vector<qfuse::TensorInfo> inputs, outputs;
  std::vector<qfuse::LayerInfo> layers;
  std::string cache;  // CompileTimes::cache
};

namespace qfuse::c_api {

// The calling thread's message ("" clears it).
QFUSE_API void set_last_error(const char* message) noexcept;

inline qfuse_status fail(qfuse_status status, const std::string& message) {
  set_last_error(message.c_str());
  return status;
}

inline qfuse_status null_argument(const char* function, const char* argument) {
  return fail(QFUSE_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + argument + " is NULL");
}

// Runs `f`, mapping exceptions to statuses: no exception leaves the C API.
template <class F>
qfuse_status guarded(F&& f) noexcept {
  try {
    f();
    set_last_error("");
    return QFUSE_OK;
  } catch (const GraphError& e) {
    return fail(QFUSE_ERROR_GRAPH, e.what());
  } catch (const UnsupportedError& e) {
    return fail(QFUSE_ERROR_UNSUPPORTED, e.what());
  } catch (const CompileError& e) {
    return fail(QFUSE_ERROR_COMPILE, e.what());
  } catch (const InferenceError& e) {
    return fail(QFUSE_ERROR_INFERENCE, e.what());
  } catch (const IoError& e) {
    return fail(QFUSE_ERROR_IO, e.what());
  } catch (const TensorError& e) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const Error& e) {
    return fail(QFUSE_ERROR_INTERNAL, e.what());
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return QFUSE_ERROR_OUT_OF_MEMORY;
  } catch (const std::invalid_argument& e) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return fail(QFUSE_ERROR_INTERNAL, e.what());
  } catch (...) {
    set_last_error("unknown error");
    return QFUSE_ERROR_INTERNAL;
  }
}

// The first versioned layout of qfuse_compile_options (before cache_dir).
inline constexpr std::size_t kCompileOptionsV1 = offsetof(qfuse_compile_options, cache_dir);

// A caller's options checked (struct_size) and read into `out`; NULL: the
// defaults. Fields past the caller's struct_size keep their defaults.
inline qfuse_status read_compile_options(const char* function, const qfuse_compile_options* options,
                                         qfuse::CompileOptions& out) {
  out = qfuse::CompileOptions{};
  if (options == nullptr) return QFUSE_OK;
  if (options->struct_size < kCompileOptionsV1) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": options->struct_size is " +
                    std::to_string(options->struct_size) + " (expected at least " +
                    std::to_string(kCompileOptionsV1) + "; set it with qfuse_compile_options_init)");
  }
  out.fuse = options->fuse != 0;
  out.allow_residual_round_drop = options->allow_residual_round_drop != 0;
  out.threads = options->threads;
  if (options->log_level != nullptr) out.log_level = options->log_level;
  out.integer_only = options->integer_only != 0;
  out.integer_eta = options->integer_eta;
  const bool has_cache_dir =
      options->struct_size >= offsetof(qfuse_compile_options, cache_dir) + sizeof(const char*);
  if (has_cache_dir && options->cache_dir != nullptr) out.cache_dir = options->cache_dir;
  if (options->struct_size >= offsetof(qfuse_compile_options, max_shapes) + sizeof(int)) {
    out.max_shapes = options->max_shapes;
  }
  return QFUSE_OK;
}

// The C handle of a compiled model, its lists read once.
inline qfuse_compiled_model* new_compiled_model(qfuse::CompiledModel model) {
  auto* c = new qfuse_compiled_model{std::move(model), {}, {}, {}, {}};
  c->inputs = c->model.inputs();
  c->outputs = c->model.outputs();
  c->layers = c->model.layers();
  c->cache = c->model.compile_times().cache;
  return c;
}

}  // namespace qfuse::c_api
