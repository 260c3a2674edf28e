// The warp-level tensor-core product the hand-written kernels share (attention's flash kernel, the weight-only
// product): mma.sync m16n8k16 of f16 or bf16 operands with f32 accumulation (sm_80 and later).
#pragma once

namespace tensoracle::cuda::kernels {

// d += a · b for one m16n8k16 tile: a (16 x 16, row major) in four registers of packed pairs, b (16 x 8, column major)
// in two, d (16 x 8) in four f32 values, in PTX's fragment layouts (lane = 4 · group + thread in group).
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace tensoracle::cuda::kernels
