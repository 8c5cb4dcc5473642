// The engine every environment shares: a batch of N copies of one physics,
// stepped by one call, with Gymnasium's NEXT_STEP autoreset, time limits,
// per-env random streams and output buffers allocated once.
//
// A physics `P` (see envs/*.h) supplies, with no Python in sight:
//   using Action = int32_t (discrete) or float (continuous);
//   struct Config;  static Config parse(Params&);  static constexpr const char* kName;
//   P(const Config&, int num_envs);
//   Spec spec() const;                          // spaces, sizes, time limit
//   void reset(int i, Rng& rng);                // draw env i's initial state
//   void step(int n, const Action* a, float* reward, int32_t* terminated, float* obs);
//                                               // all envs at once, branch-free, writes observations
//   void observe(int i, float* obs_row) const;  // write env i's observation
//   void get_state(int i, double* out) const;   void set_state(int i, const double* in);
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/params.h"
#include "core/rng.h"
#include "core/simd.h"

namespace sim_ext {

namespace batch_detail {
// Hot loops shared by all environments, as free functions so that they get
// the per-CPU clones of SIMEXT_KERNEL.

// Copies a batch of discrete actions; returns non-zero if any is outside [0, hi).
template <class T>
SIMEXT_KERNEL static int copy_discrete(size_t count, const T* __restrict src, int32_t* __restrict dst, int32_t hi) {
  using U = std::make_unsigned_t<T>;
  int bad = 0;
  for (size_t k = 0; k < count; ++k) {
    const T a = src[k];
    bad |= static_cast<int>(static_cast<U>(a) >= static_cast<U>(hi));  // negatives wrap to huge
    dst[k] = static_cast<int32_t>(a);
  }
  return bad;
}

// Copies a batch of continuous actions; returns non-zero if any is NaN or infinite.
template <class T>
SIMEXT_KERNEL static int copy_continuous(size_t count, const T* __restrict src, float* __restrict dst) {
  int bad = 0;
  for (size_t k = 0; k < count; ++k) {
    const T a = src[k];
    bad |= static_cast<int>(!(a - a == T(0)));  // a - a is NaN exactly for NaN and +-inf
    dst[k] = static_cast<float>(a);
  }
  return bad;
}

// Counts the step, applies the time limit and writes the output flags.
SIMEXT_KERNEL static void finish_step(int n, int32_t limit, const int32_t* __restrict term_i32,
                                      int32_t* __restrict elapsed, uint8_t* __restrict terminated,
                                      uint8_t* __restrict truncated, uint8_t* __restrict done) {
  for (int i = 0; i < n; ++i) {
    const int32_t e = elapsed[i] + 1;
    const int32_t term = term_i32[i] != 0;
    const int32_t trunc = (term ^ 1) & static_cast<int32_t>(e >= limit);
    elapsed[i] = e;
    terminated[i] = static_cast<uint8_t>(term);
    truncated[i] = static_cast<uint8_t>(trunc);
    done[i] = static_cast<uint8_t>(term | trunc);
  }
}

// Writes the indices of non-zero flags to out; returns how many. Scans eight
// flags at a time since most steps end few episodes.
static int collect_flags(int n, const uint8_t* __restrict flags, int* __restrict out) {
  int count = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, flags + i, 8);
    if (!word) continue;
    for (int k = 0; k < 8; ++k) {
      out[count] = i + k;
      count += flags[i + k] != 0;
    }
  }
  for (; i < n; ++i) {
    out[count] = i;
    count += flags[i] != 0;
  }
  return count;
}
}  // namespace batch_detail

struct Spec {
  int obs_dim = 0;
  std::vector<float> obs_low, obs_high;
  bool discrete = true;
  int num_actions = 0;                // discrete: actions are 0 .. num_actions-1
  int act_dim = 0;                    // continuous: actions have this many floats
  std::vector<float> act_low, act_high;
  int state_dim = 0;                  // length of get_state()/set_state() rows
  int max_episode_steps = 0;          // truncation after this many steps; 0: no time limit
};

