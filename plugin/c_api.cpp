// The C API (qfuse/qfuse_c.h) over the C++ one: every entry point catches
// everything and turns it into a status and the thread's last error.
#include "qfuse/qfuse_c.h"

#include <cstring>
#include <new>
#include <string>

#include "plugin/c_api_internal.hpp"


struct qfuse_request {
  explicit qfuse_request(qfuse::InferRequest r) : request(std::move(r)) {}
  qfuse::InferRequest request;
};

namespace {

using qfuse::c_api::fail;
using qfuse::c_api::guarded;
using qfuse::c_api::null_argument;

thread_local std::string last_error;

bool element_type(qfuse_element_type t, qfuse::ElementType& out) {
  switch (t) {
    case QFUSE_F32: out = qfuse::ElementType::f32; return true;
    case QFUSE_S8: out = qfuse::ElementType::s8; return true;
    case QFUSE_U8: out = qfuse::ElementType::u8; return true;
    case QFUSE_S32: out = qfuse::ElementType::s32; return true;
    case QFUSE_S64: out = qfuse::ElementType::s64; return true;
    case QFUSE_ELEMENT_TYPE_MAX_ENUM: break;
  }
  return false;
}

qfuse_element_type c_type(qfuse::ElementType t) {
  switch (t) {
    case qfuse::ElementType::s8: return QFUSE_S8;
    case qfuse::ElementType::u8: return QFUSE_U8;
    case qfuse::ElementType::s32: return QFUSE_S32;
    case qfuse::ElementType::s64: return QFUSE_S64;
    case qfuse::ElementType::f32: break;
  }
  return QFUSE_F32;
}

// Type and shape from C arguments; throws std::invalid_argument.
void c_tensor(const char* function, qfuse_element_type type, const int64_t* dims, size_t rank,
              qfuse::ElementType& t, qfuse::Shape& shape) {
  if (!element_type(type, t)) {
    throw std::invalid_argument(std::string(function) + ": unknown element type " +
                                std::to_string(static_cast<int>(type)));
  }
  if (rank > 0 && dims == nullptr) {
    throw std::invalid_argument(std::string(function) + ": dims is NULL with rank " +
                                std::to_string(rank));
  }
  shape.assign(dims, dims + rank);
}

qfuse_tensor_info c_info(const qfuse::TensorInfo& t) {
  return {t.name.c_str(), c_type(t.type), t.shape.size(), t.shape.data()};
}

}  // namespace

namespace qfuse::c_api {

void set_last_error(const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();
  }
}

}  // namespace qfuse::c_api

