# Installs libattn.a, the public headers, a CMake package (attn::attn) and a
# pkg-config file, so applications build against an installed attn the same
# way as against the source tree (issue 8). Included from the top
# CMakeLists.txt after the attn target is defined.
#
#   cmake --install build --prefix /opt/attn
#   find_package(attn CONFIG REQUIRED)   # with CMAKE_PREFIX_PATH=/opt/attn
#   pkg-config --cflags --libs attn      # with PKG_CONFIG_PATH=/opt/attn/lib/pkgconfig
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/attn" CACHE STRING
    "Where the attn CMake package files are installed (relative to the prefix)")

# The name the export gives the library inside the attn:: namespace.
set_target_properties(attn PROPERTIES EXPORT_NAME attn)
install(TARGETS attn EXPORT attnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attn
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT attnTargets NAMESPACE attn:: DESTINATION ${ATTN_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/attnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/attnConfig.cmake
  INSTALL_DESTINATION ${ATTN_INSTALL_CMAKEDIR})
# 0.x releases may change the API between minor versions.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/attnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/attnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/attnConfigVersion.cmake
        DESTINATION ${ATTN_INSTALL_CMAKEDIR})

# The prefix is only known at install time (cmake --install --prefix), so the
# .pc file finds it relative to its own location (pkg-config's ${pcfiledir});
# that also keeps an installed tree relocatable.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ATTN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _attn_pc_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _attn_pc_up "${_attn_pc_up}")
  set(ATTN_PC_PREFIX "\${pcfiledir}/${_attn_pc_up}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/attn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/attn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/attn.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
