#include <deep_gemm/impls/sm120_fp4_paged_mqa_logits.cuh>
using namespace deep_gemm;
static void __instantiate_kernel() {
    auto ptr = reinterpret_cast<void*>(&sm120_fp4_paged_mqa_logits<
        6, 32,
        128, 64,
        true, false,
        2, 3,
        128,
        128, 256,
        float
    >);
}
