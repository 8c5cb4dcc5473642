// GridMaze-v0: an n x n grid maze. The agent starts top-left (row 0, col 0)
// and must reach the goal bottom-right (n-1, n-1).
//
// Actions (discrete): 0 = up (row-1), 1 = down (row+1), 2 = left (col-1),
// 3 = right (col+1). A move into the border or into a wall leaves the agent in
// place. Reward -1 per move, 0 on the move that ends on the goal, which
// terminates the episode. Truncation after `max_episode_steps` (default 4*n*n).
//
// env_config:
//   size               n, in [2, 64] (default 8).
//   wall_density       in [0, 1) (default 0: an open grid). Each cell other than
//                      start and goal is a wall with this probability, except
//                      the cells of a protected path (below), so the goal is
//                      always reachable. No retries are ever needed.
//   maze_seed          optional integer in [0, 2^63). Given: every env of the
//                      batch uses the one layout generated from maze_seed, at
//                      every reset (a fixed task). Absent (or None): each env
//                      draws a new layout from its own per-env Rng at every
//                      episode start (procedural mazes).
//   obs_mode           "onehot" (default): float32[n*n] with a 1 at the agent's
//                      cell (row-major), in [0, 1]; "coords": float32 (row, col)
//                      in [0, n-1].
//   max_episode_steps  in [1, 2^30] (default 4*n*n).
//
// Layout generation (density > 0): two waypoints are drawn uniformly over the
// grid; a random monotone staircase (each step moves along the row or column
// axis with probability proportional to the distance left on that axis) links
// start -> waypoint 1 -> waypoint 2 -> goal, and its cells are protected. Then
// every cell but start and goal draws one uniform number and becomes a wall if
// it is below the density and the cell is not protected. The protected path
// may double back (waypoints in any order), so the shortest route is not
// always the Manhattan one. With density 0 no random numbers are drawn.
//
// State (get_state/set_state, doubles): row, col, then the n*n wall flags
// (0 or 1) row-major. set_state rejects (std::invalid_argument, row left
// untouched) a position outside the grid or not an integer, flags other than
// 0/1, a wall on the start or goal cell, and the agent on a wall. Walls set this
// way last until the env's next reset, which restores the maze_seed layout or
// draws a new one.
//
// Storage is structure-of-arrays: row and col are int32[N], the walls one
// contiguous int32[N*n*n] (int32 so that the step's wall lookup vectorises as
// a gather: about twice the steps/s of uint8 walls), indexed in 32 bits, so
// num_envs * n^2 must stay below 2^31 (checked). The step is one branch-free
// loop over all envs. The one-hot observation is updated in place: the step
// clears the cell it last set in that env's row and sets the new one
// (obs_cell_ remembers the cell each env's observation row holds, kept by
// step() and observe()), so a step writes two floats per env instead of n*n.
// This relies on the engine's observation rows being written only by this
// class's step() and observe().
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/batch_env.h"
#include "core/simd.h"

