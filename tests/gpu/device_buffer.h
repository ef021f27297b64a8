#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::testing {

// A device copy of T values for kernel tests, freed on destruction. Empty buffers are fine (a
// k = 1 convolution has no state): nothing is copied to or from them, since a copy from an empty
// vector's data() fails with cudaErrorInvalidValue, which the next launch check would report.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
    EXPECT_NE(ptr_, nullptr) << "cudaMalloc of " << n << " values";
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    if (n_ == 0) return;
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_ == 0) return host;
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

}  // namespace tandem::testing