extern "C" {

const char* qfuse_last_error(void) { return last_error.c_str(); }

const char* qfuse_status_name(qfuse_status status) {
  switch (status) {
    case QFUSE_OK: return "ok";
    case QFUSE_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case QFUSE_ERROR_GRAPH: return "malformed model";
    case QFUSE_ERROR_UNSUPPORTED: return "unsupported";
    case QFUSE_ERROR_COMPILE: return "compile error";
    case QFUSE_ERROR_INFERENCE: return "inference error";
    case QFUSE_ERROR_IO: return "i/o error";
    case QFUSE_ERROR_OUT_OF_MEMORY: return "out of memory";
    case QFUSE_ERROR_INTERNAL: return "internal error";
    case QFUSE_STATUS_MAX_ENUM: break;
  }
  return "unknown status";
}

const char* qfuse_version(void) { return QFUSE_VERSION_STRING; }

void qfuse_model_free(qfuse_model* model) { delete model; }

// The first versioned layouts: every field these structs have had since
// struct_size was added. A field added later is read or written only when
// the caller's struct_size covers it.
constexpr size_t kLayerInfoV1 = sizeof(qfuse_layer_info);
constexpr size_t kPostOpV1 = sizeof(qfuse_post_op);
constexpr size_t kRefusalInfoV1 = sizeof(qfuse_refusal_info);

// A caller's versioned struct is at least the first layout, else why not.
static qfuse_status check_size(size_t given, size_t v1, const char* function, const char* what,
                               const char* init) {
  if (given >= v1) return QFUSE_OK;
  return fail(QFUSE_ERROR_INVALID_ARGUMENT,
              std::string(function) + ": " + what + "->struct_size is " + std::to_string(given) +
                  " (expected at least " + std::to_string(v1) + "; set it with " + init + ")");
}

void qfuse_compile_options_init(qfuse_compile_options* options) {
  if (options == nullptr) return;
  *options = qfuse_compile_options{};
  options->struct_size = sizeof(qfuse_compile_options);
  options->fuse = 1;
  options->allow_residual_round_drop = 0;
  options->threads = 0;
  options->log_level = nullptr;
  options->integer_only = 0;
  options->integer_eta = qfuse::CompileOptions{}.integer_eta;
  options->cache_dir = nullptr;
  options->max_shapes = qfuse::CompileOptions{}.max_shapes;
}

qfuse_status qfuse_compile(const qfuse_model* model, const qfuse_compile_options* options,
                           qfuse_compiled_model** compiled) {
  if (model == nullptr) return null_argument("qfuse_compile", "model");
  if (compiled == nullptr) return null_argument("qfuse_compile", "compiled");
  qfuse::CompileOptions o;
  const qfuse_status read = qfuse::c_api::read_compile_options("qfuse_compile", options, o);
  if (read != QFUSE_OK) return read;
  return guarded([&] { *compiled = qfuse::c_api::new_compiled_model(qfuse::compile(model->model, o)); });
}

void qfuse_compiled_model_free(qfuse_compiled_model* compiled) { delete compiled; }

size_t qfuse_input_count(const qfuse_compiled_model* c) { return c != nullptr ? c->inputs.size() : 0; }
size_t qfuse_output_count(const qfuse_compiled_model* c) {
  return c != nullptr ? c->outputs.size() : 0;
}
size_t qfuse_layer_count(const qfuse_compiled_model* c) { return c != nullptr ? c->layers.size() : 0; }

static qfuse_status tensor_info(const char* function, const std::vector<qfuse::TensorInfo>* list,
                                size_t index, qfuse_tensor_info* info) {
  if (list == nullptr) return null_argument(function, "compiled");
  if (info == nullptr) return null_argument(function, "info");
  if (index >= list->size()) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT, std::string(function) + ": index " +
                                                  std::to_string(index) + " of " +
                                                  std::to_string(list->size()));
  }
  *info = c_info((*list)[index]);
  qfuse::c_api::set_last_error("");
  return QFUSE_OK;
}

qfuse_status qfuse_input_info(const qfuse_compiled_model* c, size_t index, qfuse_tensor_info* info) {
  return tensor_info("qfuse_input_info", c != nullptr ? &c->inputs : nullptr, index, info);
}

const char* qfuse_input_dim_name(const qfuse_compiled_model* c, size_t index, size_t dim) {
  if (c == nullptr || index >= c->inputs.size() || dim >= c->inputs[index].shape.size()) return nullptr;
  const std::vector<std::string>& names = c->inputs[index].dim_names;
  return names.empty() ? "" : names[dim].c_str();
}

qfuse_status qfuse_output_info(const qfuse_compiled_model* c, size_t index,
                               qfuse_tensor_info* info) {
  return tensor_info("qfuse_output_info", c != nullptr ? &c->outputs : nullptr, index, info);
}

qfuse_status qfuse_layer(const qfuse_compiled_model* c, size_t index, qfuse_layer_info* info) {
  if (c == nullptr) return null_argument("qfuse_layer", "compiled");
  if (info == nullptr) return null_argument("qfuse_layer", "info");
  if (index >= c->layers.size()) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT, "qfuse_layer: index " + std::to_string(index) +
                                                  " of " + std::to_string(c->layers.size()));
  }
  const qfuse_status size =
      check_size(info->struct_size, kLayerInfoV1, "qfuse_layer", "info", "qfuse_layer_info_init");
  if (size != QFUSE_OK) return size;
  const qfuse::LayerInfo& l = c->layers[index];
  info->node = l.node.c_str();
  info->op = l.op.c_str();
  info->implementation = l.implementation.c_str();
  info->precision = l.precision.c_str();
  info->post_ops = l.post_ops.c_str();
  info->macs = l.macs;
  info->reorders = l.reorders;
  info->scalar_fallback = l.scalar_fallback ? 1 : 0;
  info->output_scale_count = l.output_scales.size();
  info->output_scales = l.output_scales.data();
  info->has_dst_zero_point = l.dst_zero_point.has_value() ? 1 : 0;
  info->dst_zero_point = l.dst_zero_point.value_or(0);
  info->post_op_count = l.post_op_list.size();
  info->src_type = c_type(l.src_type);
  info->dst_type = c_type(l.dst_type);
  qfuse::c_api::set_last_error("");
  return QFUSE_OK;
}

