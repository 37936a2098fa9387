# Integration tests: tests/integration/check.py runs the real programs (label `integration`).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(DDP_MPI_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;OPENBLAS_NUM_THREADS=1")
set(DDP_MPIEXEC "${MPIEXEC_EXECUTABLE}")
if(NOT DDP_MPIEXEC)
  set(DDP_MPIEXEC mpiexec)
endif()

# ddp_integration(NAME scenario [PROCESSORS n])
function(ddp_integration scenario)
  cmake_parse_arguments(I "" "PROCESSORS" "" ${ARGN})
  if(NOT I_PROCESSORS)
    set(I_PROCESSORS 1)
  endif()
  add_test(NAME ${scenario}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/check.py ${scenario})
  set_tests_properties(${scenario} PROPERTIES
    LABELS integration PROCESSORS ${I_PROCESSORS} TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
endfunction()

ddp_integration(step01_learns)
ddp_integration(step01_deterministic)
ddp_integration(step01_resume)
ddp_integration(step01_bad_input)
ddp_integration(step01_fashion_mnist)

ddp_integration(step02_redundant PROCESSORS 2)
ddp_integration(step03_drift PROCESSORS 2)
ddp_integration(step04_broadcast PROCESSORS 2)
ddp_integration(step05_resume PROCESSORS 2)
ddp_integration(step05_eval_exact PROCESSORS 2)
ddp_integration(step05_fashion_mnist PROCESSORS 2)
ddp_integration(dist_bad_launch PROCESSORS 2)
foreach(step 04 05)
  foreach(np 2 3 4)
    ddp_integration(step${step}_replicas_np${np} PROCESSORS 2)
  endforeach()
  foreach(np 2 4)
    ddp_integration(step${step}_matches_baseline_np${np} PROCESSORS 2)
  endforeach()
endforeach()
