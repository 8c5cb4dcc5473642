// The one place that knows pybind11: exposes BatchEnv<P> for any physics P.
// Registering an environment is one line in bindings.cpp: bind_env<P>(m, "Name").
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "core/batch_env.h"

namespace sim_ext {
namespace py = pybind11;

// Below this many envs, releasing and re-taking the GIL costs more than it frees.
constexpr int kReleaseGilFrom = 64;

inline Params params_from_dict(const py::dict& d) {
  std::map<std::string, ParamValue> values;
  for (auto item : d) {
    if (!py::isinstance<py::str>(item.first))
      throw py::type_error("env_config keys must be str, got " + std::string(py::repr(item.first)));
    const auto key = item.first.cast<std::string>();
    py::handle v = item.second;
    if (v.is_none()) continue;  // None means "use the default"
    if (py::isinstance<py::bool_>(v) || py::isinstance(v, py::module_::import("numpy").attr("bool_"))) {
      values[key] = v.cast<bool>();
    } else if (PyIndex_Check(v.ptr())) {  // int and numpy integers
      values[key] = static_cast<int64_t>(py::int_(py::reinterpret_borrow<py::object>(v)).cast<long long>());
    } else if (PyFloat_Check(v.ptr()) || py::hasattr(v, "__float__")) {
      values[key] = py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>();
    } else if (py::isinstance<py::str>(v)) {
      values[key] = v.cast<std::string>();
    } else {
      throw py::type_error("env_config " + Params::quote(key) + ": got " + std::string(py::repr(v)) + " of type " +
                           std::string(py::str(py::type::handle_of(v).attr("__name__"))) + ", expected a bool, int, float or str");
    }
  }
  return Params(std::move(values));
}

// A read-only numpy view of a buffer owned by `owner` (kept alive as the array's base).
template <class T>
py::array view(py::handle owner, T* data, std::vector<py::ssize_t> shape, const char* dtype = nullptr) {
  py::array arr;
  if (dtype)
    arr = py::array(py::dtype(dtype), shape, {}, data, owner);
  else
    arr = py::array_t<T>(shape, {}, data, owner);
  arr.attr("flags").attr("writeable") = false;
  return arr;
}

// Checks an action batch at the boundary: numpy array, dtype, shape, C order.
template <class Env>
void load_actions(Env& e, py::handle actions) {
  const auto& s = e.spec();
  const std::string name = Env::name();
  const std::string expected =
      s.discrete ? "an int32 or int64 numpy array of shape (" + std::to_string(e.num_envs()) + ",)"
                 : "a float32 or float64 numpy array of shape (" + std::to_string(e.num_envs()) + ", " +
                       std::to_string(s.act_dim) + ")";
  if (!py::isinstance<py::array>(actions))
    throw py::type_error(name + ": actions must be " + expected + ", got " +
                         std::string(py::str(py::type::handle_of(actions).attr("__name__"))));
  auto arr = py::reinterpret_borrow<py::array>(actions);
  const bool shape_ok = s.discrete ? (arr.ndim() == 1 && arr.shape(0) == e.num_envs())
                                   : (arr.ndim() == 2 && arr.shape(0) == e.num_envs() && arr.shape(1) == s.act_dim);
  if (!shape_ok)
    throw py::value_error(name + ": actions must be " + expected + ", got shape " +
                          std::string(py::str(arr.attr("shape"))));
  if (!(arr.flags() & py::array::c_style))
    throw py::value_error(name + ": actions must be C-contiguous (" + expected +
                          "); got a strided view, pass numpy.ascontiguousarray(actions)");
  const auto dt = arr.dtype();
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (s.discrete && kind == 'i' && size == 8) return e.load_actions(static_cast<const int64_t*>(arr.data()));
  if (s.discrete && kind == 'i' && size == 4) return e.load_actions(static_cast<const int32_t*>(arr.data()));
  if (!s.discrete && kind == 'f' && size == 4) return e.load_actions(static_cast<const float*>(arr.data()));
  if (!s.discrete && kind == 'f' && size == 8) return e.load_actions(static_cast<const double*>(arr.data()));
  throw py::type_error(name + ": actions must be " + expected + ", got dtype " + std::string(py::str(dt)));
}

template <class P>
void bind_env(py::module_& m, const char* name) {
  using Env = BatchEnv<P>;
  py::class_<Env>(m, name)
      .def(py::init([](int64_t num_envs, const py::dict& config) {
             auto params = params_from_dict(config);
             return new Env(num_envs, std::move(params));
           }),
           py::arg("num_envs"), py::arg("config") = py::dict())
      .def_property_readonly_static("env_name", [](py::object) { return std::string(P::kName); })
      .def_property_readonly("num_envs", &Env::num_envs)
      .def_property_readonly("obs_dim", [](const Env& e) { return e.spec().obs_dim; })
      .def_property_readonly("obs_low", [](const Env& e) { return e.spec().obs_low; })
      .def_property_readonly("obs_high", [](const Env& e) { return e.spec().obs_high; })
      .def_property_readonly("discrete", [](const Env& e) { return e.spec().discrete; })
      .def_property_readonly("num_actions", [](const Env& e) { return e.spec().num_actions; })
      .def_property_readonly("act_dim", [](const Env& e) { return e.spec().act_dim; })
      .def_property_readonly("act_low", [](const Env& e) { return e.spec().act_low; })
      .def_property_readonly("act_high", [](const Env& e) { return e.spec().act_high; })
      .def_property_readonly("state_dim", [](const Env& e) { return e.spec().state_dim; })
      .def_property_readonly("max_episode_steps", [](const Env& e) { return e.spec().max_episode_steps; })
      .def_property_readonly("closed", &Env::closed)
      .def_property_readonly("obs",
                             [](py::object self) {
                               auto& e = self.cast<Env&>();
                               return view(self, e.obs(), {e.num_envs(), e.spec().obs_dim});
                             })
      .def_property_readonly("reward",
                             [](py::object self) {
                               auto& e = self.cast<Env&>();
                               return view(self, e.reward(), {e.num_envs()});
                             })
      .def_property_readonly("terminated",
                             [](py::object self) {
                               auto& e = self.cast<Env&>();
                               return view(self, e.terminated(), {e.num_envs()}, "bool");
                             })
      .def_property_readonly("truncated",
                             [](py::object self) {
                               auto& e = self.cast<Env&>();
                               return view(self, e.truncated(), {e.num_envs()}, "bool");
                             })
      .def_property_readonly("elapsed_steps",
                             [](py::object self) {
                               auto& e = self.cast<Env&>();
                               return view(self, e.elapsed(), {e.num_envs()});
                             })
      .def("seed", [](Env& e, uint64_t seed) { e.seed_all(seed); }, py::arg("seed"))
      .def(
          "seed_one",
          [](Env& e, int64_t i, uint64_t seed) {
            if (i < 0 || i >= e.num_envs())
              throw py::index_error("env index " + std::to_string(i) + " out of range [0, " +
                                    std::to_string(e.num_envs()) + ")");
            e.seed_one(static_cast<int>(i), seed);
          },
          py::arg("index"), py::arg("seed"))
      .def(
          "reset",
          [](Env& e, py::object mask) {
            if (mask.is_none()) return e.reset(nullptr);
            if (!py::isinstance<py::array>(mask))
              throw py::type_error(std::string(P::kName) + ": reset_mask must be a numpy bool array of shape (" +
                                   std::to_string(e.num_envs()) + ",)");
            auto arr = py::reinterpret_borrow<py::array>(mask);
            if (arr.dtype().kind() != 'b' || arr.ndim() != 1 || arr.shape(0) != e.num_envs())
              throw py::value_error(std::string(P::kName) + ": reset_mask must be a numpy bool array of shape (" +
                                    std::to_string(e.num_envs()) + ",), got dtype " +
                                    std::string(py::str(arr.dtype())) + " shape " +
                                    std::string(py::str(mask.attr("shape"))));
            auto contiguous = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(arr);
            e.reset(reinterpret_cast<const uint8_t*>(contiguous.data()));
          },
          py::arg("mask") = py::none())
      .def(
          "step",
          [](Env& e, py::handle actions) {
            load_actions(e, actions);
            if (e.num_envs() >= kReleaseGilFrom) {
              py::gil_scoped_release release;
              e.step();
            } else {
              e.step();
            }
          },
          py::arg("actions"))
      .def("get_state",
           [](const Env& e) {
             py::array_t<double> out({e.num_envs(), e.spec().state_dim});
             e.get_state(out.mutable_data());
             return out;
           })
      .def(
          "set_state",
          [](Env& e, py::array_t<double, py::array::c_style | py::array::forcecast> state) {
            if (state.ndim() != 2 || state.shape(0) != e.num_envs() || state.shape(1) != e.spec().state_dim)
              throw py::value_error(std::string(P::kName) + ": state must have shape (" +
                                    std::to_string(e.num_envs()) + ", " + std::to_string(e.spec().state_dim) +
                                    "), got " + std::string(py::str(state.attr("shape"))));
            const double* data = state.data();
            for (py::ssize_t k = 0; k < state.size(); ++k)
              if (!std::isfinite(data[k]))
                throw py::value_error(std::string(P::kName) + ": state[" + std::to_string(k / e.spec().state_dim) +
                                      "] contains " + std::to_string(data[k]) + "; expected finite numbers");
            e.set_state(data);
          },
          py::arg("state"))
      .def("close", &Env::close);
}

}  // namespace sim_ext
