// MountainCar-v0 and MountainCarContinuous-v0 with Gymnasium's dynamics
// (Moore 1990; the car's velocity changes by force - 0.0025 cos(3 x) per
// step), spaces, rewards, termination at the goal (x >= goal and v >=
// goal_velocity), reset distribution (x uniform in [-0.6, -0.4), v = 0) and
// time limits (200 and 999 steps).
//
// The car is not chaotic, but an episode's end is a threshold on the
// position, so a one-ulp difference can end an episode one step earlier or
// later. These classes therefore compute what NumPy computes for Gymnasium's
// code, bit for bit (with NumPy 2's promotion rules, NEP 50):
//
// * MountainCar-v0 keeps its state in float64 throughout (np.clip of float64
//   scalars), with libm's cos as math.cos calls it.
// * MountainCarContinuous-v0 stores its state as a float32 array after every
//   step, so from the second step of an episode on `3 * position`, the
//   velocity update, the clips and the comparisons happen in float32 (a Python
//   float meeting a NumPy float32 scalar is converted to float32 first); only
//   cos and its product with 0.0025 are float64. The first step after a reset
//   (or a set_state) starts from Gymnasium's float64 array and computes in
//   float64. A force outside [-1, 1] is clipped by Python's min/max to the
//   Python float +-1.0, which makes `force * power - ...` a float64
//   expression. The action cost uses the unclipped action, as Gymnasium does.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/batch_env.h"
#include "core/simd.h"

