// The per-epoch shuffle's device half: hashed keys and cub's radix sort (kept apart from
// kernels.cu so that cub's templates compile once and rarely).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "runner/cuda/kernels.h"

namespace ringtrain::gpu::kernels {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

int BlocksFor(std::int64_t count) {
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__global__ void ShuffleKeysKernel(std::uint64_t* __restrict__ keys, std::int64_t count,
                                  std::uint64_t seed, int epoch) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    keys[i] = ShuffleKey(seed, epoch, static_cast<std::uint64_t>(i));
  }
}

__global__ void IotaKernel(std::uint32_t* __restrict__ values, std::int64_t count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    values[i] = static_cast<std::uint32_t>(i);
  }
}

}  // namespace

cudaError_t ShuffleKeys(std::uint64_t* keys, std::int64_t count, std::uint64_t seed, int epoch,
                        cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  ShuffleKeysKernel<<<BlocksFor(count), kThreads, 0, stream>>>(keys, count, seed, epoch);
  return cudaGetLastError();
}

cudaError_t Iota(std::uint32_t* values, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  IotaKernel<<<BlocksFor(count), kThreads, 0, stream>>>(values, count);
  return cudaGetLastError();
}

cudaError_t SortPairs(void* temp, std::size_t* temp_bytes, const std::uint64_t* keys_in,
                      std::uint64_t* keys_out, const std::uint32_t* values_in,
                      std::uint32_t* values_out, int count, cudaStream_t stream) {
  if (temp_bytes == nullptr || count < 0) return cudaErrorInvalidValue;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(temp, *temp_bytes, keys_in, keys_out, values_in,
                                                    values_out, count, 0, 64, stream);
  if (err != cudaSuccess) return err;
  return temp == nullptr ? cudaSuccess : cudaGetLastError();
}

}  // namespace ringtrain::gpu::kernels
