#pragma once

// cuBLAS, loaded on first use instead of linked: libcublasLt's static initializers take about
// 0.4 s and 100 MB of page faults in every process that links it, and most tandem-worker
// processes (CPU, synthetic and upstream engines, every test's workers) never touch a GPU.

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace tandem::workers::cuda {

// The cuBLAS entry points the engine calls, resolved from libcublas.so.13 (found the way the
// dynamic loader finds any library: LD_LIBRARY_PATH, the loader's --library-path, ld.so.cache).
struct CublasLibrary {
  // cublasGemmEx is overloaded in C++ (an inline wrapper takes the older cudaDataType compute
  // type); this is the library's own. The cast checks it against the header at compile time.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);

  decltype(&::cublasCreate) create = nullptr;
  decltype(&::cublasDestroy) destroy = nullptr;
  decltype(&::cublasSetStream) set_stream = nullptr;
  decltype(&::cublasSetWorkspace) set_workspace = nullptr;
  decltype(static_cast<GemmEx>(&::cublasGemmEx)) gemm_ex = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;

  // Loads the library once per process; later calls return the same table or the same error
  // (FailedPrecondition naming the library and the loader's reason).
  static absl::StatusOr<const CublasLibrary*> Get();
};

}  // namespace tandem::workers::cuda
