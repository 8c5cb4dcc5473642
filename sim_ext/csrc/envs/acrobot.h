// Acrobot-v1 with Gymnasium's dynamics (Sutton & Barto's book equations,
// one RK4 step of dt = 0.2), spaces, reward (-1 per step, 0 on the terminal
// one), termination (-cos(t1) - cos(t1 + t2) > 1) and 500-step time limit.
//
// The double pendulum is chaotic: a one-ulp rounding difference can grow to a
// visible one within an episode, so matching Gymnasium means computing what
// NumPy computes, bit for bit. State and arithmetic are therefore float64, the
// expressions keep Gymnasium's order of operations (so constants combine in
// the same order too), sin/cos are libm's (NumPy calls the same ones) and
// squares use pow() as NumPy's scalar `**` does: x * x would differ in the
// last bit once in a thousand squares and be twice as fast, but would let
// some episodes drift away from Gymnasium's.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/batch_env.h"
#include "core/simd.h"

namespace sim_ext {

namespace acrobot_detail {
constexpr double kPi = 3.14159265358979323846;  // == numpy.pi
constexpr double kDt = 0.2;
constexpr double kM1 = 1.0, kM2 = 1.0;          // link masses
constexpr double kL1 = 1.0;                     // length of link 1
constexpr double kLc1 = 0.5, kLc2 = 0.5;        // positions of the centres of mass
constexpr double kI1 = 1.0, kI2 = 1.0;          // moments of inertia
constexpr double kG = 9.8;
constexpr double kMaxVel1 = 4 * kPi, kMaxVel2 = 9 * kPi;

// NumPy evaluates `x**2` on a float64 scalar with libm's pow(), which differs
// from the correctly rounded x*x in about 0.1% of cases. GCC folds
// pow(x, 2.0) into x*x, so kernels read the exponent from this volatile.
inline volatile double kOpaqueTwo = 2.0;

struct Deriv {
  double ddtheta1, ddtheta2;
};

// Gymnasium's AcrobotEnv._dsdt (book_or_nips = "book"): the angular
// accelerations; the angles' derivatives are the velocities themselves.
inline Deriv dsdt(double theta1, double theta2, double dtheta1, double dtheta2, double a, double two) {
  const double c2 = std::cos(theta2), s2 = std::sin(theta2);
  const double d1 = kM1 * (kLc1 * kLc1) + kM2 * (kL1 * kL1 + kLc2 * kLc2 + 2 * kL1 * kLc2 * c2) + kI1 + kI2;
  const double d2 = kM2 * (kLc2 * kLc2 + kL1 * kLc2 * c2) + kI2;
  const double phi2 = kM2 * kLc2 * kG * std::cos(theta1 + theta2 - kPi / 2.0);
  const double phi1 = -kM2 * kL1 * kLc2 * std::pow(dtheta2, two) * s2 -
                      2 * kM2 * kL1 * kLc2 * dtheta2 * dtheta1 * s2 +
                      (kM1 * kLc1 + kM2 * kL1) * kG * std::cos(theta1 - kPi / 2) + phi2;
  const double ddtheta2 = (a + d2 / d1 * phi1 - kM2 * kL1 * kLc2 * std::pow(dtheta1, two) * s2 - phi2) /
                          (kM2 * (kLc2 * kLc2) + kI2 - std::pow(d2, two) / d1);
  const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
  return {ddtheta1, ddtheta2};
}

// One pass of Gymnasium's wrap(x, -pi, pi) (`while x > M: x -= diff`, then
// `while x < m: x += diff`). One pass almost always suffices; the caller
// finishes the rare angle still outside [-pi, pi] with wrap_rest, so the
// result is always that of the full loops (for angles up to 1e4 rad).
inline double wrap_once(double x) {
  const double diff = kPi - (-kPi);
  x = x > kPi ? x - diff : x;
  return x < -kPi ? x + diff : x;
}
inline double wrap_rest(double x) {
  const double diff = kPi - (-kPi);
  // Gymnasium's loops never end for an infinite angle, nor for one so large
  // that subtracting 2 pi leaves it unchanged. Such angles (only reachable
  // through set_state) are first reduced with fmod (inf becomes NaN).
  if (!(std::fabs(x) <= 1e4)) x = std::fmod(x, diff);
  while (x > kPi) x -= diff;
  while (x < -kPi) x += diff;
  return x;
}
inline bool outside(double x) { return x > kPi || x < -kPi; }

// Gymnasium's bound(x, m, M) = min(max(x, m), M).
inline double bound(double x, double hi) {
  x = -hi > x ? -hi : x;
  return hi < x ? hi : x;
}

// Writes the observation row and returns the terminal flag.
inline int32_t write_obs(double t1, double t2, double w1, double w2, float* row) {
  row[0] = static_cast<float>(std::cos(t1));
  row[1] = static_cast<float>(std::sin(t1));
  row[2] = static_cast<float>(std::cos(t2));
  row[3] = static_cast<float>(std::sin(t2));
  row[4] = static_cast<float>(w1);
  row[5] = static_cast<float>(w2);
  return static_cast<int32_t>(-std::cos(t1) - std::cos(t2 + t1) > 1.0);
}

// Steps every env: `substeps` RK4 steps of dt / substeps (Gymnasium's rk4
// with t = [0, h]), then wrap and bound as Gymnasium does, then observations,
// rewards and flags. Returns non-zero if some angle needs more than one wrap.
SIMEXT_KERNEL static int step_kernel(int n, int substeps, const int32_t* __restrict action,
                                     double* __restrict theta1, double* __restrict theta2,
                                     double* __restrict dtheta1, double* __restrict dtheta2,
                                     float* __restrict reward, int32_t* __restrict terminated,
                                     float* __restrict obs) {
  const double two = kOpaqueTwo;
  const double h = kDt / substeps, h2 = h / 2.0, h6 = h / 6.0;
  int unwrapped = 0;
  for (int i = 0; i < n; ++i) {
    const double a = static_cast<double>(action[i] - 1);  // AVAIL_TORQUE = [-1, 0, +1]
    double t1 = theta1[i], t2 = theta2[i], w1 = dtheta1[i], w2 = dtheta2[i];
    for (int k = 0; k < substeps; ++k) {
      const Deriv k1 = dsdt(t1, t2, w1, w2, a, two);
      const double t1b = t1 + h2 * w1, t2b = t2 + h2 * w2;
      const double w1b = w1 + h2 * k1.ddtheta1, w2b = w2 + h2 * k1.ddtheta2;
      const Deriv k2 = dsdt(t1b, t2b, w1b, w2b, a, two);
      const double t1c = t1 + h2 * w1b, t2c = t2 + h2 * w2b;
      const double w1c = w1 + h2 * k2.ddtheta1, w2c = w2 + h2 * k2.ddtheta2;
      const Deriv k3 = dsdt(t1c, t2c, w1c, w2c, a, two);
      const double t1d = t1 + h * w1c, t2d = t2 + h * w2c;
      const double w1d = w1 + h * k3.ddtheta1, w2d = w2 + h * k3.ddtheta2;
      const Deriv k4 = dsdt(t1d, t2d, w1d, w2d, a, two);
      // y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4), componentwise.
      t1 = t1 + h6 * (w1 + 2 * w1b + 2 * w1c + w1d);
      t2 = t2 + h6 * (w2 + 2 * w2b + 2 * w2c + w2d);
      w1 = w1 + h6 * (k1.ddtheta1 + 2 * k2.ddtheta1 + 2 * k3.ddtheta1 + k4.ddtheta1);
      w2 = w2 + h6 * (k1.ddtheta2 + 2 * k2.ddtheta2 + 2 * k3.ddtheta2 + k4.ddtheta2);
    }
    t1 = wrap_once(t1);
    t2 = wrap_once(t2);
    w1 = bound(w1, kMaxVel1);
    w2 = bound(w2, kMaxVel2);
    unwrapped |= static_cast<int>(outside(t1)) | static_cast<int>(outside(t2));
    theta1[i] = t1;
    theta2[i] = t2;
    dtheta1[i] = w1;
    dtheta2[i] = w2;
    const int32_t term = write_obs(t1, t2, w1, w2, obs + 6 * static_cast<size_t>(i));
    terminated[i] = term;
    reward[i] = static_cast<float>(term) - 1.0f;
  }
  return unwrapped;
}
}  // namespace acrobot_detail

class Acrobot {
 public:
  using Action = int32_t;
  static constexpr const char* kName = "Acrobot-v1";
  struct Config {
    int substeps = 1;  // RK4 steps per env step, each of dt / substeps
    int max_episode_steps = 500;  // 0: no time limit (a single env under gym.make's TimeLimit)
  };
  static Config parse(Params& p) {
    Config c;
    c.substeps = static_cast<int>(p.get_int("substeps", 1, 1, 1000));
    c.max_episode_steps = static_cast<int>(p.get_int("max_episode_steps", 500, 0, 1 << 30));
    return c;
  }