namespace sim_ext {

namespace gridmaze_detail {
constexpr int kMaxSize = 64;
// Stream index of the fixed layout's Rng (maze_seed), apart from the per-env indices.
constexpr uint64_t kMazeStream = 0x4D415A452D763000ULL;

// Moves every env by its action (border and walls block), then writes reward,
// terminated and the new cell index (row * size + col).
SIMEXT_KERNEL static void move_kernel(int n, int size, const int32_t* __restrict action, int32_t* __restrict row,
                                      int32_t* __restrict col, const int32_t* __restrict walls,
                                      float* __restrict reward, int32_t* __restrict terminated,
                                      int32_t* __restrict cell) {
  const int32_t last = size - 1;
  const int32_t cells = size * size;  // n * cells < 2^31: 32-bit indices let GCC gather
  for (int32_t i = 0; i < n; ++i) {
    const int32_t a = action[i];
    const int32_t r = row[i], c = col[i];
    const int32_t dr = static_cast<int32_t>(a == 1) - static_cast<int32_t>(a == 0);
    const int32_t dc = static_cast<int32_t>(a == 3) - static_cast<int32_t>(a == 2);
    const int32_t nr = r + dr, nc = c + dc;
    const int32_t inside = static_cast<int32_t>((static_cast<uint32_t>(nr) <= static_cast<uint32_t>(last)) &
                                                (static_cast<uint32_t>(nc) <= static_cast<uint32_t>(last)));
    const int32_t tr = r + dr * inside, tc = c + dc * inside;  // the agent's own cell is never a wall
    const int32_t ok = 1 - walls[i * cells + (tr * size + tc)];
    const int32_t fr = r + (tr - r) * ok, fc = c + (tc - c) * ok;
    row[i] = fr;
    col[i] = fc;
    const int32_t goal = static_cast<int32_t>((fr == last) & (fc == last));
    terminated[i] = goal;
    reward[i] = static_cast<float>(goal - 1);
    cell[i] = fr * size + fc;
  }
}

// One-hot rows: clears the cell each row holds and sets the new one (two
// scalar stores per env; GCC 12 does not vectorise the scatter).
SIMEXT_KERNEL static void onehot_kernel(int n, int size, const int32_t* __restrict cell,
                                        int32_t* __restrict obs_cell, float* __restrict obs) {
  const int32_t cells = size * size;  // n * cells < 2^31: checked by GridMaze's constructor
  for (int32_t i = 0; i < n; ++i) {
    const int32_t base = i * cells, now = cell[i];
    obs[base + obs_cell[i]] = 0.0f;
    obs[base + now] = 1.0f;
    obs_cell[i] = now;
  }
}

SIMEXT_KERNEL static void coords_kernel(int n, const int32_t* __restrict row, const int32_t* __restrict col,
                                        float* __restrict obs) {
  for (int i = 0; i < n; ++i) {
    obs[2 * i + 0] = static_cast<float>(row[i]);
    obs[2 * i + 1] = static_cast<float>(col[i]);
  }
}

// Marks a random monotone staircase from (r, c) to (r1, c1) in `keep`.
inline void carve(int size, int r, int c, int r1, int c1, Rng& rng, uint8_t* keep) {
  keep[r * size + c] = 1;
  while (r != r1 || c != c1) {
    const int dr = r1 > r ? r1 - r : r - r1;
    const int dc = c1 > c ? c1 - c : c - c1;
    if (rng.below(static_cast<uint32_t>(dr + dc)) < static_cast<uint32_t>(dr))
      r += r1 > r ? 1 : -1;
    else
      c += c1 > c ? 1 : -1;
    keep[r * size + c] = 1;
  }
}

// Writes a layout (size*size flags) with a path from start to goal; `keep` is scratch of size*size.
template <class W>
inline void generate(int size, double density, Rng& rng, W* walls, uint8_t* keep) {
  const int cells = size * size;
  for (int k = 0; k < cells; ++k) walls[k] = keep[k] = 0;
  if (density <= 0.0) return;
  const int w1 = static_cast<int>(rng.below(static_cast<uint32_t>(cells)));
  const int w2 = static_cast<int>(rng.below(static_cast<uint32_t>(cells)));
  carve(size, 0, 0, w1 / size, w1 % size, rng, keep);
  carve(size, w1 / size, w1 % size, w2 / size, w2 % size, rng, keep);
  carve(size, w2 / size, w2 % size, size - 1, size - 1, rng, keep);
  for (int k = 1; k < cells - 1; ++k) {
    const bool wall = rng.uniform(0.0, 1.0) < density;
    walls[k] = static_cast<W>(wall & (keep[k] == 0));
  }
}
}  // namespace gridmaze_detail

class GridMaze {
 public:
  using Action = int32_t;
  static constexpr const char* kName = "GridMaze-v0";
  struct Config {
    int size = 8;
    double wall_density = 0.0;
    bool fixed_maze = false;  // maze_seed given
    uint64_t maze_seed = 0;
    bool onehot = true;
    int max_episode_steps = 4 * 8 * 8;
  };
  static Config parse(Params& p) {
    Config c;
    c.size = static_cast<int>(p.get_int("size", 8, 2, gridmaze_detail::kMaxSize));
    c.wall_density = p.get_double("wall_density", 0.0, 0.0, 1.0, /*hi_open=*/true);
    c.fixed_maze = p.has("maze_seed");
    c.maze_seed = static_cast<uint64_t>(p.get_int("maze_seed", 0, 0, std::numeric_limits<int64_t>::max()));
    c.onehot = p.get_choice("obs_mode", "onehot", {"onehot", "coords"}) == "onehot";
    c.max_episode_steps = static_cast<int>(p.get_int("max_episode_steps", 4 * c.size * c.size, 1, 1 << 30));
    return c;
  }

  GridMaze(const Config& cfg, int n)
      : cfg_(checked(cfg, n)),
        size_(cfg.size),
        cells_(cfg.size * cfg.size),
        row_(n, 0),
        col_(n, 0),
        walls_(static_cast<size_t>(n) * cfg.size * cfg.size, 0),
        cell_(n, 0),
        obs_cell_(n, 0),
        fixed_(cells_, 0),
        scratch_(cells_, 0) {
    if (cfg_.fixed_maze) {
      Rng rng = Rng::from(cfg_.maze_seed, gridmaze_detail::kMazeStream);
      gridmaze_detail::generate(size_, cfg_.wall_density, rng, fixed_.data(), scratch_.data());
      for (int i = 0; i < n; ++i) std::copy(fixed_.begin(), fixed_.end(), walls_.begin() + offset(i));
    }
  }

