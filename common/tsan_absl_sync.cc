// ThreadSanitizer builds only: CMakeLists.txt (tandem_sanitize) compiles this file into every
// executable when TANDEM_SANITIZE=thread; nothing else uses it.
//
// Tandem's locks are absl::Mutex, and Debian's Abseil is not built with -fsanitize=thread: the
// atomics inside libabsl_synchronization.so that make Lock, Unlock and CondVar::Wait synchronize
// are invisible to TSan, which would then see no order between two threads' critical sections
// and report every guarded member as a data race. (Abseil built with TSan announces its mutexes
// itself; this file stands in for that.) Each entry point that acquires or releases a Mutex is
// defined here, in the executable, so it interposes on the shared library's definition: it calls
// the library's function (found with dlsym(RTLD_NEXT)) and tells TSan the mutex was acquired
// (__tsan_acquire after locking) or released (__tsan_release before unlocking). A CondVar wait
// releases its mutex and takes it again. TSan then orders critical sections as it does for
// pthread mutexes. It does not check lock order (TSan's deadlock detector is not told about
// these locks).
//
// One limit: a Condition passed to Await/LockWhen may be evaluated by whichever thread unlocks
// the mutex, after that thread's release was announced, so a condition that reads a member
// another thread then writes can be reported; CondVar loops have no such case.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"

namespace {

#define TANDEM_STRINGIFY2(x) #x
#define TANDEM_STRINGIFY(x) TANDEM_STRINGIFY2(x)

// The library's definition of absl::<name> (Itanium mangling). `mangled` is written for Abseil
// in an inline namespace, where "S0_" names absl::<inline namespace>.
void* Real(const char* mangled) {
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const std::string ns = TANDEM_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  std::string name = "_ZN4absl" + std::to_string(ns.size()) + ns + mangled;
#else
  std::string name = std::string("_ZN4absl") + mangled;
  for (size_t at; (at = name.find("S0_")) != std::string::npos;) name.replace(at, 3, "S_");
#endif
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in the Abseil library: %s\n", name.c_str(),
                 dlerror());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn Lookup(const char* mangled) {
  return reinterpret_cast<Fn>(Real(mangled));
}

}  // namespace

// The Real() lookups run once each (function-local statics). The definitions below are the
// library's, which the analysis cannot follow: it is off for them.
#define TANDEM_REAL(type, mangled) static const auto real = Lookup<type>(mangled)

namespace absl {
ABSL_NAMESPACE_BEGIN

ABSL_NO_THREAD_SAFETY_ANALYSIS void Mutex::Lock() {
  TANDEM_REAL(void (*)(Mutex*), "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS void Mutex::ReaderLock() {
  TANDEM_REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::TryLock() {
  TANDEM_REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::ReaderTryLock() {
  TANDEM_REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS void Mutex::Unlock() {
  TANDEM_REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS void Mutex::ReaderUnlock() {
  TANDEM_REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS void Mutex::LockWhen(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS void Mutex::ReaderLockWhen(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&), "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::LockWhenWithTimeout(const Condition& cond,
                                                               Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);  // held on return either way
  return result;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond,
                                                                     Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);
  return result;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::LockWhenWithDeadline(const Condition& cond,
                                                                Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time),
              "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond,
                                                                      Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time),
              "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS void Mutex::Await(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::AwaitWithTimeout(const Condition& cond,
                                                            Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);
  return result;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time),
              "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS void CondVar::Wait(Mutex* mu) {
  TANDEM_REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  TANDEM_REAL(bool (*)(CondVar*, Mutex*, Duration),
              "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool result = real(this, mu, timeout);
  __tsan_acquire(mu);
  return result;
}

ABSL_NO_THREAD_SAFETY_ANALYSIS bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  TANDEM_REAL(bool (*)(CondVar*, Mutex*, Time),
              "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool result = real(this, mu, deadline);
  __tsan_acquire(mu);
  return result;
}

ABSL_NAMESPACE_END
}  // namespace absl
