# gtest_discover_tests with several ctest labels. Its PROPERTIES flatten a list value (CMake
# 3.25: `LABELS "integration;slurm"` gives the tests the label `integration` only, and `ctest -L
# slurm` selects nothing), so the labels are set from a CTest include file, read after the
# discovered tests', through the list of their names. RUN_SERIAL: the tests run alone (ctest -j
# starts nothing beside them), for tests that compare timings of two runs.
function(atrex_discover_tests target)
  cmake_parse_arguments(arg "RUN_SERIAL" "" "LABELS" ${ARGN})
  gtest_discover_tests(${target} TEST_LIST ${target}_TESTS DISCOVERY_TIMEOUT 60)
  set(file "${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake")
  set(serial "")
  if(arg_RUN_SERIAL)
    set(serial " RUN_SERIAL TRUE")
  endif()
  file(WRITE "${file}" "if(${target}_TESTS)\n  set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"${arg_LABELS}\"${serial})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${file}")
endfunction()
