#pragma once
// Internal: what the C API's two libraries share. libqfuse defines the C API;
// libqfuse_onnx defines its import functions and reports errors through
// set_last_error, which libqfuse exports for it (the one thread-local message
// qfuse_last_error() reads).

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "qfuse/export.hpp"
#include "qfuse/qfuse.hpp"
#include "qfuse/qfuse_c.h"

struct qfuse_model {
  qfuse::Model model;
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

}  // namespace qfuse::c_api
