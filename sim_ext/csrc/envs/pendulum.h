// Pendulum-v1 with Gymnasium's dynamics (semi-implicit Euler, dt = 0.05),
// spaces, reward (-(angle^2 + 0.1 thdot^2 + 0.001 u^2), never terminates) and
// 200-step time limit.
//
// Every operation follows Gymnasium's PendulumEnv.step as NumPy evaluates it,
// so that a float32 action gives bit for bit Gymnasium's float64 state: the
// torque is a float32 (the action space's dtype; NumPy keeps `np.clip(u)`,
// `3.0 * u` and `0.001 * u**2` in float32), the state float64 and sin/cos/fmod
// libm's. One liberty: NumPy's scalar `x**2` calls pow(), which differs from
// x * x in the last bit about once in a thousand; squares only enter the cost,
// whose float32 rounding hides that, so they are plain products (pow() would
// take 40% of the step's time).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/batch_env.h"
#include "core/simd.h"

namespace sim_ext {

namespace pendulum_detail {
constexpr double kPi = 3.14159265358979323846;  // == numpy.pi
constexpr double kDt = 0.05;
constexpr double kMaxSpeed = 8.0;
constexpr float kMaxTorque = 2.0f;

// Gymnasium's angle_normalize: ((x + pi) % (2 pi)) - pi with NumPy's float
// remainder (fmod, moved into [0, 2 pi) when negative).
inline double angle_normalize(double x) {
  const double r = std::fmod(x + kPi, 2 * kPi);
  return (r < 0 ? r + 2 * kPi : r) - kPi;
}

// Steps every env: cost from the state before the step, then `substeps`
// Euler steps of dt / substeps (speed clipped after each), then observations
// and rewards. `gain` is Gymnasium's 3 * g / (2 * l).
SIMEXT_KERNEL static void step_kernel(int n, int substeps, double gain, const float* __restrict action,
                                      double* __restrict theta, double* __restrict thetadot,
                                      float* __restrict reward, int32_t* __restrict terminated,
                                      float* __restrict obs) {
  const double h = kDt / substeps;
  for (int i = 0; i < n; ++i) {
    float u = action[i];
    u = u < -kMaxTorque ? -kMaxTorque : u;  // np.clip(u, -2.0, 2.0)
    u = u > kMaxTorque ? kMaxTorque : u;
    double th = theta[i], w = thetadot[i];
    const double angle = angle_normalize(th);
    const double costs = angle * angle + 0.1 * (w * w) + static_cast<double>(0.001f * (u * u));
    const double torque_acc = static_cast<double>(3.0f * u);  // 3.0 / (m * l**2) * u, in float32
    for (int k = 0; k < substeps; ++k) {
      w = w + (gain * std::sin(th) + torque_acc) * h;
      w = w < -kMaxSpeed ? -kMaxSpeed : w;
      w = w > kMaxSpeed ? kMaxSpeed : w;
      th = th + w * h;
    }
    theta[i] = th;
    thetadot[i] = w;
    obs[3 * i + 0] = static_cast<float>(std::cos(th));
    obs[3 * i + 1] = static_cast<float>(std::sin(th));
    obs[3 * i + 2] = static_cast<float>(w);
    reward[i] = static_cast<float>(-costs);
    terminated[i] = 0;
  }
}
}  // namespace pendulum_detail

class Pendulum {
 public:
  using Action = float;
  static constexpr const char* kName = "Pendulum-v1";
  struct Config {
    double g = 10.0;   // gravity
    int substeps = 1;  // Euler steps per env step, each of dt / substeps
    int max_episode_steps = 200;  // 0: no time limit (a single env under gym.make's TimeLimit)
  };
  static Config parse(Params& p) {
    Config c;
    c.g = p.get_double("g", 10.0, 0.0, 1000.0);
    c.substeps = static_cast<int>(p.get_int("substeps", 1, 1, 1000));
    c.max_episode_steps = static_cast<int>(p.get_int("max_episode_steps", 200, 0, 1 << 30));
    return c;
  }

  Pendulum(const Config& cfg, int n) : cfg_(cfg), theta_(n), thetadot_(n) {}

  Spec spec() const {
    using namespace pendulum_detail;
    const float v = static_cast<float>(kMaxSpeed);
    Spec s;
    s.obs_dim = 3;
    s.obs_low = {-1, -1, -v};
    s.obs_high = {1, 1, v};
    s.discrete = false;
    s.act_dim = 1;
    s.act_low = {-kMaxTorque};
    s.act_high = {kMaxTorque};
    s.state_dim = 2;
    s.max_episode_steps = cfg_.max_episode_steps;
    return s;
  }

  void reset(int i, Rng& rng) {
    theta_[i] = rng.uniform(-pendulum_detail::kPi, pendulum_detail::kPi);
    thetadot_[i] = rng.uniform(-1.0, 1.0);
  }

  void step(int n, const Action* a, float* reward, int32_t* terminated, float* obs) {
    // Gymnasium: 3 * g / (2 * l) with l = 1.
    const double gain = 3 * cfg_.g / (2 * 1.0);
    pendulum_detail::step_kernel(n, cfg_.substeps, gain, a, theta_.data(), thetadot_.data(), reward, terminated,
                                 obs);
  }

  void observe(int i, float* obs) const {
    obs[0] = static_cast<float>(std::cos(theta_[i]));
    obs[1] = static_cast<float>(std::sin(theta_[i]));
    obs[2] = static_cast<float>(thetadot_[i]);
  }

  void get_state(int i, double* out) const {
    out[0] = theta_[i];
    out[1] = thetadot_[i];
  }
  void set_state(int i, const double* in) {
    theta_[i] = in[0];
    thetadot_[i] = in[1];
  }

 private:
  Config cfg_;
  std::vector<double> theta_, thetadot_;
};

}  // namespace sim_ext
