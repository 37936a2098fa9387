# Integration tests: the scenarios of tests/integration/ (tests/harness/'s runner) run the real programs
# (label `integration`).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(DDP_MPIEXEC "${MPIEXEC_EXECUTABLE}")
if(NOT DDP_MPIEXEC)
  set(DDP_MPIEXEC mpiexec)
endif()

# The scenarios (tests/harness/, `python3 -m tests.harness NAME`): every scenario file registers its
# scenarios with their CTest properties (tests/harness/scenario.py), and `python3 -m tests.harness
# --list` prints one line per CTest test, read here at configure time (a change to a scenario file
# configures again):
#   TEST LABELS PROCESSORS TIMEOUT SKIP NEEDS ENV ARGS...
# LABELS, NEEDS and ENV comma-separated, "-" when empty. PROCESSORS, the ranks the scenario runs at
# most, only decides NEEDS' default (no test sets CTest's PROCESSORS: tests/CMakeLists.txt says why).
# NEEDS: mpi (the test runs mpirun: a build
# without MPI cannot run it), gloo (a build with Gloo; labelled `gloo` too). ENV: the variables below,
# by name. A scenario that runs under a LAUNCHER (launch: scripts/launch.sh, torchrun) instead of mpirun,
# the Gloo backend, is the test gloo_<scenario> or torchrun_<scenario>. Label `parity`: the scenarios
# that compare two runs (bit for bit where the arithmetic is the same, one step from the same state
# within the float32 error model of tests/harness/parity.py elsewhere); every run's seed comes from
# DDP_TEST_SEED, so `DDP_TEST_SEED=7 ctest -L parity` checks another seed. The tests run from the build
# folder, with the source root on PYTHONPATH.
set(DDP_PYTHONPATH "PYTHONPATH=${PROJECT_SOURCE_DIR}")
function(ddp_scenarios)
  file(GLOB scenario_files ${PROJECT_SOURCE_DIR}/tests/harness/*.py ${PROJECT_SOURCE_DIR}/tests/integration/*.py
       ${PROJECT_SOURCE_DIR}/exercises/checker/*.py)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${scenario_files})
  execute_process(COMMAND ${Python3_EXECUTABLE} -m tests.harness --list WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE tests ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "python3 -m tests.harness --list failed (${rc}): ${err}")
  endif()
  string(REPLACE "\n" ";" tests "${tests}")
  foreach(line IN LISTS tests)
    if(line STREQUAL "")
      continue()
    endif()
    string(REPLACE " " ";" f "${line}")
    list(GET f 0 name)
    list(GET f 1 labels)
    list(GET f 3 timeout)
    list(GET f 4 skip)
    list(GET f 5 needs)
    list(GET f 6 vars)
    list(SUBLIST f 7 -1 args)
    string(REPLACE "," ";" labels "${labels}")
    string(REPLACE "," ";" needs "${needs}")
    string(REPLACE "," ";" vars "${vars}")
    if(("mpi" IN_LIST needs AND NOT DDP_HAVE_MPI) OR ("gloo" IN_LIST needs AND NOT DDP_HAVE_GLOO))
      continue()
    endif()
    set(env "")
    foreach(var IN LISTS vars)
      if(var STREQUAL "bin")
        list(APPEND env "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
      elseif(var STREQUAL "mpiexec")
        list(APPEND env "DDP_MPIEXEC=${DDP_MPIEXEC}")
      elseif(var STREQUAL "mpi_env")
        list(APPEND env ${DDP_MPI_ENV})
      elseif(var STREQUAL "fashion")
        list(APPEND env "DDP_FASHION_MNIST_DIR=${DDP_FASHION_MNIST_DIR}")
      endif()
    endforeach()
    list(APPEND env "${DDP_PYTHONPATH}")
    add_test(NAME ${name} COMMAND ${Python3_EXECUTABLE} -m tests.harness ${args})
    set_tests_properties(${name} PROPERTIES
      LABELS "${labels}" TIMEOUT ${timeout} ENVIRONMENT "${env}")
    if(NOT skip STREQUAL "-")
      set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE ${skip})
    endif()
  endforeach()
endfunction()
ddp_scenarios()

# Fault injection (tests/fault/kill_rank.py): SIGKILL one rank during training and during checkpoint
# saving; the job must exit non-zero within 30 s, name the rank, and leave checkpoint.bin complete.
# The full version: python3 -m tests.fault.kill_rank --trials 20.
if(DDP_HAVE_MPI)
  add_test(NAME fault_kill_rank
           COMMAND ${Python3_EXECUTABLE} -m tests.fault.kill_rank --trials 4
                   --timeout 30 --bin ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/06_full --mpiexec ${DDP_MPIEXEC})
  set_tests_properties(fault_kill_rank PROPERTIES
    LABELS integration TIMEOUT 300
    ENVIRONMENT "${DDP_MPI_ENV};${DDP_PYTHONPATH}")
endif()

# Workshop exercises (exercises/): scripts/check_exercise.sh compiles a learner's file with this
# build's own commands (`ninja -t commands`), so these tests need a Ninja build.
# exercise_checker_0N (exercises/selftest.sh): the checker passes step N's own files, fails the
# untouched exercise on the claims listed here, and rejects each typical wrong solution of
# exercises/checker/wrong_solutions.py with its diagnosis. The step's own files run only their unit
# tests, their own-binary claim and their CLAIM@launch: their other claims are the integration tests
# above, on the same sources compiled the same way (exercises/selftest.sh says why).
if(CMAKE_GENERATOR MATCHES "Ninja" AND DDP_HAVE_MPI)
  set(untouched_02 step02_redundant)
  set(untouched_03 step03_drift)
  set(untouched_04 step04_replicas_np2 step04_matches_baseline_np2 step04_broadcast)
  set(untouched_05 step05_matches_baseline_np2 step05_one_writer)
  set(untouched_06 step06_replicas_np2 step06_matches_step04_np2 step06_grad_accum step06_trace)
  set(untouched_07 step07_matches_step06_np2 step07_matches_step06_np3 step07_checkpoints)
  set(untouched_08 step08_matches_step06_np2 step08_matches_step06_np3 step08_checkpoints step08_trace)
  # 06_fault: the extra exercise on step 06's snapshots and resume (the fault drill; about 2 minutes)
  set(untouched_06_fault fault06_drill fault06_one_writer fault06_barrier fault06_resume_mid_epoch)
  # 07_clip: the extra exercise on step 07's global norm under sharding (issue 35; hooks_check.py's claims)
  set(untouched_07_clip clip_steps_np2)
  # 09: live recovery (issue 44): the vote, the reshard, the heal; tests/fault/live_drill.py's drills under
  # scripts/launch.sh --ft, so Gloo only (exercises/checker/live09.py; well under a minute)
  set(untouched_09 live09_shrink_equals_resume live09_no_sample_lost live09_heal_equals_resume)
  # The main build's reference runs (step 06 as the reference of 07 and 08, step 04 of 06, ...) are the
  # same in every test of the checker: they run once in a suite run and are replayed after, from one
  # folder (tests/harness/cache.py says when a run is the same), which the fixture empties first.
  set(ddp_reference_runs "DDP_REFERENCE_CACHE=${PROJECT_BINARY_DIR}/reference_runs")
  add_test(NAME exercise_reference_runs COMMAND ${CMAKE_COMMAND} -E rm -rf ${PROJECT_BINARY_DIR}/reference_runs)
  set_tests_properties(exercise_reference_runs PROPERTIES LABELS integration FIXTURES_SETUP exercise_reference_runs)
  set(exercise_checkers 02 03 04 05 06 07 08 06_fault 07_clip)
  if(DDP_HAVE_GLOO)
    list(APPEND exercise_checkers 09)
  endif()
  foreach(n ${exercise_checkers})
    add_test(NAME exercise_checker_${n}
             COMMAND ${PROJECT_SOURCE_DIR}/exercises/selftest.sh ${n} ${untouched_${n}})
    set_tests_properties(exercise_checker_${n} PROPERTIES
      LABELS integration TIMEOUT 900 FIXTURES_REQUIRED exercise_reference_runs
      ENVIRONMENT "DDP_BUILD_DIR=${PROJECT_BINARY_DIR};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV};${ddp_reference_runs}")
  endforeach()
  # The checker passes correct solutions written otherwise than the steps
  # (exercises/checker/right_solutions.py: other words in a die(), another wrap, another loop).
  add_test(NAME exercise_right_solutions
           COMMAND ${Python3_EXECUTABLE} -m exercises.checker.right_solutions)
  set_tests_properties(exercise_right_solutions PROPERTIES
    LABELS integration TIMEOUT 900 FIXTURES_REQUIRED exercise_reference_runs
    ENVIRONMENT "DDP_BUILD_DIR=${PROJECT_BINARY_DIR};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV};${DDP_PYTHONPATH};${ddp_reference_runs}")
  # The checker itself (exercises/checker/checker_cases.py): Ctrl-C on a hung submission ends it and its
  # ranks within seconds (exit 130); a claim killed at DDP_CHECK_TIMEOUT leaves no process and no
  # temporary folder; spaces in TMPDIR and a checkout reached through symlinks; and the 06_fault
  # README's kill line, run by one of two participants whose drills have the same command line, kills
  # a rank of its own (10 to 20 s each).
  foreach(case interrupt timeout paths drill_kill)
    add_test(NAME exercise_checker_${case}
             COMMAND ${Python3_EXECUTABLE} -m exercises.checker.checker_cases ${case})
    set_tests_properties(exercise_checker_${case} PROPERTIES
      LABELS integration TIMEOUT 300
      ENVIRONMENT "DDP_BUILD_DIR=${PROJECT_BINARY_DIR};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV};${DDP_PYTHONPATH}")
  endforeach()
endif()
if(CMAKE_GENERATOR MATCHES "Ninja")
  # Every exercise still compiles and links (each kept in the build folder, not in work/).
  add_test(NAME exercises_build
           COMMAND bash -c "set -e; for d in exercises/0*/; do n=$(basename $d | cut -c1-2); scripts/check_exercise.sh --build-only $n $d*.c; done"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(exercises_build PROPERTIES LABELS docs
    ENVIRONMENT "DDP_BUILD_DIR=${PROJECT_BINARY_DIR};DDP_BUILD_OUT=${PROJECT_BINARY_DIR}/exercises_build")
