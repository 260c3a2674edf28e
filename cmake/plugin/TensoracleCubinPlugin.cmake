# tensoracle_add_cubin_plugin(): builds a cubin plugin library from the caller's plugin sources, tensoracle's common
# source (cubin_plugin.cpp) and a bundle's generated bundle.cpp. Installed with the package; find_package(tensoracle)
# includes it. Needs CMake 3.20+, a C++17 compiler, cuda.h and the CUDA driver library (no tensoracle library).
include_guard(GLOBAL)
if(CMAKE_VERSION VERSION_LESS 3.20)
  message(FATAL_ERROR "tensoracle_add_cubin_plugin needs CMake 3.20 or later (this is ${CMAKE_VERSION})")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/TensoracleCuda.cmake")

# Where the plugin headers and the common source are: set by tensoracleConfig.cmake for an installed package, else
# found next to this file (the source tree's cmake/plugin/, an installed lib/cmake/tensoracle/, or a cpp/cmake/ tree).
function(_tensoracle_plugin_sources out_include out_source)
  set(here "${CMAKE_CURRENT_FUNCTION_LIST_DIR}")
  set(candidates
      "${TENSORACLE_PLUGIN_INCLUDE_DIR}|${TENSORACLE_PLUGIN_SOURCE}"
      "${here}/../../include|${here}/../../src/cubin_plugin/cubin_plugin.cpp"
      "${here}/../../../include|${here}/../../../share/tensoracle/src/cubin_plugin.cpp"
      "${here}/../include|${here}/../src/cubin_plugin.cpp")
  if(DEFINED TENSORACLE_CPP_ROOT AND NOT "${TENSORACLE_CPP_ROOT}" STREQUAL "")
    list(INSERT candidates 0 "${TENSORACLE_CPP_ROOT}/include|${TENSORACLE_CPP_ROOT}/src/cubin_plugin.cpp")
  endif()
  set(tried "")
  foreach(candidate IN LISTS candidates)
    string(REPLACE "|" ";" pair "${candidate}")
    list(GET pair 0 include)
    list(LENGTH pair n)
    if(n LESS 2 OR include STREQUAL "")
      continue()
    endif()
    list(GET pair 1 source)
    list(APPEND tried "${include}/tensoracle/cubin_plugin.hpp and ${source}")
    if(EXISTS "${include}/tensoracle/cubin_plugin.hpp" AND EXISTS "${source}")
      get_filename_component(include "${include}" ABSOLUTE)
      get_filename_component(source "${source}" ABSOLUTE)
      set(${out_include} "${include}" PARENT_SCOPE)
      set(${out_source} "${source}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  string(REPLACE ";" "\n    " tried "${tried}")
  message(FATAL_ERROR "tensoracle_add_cubin_plugin: the plugin headers and common source were not found. Tried:\n"
                      "    ${tried}\nUse find_package(tensoracle) or set TENSORACLE_CPP_ROOT.")
endfunction()

# tensoracle_add_cubin_plugin(TARGET <name> BUNDLE_ROOT <dir> SOURCES <file>...)
# A SHARED library <name> exporting only tensoracle_get_plugin_creators (hidden visibility plus, with GNU-style
# linkers, a version script), C++17, linked with the CUDA driver and Threads::Threads.
function(tensoracle_add_cubin_plugin)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "TARGET;BUNDLE_ROOT" "SOURCES")
  if(DEFINED ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tensoracle_add_cubin_plugin: unknown arguments: ${ARG_UNPARSED_ARGUMENTS} "
                        "(it takes TARGET <name> BUNDLE_ROOT <dir> SOURCES <file>...)")
  endif()
  foreach(required TARGET BUNDLE_ROOT SOURCES)
    if("${ARG_${required}}" STREQUAL "")
      message(FATAL_ERROR "tensoracle_add_cubin_plugin: ${required} is required "
                          "(TARGET <name> BUNDLE_ROOT <dir> SOURCES <file>...)")
    endif()
  endforeach()
  get_filename_component(bundle_root "${ARG_BUNDLE_ROOT}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${bundle_root}/bundle.cpp")
    message(FATAL_ERROR "tensoracle_add_cubin_plugin: ${bundle_root}/bundle.cpp does not exist "
                        "(BUNDLE_ROOT must be a bundle directory written by the cubin producer)")
  endif()

  _tensoracle_plugin_sources(plugin_include plugin_source)
  tensoracle_find_cuda(OUT_INCLUDE_DIR cuda_include OUT_DRIVER_LIBRARY cuda_driver)
  find_package(Threads REQUIRED)

  add_library(${ARG_TARGET} SHARED ${ARG_SOURCES} "${plugin_source}" "${bundle_root}/bundle.cpp")
  target_include_directories(${ARG_TARGET} PRIVATE "${plugin_include}")
  target_link_libraries(${ARG_TARGET} PRIVATE tensoracle_cuda_driver Threads::Threads)
  target_compile_features(${ARG_TARGET} PRIVATE cxx_std_17)
  set_target_properties(${ARG_TARGET} PROPERTIES C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
                                                 VISIBILITY_INLINES_HIDDEN YES)
  if(NOT WIN32 AND NOT APPLE)
    # Template instantiations of the standard library keep default visibility; the version script hides them too,
    # and -z defs reports a missing symbol (a forgotten bundle.cpp) when linking rather than when loading.
    set(map "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tensoracle_plugin.map")
    if(EXISTS "${map}")
      target_link_options(${ARG_TARGET} PRIVATE "LINKER:--version-script=${map}")
      set_property(TARGET ${ARG_TARGET} APPEND PROPERTY LINK_DEPENDS "${map}")
    endif()
    target_link_options(${ARG_TARGET} PRIVATE "LINKER:-z,defs")
  endif()
endfunction()
