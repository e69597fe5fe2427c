// Fused RMSNorm in CUDA C++ (the "cuda" backend of iotrace's rmsnorm kernel, launched through CuPy).
//   s = x + r            (residual variants; s is stored, rounded to the input type, and normalised)
//   y = s * rsqrt(mean(s^2) + eps) * w      with fp32 math
// One block per row; each thread strides over the row, a warp-shuffle then shared-memory reduction gives
// the row's sum of squares, and a second pass writes y (the row is re-read from L1/L2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

template <typename T, bool RESIDUAL>
__device__ void rmsnorm_row(const T* __restrict__ x, const T* __restrict__ r, const T* __restrict__ w,
                            T* __restrict__ y, T* __restrict__ s, int n, float eps) {
    __shared__ float warp_sums[32];  // one partial sum per warp: at most 1024 / 32 warps
    const long long row = blockIdx.x;
    x += row * n;
    y += row * n;
    if (RESIDUAL) {
        r += row * n;
        s += row * n;
    }
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = to_float(x[i]);
        if (RESIDUAL) {
            T sum = from_float<T>(v + to_float(r[i]));
            s[i] = sum;
            v = to_float(sum);
        }
        acc += v * v;
    }
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    acc = lane < warps ? warp_sums[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    const float rstd = rsqrtf(acc / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = RESIDUAL ? to_float(s[i]) : to_float(x[i]);
        y[i] = from_float<T>(v * rstd * to_float(w[i]));
    }
}

extern "C" __global__ void rmsnorm_f16(const __half* x, const __half* r, const __half* w, __half* y, __half* s,
                                       int n, float eps) {
    rmsnorm_row<__half, false>(x, r, w, y, s, n, eps);
}
extern "C" __global__ void rmsnorm_f16_residual(const __half* x, const __half* r, const __half* w, __half* y,
                                                __half* s, int n, float eps) {
    rmsnorm_row<__half, true>(x, r, w, y, s, n, eps);
}
extern "C" __global__ void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* r, const __nv_bfloat16* w,
                                        __nv_bfloat16* y, __nv_bfloat16* s, int n, float eps) {
    rmsnorm_row<__nv_bfloat16, false>(x, r, w, y, s, n, eps);
}
extern "C" __global__ void rmsnorm_bf16_residual(const __nv_bfloat16* x, const __nv_bfloat16* r,
                                                 const __nv_bfloat16* w, __nv_bfloat16* y, __nv_bfloat16* s,
                                                 int n, float eps) {
    rmsnorm_row<__nv_bfloat16, true>(x, r, w, y, s, n, eps);
}
