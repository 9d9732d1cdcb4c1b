/* qfuse C API: import, compile, run and inspect int8 models from C.
 *
 *   qfuse_model* model = NULL;
 *   if (qfuse_import_onnx_file("model.onnx", NULL, 0, &model) != QFUSE_OK) {
 *     fprintf(stderr, "%s\n", qfuse_last_error());
 *   }
 *   qfuse_compiled_model* compiled = NULL;
 *   qfuse_compile(model, NULL, &compiled);        (NULL: default options)
 *   qfuse_request* request = NULL;
 *   qfuse_request_create(compiled, &request);     (one per host thread)
 *   qfuse_request_set_input(request, "x", QFUSE_F32, dims, rank, data, bytes);
 *   qfuse_request_infer(request);
 *   qfuse_request_get_output(request, "y", out, out_bytes);
 *   qfuse_request_free(request); qfuse_compiled_model_free(compiled); qfuse_model_free(model);
 *
 * Every function that can fail returns a qfuse_status; on failure the calling
 * thread's qfuse_last_error() says what and where (the node and the problem),
 * and output parameters are left untouched. No C++ exception leaves this API.
 * A compiled model may be shared by threads; a request is used by one thread
 * at a time. Strings and arrays returned by the query functions live as long
 * as the object they were read from. The import functions (ONNX and
 * OpenVINO IR) are in libqfuse_onnx (link qfuse::onnx, or pkg-config
 * qfuse-onnx).
 */
#ifndef QFUSE_QFUSE_C_H
#define QFUSE_QFUSE_C_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define QFUSE_C_API
#else
#define QFUSE_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qfuse_status {
  QFUSE_OK = 0,
  QFUSE_ERROR_INVALID_ARGUMENT = 1, /* a NULL pointer, an index out of range, a bad size */
  QFUSE_ERROR_GRAPH = 2,            /* a malformed model */
  QFUSE_ERROR_UNSUPPORTED = 3,      /* an operator, attribute or type qfuse does not run */
  QFUSE_ERROR_COMPILE = 4,          /* building the execution plan failed */
  QFUSE_ERROR_INFERENCE = 5,        /* missing or mismatched inputs, a failed primitive */
  QFUSE_ERROR_IO = 6,               /* a file could not be read */
  QFUSE_ERROR_OUT_OF_MEMORY = 7,
  QFUSE_ERROR_INTERNAL = 8,
  QFUSE_STATUS_MAX_ENUM = 0x7fffffff /* keeps the enum int-sized; not a status */
} qfuse_status;

typedef enum qfuse_element_type {
  QFUSE_F32 = 0,
  QFUSE_S8 = 1,
  QFUSE_U8 = 2,
  QFUSE_S32 = 3,
  QFUSE_S64 = 4,
  /* Not a type: makes every int a valid value of the enum in C++, so that a
     wrong value from C is rejected (QFUSE_ERROR_INVALID_ARGUMENT), not UB. */
  QFUSE_ELEMENT_TYPE_MAX_ENUM = 0x7fffffff
} qfuse_element_type;

typedef struct qfuse_model qfuse_model;                   /* an imported, uncompiled model */
typedef struct qfuse_compiled_model qfuse_compiled_model; /* immutable, shareable */
typedef struct qfuse_request qfuse_request;               /* one inference's buffers */

/* Versioned structs: the first field, struct_size, is the struct's size as
 * the caller's header declares it, set by its _init function (call it before
 * filling the struct in). qfuse reads and writes only the fields that lie
 * within it, so a later version adds fields at the end without breaking the
 * ABI: an older caller's struct keeps its meaning, and a field it lacks
 * takes its default. A struct_size below the first versioned layout (one
 * never set) is QFUSE_ERROR_INVALID_ARGUMENT. */

typedef struct qfuse_compile_options {
  size_t struct_size;            /* set by qfuse_compile_options_init */
  int fuse;                      /* 1: int8 primitives (default); 0: the unfused f32 reference */
  int allow_residual_round_drop; /* 0 (default): numerics-changing rewrite off */
  int threads;                   /* OpenMP threads per inference at most; 0: the default */
  const char* log_level;         /* "trace" ... "off"; NULL keeps the current level */
  int integer_only;              /* 1: requantize in integer arithmetic (default 0) */
  double integer_eta;            /* its multipliers' relative error bound (default 2^-20) */
  /* Added in 0.2: the compiled-model cache's directory, used by
   * qfuse_compile_onnx_file and qfuse_compile_openvino_file; NULL or "": the
   * QFUSE_CACHE_DIR environment variable, else no cache. */
  const char* cache_dir;
  /* Added in 0.2: a model with symbolic input dimensions keeps at most this
   * many other input shapes compiled (default 8; CompileOptions::max_shapes). */
  int max_shapes;
} qfuse_compile_options;

