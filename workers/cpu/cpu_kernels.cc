#include "workers/cpu/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::workers::cpu {
namespace {

// OpenBLAS is called from several threads at once (the pool's slices, and engines of their own).
// Its serial build is not safe for that: its buffer allocator takes no lock, and concurrent
// products corrupted each other's results (about 1 run in 75 of
// QwenGoldenTest.ConcurrentStatesMatchGolden). The pthread build locks; its own threads are
// turned off here, before the first product, because the pool below does the splitting.
void InitBlas() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// A fixed pool that splits one product into row slices, one per thread: the thread count is ours
// to set (--native_threads) and never oversubscribes the engine thread.
class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static teardown
    return *pool;
  }
  void SetThreads(int threads) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    while (static_cast<int>(workers_.size()) + 1 < threads) {
      workers_.emplace_back([this, id = workers_.size()] { Loop(id); });
    }
    threads_ = std::max(1, threads);
  }
  int threads() const { return threads_.load(); }
  // Runs fn(0..parts-1) with the calling thread taking part 0; returns when all are done.
  void Run(int parts, const std::function<void(int)>& fn) ABSL_LOCKS_EXCLUDED(run_mu_, mu_) {
    absl::MutexLock run(&run_mu_);  // one product at a time
    {
      absl::MutexLock l(&mu_);
      fn_ = &fn;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    cv_.SignalAll();
    fn(0);
    absl::MutexLock l(&mu_);
    while (pending_ != 0) done_cv_.Wait(&mu_);
    fn_ = nullptr;
  }

 private:
  Pool() {
    const unsigned hw = std::thread::hardware_concurrency();
    SetThreads(hw == 0 ? 1 : static_cast<int>(hw));
  }
  // Never returns: the pool's threads live as long as the process.
  void Loop(size_t id) ABSL_LOCKS_EXCLUDED(mu_) {
    uint64_t seen = 0;
    mu_.Lock();
    while (true) {
      while (generation_ == seen) cv_.Wait(&mu_);
      seen = generation_;
      const int part = static_cast<int>(id) + 1;
      if (fn_ == nullptr || part >= parts_) continue;
      const std::function<void(int)>* fn = fn_;
      mu_.Unlock();
      (*fn)(part);
      mu_.Lock();
      if (--pending_ == 0) done_cv_.SignalAll();
    }
  }

  absl::Mutex run_mu_;  // held by Run for a whole product
  absl::Mutex mu_;
  absl::CondVar cv_;       // generation_ changed
  absl::CondVar done_cv_;  // pending_ reached 0
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> threads_{1};
  const std::function<void(int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  int parts_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

// Below this many multiply-adds a product runs on the calling thread: waking the pool costs
// more than it saves.
constexpr int64_t kParallelMacs = 1 << 18;

void LinearSlice(const float* x, int64_t n, int64_t cols, const float* w, int64_t r0, int64_t r1,
                 int64_t rows, float* out, bool accumulate) {
  if (r1 <= r0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(r1 - r0), static_cast<int>(cols),
                1.0f, w + r0 * cols, static_cast<int>(cols), x, 1, beta, out + r0, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
              static_cast<int>(r1 - r0), static_cast<int>(cols), 1.0f, x, static_cast<int>(cols),
              w + r0 * cols, static_cast<int>(cols), beta, out + r0, static_cast<int>(rows));
}

}  // namespace

void Linear(const float* x, int64_t n, int64_t cols, const float* w, int64_t rows, float* out,
            bool accumulate) {
  InitBlas();
  Pool& pool = Pool::Get();
  const int threads = pool.threads();
  if (threads <= 1 || n * rows * cols < kParallelMacs || rows < 64) {
    LinearSlice(x, n, cols, w, 0, rows, rows, out, accumulate);
    return;
  }
  // Slices of output features, 16-aligned so each thread writes whole cache lines.
  const int64_t step = ((rows + threads - 1) / threads + 15) / 16 * 16;
  pool.Run(threads, [&](int part) {
    const int64_t r0 = std::min(rows, part * step);
    LinearSlice(x, n, cols, w, r0, std::min(rows, r0 + step), rows, out, accumulate);
  });
}

void RmsNorm(const float* x, int64_t n, int64_t dim, const float* weight, float eps,
             bool one_plus_weight, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    float ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const float w = weight == nullptr ? 1.0f : (one_plus_weight ? 1.0f + weight[i] : weight[i]);
      o[i] = xr[i] * inv * w;
    }
  }
}

void Softmax(float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

void MatMul(const float* a, int64_t lda, const float* b, int64_t ldb, bool b_transposed, int64_t m,
            int64_t n, int64_t k, float* out, int64_t ldc, bool accumulate) {
  InitBlas();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), accumulate ? 1.0f : 0.0f, out,
              static_cast<int>(ldc));
}

void SetKernelThreads(int threads) {
  if (threads > 0) Pool::Get().SetThreads(threads);
}

}  // namespace tandem::workers::cpu
