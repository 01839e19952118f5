# Sanitizer and fuzzing builds (issue 7, Reliability). Included from the top
# CMakeLists.txt before any target is defined, so the flags reach the library,
# the tests and the tools alike.
#
#   -DATTN_SANITIZE=address,undefined   ASan + UBSan (any undefined behaviour
#                                       aborts: -fno-sanitize-recover)
#   -DATTN_SANITIZE=thread              TSan
#   -DATTN_BUILD_FUZZ=ON                tests/fuzz/attn-fuzz (libFuzzer; clang
#                                       only), usually with address,undefined
#
# CI (.ci/run) builds both with clang-14 (Debian's clang-14, libclang-rt-14-dev
# and libomp-14-dev; cmake/install-ci-extras.sh):
#
#   CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#       -DATTN_SANITIZE=address,undefined -DATTN_BUILD_FUZZ=ON -DATTN_BUILD_BENCH=OFF
#   CC=clang-14 CXX=clang++-14 cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#       -DATTN_SANITIZE=thread -DATTN_BUILD_BENCH=OFF
#
# Uninstrumented dependencies: libhwy.so, libgtest.a and libstdc++ are
# Debian's (built without sanitizers). That is fine for ASan/UBSan (malloc,
# free and the string functions are intercepted; only accesses made inside
# those libraries go unchecked) and for TSan with
# TSAN_OPTIONS=ignore_noninstrumented_modules=1.
#
# TSan and OpenMP. g++'s libgomp synchronises its barriers and work-sharing
# loops with raw futexes and atomics TSan cannot see, so every `omp for`
# whose results are read after the implicit barrier is reported as a race
# (measured here: 8 false reports on a 20-line race-free program). clang's
# libomp (libomp-14-dev) instead supports the OMPT tool interface, and
# LLVM's Archer tool (/usr/lib/llvm-14/lib/libarcher.so, shipped in the same
# package) turns OpenMP's barriers, tasks and locks into TSan
# happens-before annotations. With
#   OMP_TOOL_LIBRARIES=/usr/lib/llvm-14/lib/libarcher.so
#   TSAN_OPTIONS=ignore_noninstrumented_modules=1
# the same race-free program is clean and a planted race inside an `omp for`
# is still reported, so the TSan build uses clang + libomp + Archer and
# checks the OpenMP-parallel kernel too, not only user threads. With g++ the
# option still builds, but its OpenMP reports are not trustworthy: use
# clang. (ctest sets both variables for the TSan build, see
# tests/CMakeLists.txt.)

set(ATTN_SANITIZE "" CACHE STRING
    "Sanitizers for every target: empty, 'address,undefined', 'address', 'undefined' or 'thread'")
option(ATTN_BUILD_FUZZ "Build the libFuzzer harness tests/fuzz (clang only)" OFF)
# Runtime settings for the sanitized tests (a ctest ENVIRONMENT list; used
# by tests/CMakeLists.txt and tests/fuzz/CMakeLists.txt).
set(ATTN_SANITIZER_TEST_ENV "")

if(ATTN_SANITIZE)
  string(REPLACE "," ";" _attn_sanitizers "${ATTN_SANITIZE}")
  foreach(_s IN LISTS _attn_sanitizers)
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "ATTN_SANITIZE: unknown sanitizer '${_s}' (use address, undefined or thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _attn_sanitizers AND "address" IN_LIST _attn_sanitizers)
    message(FATAL_ERROR "ATTN_SANITIZE: thread cannot be combined with address")
  endif()
  if("thread" IN_LIST _attn_sanitizers AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(WARNING "ATTN_SANITIZE=thread with ${CMAKE_CXX_COMPILER_ID}: libgomp is not "
                    "TSan-aware and reports false races in OpenMP regions; configure with "
                    "CC=clang-14 CXX=clang++-14 (libomp + Archer) instead")
  endif()

  # Line tables are all a sanitizer report needs; full -g (variable
  # tracking) through Highway's per-target copies of every kernel costs
  # minutes of compile time for nothing.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(_attn_debug -gline-tables-only)
  else()
    set(_attn_debug -g1)
  endif()
  set(_attn_san_flags -fsanitize=${ATTN_SANITIZE} -fno-omit-frame-pointer ${_attn_debug})
  if("undefined" IN_LIST _attn_sanitizers)
    # Abort on the first report so that ctest fails instead of printing and
    # passing. float-divide-by-zero stays off (IEEE division is the intent).
    # pointer-overflow (address arithmetic wrapping past 0 or 2^64) is off:
    # on Highway's fully inlined per-target kernels it costs clang 2/3 of
    # the compile time (streaming.cc at -O1: 69 s with it, 25 s without),
    # and the accesses such arithmetic would lead to are ASan's to catch.
    list(APPEND _attn_san_flags -fno-sanitize-recover=undefined -fno-sanitize=pointer-overflow)
  endif()
  add_compile_options(${_attn_san_flags})
  add_link_options(-fsanitize=${ATTN_SANITIZE})
  message(STATUS "attn: sanitizers ${ATTN_SANITIZE} (${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION})")

  if("thread" IN_LIST _attn_sanitizers)
    string(REGEX MATCH "^[0-9]+" _attn_clang_major "${CMAKE_CXX_COMPILER_VERSION}")
    find_library(ATTN_ARCHER_LIBRARY NAMES archer
                 PATHS /usr/lib/llvm-${_attn_clang_major}/lib NO_DEFAULT_PATH)
    set(ATTN_SANITIZER_TEST_ENV
        "TSAN_OPTIONS=ignore_noninstrumented_modules=1:halt_on_error=1:second_deadlock_stack=1")
    if(ATTN_ARCHER_LIBRARY)
      list(APPEND ATTN_SANITIZER_TEST_ENV "OMP_TOOL_LIBRARIES=${ATTN_ARCHER_LIBRARY}")
    elseif(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      message(WARNING "libarcher not found (libomp-${_attn_clang_major}-dev): TSan will report "
                      "false races inside OpenMP regions")
    endif()
  else()
    # allocator_may_return_null: an impossible allocation returns null as
    # malloc does (the library turns that into attn::Error "memory") instead
    # of ASan aborting on it.
    set(ATTN_SANITIZER_TEST_ENV
        "ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:strict_string_checks=1"
        "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
endif()

if(ATTN_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ATTN_BUILD_FUZZ needs clang (libFuzzer): configure with "
                        "CC=clang-14 CXX=clang++-14")
  endif()
  # Coverage feedback for libFuzzer from the library and the harness; the
  # harness alone links the fuzzer's main (-fsanitize=fuzzer).
  add_compile_options(-fsanitize=fuzzer-no-link)
  add_link_options(-fsanitize=fuzzer-no-link)
endif()
