// DP_VECTOR_CLONES marks an element-wise loop that runs over every parameter
// each step (the optimizers' updates, the replicas' gradient sum): GCC
// compiles it twice, for the x86-64 baseline (SSE2, 4 floats a vector) and
// for AVX2 (8), and the loader picks one by the CPU once (an ifunc). Neither
// clone has FMA (AVX2 alone enables none; GCC would contract a*b + c into
// one where it could) and each element's operations stay the same, in the
// same order, so both compute the same bits (tests/test_cpu.cpp checks them
// against the scalar formulas).
//
// Measured with a throwaway loop (not kept) on a 2-core Xeon VM with
// AVX-512: the 2-replica sum then the momentum SGD update over the
// 784-512-256-10 MLP's 535,818 parameters, in 16,384-float chunks as the CPU
// engine runs them, took 0.78-0.83 ms a step on one thread as SSE2,
// 0.69-0.71 as AVX2 and 0.68-0.70 with all of AVX-512 (g++ -O2): the update
// was 9% of the 2-device step's CPU time in `perf record`. Whole steps moved
// less than the machine's noise. Other compilers (clang: its AVX-512 would
// bring FMA in) and other processors get the baseline loop.
//
// Not under GCC's sanitizers: the dynamic loader runs an ifunc's resolver
// while it relocates, before the sanitizer's runtime is up, and GCC's TSan
// build crashed there (every TSan test: SIGSEGV in _dl_relocate_object).
#pragma once
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define DP_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DP_VECTOR_CLONES
#endif