template <class P>
class BatchEnv {
 public:
  using Action = typename P::Action;
  static constexpr int kMaxEnvs = 1 << 24;

  BatchEnv(int64_t num_envs, Params params)
      : n_(check_num_envs(num_envs)),
        phys_(parse(params), n_),
        spec_(phys_.spec()),
        // No time limit: an episode is cut only after 2^31 - 1 steps, before its counter overflows.
        limit_(spec_.max_episode_steps > 0 ? spec_.max_episode_steps : std::numeric_limits<int32_t>::max()) {
    obs_.assign(static_cast<size_t>(n_) * spec_.obs_dim, 0.0f);
    reward_.assign(n_, 0.0f);
    term_i32_.assign(n_, 0);
    terminated_.assign(n_, 0);
    truncated_.assign(n_, 0);
    done_.assign(n_, 0);
    elapsed_.assign(n_, 0);
    rng_.resize(n_);
    act_.assign(static_cast<size_t>(n_) * (spec_.discrete ? 1 : spec_.act_dim), Action{});
    pending_.assign(n_, 0);
  }

  static std::string name() { return P::kName; }
  int num_envs() const { return n_; }
  const Spec& spec() const { return spec_; }
  bool closed() const { return closed_; }
  void close() { closed_ = true; }

  void seed_all(uint64_t seed) {
    for (int i = 0; i < n_; ++i) rng_[i] = Rng::from(seed, static_cast<uint64_t>(i));
  }
  void seed_one(int i, uint64_t seed) { rng_[i] = Rng::from(seed, 0); }

  // Resets every env (mask == nullptr) or those whose mask byte is non-zero.
  void reset(const uint8_t* mask) {
    ensure_open();
    for (int i = 0; i < n_; ++i) {
      if (mask && !mask[i]) continue;
      phys_.reset(i, rng_[i]);
      phys_.observe(i, obs_.data() + static_cast<size_t>(i) * spec_.obs_dim);
      elapsed_[i] = 0;
      reward_[i] = 0.0f;
      term_i32_[i] = 0;
      terminated_[i] = truncated_[i] = 0;
    }
    int keep = 0;
    if (mask)
      for (int k = 0; k < num_pending_; ++k)
        if (!mask[pending_[k]]) pending_[keep++] = pending_[k];
    num_pending_ = keep;
    started_ = true;
  }

  // Validates a batch of actions and copies it into the action buffer.
  template <class T>
  void load_actions(const T* src) {
    ensure_open();
    if (!started_) throw std::logic_error(std::string(P::kName) + ": step() called before reset()");
    const size_t count = act_.size();
    int bad = 0;
    if constexpr (std::is_same_v<Action, int32_t>) {
      if constexpr (std::is_integral_v<T>) {
        bad = batch_detail::copy_discrete(count, src, act_.data(), spec_.num_actions);
      } else {
        throw std::invalid_argument(name() + ": discrete actions must be integers");
      }
    } else {
      static_assert(std::is_same_v<Action, float>, "Action must be int32_t (discrete) or float (continuous)");
      if constexpr (std::is_floating_point_v<T>) {
        bad = batch_detail::copy_continuous(count, src, act_.data());
      } else {
        throw std::invalid_argument(name() + ": continuous actions must be floats");
      }
    }
    if (bad) report_bad_action(src, count);
  }

  // One batch step on the loaded actions. Envs that ended on the previous
  // step are reset instead (NEXT_STEP autoreset): their action is ignored and
  // they report reward 0, not terminated, not truncated.
  void step() {
    phys_.step(n_, act_.data(), reward_.data(), term_i32_.data(), obs_.data());
    batch_detail::finish_step(n_, limit_, term_i32_.data(), elapsed_.data(), terminated_.data(),
                              truncated_.data(), done_.data());
    for (int k = 0; k < num_pending_; ++k) {
      const int i = pending_[k];
      phys_.reset(i, rng_[i]);
      phys_.observe(i, obs_.data() + static_cast<size_t>(i) * spec_.obs_dim);
      reward_[i] = 0.0f;
      elapsed_[i] = 0;
      terminated_[i] = truncated_[i] = done_[i] = 0;
    }
    num_pending_ = batch_detail::collect_flags(n_, done_.data(), pending_.data());
  }