namespace sim_ext {

namespace mountain_car_detail {
constexpr double kMinPosition = -1.2, kMaxPosition = 0.6, kMaxSpeed = 0.07;
constexpr double kGravity = 0.0025;
constexpr double kResetLow = -0.6, kResetHigh = -0.4;
// MountainCar-v0
constexpr double kForce = 0.001;
constexpr double kGoalPosition = 0.5;
// MountainCarContinuous-v0 (goal 0.45 as in Gymnasium's continuous version)
constexpr double kPower = 0.0015;
constexpr double kGoalPositionContinuous = 0.45;
constexpr float kMinPositionF = static_cast<float>(kMinPosition), kMaxPositionF = static_cast<float>(kMaxPosition);
constexpr float kMaxSpeedF = static_cast<float>(kMaxSpeed);
constexpr float kGoalPositionContinuousF = static_cast<float>(kGoalPositionContinuous);
constexpr float kPowerF = static_cast<float>(kPower);

inline void write_obs(double p, double v, float* row) {
  row[0] = static_cast<float>(p);
  row[1] = static_cast<float>(v);
}

// Gymnasium's MountainCarEnv.step, all float64.
SIMEXT_KERNEL static void discrete_kernel(int n, double goal_velocity, const int32_t* __restrict action,
                                          double* __restrict position, double* __restrict velocity,
                                          float* __restrict reward, int32_t* __restrict terminated,
                                          float* __restrict obs) {
  for (int i = 0; i < n; ++i) {
    double p = position[i], v = velocity[i];
    // velocity += (action - 1) * force + math.cos(3 * position) * (-gravity)
    v = v + (static_cast<double>(action[i] - 1) * kForce + std::cos(3 * p) * (-kGravity));
    v = v < -kMaxSpeed ? -kMaxSpeed : v;  // np.clip(velocity, -max_speed, max_speed)
    v = v > kMaxSpeed ? kMaxSpeed : v;
    p = p + v;
    p = p < kMinPosition ? kMinPosition : p;
    p = p > kMaxPosition ? kMaxPosition : p;
    v = (p == kMinPosition && v < 0) ? 0.0 : v;
    position[i] = p;
    velocity[i] = v;
    terminated[i] = static_cast<int32_t>(p >= kGoalPosition && v >= goal_velocity);
    reward[i] = -1.0f;
    write_obs(p, v, obs + 2 * static_cast<size_t>(i));
  }
}

// Gymnasium's Continuous_MountainCarEnv.step as NumPy evaluates it (see the
// top of this file). `fresh` marks envs whose state is still the float64
// array of a reset; every step clears it.
SIMEXT_KERNEL static void continuous_kernel(int n, double goal_velocity, const float* __restrict action,
                                            double* __restrict position, double* __restrict velocity,
                                            int32_t* __restrict fresh, float* __restrict reward,
                                            int32_t* __restrict terminated, float* __restrict obs) {
  const float goal_velocity_f = static_cast<float>(goal_velocity);
  constexpr double kLowestReward = -std::numeric_limits<float>::max();
  for (int i = 0; i < n; ++i) {
    const float a = action[i];
    double p = position[i], v = velocity[i];
    const bool f64 = fresh[i] != 0;
    // 3 * position: float32 once the state is the float32 array of a step.
    const double three_p = f64 ? 3 * p : static_cast<double>(3.0f * static_cast<float>(p));
    const double c = 0.0025 * std::cos(three_p);
    // force = min(max(action[0], -1.0), 1.0): the float32 action, or the Python float +-1.0.
    const bool clipped = a < -1.0f || a > 1.0f;
    const double delta = clipped ? (a > 0.0f ? 1.0 : -1.0) * kPower - c
                                 : static_cast<double>(a * kPowerF - static_cast<float>(c));
    int32_t term;
    if (f64) {
      v = v + delta;
      v = v > kMaxSpeed ? kMaxSpeed : v;
      v = v < -kMaxSpeed ? -kMaxSpeed : v;
      p = p + v;
      p = p > kMaxPosition ? kMaxPosition : p;
      p = p < kMinPosition ? kMinPosition : p;
      v = (p == kMinPosition && v < 0) ? 0.0 : v;
      term = static_cast<int32_t>(p >= kGoalPositionContinuous && v >= goal_velocity);
    } else {
      float vf = static_cast<float>(v) + static_cast<float>(delta);
      vf = vf > kMaxSpeedF ? kMaxSpeedF : vf;
      vf = vf < -kMaxSpeedF ? -kMaxSpeedF : vf;
      float pf = static_cast<float>(p) + vf;
      pf = pf > kMaxPositionF ? kMaxPositionF : pf;
      pf = pf < kMinPositionF ? kMinPositionF : pf;
      vf = (pf == kMinPositionF && vf < 0.0f) ? 0.0f : vf;
      term = static_cast<int32_t>(pf >= kGoalPositionContinuousF && vf >= goal_velocity_f);
      p = pf;
      v = vf;
    }
    // self.state = np.array([position, velocity], dtype=np.float32)
    position[i] = static_cast<float>(p);
    velocity[i] = static_cast<float>(v);
    fresh[i] = 0;
    terminated[i] = term;
    // reward = 100.0 on reaching the goal, minus math.pow(action[0], 2) * 0.1 (exact square of
    // a float32 in float64). Rounded to float32, saturating at the lowest finite float32 for
    // |action| > ~5.8e19, whose float64 cost a float32 cannot hold.
    const double ad = static_cast<double>(a);
    const double r = (term ? 100.0 : 0.0) - ad * ad * 0.1;
    reward[i] = static_cast<float>(r < kLowestReward ? kLowestReward : r);
    write_obs(position[i], velocity[i], obs + 2 * static_cast<size_t>(i));
  }
}

inline Spec car_spec(int max_episode_steps) {
  Spec s;
  s.obs_dim = 2;
  s.obs_low = {kMinPositionF, -kMaxSpeedF};
  s.obs_high = {kMaxPositionF, kMaxSpeedF};
  s.state_dim = 2;
  s.max_episode_steps = max_episode_steps;
  return s;
}

struct CarConfig {
  double goal_velocity = 0.0;
  int max_episode_steps = 0;
};

// env_config shared by both cars. `goal_velocity` is Gymnasium's constructor
// argument; velocities never leave [-0.07, 0.07], so a value outside makes the
// goal either ignore the velocity or unreachable, and is refused.
// max_episode_steps 0 means no time limit (the single env under gym.make,
// whose TimeLimit wrapper counts instead).
inline CarConfig parse_car(Params& p, int default_limit) {
  CarConfig c;
  c.goal_velocity = p.get_double("goal_velocity", 0.0, -kMaxSpeed, kMaxSpeed);
  c.max_episode_steps = static_cast<int>(p.get_int("max_episode_steps", default_limit, 0, 1 << 30));
  return c;
}
}  // namespace mountain_car_detail

class MountainCar {
 public:
  using Action = int32_t;
  static constexpr const char* kName = "MountainCar-v0";
  using Config = mountain_car_detail::CarConfig;
  static Config parse(Params& p) { return mountain_car_detail::parse_car(p, 200); }

