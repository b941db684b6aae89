// Which instructions this build of the kernels uses, as the compiler was told (-march=native or a --cpu-isa
// level): the log names the path that runs.
#include <torch/library.h>

#include <string>

namespace sqlscout {

std::string instructions() {
  std::string found;
  const auto add = [&found](bool present, const char* name) {
    if (present) found += found.empty() ? name : std::string(", ") + name;
  };
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  add(true, "AMX tiles");
#endif
#if defined(__AVX512BF16__)
  add(true, "avx512_bf16");
#endif
#if defined(__AVX512VNNI__)
  add(true, "avx512_vnni");
#endif
#if defined(__AVXVNNI__)
  add(true, "avx_vnni");
#endif
#if defined(__AVX512F__)
  add(true, "AVX-512");
#elif defined(__AVX2__)
  add(true, "AVX2");
#endif
#if defined(__F16C__)
  add(true, "F16C");
#endif
#if defined(__ARM_NEON)
  add(true, "NEON");
#endif
#if defined(__ARM_FEATURE_DOTPROD)
  add(true, "SDOT");
#endif
#if defined(__ARM_FEATURE_BF16)
  add(true, "BFDOT");
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
  add(true, "I8MM");
#endif
  return found.empty() ? "no vector extension (the portable branch of every helper)" : found;
}

}  // namespace sqlscout

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) { m.def("instructions() -> str", &sqlscout::instructions); }
