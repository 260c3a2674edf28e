# ctest driver: installs the build into a scratch prefix, builds a plugin project against it (find_package(tensoracle)
# + tensoracle_add_cubin_plugin, tests/cubin_plugin/consumer/) on a test bundle, checks that the library exports only
# the entry point and loads without a GPU. Prints SKIPPED (the test's skip expression) where no cuda.h is installed.
# -DBUILD_DIR -DSOURCE_DIR (tests/cubin_plugin) -DREPO_DIR -DWORK_DIR -DGENERATOR
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

include("${REPO_DIR}/cmake/plugin/TensoracleCuda.cmake")
_tensoracle_find_cuda_inputs(cuda_include cuda_driver cuda_error)
if(NOT cuda_error STREQUAL "")
  message(STATUS "SKIPPED: no CUDA inputs for a plugin build here:\n${cuda_error}")
  return()
endif()

run_step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
file(GLOB config_dir "${prefix}/lib*/cmake/tensoracle")
foreach(required include/tensoracle/cubin_plugin.hpp include/tensoracle/cubin_bundle.hpp include/tensoracle/plugin.hpp
                 share/tensoracle/src/cubin_plugin.cpp)
  if(NOT EXISTS "${prefix}/${required}")
    message(FATAL_ERROR "install is missing ${required}")
  endif()
endforeach()
foreach(required TensoracleCubinPlugin.cmake TensoracleCuda.cmake tensoracle_plugin.map)
  if(NOT EXISTS "${config_dir}/${required}")
    message(FATAL_ERROR "install is missing ${config_dir}/${required}")
  endif()
endforeach()

# The test bundle: a real cubin when nvcc is here, else bytes that only stand in for one (nothing loads them: the
# checker needs no GPU).
find_program(nvcc nvcc HINTS "${cuda_include}/../bin")
set(bundle "${WORK_DIR}/bundle")
# The example builds from its committed bundle (the producer's output for every architecture).
set(example_bundle "${REPO_DIR}/examples/cubin_plugin/bundle")
file(MAKE_DIRECTORY "${bundle}/cubins/sm90")
if(nvcc)
  run_step("${nvcc}" -cubin -arch=sm_90 -o "${bundle}/cubins/sm90/add.cubin" "${SOURCE_DIR}/consumer/kernel.cu")
else()
  file(WRITE "${bundle}/cubins/sm90/add.cubin" "not a cubin: nvcc was not found")
endif()
file(WRITE "${WORK_DIR}/bundle_spec.cmake" "
set(BUNDLE_DIGEST consumer-test)
set(BUNDLE_KERNELS add)
set(add_NAME add)
set(add_ENTRY add_f32)
set(add_ARGS \"x:pointer:1:16;y:pointer:1:16;n:i32:1:1;alpha:f32:1:1\")
set(add_SCRATCH 0)
set(add_THREADS 0)
set(add_CUBINS \"90=${bundle}/cubins/sm90/add.cubin\")
")
run_step(${CMAKE_COMMAND} -DSPEC=${WORK_DIR}/bundle_spec.cmake -DOUTPUT=${bundle}/bundle.cpp
         -P "${SOURCE_DIR}/embed_bundle.cmake")

run_step(${CMAKE_COMMAND} -S "${SOURCE_DIR}/consumer" -B "${WORK_DIR}/build" -G "${GENERATOR}"
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DTEST_BUNDLE_ROOT=${bundle})
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
set(libraries "${WORK_DIR}/build/libconsumer_plugin.so")
# The example project itself (examples/cubin_plugin/CMakeLists.txt) against the installed package.
run_step(${CMAKE_COMMAND} -S "${REPO_DIR}/examples/cubin_plugin" -B "${WORK_DIR}/example" -G "${GENERATOR}"
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DEXAMPLE_BUNDLE_ROOT=${example_bundle})
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/example")
list(APPEND libraries "${WORK_DIR}/example/libtensoracle_example_cubin_plugin.so")

# Exactly one exported symbol.
find_program(nm NAMES nm REQUIRED)
foreach(library IN LISTS libraries)
  run_step("${nm}" -D --defined-only "${library}")
  string(REGEX MATCHALL "[^\n]+" lines "${step_output}")
  set(exported "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] " "" symbol "${line}")
    list(APPEND exported "${symbol}")
  endforeach()
  if(NOT exported STREQUAL "tensoracle_get_plugin_creators")
    message(FATAL_ERROR "${library} exports '${exported}', not only tensoracle_get_plugin_creators")
  endif()
endforeach()

# dlopen needs libcuda.so.1; where the system has no driver, the toolkit's stub stands in (its calls would fail, and
# the checker makes none).
set(loader_env "")
execute_process(COMMAND ldconfig -p OUTPUT_VARIABLE ld_cache ERROR_QUIET)
if(NOT ld_cache MATCHES "libcuda\\.so\\.1 ")
  file(READ "${WORK_DIR}/build/cuda_driver.txt" linked_driver)
  file(MAKE_DIRECTORY "${WORK_DIR}/driver")
  file(CREATE_LINK "${linked_driver}" "${WORK_DIR}/driver/libcuda.so.1" SYMBOLIC)
  set(loader_env "LD_LIBRARY_PATH=${WORK_DIR}/driver")
endif()
run_step(${CMAKE_COMMAND} -E env ${loader_env} "${WORK_DIR}/build/plugin_checker"
         "${WORK_DIR}/build/libconsumer_plugin.so" --probe consumer_add/1 consumer_add_like/2)
run_step(${CMAKE_COMMAND} -E env ${loader_env} "${WORK_DIR}/build/plugin_checker"
         "${WORK_DIR}/example/libtensoracle_example_cubin_plugin.so" bias/1 scale/1 dot/1)
