// Region marks for llvm-mca (bench/mca_stages.sh compiles the AMX kernel to
// assembly with ATTN_MCA_MARKERS and models the marked loop bodies): empty
// in every build of the library.
#pragma once

#if defined(ATTN_MCA_MARKERS) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_MCA_BEGIN(name) asm volatile("# LLVM-MCA-BEGIN " name)
#define ATTN_MCA_END() asm volatile("# LLVM-MCA-END")
#else
#define ATTN_MCA_BEGIN(name)
#define ATTN_MCA_END()
#endif