  float* obs() { return obs_.data(); }
  float* reward() { return reward_.data(); }
  uint8_t* terminated() { return terminated_.data(); }
  uint8_t* truncated() { return truncated_.data(); }
  int32_t* elapsed() { return elapsed_.data(); }

  void get_state(double* out) const {
    for (int i = 0; i < n_; ++i) phys_.get_state(i, out + static_cast<size_t>(i) * spec_.state_dim);
  }
  // Overwrites the physical state (tests copy states between implementations);
  // observations are refreshed, counters and autoreset flags are left alone.
  // All or nothing: if the physics rejects any row, every row is put back.
  void set_state(const double* in) {
    ensure_open();
    std::vector<double> saved(static_cast<size_t>(n_) * spec_.state_dim);
    get_state(saved.data());
    try {
      for (int i = 0; i < n_; ++i) phys_.set_state(i, in + static_cast<size_t>(i) * spec_.state_dim);
    } catch (...) {
      for (int i = 0; i < n_; ++i) phys_.set_state(i, saved.data() + static_cast<size_t>(i) * spec_.state_dim);
      observe_all();
      throw;
    }
    observe_all();
  }

 private:
  static int check_num_envs(int64_t n) {
    if (n < 1 || n > kMaxEnvs)
      throw std::invalid_argument(std::string(P::kName) + ": num_envs = " + std::to_string(n) +
                                  "; expected an integer in [1, " + std::to_string(kMaxEnvs) + "]");
    return static_cast<int>(n);
  }
  static typename P::Config parse(Params& params) {
    auto cfg = P::parse(params);
    params.finish(P::kName);
    return cfg;
  }
  template <class T>
  static std::string to_text(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::to_string(static_cast<double>(v));
    } else {
      return std::to_string(static_cast<long long>(v));
    }
  }
  void observe_all() {
    for (int i = 0; i < n_; ++i) phys_.observe(i, obs_.data() + static_cast<size_t>(i) * spec_.obs_dim);
  }
  template <class T>
  [[noreturn]] void report_bad_action(const T* src, size_t count) const {
    for (size_t k = 0; k < count; ++k) {
      const T a = src[k];
      if (spec_.discrete && !(a >= T(0) && a < T(spec_.num_actions)))
        throw std::invalid_argument(name() + ": action[" + std::to_string(k) + "] = " + to_text(a) +
                                " is out of range; expected integers in [0, " + std::to_string(spec_.num_actions) +
                                ")");
      if (!spec_.discrete && !std::isfinite(static_cast<double>(a)))
        throw std::invalid_argument(name() + ": action[" + std::to_string(k / spec_.act_dim) + "] contains " +
                                    to_text(a) + "; expected finite floats");
    }
    throw std::logic_error(name() + ": invalid action batch");
  }
  void ensure_open() const {
    if (closed_) throw std::logic_error(std::string(P::kName) + ": environment is closed");
  }

  int n_;
  P phys_;
  Spec spec_;
  int32_t limit_;  // the step count that truncates an episode
  std::vector<float> obs_;
  std::vector<float> reward_;
  std::vector<int32_t> term_i32_;  // 32-bit flags keep the physics loop vectorised
  std::vector<uint8_t> terminated_, truncated_, done_;
  std::vector<int32_t> elapsed_;
  std::vector<Rng> rng_;
  std::vector<Action> act_;
  std::vector<int> pending_;  // pending_[0 .. num_pending_) are reset on the next step
  int num_pending_ = 0;
  bool started_ = false;
  bool closed_ = false;
};

}  // namespace sim_ext
