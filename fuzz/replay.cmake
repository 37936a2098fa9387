# Replays the committed fuzz corpus (fuzz/corpus/<target>/) through each fuzz target built with the
# ordinary compiler and a plain main() (replay_main.c) instead of libFuzzer, so CI needs no clang.
# dev/fuzz.sh does the actual fuzzing (clang, libFuzzer, ASan + UBSan).
foreach(target idx ckpt)
  add_executable(fuzz_replay_${target} ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${target}.c
                 ${PROJECT_SOURCE_DIR}/fuzz/fuzz_util.c ${PROJECT_SOURCE_DIR}/fuzz/replay_main.c)
  target_include_directories(fuzz_replay_${target} PRIVATE ${PROJECT_SOURCE_DIR}/fuzz)
  target_link_libraries(fuzz_replay_${target} PRIVATE ddp_common ddp_warnings)
  add_test(NAME fuzz_replay_${target}
           COMMAND fuzz_replay_${target} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${target})
  set_tests_properties(fuzz_replay_${target} PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "TMPDIR=${CMAKE_CURRENT_BINARY_DIR}/tmp")
endforeach()
