# `cmake --install build --prefix P` installs:
#   P/bin/freight                    the command (RUNPATH $ORIGIN/../lib: finds the engine there)
#   P/lib/libfreight.so              the engine, and every library listed below beside it, and
#   P/lib/libfreight_tooling.so      the tooling the command links (explain, plan, bench)
#   P/include/freight/               the public headers
#   P/share/freight/models/          the model zoo (found from the engine's own location)
#   P/lib/cmake/Freight/             FreightConfig.cmake: find_package(Freight) -> Freight::freight
# (lib is GNUInstallDirs' CMAKE_INSTALL_LIBDIR, e.g. lib/x86_64-linux-gnu for the prefix /usr.)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Libraries installed beside libfreight.so that programs do not link: modules the engine dlopens
# from its own directory. One line adds one: list(APPEND freight_module_libraries <target>), here
# or anywhere before this file is included.
list(APPEND freight_module_libraries)

# The engine finds <prefix>/share/freight from its own directory and from the program's: the
# relative paths follow the install layout (src/io/install_paths.cpp).
file(RELATIVE_PATH freight_lib_to_share ${CMAKE_INSTALL_FULL_LIBDIR}
  ${CMAKE_INSTALL_FULL_DATADIR}/freight)
file(RELATIVE_PATH freight_bin_to_share ${CMAKE_INSTALL_FULL_BINDIR}
  ${CMAKE_INSTALL_FULL_DATADIR}/freight)
file(RELATIVE_PATH freight_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
set_property(SOURCE src/io/install_paths.cpp APPEND PROPERTY COMPILE_DEFINITIONS
  FREIGHT_LIB_TO_SHARE="${freight_lib_to_share}" FREIGHT_BIN_TO_SHARE="${freight_bin_to_share}")

# Installed binaries keep the RUNPATH entries of libraries outside the project (OpenBLAS's OpenMP
# flavour lives in a directory of its own, CUDA in /usr/local/cuda) and find the engine and its
# modules relative to themselves, never in the build tree.
set_target_properties(freight ${freight_module_libraries} PROPERTIES
  INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE)
target_include_directories(freight PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# The public headers use C++20 (std::span): a user's target gets it.
target_compile_features(freight PUBLIC cxx_std_20)

install(TARGETS freight EXPORT FreightTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(freight_module_libraries)
  install(TARGETS ${freight_module_libraries} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# The tooling (explain, plan, bench) that the command links, beside the engine.
set_target_properties(freight_tooling PROPERTIES
  INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS freight_tooling LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET freight_cli)
  set_target_properties(freight_cli PROPERTIES
    INSTALL_RPATH "$ORIGIN/${freight_bin_to_lib}" INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS freight_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY include/freight DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY models/ DESTINATION ${CMAKE_INSTALL_DATADIR}/freight/models
  FILES_MATCHING PATTERN "*.json")

# The CMake package: Freight::freight carries its include directory, C++20, FREIGHT_WITH_CUDA
# and fmt (linked publicly; FreightConfig.cmake finds it with find_dependency).
set(freight_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Freight)
install(EXPORT FreightTargets NAMESPACE Freight:: DESTINATION ${freight_cmake_dir})
configure_package_config_file(cmake/FreightConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/FreightConfig.cmake INSTALL_DESTINATION ${freight_cmake_dir})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/FreightConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/FreightConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/FreightConfigVersion.cmake DESTINATION ${freight_cmake_dir})
