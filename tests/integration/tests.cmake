# Integration tests: tests/integration/check.py runs the real programs (label `integration`).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(DDP_MPIEXEC "${MPIEXEC_EXECUTABLE}")
if(NOT DDP_MPIEXEC)
  set(DDP_MPIEXEC mpiexec)
endif()

# ddp_integration(scenario [PROCESSORS n] [LAUNCHER launch|torchrun] [GLOO] [NEEDS_MPI])
# LAUNCHER: the multi-rank runs start under scripts/launch.sh or torchrun (the Gloo backend) instead
# of mpirun; the test is then named gloo_<scenario> or torchrun_<scenario>. GLOO (implied by
# LAUNCHER): labelled `gloo` too, and only in a build with Gloo. NEEDS_MPI: the scenario runs mpirun
# itself (implied by PROCESSORS > 1 without LAUNCHER).
function(ddp_integration scenario)
  cmake_parse_arguments(I "NEEDS_MPI;GLOO" "PROCESSORS;LAUNCHER" "" ${ARGN})
  if(NOT I_PROCESSORS)
    set(I_PROCESSORS 1)
  endif()
  set(name ${scenario})
  set(labels integration)
  set(args "")
  if(I_LAUNCHER)
    set(I_GLOO ON)
    set(name ${I_LAUNCHER}_${scenario})
    if(I_LAUNCHER STREQUAL "launch")
      set(name gloo_${scenario})
    endif()
    set(args --launcher ${I_LAUNCHER})
  elseif(I_PROCESSORS GREATER 1)
    set(I_NEEDS_MPI ON)  # multi-rank scenarios launch with mpirun: a build without MPI cannot run them
  endif()
  if(I_GLOO)
    set(labels "integration;gloo")
  endif()
  # Label `parity`: the scenarios that compare two runs (bit for bit where the arithmetic is the same,
  # one step from the same state within the float32 error model of check.py elsewhere); every run's
  # seed comes from DDP_TEST_SEED, so `DDP_TEST_SEED=7 ctest -L parity` checks another seed.
  if(scenario MATCHES "matches|resume|checkpoints|grad_accum|redundant|drift")
    list(APPEND labels parity)
  endif()
  if((I_NEEDS_MPI AND NOT DDP_HAVE_MPI) OR (I_GLOO AND NOT DDP_HAVE_GLOO))
    return()
  endif()
  add_test(NAME ${name}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/check.py ${args} ${scenario})
  set_tests_properties(${name} PROPERTIES
    LABELS "${labels}" PROCESSORS ${I_PROCESSORS} TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV};DDP_FASHION_MNIST_DIR=${DDP_FASHION_MNIST_DIR}")
endfunction()

ddp_integration(step01_learns)
ddp_integration(step01_deterministic)
ddp_integration(step01_resume)
ddp_integration(step01_bad_input)
ddp_integration(step01_warnings)
ddp_integration(save_init PROCESSORS 2)
ddp_integration(step01_max_steps_resume_np1)
ddp_integration(step05_max_steps_resume_np2 PROCESSORS 2)
ddp_integration(step06_max_steps_resume_np2 PROCESSORS 2)
# A mid-epoch checkpoint refuses other samples per step (--batch_size x --grad_accum) or --drop_last.
ddp_integration(step01_mid_epoch_other_batch_np1)
ddp_integration(step06_mid_epoch_other_batch_np2 PROCESSORS 2)
ddp_integration(step07_mid_epoch_other_batch_np2 PROCESSORS 2)
# A --max_steps stop at an epoch's end saves, whatever --save_interval says.
ddp_integration(step01_max_steps_epoch_end_np1)
ddp_integration(step07_max_steps_epoch_end_np2 PROCESSORS 2)
ddp_integration(step01_fashion_mnist)

ddp_integration(step02_redundant PROCESSORS 2)
ddp_integration(step03_drift PROCESSORS 2)
ddp_integration(step04_broadcast PROCESSORS 2)
ddp_integration(step05_resume PROCESSORS 2)
ddp_integration(step05_eval_exact PROCESSORS 2)
ddp_integration(step05_one_writer PROCESSORS 2)
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

ddp_integration(step06_grad_accum PROCESSORS 2)
ddp_integration(step06_trace PROCESSORS 2)
ddp_integration(step06_overlap PROCESSORS 2)
foreach(np 2 3 4)
  ddp_integration(step06_replicas_np${np} PROCESSORS 2)
endforeach()
# 2: bit-identical parameters; 3: step 06's division by W rounds, and must stay within the tolerance.
foreach(np 2 3 4)
  ddp_integration(step06_matches_step04_np${np} PROCESSORS 2)