qfuse_status qfuse_layer_post_op(const qfuse_compiled_model* c, size_t layer, size_t index,
                                 qfuse_post_op* post_op) {
  if (c == nullptr) return null_argument("qfuse_layer_post_op", "compiled");
  if (post_op == nullptr) return null_argument("qfuse_layer_post_op", "post_op");
  if (layer >= c->layers.size() || index >= c->layers[layer].post_op_list.size()) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT, "qfuse_layer_post_op: no post-op " +
                                                  std::to_string(index) + " on layer " +
                                                  std::to_string(layer));
  }
  const qfuse_status size = check_size(post_op->struct_size, kPostOpV1, "qfuse_layer_post_op",
                                       "post_op", "qfuse_post_op_init");
  if (size != QFUSE_OK) return size;
  const qfuse::PostOp& p = c->layers[layer].post_op_list[index];
  post_op->kind = p.kind == qfuse::PostOp::Kind::eltwise  ? QFUSE_POST_OP_ELTWISE
                  : p.kind == qfuse::PostOp::Kind::binary ? QFUSE_POST_OP_BINARY
                                                          : QFUSE_POST_OP_SUM;
  post_op->algorithm = p.algorithm.c_str();
  post_op->scale = p.scale;
  post_op->alpha = p.alpha;
  post_op->beta = p.beta;
  post_op->per_channel = p.per_channel ? 1 : 0;
  post_op->value_count = p.values.size();
  post_op->values = p.values.data();
  post_op->operand = p.operand.c_str();
  qfuse::c_api::set_last_error("");
  return QFUSE_OK;
}

void qfuse_layer_info_init(qfuse_layer_info* info) {
  if (info == nullptr) return;
  *info = qfuse_layer_info{};
  info->struct_size = sizeof(qfuse_layer_info);
}

void qfuse_post_op_init(qfuse_post_op* post_op) {
  if (post_op == nullptr) return;
  *post_op = qfuse_post_op{};
  post_op->struct_size = sizeof(qfuse_post_op);
}

void qfuse_refusal_info_init(qfuse_refusal_info* info) {
  if (info == nullptr) return;
  *info = qfuse_refusal_info{};
  info->struct_size = sizeof(qfuse_refusal_info);
}

size_t qfuse_refusal_count(const qfuse_compiled_model* c) {
  return c != nullptr ? c->model.refusals().size() : 0;
}

qfuse_status qfuse_refusal(const qfuse_compiled_model* c, size_t index, qfuse_refusal_info* info) {
  if (c == nullptr) return null_argument("qfuse_refusal", "compiled");
  if (info == nullptr) return null_argument("qfuse_refusal", "info");
  const std::vector<qfuse::FusionRefusal>& refusals = c->model.refusals();
  if (index >= refusals.size()) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT, "qfuse_refusal: index " + std::to_string(index) +
                                                  " of " + std::to_string(refusals.size()));
  }
  const qfuse_status size = check_size(info->struct_size, kRefusalInfoV1, "qfuse_refusal", "info",
                                       "qfuse_refusal_info_init");
  if (size != QFUSE_OK) return size;
  info->pass = refusals[index].pass.c_str();
  info->node = refusals[index].node.c_str();
  info->reason = refusals[index].reason.c_str();
  qfuse::c_api::set_last_error("");
  return QFUSE_OK;
}

size_t qfuse_fusion_log_count(const qfuse_compiled_model* c) {
  return c != nullptr ? c->model.fusion_log().size() : 0;
}

const char* qfuse_compiled_model_cache(const qfuse_compiled_model* c) {
  return c != nullptr ? c->cache.c_str() : "";
}

const char* qfuse_fusion_log_line(const qfuse_compiled_model* c, size_t index) {
  if (c == nullptr || index >= c->model.fusion_log().size()) return nullptr;
  return c->model.fusion_log()[index].c_str();
}

qfuse_status qfuse_request_create(const qfuse_compiled_model* c, qfuse_request** request) {
  if (c == nullptr) return null_argument("qfuse_request_create", "compiled");
  if (request == nullptr) return null_argument("qfuse_request_create", "request");
  return guarded([&] { *request = new qfuse_request(c->model.create_infer_request()); });
}

void qfuse_request_free(qfuse_request* request) { delete request; }

