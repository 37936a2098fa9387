# Slurm (label `slurm`): a real single-node cluster (tests/slurm/cluster.sh), started once by the
# fixture slurm_cluster_start and stopped by slurm_cluster_stop, also when a case fails; the cases
# (tests/slurm/check.py) take a lock on it, so that they run one at a time and their timings hold.
# Without Slurm, munge or root the start prints why and exits 77, and every case skips.
# Two nodes on one machine (label `multinode`): tests/multinode/two_nodes.sh.
if(NOT DDP_HAVE_MPI)
  return()
endif()
set(DDP_SLURM_POINTER ${PROJECT_BINARY_DIR}/slurm_cluster)
add_test(NAME slurm_cluster_start
         COMMAND ${PROJECT_SOURCE_DIR}/tests/slurm/cluster.sh start ${DDP_SLURM_POINTER})
add_test(NAME slurm_cluster_stop
         COMMAND ${PROJECT_SOURCE_DIR}/tests/slurm/cluster.sh stop ${DDP_SLURM_POINTER})
set_tests_properties(slurm_cluster_start PROPERTIES
  LABELS slurm FIXTURES_SETUP slurm_cluster TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(slurm_cluster_stop PROPERTIES
  LABELS slurm FIXTURES_CLEANUP slurm_cluster TIMEOUT 120)

set(slurm_cases slurm_srun_no_plugin slurm_sbatch_train slurm_sbatch_workshop slurm_scancel_resume
    slurm_task_killed)
foreach(step 06 07)
  foreach(np 2 3)
    list(APPEND slurm_cases slurm_srun_pmix_${step}_np${np})
  endforeach()
endforeach()
foreach(case ${slurm_cases})
  add_test(NAME ${case} COMMAND ${Python3_EXECUTABLE} -m tests.slurm.check ${case})
  set_tests_properties(${case} PROPERTIES
    LABELS slurm TIMEOUT 300 SKIP_RETURN_CODE 77
    FIXTURES_REQUIRED slurm_cluster RESOURCE_LOCK slurm_cluster
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV};DDP_SLURM_POINTER=${DDP_SLURM_POINTER};${DDP_PYTHONPATH}")
endforeach()

# The launcher matrix's Slurm columns (srun --mpi=pmix and a plain srun with MASTER_ADDR and MASTER_PORT,
# from tests/integration/matrix.py's table; ddp_matrix is in tests/integration/tests.cmake): on the
# same cluster, between the same fixture's start and stop, one at a time with the cases above.
if(COMMAND ddp_matrix)
  ddp_matrix(slurm matrix_slurm_tests ENV "DDP_SLURM_POINTER=${DDP_SLURM_POINTER}")
  if(matrix_slurm_tests)
    set_tests_properties(${matrix_slurm_tests} PROPERTIES
      FIXTURES_REQUIRED slurm_cluster RESOURCE_LOCK slurm_cluster)
  endif()
endif()

add_test(NAME multinode_two_nodes
         COMMAND ${PROJECT_SOURCE_DIR}/tests/multinode/two_nodes.sh ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
set_tests_properties(multinode_two_nodes PROPERTIES
  LABELS multinode TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
