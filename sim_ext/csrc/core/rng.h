// Per-environment random streams: one SplitMix64 state per env, derived from
// (seed, env index), so env i's stream never depends on how many envs run
// beside it and no two envs of a batch share a stream.
#pragma once
#include <cstdint>

namespace sim_ext {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  Rng() = default;
  // Streams for (seed, i) and (seed, j) start from decorrelated states.
  static Rng from(uint64_t seed, uint64_t index) {
    Rng r;
    r.state_ = mix64(mix64(seed) ^ mix64(index + 0x9E3779B97F4A7C15ULL));
    return r;
  }
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    return mix64(z);
  }
  // Uniform in [lo, hi) with 24 random bits (float) or 53 (double).
  float uniformf(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
  }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, bias < 2^-32).
  uint32_t below(uint32_t n) {
    return static_cast<uint32_t>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32);
  }

 private:
  uint64_t state_ = 0;
};

}  // namespace sim_ext
