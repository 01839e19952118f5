# Cross build for 64-bit Arm Linux with Debian's cross g++ and the arm64
# multiarch packages (libhwy-dev:arm64, libgtest-dev:arm64). Tests run under
# qemu-user through CMAKE_CROSSCOMPILING_EMULATOR, so `ctest` (and GoogleTest
# discovery at build time) work unchanged. .ci/arm.sh sets everything up:
#
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: packages and their CMake configs live in /usr/lib/aarch64-linux-gnu
# of the host's own root, not in a separate sysroot, so instead of
# CMAKE_FIND_ROOT_PATH the search is pointed at that architecture's libdir.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# qemu runs the binaries against the arm64 multiarch runtime (libc6:arm64,
# libstdc++6:arm64, libgomp1:arm64 in /lib/aarch64-linux-gnu), i.e. `-L /`,
# not the cross toolchain's /usr/aarch64-linux-gnu: that tree has its own
# ld.so but no libhwy, so the loader would pair it with the multiarch libc
# of another glibc build, and pthread_create (the first OpenMP thread) then
# loops forever on a stack list laid out differently. QEMU_CPU picks the CPU.
find_program(ATTN_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${ATTN_QEMU_AARCH64} -L /)

# Highway 1.0.3 compiles NEON, SVE, SVE2, SVE_256 and SVE2_128 for aarch64,
# and so does attn: its register tiles are plain arrays on NEON and named
# locals on SVE, whose sizeless vectors cannot be array elements
# (kernels/common/vec_array-inl.h). -DATTN_ARM_SVE=OFF builds NEON alone
# (0xF000000 = HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128, Highway
# 1.0.3's bits 24..27, written as a number so the flag needs no shell
# quoting), e.g. for a quicker build.
option(ATTN_ARM_SVE "Compile Highway's SVE targets too" ON)
# (The toolchain file is read more than once per configure: append once.)
if(NOT ATTN_ARM_SVE AND NOT CMAKE_CXX_FLAGS_INIT MATCHES "HWY_DISABLED_TARGETS")
  string(APPEND CMAKE_CXX_FLAGS_INIT " -DHWY_DISABLED_TARGETS=0xF000000")
endif()
