# cmake -DBUILD_DIR=... -DWORK=... -DCONSUMER_SRC=... -DCXX=... -DCONFIG=... -DMODEL=... -P install_and_consume.cmake
# Installs the build tree into WORK/prefix, checks the installed layout, configures and builds the
# outside project CONSUMER_SRC against it with find_package(lingbot_map CONFIG), runs it on MODEL
# and checks its summary line. Any failing step fails the test with that step's output.
foreach(v BUILD_DIR WORK CONSUMER_SRC CXX CONFIG MODEL)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install_and_consume.cmake: -D${v}= is required")
  endif()
endforeach()

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})

# The installed headers are exactly include/lingbot/ (no internal header travels along), and the
# package, the libraries and the CLI are where docs/library.md says.
file(GLOB installed_include RELATIVE ${prefix}/include ${prefix}/include/*)
if(NOT installed_include STREQUAL "lingbot")
  message(FATAL_ERROR "installed include/ holds '${installed_include}', expected only 'lingbot'")
endif()
file(GLOB config_file ${prefix}/lib*/cmake/lingbot_map/lingbot_mapConfig.cmake)
file(GLOB pipeline_lib ${prefix}/lib*/liblingbot_pipeline.a)
foreach(f config_file pipeline_lib)
  if(NOT ${f})
    message(FATAL_ERROR "install: ${f} not found under ${prefix}")
  endif()
endforeach()
if(NOT EXISTS ${prefix}/bin/lingbot-map)
  message(FATAL_ERROR "install: bin/lingbot-map not found under ${prefix}")
endif()

# Only this prefix may provide the package (not a copy installed system-wide).
step("consumer configure" ${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK}/build -DCMAKE_BUILD_TYPE=${CONFIG}
     -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
     -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
string(FIND "${step_output}" "from ${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the consumer did not find lingbot_map under ${prefix}:\n${step_output}")
endif()
step("consumer build" ${CMAKE_COMMAND} --build ${WORK}/build)
step("consumer run" ${WORK}/build/consumer ${MODEL})
message("${step_output}")
if(NOT step_output MATCHES "consumer: 6 frames through paged \\(f32 weights\\), depth \\[70, 112\\], world_points \\[70, 112, 3\\], 4 features; geometry consistent; identical after reset")
  message(FATAL_ERROR "unexpected consumer output:\n${step_output}")
endif()