qfuse_status qfuse_request_set_input(qfuse_request* r, const char* name, qfuse_element_type type,
                                     const int64_t* dims, size_t rank, const void* data,
                                     size_t bytes) {
  if (r == nullptr) return null_argument("qfuse_request_set_input", "request");
  if (name == nullptr) return null_argument("qfuse_request_set_input", "name");
  if (data == nullptr && bytes > 0) return null_argument("qfuse_request_set_input", "data");
  return guarded([&] {
    qfuse::ElementType t{};
    qfuse::Shape shape;
    c_tensor("qfuse_request_set_input", type, dims, rank, t, shape);
    const std::size_t expected = static_cast<std::size_t>(qfuse::element_count(shape)) * qfuse::element_size(t);
    if (bytes != expected) {
      throw qfuse::InferenceError("qfuse_request_set_input: input '" + std::string(name) + "' of " +
                                  std::string(qfuse::to_string(t)) + qfuse::to_string(shape) +
                                  " holds " + std::to_string(expected) + " bytes (got " +
                                  std::to_string(bytes) + ")");
    }
    // Another shape in the input's symbolic dimensions is taken as the C++
    // API takes it (the next inference runs at it).
    r->request.set_input(name, qfuse::Tensor::view(t, shape, const_cast<void*>(data)));
  });
}

qfuse_status qfuse_request_bind_input(qfuse_request* r, const char* name, qfuse_element_type type,
                                      const int64_t* dims, size_t rank, void* data) {
  if (r == nullptr) return null_argument("qfuse_request_bind_input", "request");
  if (name == nullptr) return null_argument("qfuse_request_bind_input", "name");
  return guarded([&] {
    qfuse::ElementType t{};
    qfuse::Shape shape;
    c_tensor("qfuse_request_bind_input", type, dims, rank, t, shape);
    r->request.bind_input(name, t, shape, data);
  });
}

qfuse_status qfuse_request_bind_output(qfuse_request* r, const char* name, qfuse_element_type type,
                                       const int64_t* dims, size_t rank, void* data,
                                       int* zero_copy) {
  if (r == nullptr) return null_argument("qfuse_request_bind_output", "request");
  if (name == nullptr) return null_argument("qfuse_request_bind_output", "name");
  return guarded([&] {
    qfuse::ElementType t{};
    qfuse::Shape shape;
    c_tensor("qfuse_request_bind_output", type, dims, rank, t, shape);
    const bool own = r->request.bind_output(name, t, shape, data);
    if (zero_copy != nullptr) *zero_copy = own ? 1 : 0;
  });
}

qfuse_status qfuse_request_set_threads(qfuse_request* r, int threads) {
  if (r == nullptr) return null_argument("qfuse_request_set_threads", "request");
  if (threads < 0) {
    return fail(QFUSE_ERROR_INVALID_ARGUMENT,
                "qfuse_request_set_threads: threads is " + std::to_string(threads) +
                    " (expected 0 for all, or a positive count)");
  }
  return guarded([&] { r->request.set_threads(threads); });
}

qfuse_status qfuse_request_infer(qfuse_request* r) {
  if (r == nullptr) return null_argument("qfuse_request_infer", "request");
  return guarded([&] { r->request.infer(); });
}

qfuse_status qfuse_request_get_output(const qfuse_request* r, const char* name, void* data,
                                      size_t bytes) {
  if (r == nullptr) return null_argument("qfuse_request_get_output", "request");
  if (name == nullptr) return null_argument("qfuse_request_get_output", "name");
  if (data == nullptr && bytes > 0) return null_argument("qfuse_request_get_output", "data");
  return guarded([&] {
    const qfuse::Tensor& t = r->request.output(name);
    if (bytes != t.byte_size()) {
      throw qfuse::InferenceError("qfuse_request_get_output: output '" + std::string(name) +
                                  "' holds " + std::to_string(t.byte_size()) + " bytes (got " +
                                  std::to_string(bytes) + ")");
    }
    if (bytes > 0) std::memcpy(data, t.raw_data(), bytes);
  });
}

qfuse_status qfuse_request_output_info(const qfuse_request* r, const char* name,
                                       qfuse_tensor_info* info) {
  if (r == nullptr) return null_argument("qfuse_request_output_info", "request");
  if (name == nullptr) return null_argument("qfuse_request_output_info", "name");
  if (info == nullptr) return null_argument("qfuse_request_output_info", "info");
  return guarded([&] {
    const qfuse::Tensor& t = r->request.output(name);
    *info = {name, c_type(t.type()), t.shape().size(), t.shape().data()};
  });
}

}  // extern "C"
