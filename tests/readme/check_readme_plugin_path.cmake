# cmake -DREADME=README.md -P check_readme_plugin_path.cmake
# The README's first NCCL_NET_PLUGIN=gdr block must say what a build tree needs: NCCL dlopens libnccl-net-gdr.so
# from the loader's path, and build/lib is on none (a new user otherwise meets NCCL's "Could not find").
file(READ ${README} readme)
string(FIND "${readme}" "export NCCL_NET_PLUGIN=gdr" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md has no 'export NCCL_NET_PLUGIN=gdr' block")
endif()
string(SUBSTRING "${readme}" ${at} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} block)
foreach(needle "LD_LIBRARY_PATH=" "build/lib" "build tree")
  string(FIND "${block}" "${needle}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "README.md's NCCL_NET_PLUGIN=gdr block does not mention '${needle}' (a build tree needs "
                        "build/lib on LD_LIBRARY_PATH):\n${block}")
  endif()
endforeach()
message(STATUS "README.md's NCCL_NET_PLUGIN=gdr block says what a build tree needs")
