# Warnings (errors by default) and the optional ASan+UBSan instrumentation,
# applied target by target so that imported targets are left alone.

function(qfuse_target_options target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wimplicit-fallthrough -Wformat=2
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>
    # Designated initializers that leave defaulted members out are intended.
    -Wno-missing-field-initializers)
  if(QFUSE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# In a unity build (the default, see CMakeLists.txt) files whose file-local
# names would meet another file's are marked SKIP_UNITY_BUILD_INCLUSION where
# their target lists them. GCC takes an included .cpp for a header and warns
# of its classes' anonymous-namespace members; in the file's own build they
# are not a header's.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()

if(QFUSE_SANITIZE)
  # ASan + UBSan for everything built here; UBSan findings abort the process.
  # GCC 12's -Wmaybe-uninitialized misfires inside libstdc++'s <regex>
  # (std::function's members in _StateT) once ASan instruments an optimized
  # build; the uninstrumented builds keep it, as an error.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer
                      $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
  add_link_options(-fsanitize=address,undefined)
endif()

if(QFUSE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "QFUSE_FUZZ needs clang (libFuzzer): configure with CXX=clang++ CC=clang")
  endif()
  # Coverage feedback for libFuzzer in everything built here.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(QFUSE_TSAN)
  if(QFUSE_SANITIZE)
    message(FATAL_ERROR "QFUSE_TSAN and QFUSE_SANITIZE (ASan) cannot be combined")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

# Sanitized shared libraries leave the sanitizer runtime's symbols to the
# executable (clang links the runtime into executables only).
if(QFUSE_SANITIZE OR QFUSE_TSAN OR QFUSE_FUZZ)
  set(QFUSE_ANY_SANITIZER ON)
else()
  set(QFUSE_ANY_SANITIZER OFF)
endif()