  Acrobot(const Config& cfg, int n) : cfg_(cfg), theta1_(n), theta2_(n), dtheta1_(n), dtheta2_(n) {}

  Spec spec() const {
    using namespace acrobot_detail;
    const float v1 = static_cast<float>(kMaxVel1), v2 = static_cast<float>(kMaxVel2);
    Spec s;
    s.obs_dim = 6;
    s.obs_low = {-1, -1, -1, -1, -v1, -v2};
    s.obs_high = {1, 1, 1, 1, v1, v2};
    s.discrete = true;
    s.num_actions = 3;
    s.state_dim = 4;
    s.max_episode_steps = cfg_.max_episode_steps;
    return s;
  }

  // Gymnasium draws float64 uniforms in [-0.1, 0.1) and stores them as float32.
  void reset(int i, Rng& rng) {
    theta1_[i] = static_cast<float>(rng.uniform(-0.1, 0.1));
    theta2_[i] = static_cast<float>(rng.uniform(-0.1, 0.1));
    dtheta1_[i] = static_cast<float>(rng.uniform(-0.1, 0.1));
    dtheta2_[i] = static_cast<float>(rng.uniform(-0.1, 0.1));
  }

  void step(int n, const Action* a, float* reward, int32_t* terminated, float* obs) {
    using namespace acrobot_detail;
    if (!step_kernel(n, cfg_.substeps, a, theta1_.data(), theta2_.data(), dtheta1_.data(), dtheta2_.data(),
                     reward, terminated, obs))
      return;
    // Rare: an angle ended the RK4 step beyond +-3 pi and needs several wraps
    // (only reachable from velocities beyond the bounds, e.g. via set_state).
    for (int i = 0; i < n; ++i) {
      if (!outside(theta1_[i]) && !outside(theta2_[i])) continue;
      theta1_[i] = wrap_rest(theta1_[i]);
      theta2_[i] = wrap_rest(theta2_[i]);
      terminated[i] = write_obs(theta1_[i], theta2_[i], dtheta1_[i], dtheta2_[i], obs + 6 * static_cast<size_t>(i));
      reward[i] = static_cast<float>(terminated[i]) - 1.0f;
    }
  }

  void observe(int i, float* obs) const {
    acrobot_detail::write_obs(theta1_[i], theta2_[i], dtheta1_[i], dtheta2_[i], obs);
  }

  void get_state(int i, double* out) const {
    out[0] = theta1_[i];
    out[1] = theta2_[i];
    out[2] = dtheta1_[i];
    out[3] = dtheta2_[i];
  }
  void set_state(int i, const double* in) {
    theta1_[i] = in[0];
    theta2_[i] = in[1];
    dtheta1_[i] = in[2];
    dtheta2_[i] = in[3];
  }

 private:
  Config cfg_;
  std::vector<double> theta1_, theta2_, dtheta1_, dtheta2_;
};

}  // namespace sim_ext