endif()
# The wrong solutions are substitutions in the steps' files: each must still match exactly once.
add_test(NAME exercise_wrong_solutions_apply
         COMMAND ${Python3_EXECUTABLE} -m exercises.checker.wrong_solutions --check)
set_tests_properties(exercise_wrong_solutions_apply PROPERTIES LABELS docs ENVIRONMENT "${DDP_PYTHONPATH}")
add_test(NAME exercise_right_solutions_apply
         COMMAND ${Python3_EXECUTABLE} -m exercises.checker.right_solutions --check)
set_tests_properties(exercise_right_solutions_apply PROPERTIES LABELS docs ENVIRONMENT "${DDP_PYTHONPATH}")

# Fuzz targets' committed corpus, replayed without libFuzzer (label `unit`; see fuzz/replay.cmake).
include(${PROJECT_SOURCE_DIR}/fuzz/replay.cmake)

# The catalogue of bad inputs (tests/integration/bad_inputs.py, listed in docs/errors.md): every case
# ends every rank with a one-line reason and a non-zero exit, and changes no file.
if(DDP_HAVE_MPI)
  add_test(NAME bad_input_catalogue
           COMMAND ${Python3_EXECUTABLE} -m tests.integration.bad_inputs)
  set_tests_properties(bad_input_catalogue PROPERTIES
    LABELS integration TIMEOUT 600
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV};DDP_HAVE_GLOO=${DDP_HAVE_GLOO};${DDP_PYTHONPATH}")
endif()

