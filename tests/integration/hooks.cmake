# The tests of issue 35 (tests/integration/hooks_check.py's scenarios): gradient clipping by the global norm in
# every step, DDP's communication hooks in step 06, the finite check before a bucket's collective.
# hooks_probe runs common/'s clipper and hooks on numbers read from a file, for the comparisons with
# PyTorch's own functions (skipped, status 77, where no Python has torch).
add_executable(hooks_probe integration/hooks_probe.c)
target_link_libraries(hooks_probe PRIVATE ddp_common ddp_warnings)

# The scenarios (clip_*, hook_*, check_finite_*, powersgd_*: the CTest tests hooks_<scenario>) are
# registered in hooks_check.py with their properties and added by tests.cmake (ddp_scenarios).
