# Build-time measures that change nothing a test sees (scripts/test.sh builds three trees on 2 cores):
#  - ccache in front of the compiler (where installed);
#  - lld as the linker (included before any target is made, so add_link_options reaches them all);
#  - conduit_test_targets_finish(), called once after add_subdirectory(tests): per-tree compile options for
#    the targets under tests/ (CONDUIT_TEST_COMPILE_OPTIONS) and, with clang, a precompiled header of
#    gtest + nlohmann/json shared by the test executables.

# Every clean clone builds three trees (release, ASan + fuzzers, TSan): ~25 minutes of compiling on two cores,
# nearly all of it translation units that did not change since the last run on this machine. ccache
# (scripts/install-deps.sh installs it; the cache is ccache's own, ~/.cache/ccache, outside the repository)
# answers those from its cache. The base dir makes a clone's paths relative, so a clone in another directory
# hits the same entries; the sloppiness lets the tests' precompiled header (clang) be cached and reused.
# Object files from the cache keep the directory of the clone that compiled them in their debug info: a
# sanitizer report may name that clone's path for a file, never different code.
option(CONDUIT_CCACHE "Compile through ccache where it is installed" ON)
if(CONDUIT_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(CONDUIT_CCACHE_PROGRAM ccache)
  if(CONDUIT_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER
        env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=true
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        ${CONDUIT_CCACHE_PROGRAM})
  endif()
endif()

# GNU ld spends seconds on every one of the ~25 executables (large debug info, sanitizer runtimes); lld links
# the same objects several times faster. scripts/install-deps.sh installs it; without it nothing changes.
option(CONDUIT_LLD "Link with lld where the compiler accepts -fuse-ld=lld" ON)
if(CONDUIT_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" CONDUIT_HAVE_LLD)
  if(CONDUIT_HAVE_LLD)
    add_link_options(-fuse-ld=lld)
  endif()
endif()

# Extra compile options for every target under tests/ (a list). scripts/test.sh's ASan tree is also the
# fuzz tree: its libraries are built -O1 with libFuzzer's coverage (the fuzzers link them), while the tests'
# own code, the largest translation units, needs neither: "-O0;-fno-sanitize=fuzzer-no-link" there.
set(CONDUIT_TEST_COMPILE_OPTIONS "" CACHE STRING "Extra compile options for the targets under tests/ (a list)")

# Precompiled test headers: clang only. With gcc 12 any PCH at -O2 (even one of <string> alone) makes
# libstdc++'s inlined code raise -Warray-bounds false positives that -Werror turns into errors (the release
# and TSan trees are gcc -O2), and at -O2 the test files' time goes to code generation, not parsing. With
# clang a test file compiles in about two thirds of the time with the PCH.
option(CONDUIT_PCH "Precompile gtest and nlohmann/json for the test executables (clang)" ON)

function(_conduit_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _conduit_targets_under(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(conduit_test_targets_finish)
  _conduit_targets_under(${PROJECT_SOURCE_DIR}/tests targets)
  # conduit-tests: what ctest runs and nothing else (each test executable depends on the binaries it starts),
  # for the sanitizer trees, which need no benchmark or probe.
  add_custom_target(conduit-tests)
  set(use_pch OFF)
  if(CONDUIT_PCH AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(use_pch ON)
    # The PCH is built once, by this target, and reused by every gtest executable. Clang rejects a PCH
    # built with a -D the using file lacks (extra ones are fine), so this target has only what every user
    # has: GTest's GTEST_HAS_PTHREAD; the options and sanitizer flags are the tree's, as the users' are.
    set(stub ${CMAKE_BINARY_DIR}/conduit_test_pch.cpp)
    file(CONFIGURE OUTPUT ${stub} CONTENT "// The translation unit that builds the tests' precompiled header.\n")
    add_library(conduit_test_pch OBJECT ${stub})
    target_link_libraries(conduit_test_pch PRIVATE GTest::gtest nlohmann_json::nlohmann_json)
    # Without a timestamp in it, the PCH is the same bytes from every clone, so ccache can keep it and the
    # files that use it (ccache's manual, "Precompiled headers"); with one, every tree compiled them anew.
    target_compile_options(conduit_test_pch PRIVATE ${CONDUIT_TEST_COMPILE_OPTIONS}
                           "SHELL:-Xclang -fno-pch-timestamp")
    target_precompile_headers(conduit_test_pch PRIVATE <gtest/gtest.h> <nlohmann/json.hpp>)
  endif()
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    if(type STREQUAL "EXECUTABLE")
      add_dependencies(conduit-tests ${t})
    endif()
    if(CONDUIT_TEST_COMPILE_OPTIONS)
      target_compile_options(${t} PRIVATE ${CONDUIT_TEST_COMPILE_OPTIONS})
    endif()
    get_target_property(libs ${t} LINK_LIBRARIES)
    if(use_pch AND libs MATCHES "GTest::|conduit_test_support")
      target_precompile_headers(${t} REUSE_FROM conduit_test_pch)
    endif()
  endforeach()
endfunction()
