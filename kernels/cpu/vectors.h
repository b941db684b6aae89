// Vectors of LANES fp32 values for the CPU kernels, written with GCC/Clang vector extensions so that one source
// compiles to AVX2, AVX-512 or NEON for the CPU it is built on: loads, bf16 widening, lane sums and exp.
#pragma once

#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

// Every helper that takes or returns a vector is inlined, whatever the compiler's size heuristics say: where the
// CPU has no 512-bit registers (AVX2, NEON) a 64-byte vector passed to a function that is not inlined goes through
// memory, and the int4 product at AVX2 ran at a third of its speed on such calls.
#define SQLSCOUT_INLINE inline __attribute__((always_inline))

namespace sqlscout {

constexpr int64_t LANES = 16;
using f32v = float __attribute__((vector_size(LANES * 4)));
using u32v = uint32_t __attribute__((vector_size(LANES * 4)));
using u16v = uint16_t __attribute__((vector_size(LANES * 2)));
using i32v = int32_t __attribute__((vector_size(LANES * 4)));

// Vectors as wide as one register (REGISTER_LANES fp32 values), for loops that keep many sums at once: GCC splits a
// wider vector through memory where the registers are narrower, and a kernel written in f32v then runs several
// times slower at AVX2 than at AVX-512. REGISTERS is how many such vectors the CPU holds.
#if defined(__AVX512F__)
constexpr int64_t REGISTER_LANES = 16;
constexpr int REGISTERS = 32;
#elif defined(__AVX2__)
constexpr int64_t REGISTER_LANES = 8;
constexpr int REGISTERS = 16;
#elif defined(__ARM_NEON)
constexpr int64_t REGISTER_LANES = 4;
constexpr int REGISTERS = 32;
#else
constexpr int64_t REGISTER_LANES = 4;
constexpr int REGISTERS = 16;
#endif

// The fp32 vector of N lanes and the integer vectors of as many lanes that its helpers convert through.
template <int64_t N>
struct Lanes {
  // typedef, not using: GCC drops the attribute from an alias whose size depends on a template parameter.
  typedef float f32 __attribute__((vector_size(N * 4)));
  typedef uint32_t u32 __attribute__((vector_size(N * 4)));
  typedef uint16_t u16 __attribute__((vector_size(N * 2)));
};
using f32r = Lanes<REGISTER_LANES>::f32;

template <class T>
SQLSCOUT_INLINE T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// N values from p as fp32 (LANES unless asked: widen<REGISTER_LANES>(p) gives an f32r): a bf16 number is the upper
// half of the fp32 of the same value, so widening is a shift.
template <int64_t N = LANES>
SQLSCOUT_INLINE typename Lanes<N>::f32 widen(const float* p) {
  return load<typename Lanes<N>::f32>(p);
}
template <int64_t N = LANES>
SQLSCOUT_INLINE typename Lanes<N>::f32 widen(const uint16_t* bits) {
  using L = Lanes<N>;
  typename L::u32 wide = __builtin_convertvector(load<typename L::u16>(bits), typename L::u32) << 16;
  return load<typename L::f32>(&wide);
}
template <int64_t N = LANES>
SQLSCOUT_INLINE typename Lanes<N>::f32 widen(const c10::BFloat16* p) {
  return widen<N>(reinterpret_cast<const uint16_t*>(p));
}

// The lanes of an f32v or f32r summed by halves (lane i plus lane i + N / 2, then + N / 4, ...), in shuffles where
// AVX-512 has them.
template <class V>
SQLSCOUT_INLINE float sum(V v) {
  constexpr int n = sizeof(V) / sizeof(float);
#if defined(__AVX512F__)
  if constexpr (n == 16) return _mm512_reduce_add_ps(load<__m512>(&v));
#endif
  float lanes[n];
  std::memcpy(lanes, &v, sizeof lanes);
  for (int width = n / 2; width > 0; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
}

#if defined(__AVX2__)
// The lanes of a vector held as two AVX2 halves, summed in sum()'s order: lane i plus lane i + 8 (the halves), then
// + 4, + 2, + 1.
SQLSCOUT_INLINE float sum_halves(__m256 low, __m256 high) {
  const __m256 pairs = _mm256_add_ps(low, high);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

// 8 values from p as fp32 lanes, as widen() gives 16.
SQLSCOUT_INLINE __m256 widen_half(const float* p) { return _mm256_loadu_ps(p); }
SQLSCOUT_INLINE __m256 widen_half(const uint16_t* bits) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load<__m128i>(bits)), 16));
}
#endif

// exp of each lane, within 2 ulp of std::exp (Cephes' expf: x = n ln 2 + r, |r| <= ln 2 / 2, a degree-7
// polynomial for e^r, 2^n put in the exponent bits), where a scalar std::exp a value costs the steps more than
// their arithmetic. Inputs are clamped to the finite range: e^-88.7 is the smallest normal, e^88.7 the largest.
SQLSCOUT_INLINE f32v exp(f32v x) {
  const f32v zero = {}, high = zero + 88.3762626647949f, low = zero - 87.3365447505531f;
  x = x > high ? high : x;
  x = x < low ? low : x;
  // n = x / ln 2 rounded half away from zero (the conversion truncates).
  const f32v half = x < zero ? zero - 0.5f : zero + 0.5f;
  const i32v n = __builtin_convertvector(x * 1.44269504088896341f + half, i32v);
  const f32v nf = __builtin_convertvector(n, f32v);
  const f32v r = x - nf * 0.693359375f + nf * 2.12194440e-4f;  // ln 2 in two parts, for an exact reduction
  f32v p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i32v power = (n + 127) << 23;
  return p * load<f32v>(&power);
}

// x * sigmoid(x) of each lane, and of one value (a row's tail past its whole vectors) by the same formula.
SQLSCOUT_INLINE f32v silu(f32v x) { return x / (1.0f + exp(-x)); }
SQLSCOUT_INLINE float silu(float x) { return x / (1.0f + std::exp(-x)); }

// The lanes stored to p as they are, or rounded to bf16 (to nearest, ties to even, NaN kept a NaN) as c10 rounds.
template <class V>
SQLSCOUT_INLINE void narrow(V v, float* p) {
  std::memcpy(p, &v, sizeof v);
}
template <class V>
SQLSCOUT_INLINE void narrow(V v, c10::BFloat16* p) {
  using L = Lanes<sizeof(V) / sizeof(float)>;
  const auto bits = load<typename L::u32>(&v);
  const auto rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
  const auto nan = typename L::u32{} + 0x7FC0;
  const auto halves = __builtin_convertvector(v != v ? nan : rounded, typename L::u16);
  std::memcpy(p, &halves, sizeof halves);
}

}  // namespace sqlscout
