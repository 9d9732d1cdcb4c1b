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

if(QFUSE_SANITIZE)
  # ASan + UBSan for everything built here; UBSan findings abort the process.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
