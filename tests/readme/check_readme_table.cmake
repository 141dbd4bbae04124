# cmake -DGEN=<gdrnet-gen-config-doc> -DREADME=README.md -P check_readme_table.cmake
# Compares the text between the README's "<!-- knobs:begin -->" and "<!-- knobs:end -->" lines with the table the
# parameter table generates, so the README cannot drift from plugin/params.def.
execute_process(COMMAND ${GEN} --readme OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GEN} --readme failed (${rc})")
endif()
file(READ ${README} readme)
string(FIND "${readme}" "<!-- knobs:begin -->\n" b)
string(FIND "${readme}" "<!-- knobs:end -->" e)
if(b EQUAL -1 OR e EQUAL -1 OR e LESS b)
  message(FATAL_ERROR "README.md has no <!-- knobs:begin --> ... <!-- knobs:end --> section")
endif()
math(EXPR start "${b} + 21")
math(EXPR len "${e} - ${start}")
string(SUBSTRING "${readme}" ${start} ${len} committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "README.md's knob table is out of date with plugin/params.def. Regenerate the lines between "
                      "the knobs markers with: <build>/plugin/gdrnet-gen-config-doc --readme")
endif()
message(STATUS "README.md's knob table matches plugin/params.def")
