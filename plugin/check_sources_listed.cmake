# cmake -DDIR=<plugin dir> -DLISTED="a.c;rdma/b.c;..." -P check_sources_listed.cmake
# plugin/CMakeLists.txt states every source; this fails when a .c file under plugin/ is in none of its lists (a new
# file someone forgot to add: it would be compiled nowhere, or break the link with a less helpful message).
cmake_minimum_required(VERSION 3.20)
file(GLOB_RECURSE on_disk RELATIVE "${DIR}" "${DIR}/*.c")
set(missing "")
foreach(f ${on_disk})
  if(NOT f IN_LIST LISTED)
    list(APPEND missing "${f}")
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "plugin/CMakeLists.txt does not list: ${missing} -- add each to GDRNET_CORE_SOURCES, "
                      "GDRNET_RDMA_SOURCES or GDRNET_OTHER_SOURCES")
endif()
message(STATUS "every plugin source is listed")
