// Portable fast kernels: the wheel is built for the baseline ISA; functions
// marked SIMEXT_KERNEL get extra AVX2 and AVX-512 clones that the loader picks
// on the running CPU (GCC function multi-versioning). The build disables FMA
// contraction, so for kernels built from arithmetic and the helpers below
// (CartPole's) every clone computes bit-identical results: a trajectory does
// not depend on which CPU produced it. Kernels that call libm (Acrobot and
// Pendulum, which match NumPy's sin/cos/pow bit for bit) inherit glibc's
// per-CPU variants, which may differ in the last bit across machines.
#pragma once
#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SIMEXT_KERNEL __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define SIMEXT_KERNEL
#endif

namespace sim_ext {

// sin and cos of a float in one branch-free pass, vectorisable by GCC (libm's
// sinf/cosf calls are not). Cody-Waite reduction by pi/2 and Cephes' minimax
// polynomials: |error| <= 2 ulp for |x| < 8192, which covers every angle the
// environments here reach.
inline void sincos_f32(float x, float& s, float& c) {
  // Round x * 2/pi to the nearest integer with the 1.5 * 2^23 trick (exact for
  // |x * 2/pi| < 2^22; GCC keeps it since fast-math is off).
  const float magic = 12582912.0f;
  float kf = (x * 0.636619772f + magic) - magic;
  int32_t q = static_cast<int32_t>(kf);
  float r = x - kf * 1.5703125f;
  r = r - kf * 4.837512969970703125e-4f;
  r = r - kf * 7.54978995489188216e-8f;
  float r2 = r * r;
  float sp = r + r * r2 * (-1.6666654611e-1f + r2 * (8.3321608736e-3f + r2 * -1.9515295891e-4f));
  float cp = 1.0f - 0.5f * r2 +
             r2 * r2 * (4.166664568298827e-2f + r2 * (-1.388731625493765e-3f + r2 * 2.443315711809948e-5f));
  const bool swap = (q & 1) != 0;
  float sv = swap ? cp : sp;
  float cv = swap ? sp : cp;
  s = (q & 2) ? -sv : sv;
  c = ((q + 1) & 2) ? -cv : cv;
}

}  // namespace sim_ext
