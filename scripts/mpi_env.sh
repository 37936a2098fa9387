# Sourced by the scripts: Open MPI settings for running on one machine, measured or verified here
# (see docs): allow root (containers, CI), oversubscribe when ranks > cores, shared memory only (the
# ob1 messaging layer over the self and vader transports: without it, MPI_Init spends ~0.2 s probing
# for network hardware, measured 0.25 s vs 0.04 s at 2 ranks), one OpenBLAS thread per rank so
# ranks do not fight over cores, and the ring algorithm for the nonblocking all-reduce of step 06's
# buckets (MPI_Iallreduce runs in Open MPI's libnbc, whose default algorithm took twice as long as
# its ring for the 7.1 MiB gradient: docs/performance.md). A value already set wins.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export OMPI_MCA_coll_libnbc_iallreduce_algorithm=${OMPI_MCA_coll_libnbc_iallreduce_algorithm:-1}
