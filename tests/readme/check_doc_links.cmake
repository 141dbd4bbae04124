# cmake -DROOT=<source dir> -P check_doc_links.cmake
# Every relative markdown link ](path) or ](path#anchor) of the project's own docs names a file or folder that is in
# the repository: README.md, CONTRIBUTING.md, docs/*.md, docs/archive/*.md and the READMEs under plugin/, bench/,
# tests/verbs-emu/, nccl-tests-configs/ and packaging/ (docs/results/ is a record and is not checked). URLs
# (scheme:...) and in-page anchors (#...) are skipped.
file(GLOB docs RELATIVE ${ROOT} ${ROOT}/README.md ${ROOT}/CONTRIBUTING.md ${ROOT}/docs/*.md ${ROOT}/docs/archive/*.md)
file(GLOB_RECURSE readmes RELATIVE ${ROOT} ${ROOT}/plugin/README.md ${ROOT}/bench/README.md
     ${ROOT}/tests/verbs-emu/README.md ${ROOT}/nccl-tests-configs/README.md ${ROOT}/packaging/README.md)
list(APPEND docs ${readmes})
set(bad "")
set(n 0)
foreach(doc ${docs})
  file(READ ${ROOT}/${doc} text)
  get_filename_component(dir ${ROOT}/${doc} DIRECTORY)
  # (a list element may not hold an unbalanced bracket: the "](" becomes a marker first, and the text loses its
  # brackets and semicolons)
  string(REPLACE "](" " LINK-TO<" text "${text}")
  string(REGEX REPLACE "[][;]" " " text "${text}")
  string(REGEX MATCHALL "LINK-TO<[^)# \t\r\n]+" links "${text}")
  foreach(l ${links})
    string(SUBSTRING "${l}" 8 -1 target)
    if(target MATCHES "^[a-zA-Z][a-zA-Z0-9+.-]*:")
      continue()
    endif()
    math(EXPR n "${n} + 1")
    if(NOT EXISTS ${dir}/${target})
      string(APPEND bad "  ${doc}: ${target}\n")
    endif()
  endforeach()
endforeach()
if(NOT bad STREQUAL "")
  message(FATAL_ERROR "links to files that are not in the repository:\n${bad}")
endif()
list(LENGTH docs ndocs)
message(STATUS "${n} relative links in ${ndocs} docs, every one names a file of the repository")
