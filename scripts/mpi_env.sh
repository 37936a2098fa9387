# Sourced by the scripts: Open MPI settings for running on one machine, measured or verified here
# (see docs): allow root (containers, CI), oversubscribe when ranks > cores, shared memory only, and
# one OpenBLAS thread per rank so ranks do not fight over cores.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# Open MPI's nonblocking all-reduce (libnbc, used by step 06's reducer) defaults to an algorithm that
# took 8.8-9.9 ms for the 7.11 MiB gradient at 2 ranks here; the ring algorithm took 3.7-4.8 ms, as
# fast as the blocking MPI_Allreduce (3.5-3.8 ms) (allreduce_bench --nonblocking, 3 runs each).
export OMPI_MCA_coll_libnbc_iallreduce_algorithm=${OMPI_MCA_coll_libnbc_iallreduce_algorithm:-1}
