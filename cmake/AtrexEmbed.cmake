# atrex_embed_files(<target> NAMESPACE <ns> BASE <dir> FILES <f>...)
# Generates a C++ source that holds each file's bytes and a lookup table
#   std::span<const atrex::EmbeddedFile> <ns>::embedded_files();
# so the binary works without its source tree (e.g. the default sweep and kernel templates).
function(atrex_embed_files target)
  cmake_parse_arguments(ARG "" "NAMESPACE;BASE" "FILES" ${ARGN})
  # One generated source per namespace, so a target may embed several folders.
  string(MAKE_C_IDENTIFIER "${ARG_NAMESPACE}" ns_id)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${target}_${ns_id}_embedded.cpp)
  set(abs_files)
  foreach(f IN LISTS ARG_FILES)
    list(APPEND abs_files ${ARG_BASE}/${f})
  endforeach()
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNAMESPACE=${ARG_NAMESPACE} -DBASE=${ARG_BASE}
            "-DFILES=${ARG_FILES}" -P ${PROJECT_SOURCE_DIR}/cmake/AtrexEmbedGenerate.cmake
    DEPENDS ${abs_files} ${PROJECT_SOURCE_DIR}/cmake/AtrexEmbedGenerate.cmake
    COMMENT "Embedding ${target} resources"
    VERBATIM)
  target_sources(${target} PRIVATE ${out})
endfunction()
