#include "workers/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::workers::cuda {
namespace {

constexpr char kLibrary[] = "libcublas.so.13";

// Sets *fn to `symbol` in the library, or names the symbol in `missing`.
template <typename Fn>
void Resolve(void* handle, const char* symbol, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (*fn == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", symbol);
}

absl::StatusOr<CublasLibrary> Load() {
  // Never closed: cuBLAS handles may outlive any one caller, up to the process's exit.
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", kLibrary,
                     "), which the CUDA engine needs: ", why != nullptr ? why : "unknown reason",
                     "; install CUDA 13's cuBLAS or put its directory on LD_LIBRARY_PATH"));
  }
  // The cublas_v2.h names are macros for the _v2 symbols the library exports.
  CublasLibrary lib;
  std::string missing;
  Resolve(handle, "cublasCreate_v2", &lib.create, &missing);
  Resolve(handle, "cublasDestroy_v2", &lib.destroy, &missing);
  Resolve(handle, "cublasSetStream_v2", &lib.set_stream, &missing);
  Resolve(handle, "cublasSetWorkspace_v2", &lib.set_workspace, &missing);
  Resolve(handle, "cublasGemmEx", &lib.gemm_ex, &missing);
  Resolve(handle, "cublasGetStatusName", &lib.status_name, &missing);
  Resolve(handle, "cublasGetStatusString", &lib.status_string, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kLibrary, " lacks ", missing, ": not the cuBLAS 13 the engine was built for"));
  }
  return lib;
}

}  // namespace

absl::StatusOr<const CublasLibrary*> CublasLibrary::Get() {
  static const absl::StatusOr<CublasLibrary>* const loaded =
      new absl::StatusOr<CublasLibrary>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace tandem::workers::cuda
