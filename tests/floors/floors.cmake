# CTest floors_upward_include: common/'s floors are enforced by the build. Compiles three probes as
# the build compiles a file of a floor (tests/CMakeLists.txt passes each command: the C compiler and
# that floor's include directories; `cmake --build build --target floor_probe_up` does the same
# through the build): the control (a dist-floor file that includes its own and lower floors' headers)
# must compile; a base-floor file that includes dist.h and an nn-floor file that includes ops'
# internal ops_backend.h must fail, each on that include.
# Run: cmake "-DDOWN=cc|-std=c11|-fsyntax-only|-I..." "-DUP=..." "-DPRIVATE=..." -DSRC=tests/floors -P tests/floors/floors.cmake
function(probe name words file want header)
  string(REPLACE "|" ";" cmd "${words}")
  execute_process(COMMAND ${cmd} ${SRC}/${file} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(want STREQUAL "ok")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${name}: the control did not compile (rc ${rc}):\n${out}")
    endif()
    message(STATUS "${name}: compiles, as it must")
  else()
    if(rc EQUAL 0)
      message(FATAL_ERROR "${name}: compiled, so the floors are not enforced: ${want}")
    endif()
    if(NOT out MATCHES "${header}: No such file or directory")
      message(FATAL_ERROR "${name}: failed (rc ${rc}), but not on '${header}':\n${out}")
    endif()
    message(STATUS "${name}: rejected at '#include \"${header}\"', as it must be: ${want}")
  endif()
endfunction()
probe(floor_probe_down "${DOWN}" down.c ok "")
probe(floor_probe_up "${UP}" upward.c "the base floor included the dist floor's header" "dist.h")
probe(floor_probe_private "${PRIVATE}" private.c "the nn floor included the ops floor's internal header"
      "ops_backend.h")