/* A concrete shape for a model input with symbolic dimensions. */
typedef struct qfuse_input_shape {
  const char* name;
  size_t rank;
  const int64_t* dims;
} qfuse_input_shape;

typedef struct qfuse_tensor_info {
  const char* name;
  qfuse_element_type type;
  size_t rank;
  const int64_t* dims;
} qfuse_tensor_info;

typedef enum qfuse_post_op_kind {
  QFUSE_POST_OP_ELTWISE = 0, /* y = scale * algorithm(y, alpha, beta) */
  QFUSE_POST_OP_BINARY = 1,  /* y = algorithm(y, operand) */
  QFUSE_POST_OP_SUM = 2,     /* y = y + scale * operand */
  QFUSE_POST_OP_KIND_MAX_ENUM = 0x7fffffff
} qfuse_post_op_kind;

typedef struct qfuse_post_op {
  size_t struct_size; /* set by qfuse_post_op_init */
  qfuse_post_op_kind kind;
  const char* algorithm;
  float scale, alpha, beta;
  int per_channel;
  size_t value_count;     /* binary with a constant operand: its values */
  const float* values;
  const char* operand;    /* binary / sum reading a tensor: its name, else "" */
} qfuse_post_op;

typedef struct qfuse_layer_info {
  size_t struct_size;         /* set by qfuse_layer_info_init */
  const char* node;
  const char* op;
  const char* implementation; /* oneDNN's implementation, or "reference" */
  const char* precision;      /* "int8", "f32", "quantize", "dequantize" */
  const char* post_ops;       /* the post-ops as text */
  int64_t macs;
  int reorders;
  int scalar_fallback;
  size_t output_scale_count;
  const float* output_scales;
  int has_dst_zero_point;
  int32_t dst_zero_point;
  size_t post_op_count;       /* read each with qfuse_layer_post_op */
  qfuse_element_type src_type, dst_type;
} qfuse_layer_info;

/* A candidate the fusion passes refused, and why (what qfuse dump lists). */
typedef struct qfuse_refusal_info {
  size_t struct_size; /* set by qfuse_refusal_info_init */
  const char* pass;
  const char* node;
  const char* reason;
} qfuse_refusal_info;

/* The calling thread's message for its last failed call ("" if none). */
QFUSE_C_API const char* qfuse_last_error(void);
QFUSE_C_API const char* qfuse_status_name(qfuse_status status);
QFUSE_C_API const char* qfuse_version(void);

/* `shapes` (may be NULL when `shape_count` is 0) binds symbolic input
 * dimensions; an input left symbolic is a QFUSE_ERROR_GRAPH naming it. */
QFUSE_C_API qfuse_status qfuse_import_onnx_file(const char* path, const qfuse_input_shape* shapes,
                                                size_t shape_count, qfuse_model** model);
QFUSE_C_API qfuse_status qfuse_import_onnx_memory(const void* data, size_t size,
                                                  const qfuse_input_shape* shapes,
                                                  size_t shape_count, qfuse_model** model);
/* An OpenVINO IR (IR v10 / v11): `xml_path` names the .xml, whose weights
 * are read from the .bin beside it (same name, extension .bin). `shapes`
 * binds dynamic input dimensions as for ONNX. */
QFUSE_C_API qfuse_status qfuse_import_openvino_file(const char* xml_path,
                                                    const qfuse_input_shape* shapes,
                                                    size_t shape_count, qfuse_model** model);
QFUSE_C_API void qfuse_model_free(qfuse_model* model);

QFUSE_C_API void qfuse_compile_options_init(qfuse_compile_options* options);
/* options may be NULL (the defaults). */
QFUSE_C_API qfuse_status qfuse_compile(const qfuse_model* model,
                                       const qfuse_compile_options* options,
                                       qfuse_compiled_model** compiled);
/* Import and compile a model file in one call, through the compiled-model
 * cache when options->cache_dir (or QFUSE_CACHE_DIR) names one: a file
 * compiled before with the same bytes and options is mapped from the cache
 * without importing it again. `shapes` as for the imports; options may be
 * NULL. */
QFUSE_C_API qfuse_status qfuse_compile_onnx_file(const char* path, const qfuse_input_shape* shapes,
                                                 size_t shape_count,
                                                 const qfuse_compile_options* options,
                                                 qfuse_compiled_model** compiled);
QFUSE_C_API qfuse_status qfuse_compile_openvino_file(const char* xml_path,
                                                     const qfuse_input_shape* shapes,
                                                     size_t shape_count,
                                                     const qfuse_compile_options* options,
                                                     qfuse_compiled_model** compiled);
