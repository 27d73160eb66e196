#pragma once

// Compiles a function for AVX-512, AVX2 and the baseline x86-64; the dynamic loader picks the
// best the CPU has (an ifunc), so the binary needs no -march and still uses the wide registers.
// For elementwise loops whose rounding must not depend on the clone: rt_model builds with
// -ffp-contract=off, so no clone fuses a multiply-add the baseline does not.
// Not under ThreadSanitizer: an ifunc resolver runs during relocation, before the TSan runtime
// is up, and its instrumented code crashes there (ASan copes).
#if defined(__x86_64__) && !defined(__clang_analyzer__) && !defined(__SANITIZE_THREAD__)
#define RINGTRAIN_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RINGTRAIN_TARGET_CLONES
#endif