endforeach()
# Step 07 (ZeRO stage 1): replicas at 2, 3 and 4 ranks, step 06's training within the tolerances
# (bit for bit at 2 ranks), the momentum sharded and the peak memory below step 06's, checkpoints
# interchangeable with step 06's and across world sizes.
foreach(np 2 3 4)
  ddp_integration(step07_replicas_np${np} PROCESSORS 2)
  ddp_integration(step07_matches_step06_np${np} PROCESSORS 2)
endforeach()
if(DDP_HAVE_MPI)  # mpirun -np 1: MPI is up with one rank (the singleton never reaches it)
  ddp_integration(step07_one_rank_mpirun)
endif()
ddp_integration(step07_memory PROCESSORS 2)
ddp_integration(step07_checkpoints PROCESSORS 2)
# Step 08 (FSDP, ZeRO stage 3): every rank's gathered parameters identical at 2, 3 and 4 ranks, step 06's
# training within the tolerances (bit for bit at 2 ranks without accumulation), peak memory below step
# 07's, checkpoints interchangeable with 06's and 07's and across world sizes, the trace's prefetch.
foreach(np 2 3 4)
  ddp_integration(step08_replicas_np${np} PROCESSORS 2)
  ddp_integration(step08_matches_step06_np${np} PROCESSORS 2)
endforeach()
ddp_integration(step08_memory PROCESSORS 2)
ddp_integration(step08_checkpoints PROCESSORS 2)
ddp_integration(step08_trace PROCESSORS 2)
ddp_integration(launchers PROCESSORS 2)
ddp_integration(launcher_signal PROCESSORS 2)
ddp_integration(watchdog_deadlock PROCESSORS 2)
# X3 of issue 21: a start-up collective outside the watchdog hung for ever; bounded so that a
# regression fails instead of hanging.
ddp_integration(watchdog_startup PROCESSORS 2)
if(TEST watchdog_startup)
  set_tests_properties(watchdog_startup PROPERTIES TIMEOUT 90)
endif()

