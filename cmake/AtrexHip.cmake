# The HIP backend's evaluation child (atrex-eval-hip) is built when the HIP runtime is found
# (ATREX_WITH_HIP=AUTO) or required (ON). It is host code only: the HIP runtime API (Debian
# libamdhip64-dev: hip/hip_runtime_api.h, libamdhip64.so), compiled by the project's C++ compiler
# with __HIP_PLATFORM_AMD__; references, input generation and comparisons run on the host. Candidates
# are compiled at run time by hipcc (runner/src/compile.cpp), not by CMake, so the HIP language is not
# enabled: CMake 3.25's HIP support does not find Debian's layout without a hand-made ROCm root
# (docs/evaluation.md "HIP backend").
#
# Sets ATREX_HAVE_HIP and, when ON, the imported target atrex::hip_runtime and ATREX_HIPCC (hipcc,
# may be NOTFOUND: the child builds without it; candidates then cannot compile).
set(ATREX_HAVE_HIP OFF)
if(NOT ATREX_WITH_HIP STREQUAL "OFF")
  set(_atrex_rocm_hints $ENV{ROCM_PATH} /opt/rocm)
  find_path(ATREX_HIP_INCLUDE_DIR hip/hip_runtime_api.h HINTS ${_atrex_rocm_hints} PATH_SUFFIXES include)
  find_library(ATREX_HIP_LIBRARY amdhip64 HINTS ${_atrex_rocm_hints} PATH_SUFFIXES lib lib64)
  find_program(ATREX_HIPCC hipcc HINTS ${_atrex_rocm_hints} PATH_SUFFIXES bin)
  if(ATREX_HIP_INCLUDE_DIR AND ATREX_HIP_LIBRARY)
    add_library(atrex_hip_runtime INTERFACE IMPORTED)
    target_include_directories(atrex_hip_runtime SYSTEM INTERFACE ${ATREX_HIP_INCLUDE_DIR})
    target_compile_definitions(atrex_hip_runtime INTERFACE __HIP_PLATFORM_AMD__=1)
    target_link_libraries(atrex_hip_runtime INTERFACE ${ATREX_HIP_LIBRARY})
    add_library(atrex::hip_runtime ALIAS atrex_hip_runtime)
    set(ATREX_HAVE_HIP ON)
    file(STRINGS ${ATREX_HIP_INCLUDE_DIR}/hip/hip_version.h _atrex_hip_version REGEX "#define HIP_VERSION_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE "[^0-9;]*([0-9]+)" "\\1" _atrex_hip_version "${_atrex_hip_version}")
    string(REPLACE ";" "." _atrex_hip_version "${_atrex_hip_version}")
    message(STATUS "atrex: HIP backend enabled (HIP runtime ${_atrex_hip_version}: ${ATREX_HIP_LIBRARY}; hipcc: ${ATREX_HIPCC})")
  elseif(ATREX_WITH_HIP STREQUAL "ON")
    message(FATAL_ERROR "ATREX_WITH_HIP=ON but the HIP runtime was not found (Debian: apt-get install libamdhip64-dev; "
                        "else set ROCM_PATH)")
  else()
    message(STATUS "atrex: no HIP runtime found (libamdhip64-dev); HIP backend disabled")
  endif()
endif()
