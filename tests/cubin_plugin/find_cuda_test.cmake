# ctest driver for the plugin CMake helpers' rules: each case configures a scratch project that includes
# cmake/plugin/TensoracleCubinPlugin.cmake and expects success or an error message. Needs no CUDA: the roots are fake.
# -DREPO_DIR -DWORK_DIR -DGENERATOR
file(REMOVE_RECURSE "${WORK_DIR}")
set(helper "${REPO_DIR}/cmake/plugin/TensoracleCubinPlugin.cmake")

# A fake toolkit root: only what the helper looks for.
set(fake "${WORK_DIR}/fake-cuda")
file(WRITE "${fake}/include/cuda.h" "/* fake cuda.h */\n")
file(WRITE "${fake}/lib64/stubs/libcuda.so" "")
file(WRITE "${WORK_DIR}/empty-root/README" "no cuda.h here\n")

set(failures 0)
# check_case(<name> <PASS|FAIL> <expected output regex> <CMakeLists body> [cmake args...])
function(check_case name expect pattern body)
  set(dir "${WORK_DIR}/${name}")
  file(WRITE "${dir}/CMakeLists.txt"
       "cmake_minimum_required(VERSION 3.20)\nproject(${name} LANGUAGES NONE)\ninclude(\"${helper}\")\n${body}\n")
  execute_process(COMMAND ${CMAKE_COMMAND} ${ARGN} -S "${dir}" -B "${dir}/build" -G "${GENERATOR}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}\n${err}")
  string(REGEX REPLACE "[ \t\r\n]+" " " flat "${all}")  # CMake wraps long messages
  set(ok TRUE)
  if(expect STREQUAL "PASS" AND NOT rc EQUAL 0)
    set(ok FALSE)
  elseif(expect STREQUAL "FAIL" AND rc EQUAL 0)
    set(ok FALSE)
  endif()
  if(NOT flat MATCHES "${pattern}")
    set(ok FALSE)
  endif()
  if(ok)
    message(STATUS "ok: ${name}")
  else()
    message(STATUS "FAILED: ${name} (expected ${expect} matching '${pattern}', rc ${rc})\n${all}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  endif()
endfunction()

set(required "both OUT_INCLUDE_DIR <var> and OUT_DRIVER_LIBRARY <var> are required")
check_case(missing_keyword FAIL "${required}" "tensoracle_find_cuda(OUT_INCLUDE_DIR inc)" -DCUDAToolkit_ROOT=${fake})
check_case(no_arguments FAIL "${required}" "tensoracle_find_cuda()" -DCUDAToolkit_ROOT=${fake})
check_case(empty_value FAIL "${required}" "tensoracle_find_cuda(OUT_INCLUDE_DIR \"\" OUT_DRIVER_LIBRARY drv)"
           -DCUDAToolkit_ROOT=${fake})
check_case(keyword_without_value FAIL "${required}" "tensoracle_find_cuda(OUT_INCLUDE_DIR OUT_DRIVER_LIBRARY drv)"
           -DCUDAToolkit_ROOT=${fake})
check_case(unknown_argument FAIL "tensoracle_find_cuda: unknown arguments: EXTRA;x"
           "tensoracle_find_cuda(OUT_INCLUDE_DIR inc OUT_DRIVER_LIBRARY drv EXTRA x)" -DCUDAToolkit_ROOT=${fake})

# CUDAToolkit_ROOT as a CMake variable and as an environment variable; called twice; the target defined once.
set(repeated [=[
tensoracle_find_cuda(OUT_INCLUDE_DIR inc OUT_DRIVER_LIBRARY drv)
tensoracle_find_cuda(OUT_INCLUDE_DIR inc2 OUT_DRIVER_LIBRARY drv2)
if(NOT TARGET tensoracle_cuda_driver)
  message(FATAL_ERROR "no tensoracle_cuda_driver target")
endif()
get_target_property(imported tensoracle_cuda_driver IMPORTED)
if(NOT inc STREQUAL inc2 OR NOT drv STREQUAL drv2 OR NOT imported OR NOT EXISTS "${drv}")
  message(FATAL_ERROR "inconsistent: ${inc} ${drv} / ${inc2} ${drv2}")
endif()
add_subdirectory(sub)
message(STATUS "include=${inc} driver=${drv}")
]=])
foreach(case root_variable root_environment root_variable_first)
  file(WRITE "${WORK_DIR}/${case}/sub/CMakeLists.txt"
       "tensoracle_find_cuda(OUT_INCLUDE_DIR inc3 OUT_DRIVER_LIBRARY drv3)\nmessage(STATUS \"sub include=\${inc3}\")\n")
endforeach()
check_case(root_variable PASS "sub include=${fake}/include .*include=${fake}/include driver=" "${repeated}"
           -DCUDAToolkit_ROOT=${fake})
check_case(root_environment PASS "include=${fake}/include driver=" "${repeated}" -E env CUDAToolkit_ROOT=${fake}
           ${CMAKE_COMMAND})
# A CMake variable wins over the environment.
check_case(root_variable_first PASS "include=${fake}/include" "${repeated}" -E env
           CUDAToolkit_ROOT=${WORK_DIR}/empty-root ${CMAKE_COMMAND} -DCUDAToolkit_ROOT=${fake})
# Without CUDAToolkit_ROOT: nvcc on PATH (its ../include) comes first, then CUDA_PATH.
set(nvcc_root "${WORK_DIR}/nvcc-root")
file(WRITE "${nvcc_root}/include/cuda.h" "/* fake cuda.h */\n")
file(WRITE "${nvcc_root}/lib64/stubs/libcuda.so" "")
file(WRITE "${WORK_DIR}/nvcc-script/nvcc" "#!/bin/sh\nexit 0\n")
file(MAKE_DIRECTORY "${nvcc_root}/bin")
file(COPY "${WORK_DIR}/nvcc-script/nvcc" DESTINATION "${nvcc_root}/bin"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE)
set(plain_find "tensoracle_find_cuda(OUT_INCLUDE_DIR inc OUT_DRIVER_LIBRARY drv)\nmessage(STATUS \"include=\${inc}\")")
check_case(nvcc_on_path PASS "include=${nvcc_root}/include" "${plain_find}" -E env --unset=CUDAToolkit_ROOT
           "PATH=${nvcc_root}/bin:/usr/bin:/bin" CUDA_PATH=${fake} ${CMAKE_COMMAND})
check_case(cuda_path PASS "include=${fake}/include" "${plain_find}" -E env --unset=CUDAToolkit_ROOT
           "PATH=/usr/bin:/bin" CUDA_PATH=${fake} ${CMAKE_COMMAND})

# A root without cuda.h: one error naming the root and the directories searched.
check_case(root_without_header FAIL
           "cuda.h was not found \\(CUDAToolkit_ROOT is '${WORK_DIR}/empty-root'\\)\\. Searched: ${WORK_DIR}/empty-root/include"
           "tensoracle_find_cuda(OUT_INCLUDE_DIR inc OUT_DRIVER_LIBRARY drv)" -DCUDAToolkit_ROOT=${WORK_DIR}/empty-root)

# tensoracle_add_cubin_plugin's own argument rules (no compiler needed: they fail before add_library).
check_case(plugin_without_bundle_root FAIL "tensoracle_add_cubin_plugin: BUNDLE_ROOT is required"
           "tensoracle_add_cubin_plugin(TARGET p SOURCES plugin.cpp)" -DCUDAToolkit_ROOT=${fake})
check_case(plugin_unknown_argument FAIL "tensoracle_add_cubin_plugin: unknown arguments: TENSORRT_ROOT;/opt/trt"
           "tensoracle_add_cubin_plugin(TARGET p TENSORRT_ROOT /opt/trt BUNDLE_ROOT b SOURCES plugin.cpp)"
           -DCUDAToolkit_ROOT=${fake})
check_case(plugin_bundle_without_source FAIL "empty-root/bundle.cpp does not exist"
           "tensoracle_add_cubin_plugin(TARGET p BUNDLE_ROOT ${WORK_DIR}/empty-root SOURCES plugin.cpp)"
           -DCUDAToolkit_ROOT=${fake})

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} helper case(s) failed")
endif()
