# `cmake --install build --prefix P`: the public headers (MLIR-free), the
# libraries, the kiln command, and P/lib/cmake/kiln/kilnConfig.cmake with the
# targets kiln::runtime, kiln::kiln (compiler and DSL), kiln::kernels and
# kiln::c (the C ABI). examples/consumer is a project that uses them.
include(CMakePackageConfigHelpers)

set_target_properties(kiln_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(kiln_kernels PROPERTIES EXPORT_NAME kernels)
set_target_properties(kiln_c PROPERTIES EXPORT_NAME c)
# Installed libraries find each other next to themselves.
set_target_properties(kiln_runtime kiln kiln_kernels kiln_c kiln-cli PROPERTIES
  INSTALL_RPATH "$ORIGIN;$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

install(TARGETS kiln_runtime kiln kiln_kernels kiln_c EXPORT kilnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Public headers: every header under the include folders but KernelImpl.h
# and OptMain.h, which are libkiln's own (they include MLIR).
foreach(dir runtime/include compiler/include dsl/include kernels/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/kiln
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    FILES_MATCHING PATTERN "*.h"
    PATTERN "KernelImpl.h" EXCLUDE PATTERN "OptMain.h" EXCLUDE
    PATTERN "Dialect" EXCLUDE PATTERN "Transforms" EXCLUDE)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/python/capi/kiln_c.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT kilnTargets NAMESPACE kiln::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake
  ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