  Spec spec() const {
    Spec s;
    if (cfg_.onehot) {
      s.obs_dim = cells_;
      s.obs_low.assign(cells_, 0.0f);
      s.obs_high.assign(cells_, 1.0f);
    } else {
      s.obs_dim = 2;
      s.obs_low = {0.0f, 0.0f};
      s.obs_high = {static_cast<float>(size_ - 1), static_cast<float>(size_ - 1)};
    }
    s.discrete = true;
    s.num_actions = 4;
    s.state_dim = 2 + cells_;
    s.max_episode_steps = cfg_.max_episode_steps;
    return s;
  }

  void reset(int i, Rng& rng) {
    row_[i] = 0;
    col_[i] = 0;
    int32_t* w = walls_.data() + offset(i);
    if (cfg_.fixed_maze)
      std::copy(fixed_.begin(), fixed_.end(), w);
    else
      gridmaze_detail::generate(size_, cfg_.wall_density, rng, w, scratch_.data());
  }

  void step(int n, const Action* a, float* reward, int32_t* terminated, float* obs) {
    using namespace gridmaze_detail;
    move_kernel(n, size_, a, row_.data(), col_.data(), walls_.data(), reward, terminated, cell_.data());
    if (cfg_.onehot)
      onehot_kernel(n, size_, cell_.data(), obs_cell_.data(), obs);
    else
      coords_kernel(n, row_.data(), col_.data(), obs);
  }

  void observe(int i, float* obs) const {
    if (cfg_.onehot) {
      for (int k = 0; k < cells_; ++k) obs[k] = 0.0f;
      const int32_t cell = row_[i] * size_ + col_[i];
      obs[cell] = 1.0f;
      obs_cell_[i] = cell;
    } else {
      obs[0] = static_cast<float>(row_[i]);
      obs[1] = static_cast<float>(col_[i]);
    }
  }

  void get_state(int i, double* out) const {
    out[0] = row_[i];
    out[1] = col_[i];
    const int32_t* w = walls_.data() + offset(i);
    for (int k = 0; k < cells_; ++k) out[2 + k] = w[k];
  }

  // Validates the whole row before writing any of it.
  void set_state(int i, const double* in) {
    const std::string where = std::string(kName) + ": set_state row " + std::to_string(i) + ": ";
    const double limit = static_cast<double>(size_ - 1);
    for (int axis = 0; axis < 2; ++axis) {
      const double v = in[axis];
      if (!(v >= 0.0 && v <= limit && v == static_cast<double>(static_cast<int>(v))))
        throw std::invalid_argument(where + (axis == 0 ? "row" : "col") + " = " + num(v) +
                                    "; expected an integer in [0, " + std::to_string(size_ - 1) + "]");
    }
    for (int k = 0; k < cells_; ++k) {
      const double v = in[2 + k];
      if (!(v == 0.0 || v == 1.0))
        throw std::invalid_argument(where + "wall flag of cell (" + std::to_string(k / size_) + ", " +
                                    std::to_string(k % size_) + ") = " + num(v) + "; expected 0 or 1");
    }
    if (in[2] != 0.0) throw std::invalid_argument(where + "the start cell (0, 0) is a wall; it must be open");
    if (in[2 + cells_ - 1] != 0.0)
      throw std::invalid_argument(where + "the goal cell (" + std::to_string(size_ - 1) + ", " +
                                  std::to_string(size_ - 1) + ") is a wall; it must be open");
    const int r = static_cast<int>(in[0]), c = static_cast<int>(in[1]);
    if (in[2 + r * size_ + c] != 0.0)
      throw std::invalid_argument(where + "the agent at (" + std::to_string(r) + ", " + std::to_string(c) +
                                  ") is on a wall");
    row_[i] = r;
    col_[i] = c;
    int32_t* w = walls_.data() + offset(i);
    for (int k = 0; k < cells_; ++k) w[k] = static_cast<int32_t>(in[2 + k] != 0.0);
  }

 private:
  // The kernels index walls and observations with int32: refuse batches past 2^31 cells
  // (8 GiB of walls, as much again of one-hot observations).
  static const Config& checked(const Config& cfg, int n) {
    const int64_t total = static_cast<int64_t>(n) * cfg.size * cfg.size;
    if (total > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument(std::string(kName) + ": num_envs * size^2 = " + std::to_string(total) +
                                  " grid cells; expected at most 2^31 - 1 (fewer envs or a smaller size)");
    return cfg;
  }
  size_t offset(int i) const { return static_cast<size_t>(i) * static_cast<size_t>(cells_); }
  static std::string num(double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  }

  Config cfg_;
  int size_, cells_;
  std::vector<int32_t> row_, col_;
  std::vector<int32_t> walls_;  // env i's layout is walls_[i*cells_ .. (i+1)*cells_), row-major
  std::vector<int32_t> cell_;   // step scratch: each env's cell after the move
  // The cell whose 1 each env's one-hot observation row holds (written by
  // step() and by observe(), which the engine's interface makes const).
  mutable std::vector<int32_t> obs_cell_;
  std::vector<int32_t> fixed_;    // the maze_seed layout
  std::vector<uint8_t> scratch_;  // protected-path marks while generating
};

}  // namespace sim_ext
