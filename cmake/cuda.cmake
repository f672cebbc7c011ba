# CUDA is optional. We need only the runtime headers and libcudart, which come either from a toolkit
# (CUDA_HOME, /usr/local/cuda, nvcc on PATH) or from PyPI's nvidia-cuda-runtime wheel (site-packages/nvidia/
# cuda_runtime). Sets CONDUIT_HAVE_CUDA and the imported target conduit::cudart when found.
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
  find_path(CONDUIT_CUDA_INCLUDE_DIR cuda_runtime_api.h HINTS ${_cuda_hints} PATH_SUFFIXES include)
  find_library(CONDUIT_CUDART_LIBRARY NAMES cudart libcudart.so.12 libcudart.so.13
               HINTS ${_cuda_hints} PATH_SUFFIXES lib lib64 targets/x86_64-linux/lib)
  if(CONDUIT_CUDA_INCLUDE_DIR AND CONDUIT_CUDART_LIBRARY)
    set(CONDUIT_HAVE_CUDA ON)
    add_library(conduit::cudart UNKNOWN IMPORTED)
    set_target_properties(conduit::cudart PROPERTIES IMPORTED_LOCATION ${CONDUIT_CUDART_LIBRARY}
                                                     INTERFACE_INCLUDE_DIRECTORIES ${CONDUIT_CUDA_INCLUDE_DIR})
    message(STATUS "CUDA runtime: ${CONDUIT_CUDART_LIBRARY} (headers ${CONDUIT_CUDA_INCLUDE_DIR})")
  elseif(CONDUIT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CONDUIT_CUDA=ON but no CUDA runtime found (set CUDA_HOME or pip install nvidia-cuda-runtime)")
  else()
    message(STATUS "CUDA runtime not found: building without CUDA")
  endif()
endif()