  MountainCar(const Config& cfg, int n) : cfg_(cfg), position_(n), velocity_(n) {}

  Spec spec() const {
    Spec s = mountain_car_detail::car_spec(cfg_.max_episode_steps);
    s.discrete = true;
    s.num_actions = 3;  // accelerate left, don't accelerate, accelerate right
    return s;
  }

  void reset(int i, Rng& rng) {
    position_[i] = rng.uniform(mountain_car_detail::kResetLow, mountain_car_detail::kResetHigh);
    velocity_[i] = 0.0;
  }

  void step(int n, const Action* a, float* reward, int32_t* terminated, float* obs) {
    mountain_car_detail::discrete_kernel(n, cfg_.goal_velocity, a, position_.data(), velocity_.data(), reward,
                                         terminated, obs);
  }

  void observe(int i, float* obs) const { mountain_car_detail::write_obs(position_[i], velocity_[i], obs); }

  void get_state(int i, double* out) const {
    out[0] = position_[i];
    out[1] = velocity_[i];
  }
  void set_state(int i, const double* in) {
    position_[i] = in[0];
    velocity_[i] = in[1];
  }

 private:
  Config cfg_;
  std::vector<double> position_, velocity_;
};

class MountainCarContinuous {
 public:
  using Action = float;
  static constexpr const char* kName = "MountainCarContinuous-v0";
  using Config = mountain_car_detail::CarConfig;
  static Config parse(Params& p) { return mountain_car_detail::parse_car(p, 999); }

  MountainCarContinuous(const Config& cfg, int n) : cfg_(cfg), position_(n), velocity_(n), fresh_(n, 1) {}

  Spec spec() const {
    Spec s = mountain_car_detail::car_spec(cfg_.max_episode_steps);
    s.discrete = false;
    s.act_dim = 1;
    s.act_low = {-1.0f};
    s.act_high = {1.0f};
    return s;
  }

  void reset(int i, Rng& rng) {
    position_[i] = rng.uniform(mountain_car_detail::kResetLow, mountain_car_detail::kResetHigh);
    velocity_[i] = 0.0;
    fresh_[i] = 1;
  }

  void step(int n, const Action* a, float* reward, int32_t* terminated, float* obs) {
    mountain_car_detail::continuous_kernel(n, cfg_.goal_velocity, a, position_.data(), velocity_.data(),
                                           fresh_.data(), reward, terminated, obs);
  }

  void observe(int i, float* obs) const { mountain_car_detail::write_obs(position_[i], velocity_[i], obs); }

  void get_state(int i, double* out) const {
    out[0] = position_[i];
    out[1] = velocity_[i];
  }
  // As Gymnasium after `env.state = np.array([x, v])` (float64): the next step computes in float64.
  void set_state(int i, const double* in) {
    position_[i] = in[0];
    velocity_[i] = in[1];
    fresh_[i] = 1;
  }

 private:
  Config cfg_;
  std::vector<double> position_, velocity_;
  std::vector<int32_t> fresh_;
};

}  // namespace sim_ext
