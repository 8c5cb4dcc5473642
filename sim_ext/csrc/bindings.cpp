// Registration only: each environment is one line. Physics lives in envs/*.h.
#include "core/binding.h"
#include "envs/cartpole.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "Batched C++ environments (structure-of-arrays state, one call per batch step).";
  sim_ext::bind_env<sim_ext::CartPole>(m, "CartPole");
}