# dist_mpi.c splits a blocking collective of more than DDP_MPI_CHUNK elements (2^30, below MPI's
# int counts) into chunks: tests/mpi/test_dist.c again, with a chunk of 2 elements, so that every
# chunked path runs and must give the same results.
if(DDP_HAVE_MPI)
  add_executable(test_dist_chunked ${PROJECT_SOURCE_DIR}/tests/mpi/test_dist.c
                 ${PROJECT_SOURCE_DIR}/tests/mpi/dist_cases.c ${PROJECT_SOURCE_DIR}/common/dist/dist_mpi.c)
  target_compile_definitions(test_dist_chunked PRIVATE DDP_MPI_CHUNK=2)
  target_link_libraries(test_dist_chunked PRIVATE ddp_common_internal ddp_warnings)
  add_test(NAME dist_collectives_chunked
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 $<TARGET_FILE:test_dist_chunked>)
  set_tests_properties(dist_collectives_chunked PROPERTIES
    LABELS integration TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED"
    ENVIRONMENT "${DDP_MPI_ENV}")
endif()

# Fault drills (tests/fault/restart_drill.py, labels integration and fault): under scripts/restart.sh a
# rank is SIGKILLed at a step drawn from a seed (steps 06 and 07, 2 and 3 ranks), while the checkpoint is
# written, and during start-up; one rank gets SIGTERM (preemption); a corrupt snapshot reaches the restart
# limit; restart.sh itself gets SIGTERM; torchrun --max-restarts (skipped without torchrun). Each final
# param_digest must equal the uninterrupted run's.
function(ddp_fault name drill)
  if(NOT DDP_HAVE_MPI)
    return()
  endif()
  add_test(NAME fault_${name}
           COMMAND ${Python3_EXECUTABLE} -m tests.fault.restart_drill ${drill} ${ARGN}
                   --bin_dir ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} --mpiexec ${DDP_MPIEXEC})
  set_tests_properties(fault_${name} PROPERTIES
    LABELS "integration;fault" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};${DDP_MPI_ENV};${DDP_PYTHONPATH}")
