# CUDA is optional. Conduit needs only the driver API headers (cuda.h): it loads the driver itself
# (dlopen of libcuda.so.1 at run time) and links no CUDA library, so a CUDA build runs on machines without a
# GPU and says why there. The headers come from a toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda, nvcc on
# PATH), from PyPI's nvidia-cuda-runtime wheel installed into the Python cmake finds, or from an explicit
# -DCONDUIT_CUDA_INCLUDE_DIR=$(scripts/cuda-headers.sh).
# CONDUIT_CUDA: AUTO (use CUDA when found), ON (fail without it), OFF (never).
# Sets CONDUIT_HAVE_CUDA and, when ON, the interface target conduit::cuda_headers.
set(CONDUIT_HAVE_CUDA OFF)
if(NOT CONDUIT_CUDA STREQUAL "OFF")
  set(_cuda_hints $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda /usr/lib/cuda)
  find_program(_nvcc nvcc)
  if(_nvcc)
    get_filename_component(_nvcc_dir ${_nvcc} DIRECTORY)
    list(APPEND _cuda_hints ${_nvcc_dir}/..)
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
              "import nvidia.cuda_runtime, os; print(os.path.dirname(nvidia.cuda_runtime.__file__))"
      OUTPUT_VARIABLE _pypi_cuda OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_pypi_cuda)
      list(APPEND _cuda_hints ${_pypi_cuda})
    endif()
  endif()
  find_path(CONDUIT_CUDA_INCLUDE_DIR cuda.h HINTS ${_cuda_hints}
            PATH_SUFFIXES include targets/x86_64-linux/include)
  if(CONDUIT_CUDA_INCLUDE_DIR)
    file(STRINGS ${CONDUIT_CUDA_INCLUDE_DIR}/cuda.h _cuda_version_line REGEX "^#define CUDA_VERSION [0-9]+")
    string(REGEX REPLACE "^#define CUDA_VERSION ([0-9]+).*" "\\1" _cuda_version "${_cuda_version_line}")
    if(_cuda_version LESS 11070)
      message(FATAL_ERROR "CUDA headers in ${CONDUIT_CUDA_INCLUDE_DIR} are version ${_cuda_version}; "
                          "Conduit needs 11.7 or later (cuMemGetHandleForAddressRange)")
    endif()
    set(CONDUIT_HAVE_CUDA ON)
    add_library(conduit_cuda_headers INTERFACE)
    # SYSTEM: cuda.h's own warnings must not fail a -Werror build.
    target_include_directories(conduit_cuda_headers SYSTEM INTERFACE ${CONDUIT_CUDA_INCLUDE_DIR})
    add_library(conduit::cuda_headers ALIAS conduit_cuda_headers)
    message(STATUS "CUDA: driver API headers ${CONDUIT_CUDA_INCLUDE_DIR} (CUDA_VERSION ${_cuda_version}); "
                   "libcuda.so.1 is loaded at run time")
  elseif(CONDUIT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CONDUIT_CUDA=ON but no cuda.h found: set CUDA_HOME, or pass "
                        "-DCONDUIT_CUDA_INCLUDE_DIR=$(scripts/cuda-headers.sh)")
  else()
    message(STATUS "CUDA headers not found: building without CUDA (cuda:N regions answer 422)")
  endif()
endif()
