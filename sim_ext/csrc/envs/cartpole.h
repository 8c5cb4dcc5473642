// CartPole-v1 with Gymnasium's dynamics (Barto, Sutton & Anderson 1983; Euler
// integration), spaces, reward (+1 every step, the terminal one included),
// termination (|x| > 2.4 or |theta| > 12 deg) and 500-step time limit.
// State is float32 structure-of-arrays; the step kernel is branch-free.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/batch_env.h"
#include "core/simd.h"

namespace sim_ext {

namespace cartpole_detail {
constexpr float kGravity = 9.8f, kMassCart = 1.0f, kMassPole = 0.1f, kLength = 0.5f, kForceMag = 10.0f;
constexpr float kTau = 0.02f;
constexpr float kTotalMass = kMassCart + kMassPole;
constexpr float kPoleMassLength = kMassPole * kLength;
constexpr float kInvTotalMass = 1.0f / kTotalMass;  // multiply, not divide: divisions dominate the kernel
constexpr float kThetaThreshold = static_cast<float>(12.0 * 2.0 * 3.14159265358979323846 / 360.0);
constexpr float kXThreshold = 2.4f;

SIMEXT_KERNEL static void step_kernel(int n, int substeps, const int32_t* __restrict action,
                                      float* __restrict x, float* __restrict x_dot, float* __restrict theta,
                                      float* __restrict theta_dot, float* __restrict reward,
                                      int32_t* __restrict terminated, float* __restrict obs) {
  const float tau = kTau / static_cast<float>(substeps);
  for (int k = 0; k < substeps; ++k) {
    for (int i = 0; i < n; ++i) {
      const float force = action[i] == 1 ? kForceMag : -kForceMag;
      const float xi = x[i], vi = x_dot[i], ti = theta[i], wi = theta_dot[i];
      float sintheta, costheta;
      sincos_f32(ti, sintheta, costheta);
      const float temp = (force + kPoleMassLength * wi * wi * sintheta) * kInvTotalMass;
      const float thetaacc = (kGravity * sintheta - costheta * temp) /
                             (kLength * (4.0f / 3.0f - kMassPole * costheta * costheta * kInvTotalMass));
      const float xacc = temp - kPoleMassLength * thetaacc * costheta * kInvTotalMass;
      x[i] = xi + tau * vi;
      x_dot[i] = vi + tau * xacc;
      theta[i] = ti + tau * wi;
      theta_dot[i] = wi + tau * thetaacc;
    }
  }
  for (int i = 0; i < n; ++i) {
    const float xi = x[i], ti = theta[i];
    obs[4 * i + 0] = xi;
    obs[4 * i + 1] = x_dot[i];
    obs[4 * i + 2] = ti;
    obs[4 * i + 3] = theta_dot[i];
    reward[i] = 1.0f;
    terminated[i] = (xi < -kXThreshold) | (xi > kXThreshold) | (ti < -kThetaThreshold) | (ti > kThetaThreshold);
  }
}
}  // namespace cartpole_detail

class CartPole {
 public:
  using Action = int32_t;
  static constexpr const char* kName = "CartPole-v1";
  struct Config {
    int substeps = 1;  // physics integrations per env step, each of tau / substeps
    int max_episode_steps = 500;  // 0: no time limit (a single env under gym.make's TimeLimit)
  };
  static Config parse(Params& p) {
    Config c;
    c.substeps = static_cast<int>(p.get_int("substeps", 1, 1, 100000));
    c.max_episode_steps = static_cast<int>(p.get_int("max_episode_steps", 500, 0, 1 << 30));
    return c;
  }

  CartPole(const Config& cfg, int n) : cfg_(cfg), x_(n), x_dot_(n), theta_(n), theta_dot_(n) {}

  Spec spec() const {
    using namespace cartpole_detail;
    const float inf = std::numeric_limits<float>::infinity();  // Gymnasium's np.inf velocity bounds
    Spec s;
    s.obs_dim = 4;
    s.obs_low = {-2 * kXThreshold, -inf, -2 * kThetaThreshold, -inf};
    s.obs_high = {2 * kXThreshold, inf, 2 * kThetaThreshold, inf};
    s.discrete = true;
    s.num_actions = 2;
    s.state_dim = 4;
    s.max_episode_steps = cfg_.max_episode_steps;
    return s;
  }

  void reset(int i, Rng& rng) {
    x_[i] = rng.uniformf(-0.05f, 0.05f);
    x_dot_[i] = rng.uniformf(-0.05f, 0.05f);
    theta_[i] = rng.uniformf(-0.05f, 0.05f);
    theta_dot_[i] = rng.uniformf(-0.05f, 0.05f);
  }

  void step(int n, const Action* a, float* reward, int32_t* terminated, float* obs) {
    cartpole_detail::step_kernel(n, cfg_.substeps, a, x_.data(), x_dot_.data(), theta_.data(), theta_dot_.data(),
                                 reward, terminated, obs);
  }

  void observe(int i, float* obs) const {
    obs[0] = x_[i];
    obs[1] = x_dot_[i];
    obs[2] = theta_[i];
    obs[3] = theta_dot_[i];
  }

  void get_state(int i, double* out) const {
    out[0] = x_[i];
    out[1] = x_dot_[i];
    out[2] = theta_[i];
    out[3] = theta_dot_[i];
  }
  void set_state(int i, const double* in) {
    x_[i] = static_cast<float>(in[0]);
    x_dot_[i] = static_cast<float>(in[1]);
    theta_[i] = static_cast<float>(in[2]);
    theta_dot_[i] = static_cast<float>(in[3]);
  }

 private:
  Config cfg_;
  std::vector<float> x_, x_dot_, theta_, theta_dot_;
};

}  // namespace sim_ext
