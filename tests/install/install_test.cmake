# cmake --install, then configure, build and run tests/install/consumer against the installed package,
# then compile and run the aclnn examples against the installed headers and libraries.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)

# The aclnn examples, compiled unchanged against the installed headers and libraries (README's line).
set(prefix ${WORK_DIR}/prefix)
foreach(example aclnn_conv3d_backward_bf16 aclnn_conv_backward_all_outputs)
  run(${CXX} -std=c++17 ${EXAMPLES_DIR}/${example}.cpp -I${prefix}/include -L${prefix}/lib -lopapi -lnnopbase
      -lascendcl -Wl,-rpath,${prefix}/lib -o ${WORK_DIR}/${example})
  run(${WORK_DIR}/${example})
endforeach()