# The probe (tools/probe.c, tests/integration/probe_check.py): one process; ok lines and the table at
# 2 and 3 CPU ranks; `broken` and exit 1 when one rank contributes a wrong value; the missing rank
# named within --timeout when one never arrives.
foreach(scenario probe_np1 probe_np2 probe_np3 probe_wrong probe_absent)
  if(NOT scenario STREQUAL probe_np1 AND NOT DDP_HAVE_MPI)
    continue()  # the multi-rank runs launch with mpirun
  endif()
  add_test(NAME ${scenario}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/probe_check.py ${scenario})
  set_tests_properties(${scenario} PROPERTIES LABELS integration PROCESSORS 2 TIMEOUT 180
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
endforeach()

# The Gloo backend (label `gloo`): the multi-rank scenarios of steps 02 to 07 again under
# scripts/launch.sh at 2 and 3 ranks (the loss parity with step 01 at 2 only: 128 samples do not
# split into 3 equal batches), Gloo against MPI (bit for bit at 2 ranks), the peers' faults, the
# ranks' agreement check over Gloo, and
# the course's torchrun line (skipped where PyTorch is not installed).
foreach(scenario step02_redundant step03_drift step04_matches_baseline_np2 step05_matches_baseline_np2)
  ddp_integration(${scenario} PROCESSORS 2 LAUNCHER launch)
endforeach()
foreach(np 2 3)
  foreach(scenario step04_replicas step05_replicas step06_replicas step06_matches_step04 step07_replicas
                   step07_matches_step06)
    ddp_integration(${scenario}_np${np} PROCESSORS 2 LAUNCHER launch)
  endforeach()
endforeach()
foreach(np 2 3)
  foreach(step 06 07)
    ddp_integration(gloo_matches_mpi_${step}_np${np} PROCESSORS 2 GLOO NEEDS_MPI)
  endforeach()
endforeach()
ddp_integration(gloo_peer_faults PROCESSORS 2 GLOO)
ddp_integration(gloo_ranks_agree PROCESSORS 2 GLOO)
ddp_integration(torchrun_matches_mpi PROCESSORS 2 GLOO NEEDS_MPI)

# Fault injection (tests/fault/kill_rank.py): SIGKILL one rank during training and during checkpoint
# saving; the job must exit non-zero within 30 s, name the rank, and leave checkpoint.bin complete.
# The full version: python3 tests/fault/kill_rank.py --trials 20.
if(DDP_HAVE_MPI)
  add_test(NAME fault_kill_rank
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/fault/kill_rank.py --trials 4
                   --timeout 30 --bin ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/06_full --mpiexec ${DDP_MPIEXEC})
  set_tests_properties(fault_kill_rank PROPERTIES
    LABELS integration PROCESSORS 2 TIMEOUT 300
    ENVIRONMENT "${DDP_MPI_ENV}")
endif()

# Workshop exercises (exercises/): scripts/check_exercise.sh compiles a learner's file with this
# build's own commands (`ninja -t commands`), so these tests need a Ninja build.
# exercise_checker_0N (exercises/selftest.sh): the checker passes step N's own files, fails the
# untouched exercise on the claims listed here, and rejects each typical wrong solution of
# tests/exercises/wrong_solutions.py with its diagnosis. The step's own files run only the claims
# listed here, its own-binary claim and its CLAIM@launch: its other claims are the integration tests
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
  foreach(n 02 03 04 05 06 07 08 06_fault 07_clip)
    add_test(NAME exercise_checker_${n}
             COMMAND ${PROJECT_SOURCE_DIR}/exercises/selftest.sh ${n} ${untouched_${n}})
    set_tests_properties(exercise_checker_${n} PROPERTIES
      LABELS integration PROCESSORS 2 TIMEOUT 900
      ENVIRONMENT "DDP_BUILD_DIR=${PROJECT_BINARY_DIR};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
  endforeach()
  # The checker passes correct solutions written otherwise than the steps
  # (tests/exercises/right_solutions.py: other words in a die(), another wrap, another loop).
  add_test(NAME exercise_right_solutions
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/exercises/right_solutions.py)
  set_tests_properties(exercise_right_solutions PROPERTIES
    LABELS integration PROCESSORS 2 TIMEOUT 900
    ENVIRONMENT "DDP_BUILD_DIR=${PROJECT_BINARY_DIR};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
  # The checker itself (tests/exercises/checker_cases.py): Ctrl-C on a hung submission ends it and its
  # ranks within seconds (exit 130); a claim killed at DDP_CHECK_TIMEOUT leaves no process and no
  # temporary folder; spaces in TMPDIR and a checkout reached through symlinks; and the 06_fault
  # README's kill line, run by one of two participants whose drills have the same command line, kills
  # a rank of its own (10 to 20 s each).
  foreach(case interrupt timeout paths drill_kill)
    add_test(NAME exercise_checker_${case}
             COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/exercises/checker_cases.py ${case})
    set_tests_properties(exercise_checker_${case} PROPERTIES
      LABELS integration PROCESSORS 2 TIMEOUT 300
      ENVIRONMENT "DDP_BUILD_DIR=${PROJECT_BINARY_DIR};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
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
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/exercises/wrong_solutions.py --check)
set_tests_properties(exercise_wrong_solutions_apply PROPERTIES LABELS docs)
add_test(NAME exercise_right_solutions_apply
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/exercises/right_solutions.py --check)
set_tests_properties(exercise_right_solutions_apply PROPERTIES LABELS docs)

# Fuzz targets' committed corpus, replayed without libFuzzer (label `unit`; see fuzz/replay.cmake).
include(${PROJECT_SOURCE_DIR}/fuzz/replay.cmake)

# The catalogue of bad inputs (tests/integration/bad_inputs.py, listed in docs/errors.md): every case
# ends every rank with a one-line reason and a non-zero exit, and changes no file.
if(DDP_HAVE_MPI)
  add_test(NAME bad_input_catalogue
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/bad_inputs.py)
  set_tests_properties(bad_input_catalogue PROPERTIES
    LABELS integration PROCESSORS 2 TIMEOUT 600
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV};DDP_HAVE_GLOO=${DDP_HAVE_GLOO}")
endif()

# dist_mpi.c splits a blocking collective of more than DDP_MPI_CHUNK elements (2^30, below MPI's
# int counts) into chunks: tests/mpi/test_dist.c again, with a chunk of 2 elements, so that every
# chunked path runs and must give the same results.
if(DDP_HAVE_MPI)
  add_executable(test_dist_chunked ${PROJECT_SOURCE_DIR}/tests/mpi/test_dist.c
                 ${PROJECT_SOURCE_DIR}/tests/mpi/dist_cases.c ${PROJECT_SOURCE_DIR}/common/dist_mpi.c)
  target_compile_definitions(test_dist_chunked PRIVATE DDP_MPI_CHUNK=2)
  target_link_libraries(test_dist_chunked PRIVATE ddp_common ddp_warnings)
  add_test(NAME dist_collectives_chunked
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 $<TARGET_FILE:test_dist_chunked>)
  set_tests_properties(dist_collectives_chunked PROPERTIES
    LABELS integration PROCESSORS 2 TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED"
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
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/fault/restart_drill.py ${drill} ${ARGN}
                   --bin_dir ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} --mpiexec ${DDP_MPIEXEC})
  set_tests_properties(fault_${name} PROPERTIES
    LABELS "integration;fault" PROCESSORS 2 TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};${DDP_MPI_ENV}")
endfunction()
ddp_fault(kill_06_np2 kill --step 06_full --np 2 --seeds 1,2)
ddp_fault(kill_06_np3 kill --step 06_full --np 3 --seeds 3,4)
ddp_fault(kill_07_np2 kill --step 07_zero --np 2 --seeds 5,6)
ddp_fault(kill_07_np3 kill --step 07_zero --np 3 --seeds 7,8)
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
    LABELS "integration;fault" PROCESSORS 2 TIMEOUT 120 SKIP_RETURN_CODE 77
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

# Review of the launch tools and the trainers' edges (one scenario per defect, each failing before its fix).
# probe_disagree (probe_check.py): probe ranks started with different --iters or --max_bytes are refused
# at once, naming the flag (they ended in MPI_ERR_TRUNCATE, or a table saying OK, then a watchdog error).
if(DDP_HAVE_MPI)
  add_test(NAME probe_disagree
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/probe_check.py probe_disagree)
  set_tests_properties(probe_disagree PROPERTIES LABELS integration PROCESSORS 2 TIMEOUT 180
    ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DDP_MPIEXEC=${DDP_MPIEXEC};${DDP_MPI_ENV}")
endif()
# slurm_job_scripts (tests/slurm/job_scripts.py): scripts/slurm/*.sbatch without Slurm (stand-ins for
# srun, scontrol and nvidia-smi): MASTER_PORT and MASTER_PORT + 1 below the ephemeral range, a held pair
# skipped, and the job's GPUs counted (SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES), not the node's.
add_test(NAME slurm_job_scripts COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/slurm/job_scripts.py)
set_tests_properties(slurm_job_scripts PROPERTIES LABELS integration TIMEOUT 180)
# step08_eval_uneven: step 08 with 1001 test samples at 2 ranks (two test batches against one)
# evaluates without hanging and matches step 06 (it deadlocked in the extra batch's gathers); MPI, Gloo.
ddp_integration(step08_eval_uneven PROCESSORS 2)
ddp_integration(step08_eval_uneven PROCESSORS 2 LAUNCHER launch)
# preempt_stuck: SIGTERM to a rank stuck in a collective ends it within the watchdog's short grace
# (WATCHDOG_SIGNAL_GRACE_S), a second SIGTERM at once (it waited for --timeout or SIGKILL).
ddp_integration(preempt_stuck PROCESSORS 2)
# docs06_launcher_digest: mpirun and launch.sh end at one param_digest, and where the machine's OpenBLAS
# runs the chapters' kernel, at the one docs/06_full.md pastes for torchrun (it pasted a stale one).
ddp_integration(docs06_launcher_digest PROCESSORS 2 GLOO NEEDS_MPI)

# The Gloo ranks' rendezvous store (tests/integration/store_check.py, labels integration and gloo;
# loopback only): a port scan of 1100 connections while rank 0 waits, a client storing 1 MiB values,
# the listening address (MASTER_ADDR's, not every interface), and ranks started with another
# WORLD_SIZE or TORCHELASTIC_RESTART_COUNT than rank 0 (both named, both ranks stopped).
if(DDP_HAVE_GLOO)
  foreach(scenario port_scan large_values listen_address world_size_mismatch restart_count_mismatch)
    add_test(NAME store_${scenario}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/store_check.py ${scenario})
    set_tests_properties(store_${scenario} PROPERTIES
      LABELS "integration;gloo" PROCESSORS 2 TIMEOUT 180 SKIP_RETURN_CODE 77
      ENVIRONMENT "DDP_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  endforeach()
endif()

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
  execute_process(COMMAND ${Python3_EXECUTABLE} ${script} --cells ${where}
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
    list(APPEND env "DDP_HAVE_MPI=${DDP_HAVE_MPI}" ${M_ENV})
    add_test(NAME ${name} COMMAND ${Python3_EXECUTABLE} ${script} ${launcher} ${np})
    set_tests_properties(${name} PROPERTIES
      LABELS "${labels}" PROCESSORS 2 TIMEOUT 600 SKIP_RETURN_CODE 77 ENVIRONMENT "${env}")
    list(APPEND names ${name})
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()
ddp_matrix(local matrix_local_tests)
