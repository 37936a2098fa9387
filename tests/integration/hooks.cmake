# The tests of issue 35 (tests/integration/hooks_check.py): gradient clipping by the global norm in
# every step, DDP's communication hooks in step 06, the finite check before a bucket's collective.
# hooks_probe runs common/'s clipper and hooks on numbers read from a file, for the comparisons with
# PyTorch's own functions (skipped, status 77, where no Python has torch).
add_executable(hooks_probe integration/hooks_probe.c)
target_link_libraries(hooks_probe PRIVATE ddp_common ddp_warnings)

# ddp_hooks(scenario [PROCESSORS n] [LABELS ...])
function(ddp_hooks scenario)
  cmake_parse_arguments(H "" "PROCESSORS" "LABELS" ${ARGN})
  if(NOT H_PROCESSORS)
    set(H_PROCESSORS 1)
  endif()
  if(H_PROCESSORS GREATER 1 AND NOT DDP_HAVE_MPI)
    return()
  endif()
  add_test(NAME hooks_${scenario}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/hooks_check.py ${scenario})
  set_tests_properties(hooks_${scenario} PROPERTIES
    LABELS "integration;hooks;${H_LABELS}" PROCESSORS ${H_PROCESSORS} TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
endfunction()

ddp_hooks(clip_vs_torch)
ddp_hooks(clip_steps_np2 PROCESSORS 2 LABELS parity)
ddp_hooks(clip_norm_np3 PROCESSORS 2 LABELS parity)
ddp_hooks(hook_vs_torch PROCESSORS 2)
ddp_hooks(hook_bytes_np2 PROCESSORS 2)
if(DDP_HAVE_GLOO)  # the hooks' collectives on the other CPU backend: the same digests as MPI
  ddp_hooks(hook_gloo_np2 PROCESSORS 2 LABELS "gloo;parity")
endif()
ddp_hooks(check_finite_nan_np2 PROCESSORS 2)
ddp_hooks(powersgd_vs_torch PROCESSORS 2)
ddp_hooks(powersgd_resume_np2 PROCESSORS 2 LABELS parity)
