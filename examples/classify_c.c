/* The C API: import with a bound batch, compile, run, read the output. */
#include <stdio.h>
#include <stdlib.h>

#include <qfuse/qfuse_c.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.onnx\n", argv[0]);
    return 2;
  }
  const int64_t dims[4] = {1, 1, 28, 28};
  const qfuse_input_shape shape = {"input", 4, dims};
  qfuse_model* model = NULL;
  qfuse_compiled_model* compiled = NULL;
  qfuse_request* request = NULL;
  float x[28 * 28];
  float y[10];
  for (int i = 0; i < 28 * 28; ++i) x[i] = (float)(i % 17) / 17.0f;
  if (qfuse_import_onnx_file(argv[1], &shape, 1, &model) != QFUSE_OK ||
      qfuse_compile(model, NULL, &compiled) != QFUSE_OK ||
      qfuse_request_create(compiled, &request) != QFUSE_OK ||
      qfuse_request_set_input(request, "input", QFUSE_F32, dims, 4, x, sizeof x) != QFUSE_OK ||
      qfuse_request_infer(request) != QFUSE_OK ||
      qfuse_request_get_output(request, "output", y, sizeof y) != QFUSE_OK) {
    fprintf(stderr, "qfuse: %s\n", qfuse_last_error());
    return 1;
  }
  int best = 0;
  for (int i = 1; i < 10; ++i) best = y[i] > y[best] ? i : best;
  printf("qfuse %s, %zu layers, class %d\n", qfuse_version(), qfuse_layer_count(compiled), best);
  qfuse_request_free(request);
  qfuse_compiled_model_free(compiled);
  qfuse_model_free(model);
  return 0;
}
