# cmake -DGEN=gdrnet-gen-config-doc -DDOC=docs/configuration.md -P check_config_doc.cmake
execute_process(COMMAND ${GEN} OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GEN} failed (${rc})")
endif()
file(READ ${DOC} committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "docs/configuration.md is out of date with plugin/params.def. Regenerate it:\n"
                      "  cmake --build <build> --target gdrnet-gen-config-doc && "
                      "<build>/plugin/gdrnet-gen-config-doc > docs/configuration.md")
endif()
message(STATUS "docs/configuration.md matches plugin/params.def")
