// A CPU kernel's hot loop compiled once per instruction set beside the
// baseline (AVX-512, AVX2), the copy for the CPU it runs on picked at each
// call, as PyTorch dispatches its CPU kernels: the build runs on any x86-64,
// and a loop of GELU's rational tanh runs 10x faster on AVX-512 than the
// baseline's. A loop is written once, as an ordinary function;
// cpu_clones::run<loop>(args...) calls it through the copy for the best
// instruction set this CPU (and its OS) has. Each copy is a function marked
// for its instruction set into which the loop, and everything it calls that
// can be inlined, is inlined (flatten): one source, compiled three times.
//
// Every copy gives the baseline's bits on the same machine: the loops are
// elementwise IEEE operations in source order (the build keeps
// floating-point contraction off, so no copy fuses a multiply and an add,
// and nothing reassociates a sum). Calls into libm (erff, expf, tanhf) are
// the library's, which may itself pick code by CPU. The tests run every
// copy this CPU can execute against the scalar formula, bit for bit
// (ScopedIsaForTesting; tests/kernels/ops_math_test.cc).
//
// RILL_CPU_ISA (avx512, avx2 or baseline) caps the copy picked.
//
// The choice costs a relaxed atomic load, the cached CPU check and a switch
// per call: within a nanosecond of the indirect call GCC's target_clones
// made (an ifunc), measured on loops of 64 elements.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define RILL_CPU_CLONES_X86 1
#else
#define RILL_CPU_CLONES_X86 0
#endif

namespace rill::cpu_clones {

// The instruction sets a loop is compiled for, the best first.
enum class Isa : int { kAvx512, kAvx2, kBaseline };
inline constexpr Isa kIsas[] = {Isa::kAvx512, Isa::kAvx2, Isa::kBaseline};

constexpr const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "AVX-512";
    case Isa::kAvx2: return "AVX2";
    case Isa::kBaseline: return "baseline";
  }
  return "?";
}

// Whether this CPU, and the OS (its saved register state), can execute the
// copy compiled for `isa`: the check GCC's target_clones makes.
inline bool cpu_runs(Isa isa) {
#if RILL_CPU_CLONES_X86
  __builtin_cpu_init();  // callable before static constructors have run
  switch (isa) {
    case Isa::kAvx512: return __builtin_cpu_supports("avx512f");
    case Isa::kAvx2: return __builtin_cpu_supports("avx2");
    case Isa::kBaseline: return true;
  }
  return false;
#else
  return isa == Isa::kBaseline;
#endif
}

// The instruction set named by RILL_CPU_ISA's value: "avx512", "avx2" or
// "baseline"; nullopt for anything else.
inline std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "avx512") return Isa::kAvx512;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "baseline") return Isa::kBaseline;
  return std::nullopt;
}

// The best copy this CPU runs, at most `cap`: RILL_CPU_ISA=avx2 on an
// AVX-512 machine runs the AVX2 copies, to measure them where both exist
// (as PyTorch's ATEN_CPU_CAPABILITY). A cap above the CPU's is the CPU's.
inline Isa best_isa_up_to(Isa cap) {
  for (Isa isa : kIsas)
    if (static_cast<int>(isa) >= static_cast<int>(cap) && cpu_runs(isa)) return isa;
  return Isa::kBaseline;
}

inline Isa best_isa() {
  static const Isa best = [] {
    const char* env = std::getenv("RILL_CPU_ISA");
    if (env == nullptr || *env == '\0') return best_isa_up_to(Isa::kAvx512);
    const std::optional<Isa> cap = parse_isa(env);
    if (!cap) {
      std::fprintf(stderr, "RILL_CPU_ISA='%s' is not one of avx512, avx2, baseline: ignored\n", env);
      return best_isa_up_to(Isa::kAvx512);
    }
    return best_isa_up_to(*cap);
  }();
  return best;
}

namespace detail {
// -1: the loops run the best copy; otherwise the Isa a test chose.
inline std::atomic<int> forced_isa{-1};
}  // namespace detail

// The copy run() calls now.
inline Isa active_isa() {
  const int forced = detail::forced_isa.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : best_isa();
}

// For tests: while one lives, run() calls the copy for `isa`, in every
// thread. A copy this CPU cannot run (cpu_runs) is not forced: run() goes
// on calling the best one. Scopes nest; not for concurrent use.
class ScopedIsaForTesting {
 public:
  explicit ScopedIsaForTesting(Isa isa)
      : previous_(detail::forced_isa.exchange(cpu_runs(isa) ? static_cast<int>(isa) : detail::forced_isa.load())) {}
  ~ScopedIsaForTesting() { detail::forced_isa.store(previous_); }
  ScopedIsaForTesting(const ScopedIsaForTesting&) = delete;
  ScopedIsaForTesting& operator=(const ScopedIsaForTesting&) = delete;

 private:
  int previous_;
};

#if RILL_CPU_CLONES_X86
// The copies. Each takes the loop as a template argument, so the call in it
// is direct and flatten inlines the loop into the function compiled for
// the copy's instruction set.
template <auto kLoop, class... Args>
__attribute__((target("avx512f"), flatten)) void run_avx512(Args... args) {
  kLoop(args...);
}

template <auto kLoop, class... Args>
__attribute__((target("avx2"), flatten)) void run_avx2(Args... args) {
  kLoop(args...);
}
#endif

template <auto kLoop, class... Args>
__attribute__((flatten)) void run_baseline(Args... args) {
  kLoop(args...);
}

// Runs kLoop(args...) in the copy for active_isa().
template <auto kLoop, class... Args>
void run(Args... args) {
#if RILL_CPU_CLONES_X86
  switch (active_isa()) {
    case Isa::kAvx512: return run_avx512<kLoop>(args...);
    case Isa::kAvx2: return run_avx2<kLoop>(args...);
    case Isa::kBaseline: break;
  }
#endif
  run_baseline<kLoop>(args...);
}

}  // namespace rill::cpu_clones
