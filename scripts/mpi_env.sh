# Sourced by the scripts: Open MPI settings for running on one machine, measured or verified here
# (see docs): allow root (containers, CI), oversubscribe when ranks > cores, shared memory only (the
# ob1 messaging layer over the self and vader transports: without it, MPI_Init spends ~0.2 s probing
# for network hardware, measured 0.25 s vs 0.04 s at 2 ranks), and one OpenBLAS thread per rank so
# ranks do not fight over cores.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