endfunction()
ddp_fault(kill_06_np2 kill --step 06_full --np 2 --seeds 1,2)
ddp_fault(kill_06_np3 kill --step 06_full --np 3 --seeds 3,4)
ddp_fault(kill_07_np2 kill --step 07_zero --np 2 --seeds 5,6)
ddp_fault(kill_07_np3 kill --step 07_zero --np 3 --seeds 7,8)
ddp_fault(kill_09_np3 kill --step 09_live --np 3 --seeds 12,13)
ddp_fault(kill_while_saving save --step 06_full --np 2)
# PowerSGD's per-rank state beside each checkpoint: a kill (at a drawn step, or of rank 0 while it writes
# the checkpoint) must leave a checkpoint whose states all exist, so that the restart resumes it exactly
ddp_fault(kill_06_powersgd kill --step 06_full --np 2 --seeds 11 --comm_hook powersgd)
ddp_fault(kill_while_saving_powersgd save --step 06_full --np 2 --comm_hook powersgd)
ddp_fault(kill_during_startup startup --step 07_zero --np 3)
ddp_fault(preempt_one_rank preempt --step 06_full --np 3 --seeds 9)
ddp_fault(restart_limit limit --step 06_full --np 2)
ddp_fault(supervisor_sigterm supervisor --step 06_full --np 2)
ddp_fault(torchrun_max_restarts torchrun --step 06_full --np 1)

# The supervisors' inputs and signals (tests/fault/supervisor_cases.py, labels integration and fault,
# seconds each, on small shell programs): launch.sh's options in any order, fractional and invalid
# STOP_GRACE and RESTART_DELAY, SIGKILL to restart.sh (the attempt must not run on unsupervised), and
# SIGTERM to restart.sh over mpirun (the ranks get STOP_GRACE, not mpirun's 1 s).
foreach(case launch_args grace_values grace_launch grace_restart orphan orphan_mpirun mpirun_grace)
  if(case MATCHES "mpirun" AND NOT DDP_HAVE_MPI)
    continue()
  endif()
  add_test(NAME supervisor_${case}
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/fault/supervisor_cases.py ${case}
                   --mpiexec ${DDP_MPIEXEC})
  set_tests_properties(supervisor_${case} PROPERTIES
    LABELS "integration;fault" TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "${DDP_MPI_ENV}")
endforeach()

