// Reference answers from NVIDIA's own occupancy calculator (cuda_occupancy.h, host-only functions).
// Reads one launch per line on stdin:
//   major minor maxThreadsPerSM maxThreadsPerBlock regsPerSM regsPerBlock smemPerSM smemPerBlock
//   smemPerBlockOptin smemReserved threads regs smemStatic smemDynamic carveoutPct barriers optin
// and writes per line:
//   status activeBlocks limitWarps limitRegs limitSmem limitBlocks limitBarriers limitingFactors
//   allocatedRegsPerBlock allocatedSmemPerBlock
// INT_MAX (no limit) is printed as -1.
#include <climits>
#include <cstdio>
#include "cuda_occupancy.h"

static long long show(int v) { return v == INT_MAX ? -1 : v; }

int main() {
    int major, minor, threadsSM, threadsBlock, regsSM, regsBlock, threads, regs, carveout, barriers, optin;
    long long smemSM, smemBlock, smemOptin, smemReserved, smemStatic, smemDynamic;
    while (std::scanf("%d %d %d %d %d %d %lld %lld %lld %lld %d %d %lld %lld %d %d %d", &major, &minor,
                      &threadsSM, &threadsBlock, &regsSM, &regsBlock, &smemSM, &smemBlock, &smemOptin,
                      &smemReserved, &threads, &regs, &smemStatic, &smemDynamic, &carveout, &barriers, &optin) == 17) {
        cudaOccDeviceProp prop;
        prop.computeMajor = major;
        prop.computeMinor = minor;
        prop.maxThreadsPerBlock = threadsBlock;
        prop.maxThreadsPerMultiprocessor = threadsSM;
        prop.regsPerBlock = regsBlock;
        prop.regsPerMultiprocessor = regsSM;
        prop.warpSize = 32;
        prop.sharedMemPerBlock = (size_t)smemBlock;
        prop.sharedMemPerMultiprocessor = (size_t)smemSM;
        prop.numSms = 1;
        prop.sharedMemPerBlockOptin = (size_t)smemOptin;
        prop.reservedSharedMemPerBlock = (size_t)smemReserved;

        // optin=1: as a Triton kernel, which raises its dynamic shared memory limit to the device's opt-in maximum;
        // optin=0: as a plain CUDA kernel that never called cudaFuncSetAttribute (48 KB per block).
        cudaOccFuncAttributes attr;
        attr.maxThreadsPerBlock = threadsBlock;
        attr.numRegs = regs;
        attr.sharedSizeBytes = (size_t)smemStatic;
        attr.partitionedGCConfig = PARTITIONED_GC_OFF;
        attr.shmemLimitConfig = optin ? FUNC_SHMEM_LIMIT_OPTIN : FUNC_SHMEM_LIMIT_DEFAULT;
        attr.maxDynamicSharedSizeBytes = (size_t)(optin ? smemOptin : smemBlock);
        attr.numBlockBarriers = barriers;
        attr.virtualResourceCount = 0;

        cudaOccDeviceState state;
        state.carveoutConfig = carveout;

        cudaOccResult result;
        cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state, threads,
                                                                      (size_t)smemDynamic);
        if (status != CUDA_OCC_SUCCESS) {
            std::printf("%d 0 0 0 0 0 0 0 0 0\n", (int)status);
            continue;
        }
        std::printf("0 %d %lld %lld %lld %lld %lld %u %d %llu\n", result.activeBlocksPerMultiprocessor,
                    show(result.blockLimitWarps), show(result.blockLimitRegs), show(result.blockLimitSharedMem),
                    show(result.blockLimitBlocks), show(result.blockLimitBarriers), result.limitingFactors,
                    result.allocatedRegistersPerBlock, (unsigned long long)result.allocatedSharedMemPerBlock);
    }
    return 0;
}
