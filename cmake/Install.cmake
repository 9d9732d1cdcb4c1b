# cmake --install: the shared libraries, the public headers, the CLI, a CMake
# package (find_package(qfuse) -> qfuse::qfuse, qfuse::onnx) and pkg-config
# files (qfuse, qfuse-onnx).
include(CMakePackageConfigHelpers)

set(QFUSE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qfuse)
set(qfuse_install_targets qfuse)
if(QFUSE_BUILD_ONNX)
  list(APPEND qfuse_install_targets qfuse_onnx)
endif()
install(TARGETS ${qfuse_install_targets} EXPORT qfuseTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/plugin/include/qfuse
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS qfuse_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The bundled models the CLI's default job runs (found from bin/ as
# ../share/qfuse/fashion_mnist).
install(FILES ${PROJECT_SOURCE_DIR}/tools/fashion_mnist/fashion_cnn.onnx
              ${PROJECT_SOURCE_DIR}/tools/fashion_mnist/fashion_cnn.torch.json
              ${PROJECT_SOURCE_DIR}/tools/fashion_mnist/fashion_vit.onnx
              ${PROJECT_SOURCE_DIR}/tools/fashion_mnist/fashion_vit.torch.json
              ${PROJECT_SOURCE_DIR}/tools/fashion_mnist/fashion_dae.onnx
              ${PROJECT_SOURCE_DIR}/tools/fashion_mnist/fashion_dae.torch.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/qfuse/fashion_mnist)
install(EXPORT qfuseTargets NAMESPACE qfuse:: DESTINATION ${QFUSE_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qfuseConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/qfuseConfig.cmake
                              INSTALL_DESTINATION ${QFUSE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qfuseConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qfuseConfig.cmake ${PROJECT_BINARY_DIR}/qfuseConfigVersion.cmake
        DESTINATION ${QFUSE_CMAKE_DIR})

# Relocatable: the prefix is found from the .pc file's own directory.
file(RELATIVE_PATH QFUSE_PC_TO_PREFIX ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" QFUSE_PC_TO_PREFIX "${QFUSE_PC_TO_PREFIX}")
foreach(pc qfuse qfuse-onnx)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
