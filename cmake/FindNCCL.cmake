# FindNCCL: locate NCCL (no CMake package config ships with it).
#
# The header and the library must come from one install: nccl.h of one version with libnccl of
# another compiles and links, then fails (or misbehaves) at run time. So this module looks for roots
# that hold both, in order, and takes the first:
#   1. -DNCCL_ROOT=<prefix> or the environment variable NCCL_ROOT (then nothing else is tried);
#   2. the CUDA toolkit's own directories, then /usr/local/cuda;
#   3. the system (/usr, /usr/local: Debian's libnccl-dev).
# A root holds include/nccl.h and lib/, lib64/ or lib/x86_64-linux-gnu/ with libnccl.so or, as pip
# wheels (nvidia-nccl-cu*) ship it, only libnccl.so.2.
# Provides the imported target NCCL::NCCL, NCCL_FOUND, NCCL_VERSION (from nccl.h), NCCL_ROOT_FOUND.
set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "NCCL install prefix (contains include/nccl.h and lib*/libnccl.so*)")
# A new value of the environment variable wins over the cached one (-DNCCL_ROOT wins otherwise).
if(DEFINED ENV{NCCL_ROOT} AND NOT "$ENV{NCCL_ROOT}" STREQUAL "${NCCL_ROOT_ENV_SEEN}")
  set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "NCCL install prefix" FORCE)
endif()
set(NCCL_ROOT_ENV_SEEN "$ENV{NCCL_ROOT}" CACHE INTERNAL "NCCL_ROOT in the environment at the last configure")

# A changed NCCL_ROOT makes the search start again.
if(DEFINED NCCL_ROOT_SEARCHED AND NOT NCCL_ROOT_SEARCHED STREQUAL NCCL_ROOT)
  unset(NCCL_INCLUDE_DIR CACHE)
  unset(NCCL_LIBRARY CACHE)
endif()
set(NCCL_ROOT_SEARCHED "${NCCL_ROOT}" CACHE INTERNAL "NCCL_ROOT of the last search")

# A cache from elsewhere (or an older version of this module) that pairs a header and a library of
# different roots is searched again.
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  get_filename_component(_nccl_root "${NCCL_INCLUDE_DIR}" DIRECTORY)
  string(FIND "${NCCL_LIBRARY}" "${_nccl_root}/" _nccl_at)
  if(NOT _nccl_at EQUAL 0)
    unset(NCCL_INCLUDE_DIR CACHE)
    unset(NCCL_LIBRARY CACHE)
  endif()
endif()

if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  if(NCCL_ROOT)
    set(_nccl_roots "${NCCL_ROOT}")
  else()
    set(_nccl_roots "")
    foreach(dir ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR})
      get_filename_component(parent "${dir}" DIRECTORY)
      list(APPEND _nccl_roots "${dir}" "${parent}")
    endforeach()
    list(APPEND _nccl_roots /usr/local/cuda /usr /usr/local)
    list(REMOVE_DUPLICATES _nccl_roots)
  endif()
  set(_nccl_tried "")
  foreach(root ${_nccl_roots})
    if(NOT EXISTS "${root}/include/nccl.h")
      continue()
    endif()
    list(APPEND _nccl_tried "${root}")
    foreach(libdir lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu)
      foreach(name libnccl.so libnccl.so.2)
        if(EXISTS "${root}/${libdir}/${name}")
          set(NCCL_INCLUDE_DIR "${root}/include" CACHE PATH "directory of nccl.h" FORCE)
          set(NCCL_LIBRARY "${root}/${libdir}/${name}" CACHE FILEPATH "libnccl, from the same root" FORCE)
          break()
        endif()
      endforeach()
      if(NCCL_LIBRARY)
        break()
      endif()
    endforeach()
    if(NCCL_LIBRARY)
      break()
    endif()
  endforeach()
  if(_nccl_tried AND NOT NCCL_LIBRARY)
    message(STATUS "NCCL: nccl.h in ${_nccl_tried} but no libnccl.so(.2) beside it in lib*/")
  endif()
endif()

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${part} +([0-9]+).*" "\\1" _nccl_${part} "${_nccl_defs}")
  endforeach()
  set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  get_filename_component(NCCL_ROOT_FOUND "${NCCL_INCLUDE_DIR}" DIRECTORY)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION
  FAIL_MESSAGE "NCCL not found: set NCCL_ROOT to the prefix that holds both include/nccl.h and lib/libnccl.so (or lib/libnccl.so.2)")
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
