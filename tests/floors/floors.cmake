# CTest floors_upward_include: common/'s floors are enforced by the build. Builds three object
# libraries of tests/CMakeLists.txt that no other target needs: the control (a dist-floor file that
# includes its own and lower floors' headers) must compile; a base-floor file that includes dist.h
# and an nn-floor file that includes ops' internal ops_backend.h must fail, each on that include.
# Run: cmake -DBIN=<build dir> -P tests/floors/floors.cmake
function(build target want header)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target ${target}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(want STREQUAL "ok")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${target}: the control did not build (rc ${rc}):\n${out}")
    endif()
    message(STATUS "${target}: builds, as it must")
  else()
    if(rc EQUAL 0)
      message(FATAL_ERROR "${target}: built, so the floors are not enforced: ${want}")
    endif()
    if(NOT out MATCHES "${header}: No such file or directory")
      message(FATAL_ERROR "${target}: failed (rc ${rc}), but not on '${header}':\n${out}")
    endif()
    message(STATUS "${target}: rejected at '#include \"${header}\"', as it must be: ${want}")
  endif()
endfunction()
build(floor_probe_down ok "")
build(floor_probe_up "the base floor included the dist floor's header" "dist.h")
build(floor_probe_private "the nn floor included the ops floor's internal header" "ops_backend.h")