QFUSE_C_API void qfuse_compiled_model_free(qfuse_compiled_model* compiled);
/* What the compiled-model cache did for this model: "" when none was used,
 * else "hit <entry> (...)", "miss, stored <entry>" or "miss, not stored (<why>)".
 * Valid as long as the model. */
QFUSE_C_API const char* qfuse_compiled_model_cache(const qfuse_compiled_model* compiled);

QFUSE_C_API size_t qfuse_input_count(const qfuse_compiled_model* compiled);
QFUSE_C_API size_t qfuse_output_count(const qfuse_compiled_model* compiled);
QFUSE_C_API qfuse_status qfuse_input_info(const qfuse_compiled_model* compiled, size_t index,
                                          qfuse_tensor_info* info);
QFUSE_C_API qfuse_status qfuse_output_info(const qfuse_compiled_model* compiled, size_t index,
                                           qfuse_tensor_info* info);
/* A model input's symbolic dimension `dim`: its name, "" where the model
 * fixes it, NULL when `index` or `dim` is out of range. qfuse_request_set_input
 * and qfuse_request_bind_input take other sizes of these dimensions: the next
 * inference runs the model at the shapes set (compiled on first use). Valid
 * as long as the model. */
QFUSE_C_API const char* qfuse_input_dim_name(const qfuse_compiled_model* compiled, size_t index,
                                             size_t dim);
QFUSE_C_API size_t qfuse_layer_count(const qfuse_compiled_model* compiled);
QFUSE_C_API qfuse_status qfuse_layer(const qfuse_compiled_model* compiled, size_t index,
                                     qfuse_layer_info* info);
QFUSE_C_API qfuse_status qfuse_layer_post_op(const qfuse_compiled_model* compiled, size_t layer,
                                             size_t index, qfuse_post_op* post_op);
/* Zero the struct and set its struct_size. */
QFUSE_C_API void qfuse_layer_info_init(qfuse_layer_info* info);
QFUSE_C_API void qfuse_post_op_init(qfuse_post_op* post_op);
QFUSE_C_API void qfuse_refusal_info_init(qfuse_refusal_info* info);

/* The fusion passes' refusals that hold for the compiled graph, and the
 * fusion log (one line per rewrite, then the refusals); the strings live as
 * long as the compiled model. qfuse_fusion_log_line gives NULL past the end. */
QFUSE_C_API size_t qfuse_refusal_count(const qfuse_compiled_model* compiled);
QFUSE_C_API qfuse_status qfuse_refusal(const qfuse_compiled_model* compiled, size_t index,
                                       qfuse_refusal_info* info);
QFUSE_C_API size_t qfuse_fusion_log_count(const qfuse_compiled_model* compiled);
QFUSE_C_API const char* qfuse_fusion_log_line(const qfuse_compiled_model* compiled, size_t index);

QFUSE_C_API qfuse_status qfuse_request_create(const qfuse_compiled_model* compiled,
                                              qfuse_request** request);
QFUSE_C_API void qfuse_request_free(qfuse_request* request);
/* Copies `bytes` bytes (the whole tensor, C order) into the input. */
QFUSE_C_API qfuse_status qfuse_request_set_input(qfuse_request* request, const char* name,
                                                 qfuse_element_type type, const int64_t* dims,
                                                 size_t rank, const void* data, size_t bytes);
/* Zero-copy: the request reads the input from / writes the output to `data`
 * (the tensor's type and shape, dense C order), which stays valid while the
 * request runs; NULL unbinds. *zero_copy (may be NULL) is 0 when the output's
 * buffer is shared in the plan and is copied to `data` after each inference. */
QFUSE_C_API qfuse_status qfuse_request_bind_input(qfuse_request* request, const char* name,
                                                  qfuse_element_type type, const int64_t* dims,
                                                  size_t rank, void* data);
QFUSE_C_API qfuse_status qfuse_request_bind_output(qfuse_request* request, const char* name,
                                                   qfuse_element_type type, const int64_t* dims,
                                                   size_t rank, void* data, int* zero_copy);
QFUSE_C_API qfuse_status qfuse_request_set_threads(qfuse_request* request, int threads);
QFUSE_C_API qfuse_status qfuse_request_infer(qfuse_request* request);
/* An output's type and shape at the shapes the request last ran (they
 * follow the inputs' symbolic dimensions). info->name is `name`; dims stay
 * valid until the request runs at other shapes. */
QFUSE_C_API qfuse_status qfuse_request_output_info(const qfuse_request* request, const char* name,
                                                   qfuse_tensor_info* info);
/* Copies the output into `data`; `bytes` must be its exact size. */
QFUSE_C_API qfuse_status qfuse_request_get_output(const qfuse_request* request, const char* name,
                                                  void* data, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* QFUSE_QFUSE_C_H */
