# cmake -DSRC=<source tree> -DOBJCOPY=<objcopy> -DFILES="a;b;c" -P check_no_build_paths.cmake
# Fails if the read-only data of an installed binary (the plugin, the tools) holds the build machine's source
# directory: log lines carry __FILE__, which must be relative to the source tree (-fmacro-prefix-map).
# Debug information (.debug_*) may keep absolute paths: it is for debuggers, and is not what users read.
foreach(f ${FILES})
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "${f} does not exist")
  endif()
  get_filename_component(_name "${f}" NAME)
  set(_out "${CMAKE_CURRENT_BINARY_DIR}/${_name}.rodata")
  execute_process(COMMAND "${OBJCOPY}" -O binary --only-section=.rodata "${f}" "${_out}" RESULT_VARIABLE rc
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "objcopy failed on ${f}: ${err}")
  endif()
  file(STRINGS "${_out}" hits REGEX "${SRC}/")
  file(REMOVE "${_out}")
  if(hits)
    list(GET hits 0 first)
    message(FATAL_ERROR "${f} carries the build's source path ${SRC}/ in its read-only data (e.g. \"${first}\"): "
                        "__FILE__ must be relative to the source tree")
  endif()
  message(STATUS "${f}: no ${SRC}/ in .rodata")
endforeach()
