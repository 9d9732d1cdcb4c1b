# Every dependency comes from a Debian package; cmake/install_deps.sh installs them.
# Debian's dnnl-config.cmake insists on OpenCL headers even for CPU use, so the
# library and header are located directly.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp REQUIRED)
find_library(DNNL_LIBRARY dnnl REQUIRED)
file(STRINGS "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_major REGEX "define DNNL_VERSION_MAJOR")
if(NOT _dnnl_major MATCHES "DNNL_VERSION_MAJOR 2")
  message(FATAL_ERROR "qfuse needs oneDNN 2.x (libdnnl-dev), found: ${_dnnl_major}")
endif()
add_library(DNNL::dnnl UNKNOWN IMPORTED)
set_target_properties(DNNL::dnnl PROPERTIES
  IMPORTED_LOCATION "${DNNL_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
# The compiled-model cache's hashes and checksums (libxxhash-dev).
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
add_library(xxHash::xxhash UNKNOWN IMPORTED)
set_target_properties(xxHash::xxhash PROPERTIES
  IMPORTED_LOCATION "${XXHASH_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${XXHASH_INCLUDE_DIR}")
find_package(spdlog REQUIRED CONFIG)
find_package(OpenMP REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)  # the Fashion-MNIST test set is gzip-compressed

if(QFUSE_BUILD_TESTS)
  find_package(GTest REQUIRED CONFIG)
endif()
if(QFUSE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED CONFIG)
endif()
if(QFUSE_BUILD_ONNX)
  find_package(ONNX REQUIRED CONFIG)
  find_package(Protobuf REQUIRED)
  # The OpenVINO IR reader's XML (libpugixml-dev); it shares libqfuse_onnx.
  find_package(pugixml REQUIRED CONFIG)
endif()
