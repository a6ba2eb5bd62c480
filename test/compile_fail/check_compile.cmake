# cmake -P check_compile.cmake: compiles one CUDA file alone and checks how that went.
#   -DCOMPILER=      the CUDA compiler (nvcc)
#   -DHOST_COMPILER= its host compiler (-ccbin), optional
#   -DINCLUDE_DIR=   vxqa's include directory
#   -DSOURCE=        the .cu file
#   -DEXPECT=FAIL    passes only if compilation fails and the output contains EXPECT_MESSAGE
#   -DEXPECT=PASS    passes only if compilation succeeds
foreach(var COMPILER INCLUDE_DIR SOURCE EXPECT)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_compile.cmake: -D${var}= is required")
  endif()
endforeach()
if(EXPECT STREQUAL "FAIL" AND "${EXPECT_MESSAGE}" STREQUAL "")
  message(FATAL_ERROR "check_compile.cmake: EXPECT=FAIL needs -DEXPECT_MESSAGE=")
endif()

set(command "${COMPILER}")
if(HOST_COMPILER)
  list(APPEND command -ccbin "${HOST_COMPILER}")
endif()
list(APPEND command -std=c++17 "-I${INCLUDE_DIR}" -arch=sm_75 -c "${SOURCE}" -o /dev/null)
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE output ERROR_VARIABLE output)
string(REPLACE ";" " " shown "${command}")

if(EXPECT STREQUAL "PASS")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "expected to compile, failed (${rc}):\n  ${shown}\n${output}")
  endif()
  message(STATUS "compiled, as expected: ${shown}")
elseif(EXPECT STREQUAL "FAIL")
  if(rc EQUAL 0)
    message(FATAL_ERROR "expected a compile error, it compiled:\n  ${shown}\n${output}")
  endif()
  string(FIND "${output}" "${EXPECT_MESSAGE}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "failed (${rc}) but without \"${EXPECT_MESSAGE}\":\n  ${shown}\n${output}")
  endif()
  message(STATUS "failed with \"${EXPECT_MESSAGE}\", as expected: ${shown}")
else()
  message(FATAL_ERROR "check_compile.cmake: EXPECT must be PASS or FAIL, not '${EXPECT}'")
endif()
