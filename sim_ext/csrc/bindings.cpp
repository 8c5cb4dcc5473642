// Registration only: each environment is one line. Physics lives in envs/*.h.
#include "core/binding.h"
#include "envs/acrobot.h"
#include "envs/cartpole.h"
#include "envs/gridmaze.h"
#include "envs/mountain_car.h"
#include "envs/pendulum.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "Batched C++ environments (structure-of-arrays state, one call per batch step).";
  sim_ext::bind_env<sim_ext::Acrobot>(m, "Acrobot");
  sim_ext::bind_env<sim_ext::CartPole>(m, "CartPole");
  sim_ext::bind_env<sim_ext::GridMaze>(m, "GridMaze");
  sim_ext::bind_env<sim_ext::MountainCar>(m, "MountainCar");
  sim_ext::bind_env<sim_ext::MountainCarContinuous>(m, "MountainCarContinuous");
  sim_ext::bind_env<sim_ext::Pendulum>(m, "Pendulum");
}