# Restarts and preemptions keep what they should (tests/fault/restart_drill.py, label fault): under
# restart.sh each rank's metrics file keeps every attempt (an attempt record between them, the final
# record naming the attempt and its start step) and each attempt's trace is kept (a restart truncated
# both); a preemption with saving off writes no checkpoint (another run's file stays) and exits 143,
# with --save_interval 5 it saves and exits 75; --resume auto with other --lr, --momentum,
# --weight_decay and --epochs resumes and says that they are not compared, another --seed is refused.
ddp_fault(metrics_across_restarts metrics --step 06_full --np 2 --seeds 3)
ddp_fault(preempt_saving_off_06 unsaved --step 06_full --np 2 --seeds 4)
ddp_fault(preempt_saving_off_08 unsaved --step 08_fsdp --np 2 --seeds 5)
ddp_fault(resume_auto_settings settings --step 07_zero --np 2)

# Review of the launch tools and the trainers' edges (one scenario per defect, each failing before its fix):
# the scenarios probe_disagree (probe_check.py), step08_eval_uneven (step08.py), preempt_stuck
# (launchers.py) and docs06_launcher_digest (docs.py) are registered with the others above.
# slurm_job_scripts (tests/slurm/job_scripts.py): scripts/slurm/*.sbatch without Slurm (stand-ins for
# srun, scontrol and nvidia-smi): MASTER_PORT and MASTER_PORT + 1 below the ephemeral range, a held pair
# skipped, and the job's GPUs counted (SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES), not the node's.
add_test(NAME slurm_job_scripts COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/slurm/job_scripts.py)
set_tests_properties(slurm_job_scripts PROPERTIES LABELS integration TIMEOUT 180)
# The launcher matrix (tests/integration/matrix.py, labels integration and matrix): every step 02 to 08
# at 2 and 3 ranks under every launcher, one CTest test per launcher and rank count (matrix_<launcher>_np<N>),
# generated from the script's table (`matrix.py --cells`, read here at configure time; a change to the
# script configures again). ddp_matrix(WHERE OUT [ENV ...]) adds the cells that run WHERE (local: here;
# slurm: tests/slurm/tests.cmake adds those on the test cluster) and returns their names in OUT. A cell
# skips (77) without its launcher (torchrun, the cluster); DDP_TEST_SEED, if set, is every run's --seed.
function(ddp_matrix where out)
  cmake_parse_arguments(M "" "" "ENV" ${ARGN})
  set(script ${PROJECT_SOURCE_DIR}/tests/integration/matrix.py)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${script})
  execute_process(COMMAND ${Python3_EXECUTABLE} -m tests.integration.matrix --cells ${where}
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE cells ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(names "")
  if(NOT rc EQUAL 0)
    message(WARNING "tests/integration/matrix.py --cells ${where} failed (${rc}): ${err}")
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" cells "${cells}")
  foreach(cell IN LISTS cells)
    if(cell STREQUAL "")
      continue()
    endif()
    string(REPLACE " " ";" f "${cell}")  # NAME LAUNCHER NP BACKEND
    list(GET f 0 name)
    list(GET f 1 launcher)
    list(GET f 2 np)
    list(GET f 3 backend)
    set(labels integration matrix parity)  # it compares runs: DDP_TEST_SEED, `ctest -L parity`
    if(backend STREQUAL "gloo")
      if(NOT DDP_HAVE_GLOO)
        continue()
      endif()
      list(APPEND labels gloo)
    elseif(NOT DDP_HAVE_MPI)
      continue()
    endif()
    if(where STREQUAL "slurm")
      list(APPEND labels slurm)
    endif()
    set(env "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
    list(APPEND env "DDP_HAVE_MPI=${DDP_HAVE_MPI}" ${M_ENV} "${DDP_PYTHONPATH}")
    add_test(NAME ${name} COMMAND ${Python3_EXECUTABLE} -m tests.integration.matrix ${launcher} ${np})
    set_tests_properties(${name} PROPERTIES
      LABELS "${labels}" TIMEOUT 600 SKIP_RETURN_CODE 77 ENVIRONMENT "${env}")
    list(APPEND names ${name})
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()
ddp_matrix(local matrix_local_tests)
