# Sourced by the scripts: Open MPI settings for running on one machine, measured or verified here
# (see docs): allow root (containers, CI), oversubscribe when ranks > cores, shared memory only, and
# one OpenBLAS thread per rank so ranks do not fight over cores.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
