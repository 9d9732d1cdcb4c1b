/* The C API driven from plain C (C11), linked against the shared libraries:
 * import the bundled classifier from a file and from memory (and, given a
 * second argument, an OpenVINO IR .xml), compile it fused
 * and unfused, query inputs, outputs and layers, run both on the same input,
 * bind buffers without copies, and check that every misuse returns a status
 * and a message instead of crashing. Exits non-zero on the first failure. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfuse/qfuse_c.h"

static int failures = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__,     \
              __LINE__, #cond, qfuse_last_error());                              \
      ++failures;                                                                \
    }                                                                            \
  } while (0)

#define CHECK_OK(call) CHECK((call) == QFUSE_OK)

/* The error status, and a message that contains `needle`. */
#define CHECK_FAILS(call, status, needle)                                        \
  do {                                                                           \
    qfuse_status s_ = (call);                                                    \
    CHECK(s_ == (status));                                                       \
    CHECK(strstr(qfuse_last_error(), (needle)) != NULL);                         \
  } while (0)

static char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* data = malloc((size_t)n);
  if (data != NULL && fread(data, 1, (size_t)n, f) != (size_t)n) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return data;
}

static size_t elements(const qfuse_tensor_info* t) {
  size_t n = 1;
  for (size_t i = 0; i < t->rank; ++i) n *= (size_t)t->dims[i];
  return n;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.onnx [MODEL.xml]\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  printf("qfuse %s\n", qfuse_version());

  /* Errors before anything exists. */
  qfuse_model* model = NULL;
  CHECK_FAILS(qfuse_import_onnx_file("/nonexistent.onnx", NULL, 0, &model), QFUSE_ERROR_IO,
              "nonexistent");
  CHECK(model == NULL);
  CHECK_FAILS(qfuse_import_onnx_file(NULL, NULL, 0, &model), QFUSE_ERROR_INVALID_ARGUMENT,
              "path is NULL");
  CHECK_FAILS(qfuse_import_onnx_memory("\x08\x07garbage", 9, NULL, 0, &model), QFUSE_ERROR_GRAPH, "");
  CHECK(strlen(qfuse_last_error()) > 0);
  CHECK_FAILS(qfuse_compile(NULL, NULL, NULL), QFUSE_ERROR_INVALID_ARGUMENT, "model is NULL");

  /* The classifier's batch is symbolic: without a shape the import names the
   * input; with one it imports, from the file and from memory. */
  CHECK_FAILS(qfuse_import_onnx_file(path, NULL, 0, &model), QFUSE_ERROR_GRAPH, "input");
  printf("symbolic batch left unbound: %s\n", qfuse_last_error());
  const int64_t batch_dims[4] = {4, 1, 28, 28};
  const qfuse_input_shape shape = {"input", 4, batch_dims};
  CHECK_FAILS(qfuse_import_onnx_file(path, NULL, 1, &model), QFUSE_ERROR_INVALID_ARGUMENT, "shapes");
  CHECK_OK(qfuse_import_onnx_file(path, &shape, 1, &model));
  if (model == NULL) return 1;
  size_t size = 0;
  char* bytes = read_file(path, &size);
  CHECK(bytes != NULL);
  if (bytes == NULL) return 1;
  qfuse_model* from_memory = NULL;
  CHECK_OK(qfuse_import_onnx_memory(bytes, size, &shape, 1, &from_memory));
  qfuse_model* truncated = NULL;
  CHECK_FAILS(qfuse_import_onnx_memory(bytes, size / 2, &shape, 1, &truncated), QFUSE_ERROR_GRAPH, "");
  CHECK(truncated == NULL);
  free(bytes);
  if (from_memory == NULL) return 1;

  qfuse_compile_options options;
  qfuse_compile_options_init(&options);
  qfuse_compiled_model* fused = NULL;
  qfuse_compiled_model* unfused = NULL;
  CHECK_OK(qfuse_compile(model, &options, &fused));
  options.fuse = 0;
  CHECK_OK(qfuse_compile(from_memory, &options, &unfused));
  options.threads = -1;
  qfuse_compiled_model* bad = NULL;
  CHECK_FAILS(qfuse_compile(model, &options, &bad), QFUSE_ERROR_COMPILE, "threads");
  CHECK(bad == NULL);
  /* The integer-only mode compiles; a bound outside (0, 1) is refused. */
  qfuse_compile_options_init(&options);
  options.integer_only = 1;
  qfuse_compiled_model* integer = NULL;
  CHECK_OK(qfuse_compile(model, &options, &integer));
  qfuse_compiled_model_free(integer);
  options.integer_eta = 1.5;
  CHECK_FAILS(qfuse_compile(model, &options, &bad), QFUSE_ERROR_COMPILE, "integer_eta");
  CHECK(bad == NULL);
  qfuse_compile_options_init(&options);
  options.fuse = 0;
  if (fused == NULL || unfused == NULL) return 1;

  /* Inputs, outputs, layers. */
  CHECK(qfuse_input_count(fused) == 1);
  CHECK(qfuse_output_count(fused) == 1);
  qfuse_tensor_info in, out;
  CHECK_OK(qfuse_input_info(fused, 0, &in));
  CHECK_OK(qfuse_output_info(fused, 0, &out));
  CHECK(in.type == QFUSE_F32 && in.rank == 4);
  CHECK_FAILS(qfuse_input_info(fused, 5, &in), QFUSE_ERROR_INVALID_ARGUMENT, "index 5");
  CHECK_OK(qfuse_input_info(fused, 0, &in));
  size_t int8_layers = 0, scaled = 0;
  for (size_t i = 0; i < qfuse_layer_count(fused); ++i) {
    qfuse_layer_info l;
    qfuse_layer_info_init(&l);
    CHECK_OK(qfuse_layer(fused, i, &l));
    printf("layer %-28s %-24s %-10s %s\n", l.node, l.op, l.precision, l.implementation);
    if (strcmp(l.precision, "int8") == 0 && l.macs > 0) {
      ++int8_layers;
      if (l.output_scale_count > 0 && l.output_scales[0] > 0.0f) ++scaled;
    }
    for (size_t k = 0; k < l.post_op_count; ++k) {
      qfuse_post_op p;
      qfuse_post_op_init(&p);
      CHECK_OK(qfuse_layer_post_op(fused, i, k, &p));
      CHECK(p.algorithm != NULL && strlen(p.algorithm) > 0);
    }
  }
  CHECK(int8_layers >= 3);
  CHECK(scaled == int8_layers);

  /* Versioned structs: one whose struct_size was never set is refused. */
  {
    qfuse_layer_info unset;
    memset(&unset, 0, sizeof unset);
    CHECK_FAILS(qfuse_layer(fused, 0, &unset), QFUSE_ERROR_INVALID_ARGUMENT, "struct_size is 0");
    qfuse_compile_options old_options;
    memset(&old_options, 0, sizeof old_options);
    old_options.struct_size = sizeof(int);
    qfuse_compiled_model* refused = NULL;
    CHECK_FAILS(qfuse_compile(model, &old_options, &refused), QFUSE_ERROR_INVALID_ARGUMENT,
                "qfuse_compile_options_init");
    CHECK(refused == NULL);
  }

  /* Import and compile in one call, through the compiled-model cache: the
   * first call stores, the second maps the entry; both run as `fused`. */
  {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/qfuse_c_api_cache", getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
    qfuse_compile_options cached;
    qfuse_compile_options_init(&cached);
    CHECK(cached.cache_dir == NULL);
    cached.cache_dir = dir;
    qfuse_compiled_model* first = NULL;
    qfuse_compiled_model* second = NULL;
    CHECK_OK(qfuse_compile_onnx_file(path, &shape, 1, &cached, &first));
    CHECK_OK(qfuse_compile_onnx_file(path, &shape, 1, &cached, &second));
    if (first == NULL || second == NULL) return 1;
    const char* first_cache = qfuse_compiled_model_cache(first);
    const char* second_cache = qfuse_compiled_model_cache(second);
    printf("cache: %s\ncache: %s\n", first_cache, second_cache);
    CHECK(strncmp(first_cache, "miss", 4) == 0 || strncmp(first_cache, "hit ", 4) == 0);
    CHECK(strncmp(second_cache, "hit ", 4) == 0);
    CHECK(strcmp(qfuse_compiled_model_cache(fused), "") == 0);
    CHECK(qfuse_layer_count(second) == qfuse_layer_count(fused));
    qfuse_compiled_model* none = NULL;
    CHECK_FAILS(qfuse_compile_onnx_file("/nonexistent.onnx", NULL, 0, &cached, &none), QFUSE_ERROR_IO,
                "nonexistent");
    CHECK(none == NULL);
    /* An older caller's options (no cache_dir field) still compile. */
    qfuse_compile_options older;
    qfuse_compile_options_init(&older);
    older.struct_size = offsetof(qfuse_compile_options, cache_dir);
    older.cache_dir = dir; /* beyond the caller's struct: not read */
    qfuse_compiled_model* old_caller = NULL;
    CHECK_OK(qfuse_compile_onnx_file(path, &shape, 1, &older, &old_caller));
    if (old_caller != NULL) CHECK(strcmp(qfuse_compiled_model_cache(old_caller), "") == 0);
    qfuse_compiled_model_free(old_caller);
    /* The same input through the cached models gives fused's logits. */
    qfuse_tensor_info cin, cout;
    CHECK_OK(qfuse_input_info(second, 0, &cin));
    CHECK_OK(qfuse_output_info(second, 0, &cout));
    const size_t n = elements(&cin), m = elements(&cout);
    float* cx = malloc(n * sizeof(float));
    float* a = malloc(m * sizeof(float));
    float* b = malloc(m * sizeof(float));
    for (size_t i = 0; i < n; ++i) cx[i] = (float)((i * 131u) % 256u) / 255.0f;
    qfuse_request* ra = NULL;
    qfuse_request* rb = NULL;
    CHECK_OK(qfuse_request_create(fused, &ra));
    CHECK_OK(qfuse_request_create(second, &rb));
    CHECK_OK(qfuse_request_set_input(ra, cin.name, QFUSE_F32, cin.dims, cin.rank, cx, n * sizeof(float)));
    CHECK_OK(qfuse_request_set_input(rb, cin.name, QFUSE_F32, cin.dims, cin.rank, cx, n * sizeof(float)));
    CHECK_OK(qfuse_request_infer(ra));
    CHECK_OK(qfuse_request_infer(rb));
    CHECK_OK(qfuse_request_get_output(ra, cout.name, a, m * sizeof(float)));
    CHECK_OK(qfuse_request_get_output(rb, cout.name, b, m * sizeof(float)));
    CHECK(memcmp(a, b, m * sizeof(float)) == 0);
    /* The batch is symbolic in the file: three copies of the input in one
     * request give three copies of the output (the next shape is compiled
     * on first use). */
    const char* batch = qfuse_input_dim_name(fused, 0, 0);
    CHECK(batch != NULL && strlen(batch) > 0);
    CHECK(qfuse_input_dim_name(fused, 0, 1) != NULL && strcmp(qfuse_input_dim_name(fused, 0, 1), "") == 0);
    CHECK(qfuse_input_dim_name(fused, 0, cin.rank) == NULL);
    {
      int64_t dims3[8];
      for (size_t d = 0; d < cin.rank && d < 8; ++d) dims3[d] = cin.dims[d];
      dims3[0] *= 3;
      float* x3 = malloc(3 * n * sizeof(float));
      float* y3 = malloc(3 * m * sizeof(float));
      for (size_t k = 0; k < 3; ++k) memcpy(x3 + k * n, cx, n * sizeof(float));
      CHECK_OK(qfuse_request_set_input(ra, cin.name, QFUSE_F32, dims3, cin.rank, x3, 3 * n * sizeof(float)));
      CHECK_OK(qfuse_request_infer(ra));
      qfuse_tensor_info got;
      CHECK_OK(qfuse_request_output_info(ra, cout.name, &got));
      CHECK(got.rank == cout.rank && got.dims[0] == 3 * cout.dims[0]);
      CHECK_OK(qfuse_request_get_output(ra, cout.name, y3, 3 * m * sizeof(float)));
      float worst = 0.0f;
      for (size_t i = 0; i < 3 * m; ++i) {
        const float d = fabsf(y3[i] - a[i % m]) / (1.0f + fabsf(a[i % m]));
        if (d > worst) worst = d;
      }
      CHECK(worst <= 1e-4f);
      dims3[1] += 1;
      CHECK_FAILS(qfuse_request_bind_input(ra, cin.name, QFUSE_F32, dims3, cin.rank, x3),
                  QFUSE_ERROR_INFERENCE, "dimension 1");
      free(x3);
      free(y3);
    }
    qfuse_request_free(ra);
    qfuse_request_free(rb);
    free(cx);
    free(a);
    free(b);
    qfuse_compiled_model_free(first);
    qfuse_compiled_model_free(second);
  }

  /* The fusion log and the refusals, as the C++ API gives them. */
  CHECK(qfuse_fusion_log_count(fused) > 0);
  for (size_t i = 0; i < qfuse_fusion_log_count(fused); ++i) {
    const char* line = qfuse_fusion_log_line(fused, i);
    CHECK(line != NULL && strchr(line, ':') != NULL);
  }
  CHECK(qfuse_fusion_log_line(fused, qfuse_fusion_log_count(fused)) == NULL);
  CHECK(qfuse_refusal_count(unfused) == 0);
  for (size_t i = 0; i < qfuse_refusal_count(fused); ++i) {
    qfuse_refusal_info r;
    qfuse_refusal_info_init(&r);
    CHECK_OK(qfuse_refusal(fused, i, &r));
    CHECK(strlen(r.pass) > 0 && strlen(r.node) > 0 && strlen(r.reason) > 0);
  }
  {
    qfuse_refusal_info r;
    qfuse_refusal_info_init(&r);
    CHECK_FAILS(qfuse_refusal(fused, qfuse_refusal_count(fused), &r), QFUSE_ERROR_INVALID_ARGUMENT,
                "qfuse_refusal: index");
  }

  /* Run fused and unfused on the same input; the logits agree closely. */
  const size_t n_in = elements(&in), n_out = elements(&out);
  float* x = malloc(n_in * sizeof(float));
  float* y_fused = malloc(n_out * sizeof(float));
  float* y_unfused = malloc(n_out * sizeof(float));
  float* y_bound = malloc(n_out * sizeof(float));
  for (size_t i = 0; i < n_in; ++i) x[i] = (float)((i * 7919u) % 256u) / 255.0f;
  qfuse_request* rf = NULL;
  qfuse_request* ru = NULL;
  CHECK_OK(qfuse_request_create(fused, &rf));
  CHECK_OK(qfuse_request_create(unfused, &ru));
  CHECK_OK(qfuse_request_set_input(rf, in.name, QFUSE_F32, in.dims, in.rank, x, n_in * sizeof(float)));
  CHECK_OK(qfuse_request_set_input(ru, in.name, QFUSE_F32, in.dims, in.rank, x, n_in * sizeof(float)));
  CHECK_OK(qfuse_request_infer(rf));
  CHECK_OK(qfuse_request_infer(ru));
  CHECK_OK(qfuse_request_get_output(rf, out.name, y_fused, n_out * sizeof(float)));
  CHECK_OK(qfuse_request_get_output(ru, out.name, y_unfused, n_out * sizeof(float)));
  double dot = 0, nf = 0, nu = 0;
  for (size_t i = 0; i < n_out; ++i) {
    dot += (double)y_fused[i] * y_unfused[i];
    nf += (double)y_fused[i] * y_fused[i];
    nu += (double)y_unfused[i] * y_unfused[i];
  }
  const double cosine = dot / sqrt(nf * nu);
  printf("fused vs unfused logits: cosine %.6f\n", cosine);
  CHECK(cosine > 0.99);

  /* Zero-copy: bound buffers give the same bits as the copying path. */
  int zero_copy = -1;
  CHECK_OK(qfuse_request_bind_input(rf, in.name, QFUSE_F32, in.dims, in.rank, x));
  CHECK_OK(qfuse_request_bind_output(rf, out.name, QFUSE_F32, out.dims, out.rank, y_bound, &zero_copy));
  CHECK(zero_copy == 0 || zero_copy == 1);
  CHECK_OK(qfuse_request_infer(rf));
  CHECK(memcmp(y_bound, y_fused, n_out * sizeof(float)) == 0);
  printf("bound output: zero copy %d\n", zero_copy);

  /* Misuse at inference: named, never a crash. */
  int64_t wrong_dims[4] = {1, 2, 28, 28}; /* the batch is symbolic, the channels are not */
  float* two_channels = calloc(2 * 28 * 28, sizeof(float));
  CHECK_FAILS(qfuse_request_set_input(ru, in.name, QFUSE_F32, wrong_dims, 4, two_channels,
                                      2 * 28 * 28 * sizeof(float)),
              QFUSE_ERROR_INFERENCE, "dimension 1");
  free(two_channels);
  CHECK_FAILS(qfuse_request_set_input(ru, in.name, QFUSE_U8, in.dims, in.rank, x, n_in),
              QFUSE_ERROR_INFERENCE, "u8");
  CHECK_FAILS(qfuse_request_set_input(ru, in.name, QFUSE_F32, in.dims, in.rank, x, 3),
              QFUSE_ERROR_INFERENCE, "bytes");
  CHECK_FAILS(qfuse_request_set_input(ru, "nope", QFUSE_F32, in.dims, in.rank, x, n_in * sizeof(float)),
              QFUSE_ERROR_INFERENCE, "nope");
  CHECK_FAILS(qfuse_request_set_input(ru, in.name, (qfuse_element_type)42, in.dims, in.rank, x, 4),
              QFUSE_ERROR_INVALID_ARGUMENT, "element type");
  CHECK_FAILS(qfuse_request_get_output(ru, out.name, y_unfused, 1), QFUSE_ERROR_INFERENCE, "bytes");
  CHECK_FAILS(qfuse_request_infer(NULL), QFUSE_ERROR_INVALID_ARGUMENT, "request is NULL");
  CHECK_FAILS(qfuse_request_set_threads(ru, -2), QFUSE_ERROR_INVALID_ARGUMENT, "threads");
  CHECK_OK(qfuse_request_set_threads(ru, 1));
  CHECK_OK(qfuse_request_infer(ru));
  CHECK(strcmp(qfuse_last_error(), "") == 0);
  CHECK(strcmp(qfuse_status_name(QFUSE_ERROR_IO), "i/o error") == 0);

  qfuse_request_free(rf);
  qfuse_request_free(ru);
  qfuse_compiled_model_free(fused);
  qfuse_compiled_model_free(unfused);
  qfuse_model_free(model);
  qfuse_model_free(from_memory);
  qfuse_request_free(NULL);
  qfuse_compiled_model_free(NULL);
  qfuse_model_free(NULL);
  free(x);
  free(y_fused);
  free(y_unfused);
  free(y_bound);
  /* An OpenVINO IR: its .bin read beside it; a missing file and NULL named. */
  CHECK_FAILS(qfuse_import_openvino_file(NULL, NULL, 0, &model), QFUSE_ERROR_INVALID_ARGUMENT,
              "xml_path is NULL");
  CHECK_FAILS(qfuse_import_openvino_file("/nonexistent.xml", NULL, 0, &model), QFUSE_ERROR_IO,
              "nonexistent");
  if (argc > 2) {
    qfuse_model* ir = NULL;
    CHECK_OK(qfuse_import_openvino_file(argv[2], NULL, 0, &ir));
    qfuse_compiled_model* ir_compiled = NULL;
    if (ir != NULL) CHECK_OK(qfuse_compile(ir, NULL, &ir_compiled));
    if (ir_compiled != NULL) printf("OpenVINO IR %s compiled\n", argv[2]);
    qfuse_compiled_model_free(ir_compiled);
    qfuse_model_free(ir);
  }
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("C API: all checks passed\n");
  return 0;
}
