# FindNCCL: locate NCCL (no CMake package config ships with it).
#
# Hints: -DNCCL_ROOT=<prefix> or the environment variable NCCL_ROOT, then the CUDA toolkit's own
# directories. Provides the imported target NCCL::NCCL and NCCL_FOUND.
set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "NCCL install prefix (contains include/nccl.h)")
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2  # pip wheels (nvidia-nccl-*) ship only the .so.2
  HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda
  PATH_SUFFIXES lib64 lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  FAIL_MESSAGE "NCCL not found: set NCCL_ROOT to the prefix that holds include/nccl.h and lib/libnccl.so")
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
