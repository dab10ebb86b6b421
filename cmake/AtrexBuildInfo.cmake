# atrex::build_info: what `atrex --version` prints and what a sweep's manifest records of the
# build that produced its results (docs/results.md "Manifest"): the version, the commit (at
# build time, see AtrexGitDescribe.cmake), the build type, and atrex's own compilers and flags.
# A small library of its own: a new commit relinks only its users (the CLI and the scheduler).
find_program(ATREX_GIT_EXECUTABLE git)
set(_atrex_gen_dir ${CMAKE_BINARY_DIR}/generated/atrex)
add_custom_target(atrex_build_version
  COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${_atrex_gen_dir}/git_describe.h
          -DGIT=${ATREX_GIT_EXECUTABLE} -P ${CMAKE_SOURCE_DIR}/cmake/AtrexGitDescribe.cmake
  BYPRODUCTS ${_atrex_gen_dir}/git_describe.h
  COMMENT "atrex: commit of the source tree"
  VERBATIM)

function(atrex_add_build_info_library)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _bt)
  string(STRIP "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${_bt}}" _atrex_cxx_flags)
  string(REPLACE "\"" "\\\"" _atrex_cxx_flags "${_atrex_cxx_flags}")
  set(_atrex_cxx "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} (${CMAKE_CXX_COMPILER})")
  set(_atrex_cuda "")
  if(ATREX_HAVE_CUDA)
    set(_atrex_cuda "${CMAKE_CUDA_COMPILER_ID} ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER})")
  endif()
  configure_file(${CMAKE_SOURCE_DIR}/cmake/atrex_build_config.h.in ${_atrex_gen_dir}/build_config.h @ONLY)
  add_library(atrex_build_info STATIC ${CMAKE_SOURCE_DIR}/common/src/build/build_info.cpp)
  add_library(atrex::build_info ALIAS atrex_build_info)
  add_dependencies(atrex_build_info atrex_build_version)
  target_include_directories(atrex_build_info PRIVATE ${_atrex_gen_dir})
  target_link_libraries(atrex_build_info PUBLIC atrex::common)
  atrex_target_warnings(atrex_build_info)
endfunction()
