"""RLlib's learner against plain torch: the cost of one minibatch update and of one train().

The population is learner-bound (`workbench diagnose`), and on small networks the learner's
time is mostly not the network's. This measures, on one core with one torch thread:

* **per minibatch update** (PPO): ``Learner.update`` on one fixed train batch of 2,048 env
  steps run for 1 and for 3 epochs; the difference over the difference in minibatches is
  the cost of one minibatch update, the rest the fixed cost of an ``update()`` call (the
  learner connectors with GAE, metrics reduction). Arms: RLlib's ``PPOTorchLearner``, the
  workbench's ``LeanPPOTorchLearner`` (workbench/trial/lean_learner.py), and the anchor:
  the same networks, PPO loss (RLlib's operations: clipped surrogate, clipped value loss,
  entropy, KL) and Adam in plain eager torch on preassembled tensors (``torch`` with
  torch's default Adam as RLlib builds it, ``torch_fused`` with the fused Adam the lean
  learner uses). Minibatch sizes 64-2048; the small-env networks (64x64 tanh policy and
  value, workbench/experiment/defaults.py) and RLlib's default ones (256x256 ReLU).
* **per minibatch update** (DQN, ``--dqn``): one ``Learner.update`` per minibatch, as DQN's
  training step calls it (every update pays the fixed cost), on a replay-buffer sample:
  RLlib's ``DQNTorchLearner``, the workbench's ``LeanDQNTorchLearner``
  (workbench/trial/lean_dqn.py), against double-Q Huber loss and Adam in plain torch
  (dueling off in all).
* **one train()** (PPO, batch 256, one minibatch of 256, 20 epochs, 8 envs, the fast env
  runner in the trial's process): its wall time, RLlib's own timers (sampling, learner
  update, weight sync), and its fixed cost: wall time less sampling less 20 plain-torch
  updates of 256.
* **where the time goes**: cProfile of RLlib's ``update()`` at minibatch 256 and of one
  ``train()`` at batch 256, the cumulative time of the functions that make up the
  overhead (nested: a row's time includes the rows it calls; profiling inflates Python).

``--device cuda`` measures only the per-minibatch PPO update, with a GPU next to the CPU in
the same rounds: RLlib's learner on the GPU (``rllib_gpu``, the learner in this process as
a trial's is in its main process or a 0-CPU learner actor) and on one CPU thread
(``rllib``, ``lean``), plain torch on the GPU (``torch_gpu``) and on the CPU (``torch``).
What a GPU learner costs per minibatch against what the arithmetic costs on the same GPU,
and where the CPU is the faster of the two; ``--networks wide`` adds a 1024x1024 MLP.

Every figure: ``--rounds`` interleaved rounds (each arm once per round), median [min-max].

    .venv/bin/python benchmarks/learner_overhead.py [--rounds 5] [--dqn] [--json out.json]
    .venv/bin/python benchmarks/learner_overhead.py --device cuda --networks small_env,wide
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import json
import os
import platform
import pstats
import sys
import time
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/learner_overhead.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import command_line, cpu_model, interleaved, pin_to_one_cpu, spread
from benchmarks.plain_learners import PlainDQN, PlainPPO, plain_seconds, synchronize

ENV = "sim_ext/CartPole-v1"
ENVS = 8
BATCH = 2048
MINIBATCHES = (64, 128, 256, 512, 1024, 2048)
DQN_ARMS = ("rllib", "lean", "torch")
NETWORKS: dict[str, dict[str, Any]] = {
    "small_env": {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False},
    "rllib_default": {
        "fcnet_hiddens": [256, 256],
        "fcnet_activation": "relu",
        "vf_share_layers": False,
    },
    "wide": {"fcnet_hiddens": [1024, 1024], "fcnet_activation": "relu", "vf_share_layers": False},
}
DEFAULT_NETWORKS = ("small_env", "rllib_default")
EPOCHS = (1, 3)  # update() runs of 1 and 3 epochs: per-minibatch cost and fixed cost
TRAIN_BATCH, TRAIN_EPOCHS = 256, 20
PPO_ARMS = ("rllib", "lean", "torch", "torch_fused")
GPU_PPO_ARMS = ("rllib_gpu", "rllib", "lean", "torch_gpu", "torch")
# RLlib arms: (the lean learner, on the GPU); plain-torch arms: (fused Adam, on the GPU).
RLLIB_ARMS = {"rllib": (False, False), "lean": (True, False), "rllib_gpu": (False, True)}
PLAIN_ARMS = {"torch": (False, False), "torch_fused": (True, False), "torch_gpu": (False, True)}


# --- RLlib --------------------------------------------------------------------------------


def ppo_config(
    network: dict[str, Any], *, lean: bool, batch: int, minibatch: int, gpu: bool = False
) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig

    from workbench.trial.config import register_env
    from workbench.trial.fast_runner import FastEnvRunner
    from workbench.trial.lean_learner import LeanPPOTorchLearner, install_lean_weight_sync

    config = (
        PPOConfig()
        .environment(env=register_env(ENV))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=ENVS,
            gym_env_vectorize_mode="vector_entry_point",
            env_runner_cls=FastEnvRunner,
        )
        .rl_module(model_config=dict(network))
        .training(
            train_batch_size_per_learner=batch, minibatch_size=minibatch, num_epochs=TRAIN_EPOCHS
        )
        .debugging(seed=0)
    )
    if gpu:  # the learner in this process, on the GPU
        config.learners(num_learners=0, num_gpus_per_learner=1)
    if lean:  # as workbench.trial.config sets it up: the lean learner and its weight sync
        config.learners(learner_class=LeanPPOTorchLearner)
        config.callbacks(on_algorithm_init=install_lean_weight_sync)
    return config


def build(config: Any) -> Any:
    import torch

    algo = config.build_algo()
    torch.set_num_threads(1)
    return algo


def timed_update(learner: Any, episodes: list[Any], epochs: int, minibatch: int) -> float:
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    data = copy.deepcopy(episodes)  # the connectors extend episodes in place
    synchronize()
    start = time.perf_counter()
    learner.update(
        episodes=data,
        timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: BATCH},
        num_epochs=epochs,
        minibatch_size=minibatch,
        shuffle_batch_per_epoch=True,
    )
    synchronize()
    return time.perf_counter() - start


def minibatch_count(rows: int, minibatch: int, epochs: int) -> int:
    from workbench.trial.minibatch_plan import minibatch_plan

    return len(minibatch_plan(rows, minibatch, epochs, True))


def ppo_updates(
    rounds: int,
    out: dict[str, Any],
    networks: list[str],
    minibatches: list[int],
    arms: tuple[str, ...] = PPO_ARMS,
) -> None:
    second = "torch_fused" if "torch_fused" in arms else "torch_gpu"
    print("\nPPO: one minibatch update, and the fixed cost of one update() call (ms)")
    print(
        f"{'network':<14} {'minibatch':>9} {'arm':<12} {'per update':>22} "
        f"{'vs torch':>9} {'vs ' + second.removeprefix('torch_'):>9} {'fixed':>20}"
    )
    for net_name in networks:
        network = NETWORKS[net_name]
        algos = {
            arm: build(
                ppo_config(
                    network,
                    lean=RLLIB_ARMS[arm][0],
                    batch=BATCH,
                    minibatch=128,
                    gpu=RLLIB_ARMS[arm][1],
                )
            )
            for arm in arms
            if arm in RLLIB_ARMS
        }
        try:
            episodes = algos["rllib"].env_runner.sample(num_timesteps=BATCH)
            learners = {arm: algo.learner_group._learner for arm, algo in algos.items()}
            for arm, learner in learners.items():
                print(f"{arm}: {type(learner).__name__} on {learner._device}", flush=True)
            rows = len(
                learners["rllib"]._learner_connector(
                    rl_module=learners["rllib"].module,
                    batch={},
                    episodes=copy.deepcopy(episodes),
                    shared_data={},
                )["default_policy"]["obs"]
            )
            for minibatch in minibatches:
                plain = {
                    arm: PlainPPO(network, minibatch, *PLAIN_ARMS[arm])
                    for arm in arms
                    if arm in PLAIN_ARMS
                }
                for arm in learners:
                    timed_update(learners[arm], episodes, 1, minibatch)  # warm

                def measure(
                    arm: str,
                    minibatch: int = minibatch,
                    plain: Any = plain,
                    learners: Any = learners,
                    episodes: Any = episodes,
                    rows: int = rows,
                ) -> Any:
                    if arm in plain:
                        return plain_seconds(plain[arm], 20), 0.0
                    low, high = (
                        timed_update(learners[arm], episodes, epochs, minibatch)
                        for epochs in EPOCHS
                    )
                    counts = [minibatch_count(rows, minibatch, e) for e in EPOCHS]
                    per = (high - low) / (counts[1] - counts[0])
                    return per, low - counts[0] * per

                figures = interleaved(rounds, arms, measure, label=f"{net_name} {minibatch}")
                per_arm = {
                    arm: [f[0] * 1e3 for f in figs] for arm, figs in zip(arms, figures, strict=True)
                }
                fixed = {
                    arm: [f[1] * 1e3 for f in figs] for arm, figs in zip(arms, figures, strict=True)
                }
                anchor = sorted(per_arm["torch"])[len(per_arm["torch"]) // 2]
                fused = sorted(per_arm[second])[len(per_arm[second]) // 2]
                for arm in arms:
                    median = sorted(per_arm[arm])[len(per_arm[arm]) // 2]
                    fixed_s = spread(fixed[arm], ".1f") if arm in learners else "-"
                    print(
                        f"{net_name:<14} {minibatch:>9} {arm:<12} "
                        f"{spread(per_arm[arm], '.2f'):>22} {median / anchor:>8.2f}x "
                        f"{median / fused:>8.2f}x {fixed_s:>20}"
                    )
                    out["ppo_updates"].append(
                        {
                            "network": net_name,
                            "minibatch": minibatch,
                            "arm": arm,
                            "per_update_ms": per_arm[arm],
                            "fixed_ms": fixed[arm] if arm in learners else None,
                            "vs_torch": median / anchor,
                            f"vs_{second}": median / fused,
                        }
                    )
        finally:
            for algo in algos.values():
                algo.stop()


def timed_train(algo: Any) -> tuple[float, float, float, float]:
    start = time.perf_counter()
    result = algo.train()
    wall = time.perf_counter() - start
    timers = result.get("timers", {})
    return (
        wall,
        float(timers.get("env_runner_sampling_timer", float("nan"))),
        float(timers.get("learner_update_timer", float("nan"))),
        float(timers.get("synch_weights", float("nan"))),
    )


def ppo_train(rounds: int, out: dict[str, Any]) -> None:
    """train() at batch 256 with 20 epochs and with 1: the difference over the difference
    in minibatch updates is one update inside train(); what is left at 1 epoch, less that
    update and RLlib's sampling timer, is the fixed cost of a train()."""
    import statistics

    network = NETWORKS["small_env"]
    plain = statistics.median(
        plain_seconds(PlainPPO(network, TRAIN_BATCH, fused=False), 30) for _ in range(5)
    )
    cases = [(arm, epochs) for arm in ("rllib", "lean") for epochs in (1, TRAIN_EPOCHS)]
    algos = {}
    for arm, epochs in cases:
        config = ppo_config(network, lean=arm == "lean", batch=TRAIN_BATCH, minibatch=TRAIN_BATCH)
        algos[(arm, epochs)] = build(config.training(num_epochs=epochs))
    try:
        for algo in algos.values():
            for _ in range(3):
                algo.train()

        def measure(case: tuple[str, int]) -> list[tuple[float, float, float, float]]:
            return [timed_train(algos[case]) for _ in range(5)]

        figures = dict(
            zip(cases, interleaved(rounds, cases, measure, label="train()"), strict=True)
        )
    finally:
        for algo in algos.values():
            algo.stop()
    # A train() samples 256 env steps; RLlib's batch adds one masked row per episode.
    rows = TRAIN_BATCH + 8
    counts = {e: minibatch_count(rows, TRAIN_BATCH, e) for e in (1, TRAIN_EPOCHS)}
    print(
        f"\nPPO train(): batch {TRAIN_BATCH}, minibatch {TRAIN_BATCH}, {ENVS} envs, small_env "
        f"networks, {TRAIN_EPOCHS} epochs ({counts[TRAIN_EPOCHS]} updates) and 1 epoch "
        f"({counts[1]}) (ms). Plain torch: {plain * 1e3:.2f} ms per update"
    )
    print(
        f"{'arm':<6} {'train() 20 epochs':>22} {'train() 1 epoch':>20} {'per update':>20} "
        f"{'sampling':>9} {'sync':>6} {'fixed':>20}"
    )
    for arm in ("rllib", "lean"):
        long_rounds, short_rounds = figures[(arm, TRAIN_EPOCHS)], figures[(arm, 1)]
        per_update, fixed, long_ms, short_ms = [], [], [], []
        sampling = sync = 0.0
        for long_calls, short_calls in zip(long_rounds, short_rounds, strict=True):
            t_long = statistics.median(c[0] for c in long_calls)
            t_short = statistics.median(c[0] for c in short_calls)
            sampling = statistics.median(c[1] for c in short_calls)
            sync = statistics.median(c[3] for c in short_calls)
            per = (t_long - t_short) / (counts[TRAIN_EPOCHS] - counts[1])
            per_update.append(per * 1e3)
            fixed.append((t_short - counts[1] * per - sampling) * 1e3)
            long_ms.append(t_long * 1e3)
            short_ms.append(t_short * 1e3)
        print(
            f"{arm:<6} {spread(long_ms, '.1f'):>22} {spread(short_ms, '.1f'):>20} "
            f"{spread(per_update, '.2f'):>20} {sampling * 1e3:>9.1f} {sync * 1e3:>6.2f} "
            f"{spread(fixed, '.1f'):>20}"
        )
        out["ppo_train"].append(
            {
                "arm": arm,
                "train_ms": long_ms,
                "train_1_epoch_ms": short_ms,
                "per_update_ms": per_update,
                "fixed_ms": fixed,
                "sampling_ms": sampling * 1e3,
                "sync_ms": sync * 1e3,
                "plain_update_ms": plain * 1e3,
            }
        )


# --- DQN ----------------------------------------------------------------------------------


def dqn_updates(
    rounds: int,
    out: dict[str, Any],
    networks: list[str],
    minibatches: list[int],
    *,
    warm_trains: int = 20,
) -> None:
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    from workbench.trial.config import register_env
    from workbench.trial.lean_dqn import LeanDQNTorchLearner

    print("\nDQN: one update() call = one minibatch update (ms), double Q, dueling off")
    print(f"{'network':<14} {'minibatch':>9} {'arm':<6} {'per update':>22} {'vs torch':>9}")
    for net_name in networks:
        network = NETWORKS[net_name]
        model = {k: v for k, v in network.items() if k != "vf_share_layers"}
        config = (
            DQNConfig()
            .environment(env=register_env(ENV))
            .env_runners(
                num_env_runners=0,
                num_envs_per_env_runner=ENVS,
                gym_env_vectorize_mode="vector_entry_point",
            )
            .rl_module(model_config={**model, "head_fcnet_hiddens": []})
            .training(dueling=False, double_q=True, num_steps_sampled_before_learning_starts=0)
            .debugging(seed=0)
        )
        algo = build(config)
        lean_algo = build(copy.deepcopy(config).learners(learner_class=LeanDQNTorchLearner))
        try:
            for _ in range(warm_trains):  # fills the replay buffer (1,000 env steps each)
                algo.train()
            learners = {
                "rllib": algo.learner_group._learner,
                "lean": lean_algo.learner_group._learner,
            }
            buffer = algo.local_replay_buffer
            for minibatch in minibatches:
                samples = [
                    buffer.sample(
                        num_items=minibatch, n_step=1, gamma=0.99, beta=0.4, sample_episodes=True
                    )
                    for _ in range(10)
                ]
                plain = PlainDQN(network, minibatch)

                def measure(
                    arm: str, samples: Any = samples, plain: Any = plain, learners: Any = learners
                ) -> float:
                    if arm == "torch":
                        return plain_seconds(plain, 20)
                    data = [copy.deepcopy(s) for s in samples]
                    start = time.perf_counter()
                    for episodes in data:
                        learners[arm].update(
                            episodes=episodes, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: 10_000}
                        )
                    return (time.perf_counter() - start) / len(data)

                measure("rllib")
                measure("lean")
                figures = interleaved(rounds, DQN_ARMS, measure, label=f"dqn {minibatch}")
                ms = {
                    arm: [f * 1e3 for f in figs]
                    for arm, figs in zip(DQN_ARMS, figures, strict=True)
                }
                anchor = sorted(ms["torch"])[len(ms["torch"]) // 2]
                for arm in DQN_ARMS:
                    median = sorted(ms[arm])[len(ms[arm]) // 2]
                    print(
                        f"{net_name:<14} {minibatch:>9} {arm:<6} {spread(ms[arm], '.2f'):>22} "
                        f"{median / anchor:>8.2f}x"
                    )
                    out["dqn_updates"].append(
                        {"network": net_name, "minibatch": minibatch, "arm": arm, "ms": ms[arm]}
                    )
        finally:
            algo.stop()
            lean_algo.stop()


# --- where the time goes ------------------------------------------------------------------

# (label, file fragment, function name): cumulative time of each (nested rows overlap).
PROFILE_ROWS = (
    ("learner connectors (episodes -> batch, GAE)", "connector_pipeline_v2", "__call__"),
    ("minibatch slicing and concatenation", "minibatch_utils", "__iter__"),
    ("numpy -> torch conversion", "torch_utils", "convert_to_torch_tensor"),
    ("metrics: log_value", "metrics_logger", "log_value"),
    ("metrics: log_dict", "metrics_logger", "log_dict"),
    ("metrics: reduce", "metrics_logger", "reduce"),
    ("off-policyness metric", "torch_learner", "_compute_off_policyness"),
    ("steps-trained metrics", "learner", "_log_steps_trained_metrics"),
    ("forward_train", "rl_module", "forward_train"),
    ("loss (PPO)", "ppo_torch_learner", "compute_loss_for_module"),
    ("explained variance", "torch_utils", "explained_variance"),
    ("backward", "_tensor", "backward"),
    ("apply_gradients (NaN checks + step)", "torch_learner", "apply_gradients"),
    ("optimizer step (Adam)", "adam", "step"),
    ("weight sync to the env runner", "env_runner_group", "sync_weights"),
    ("env runner sampling", "single_agent_env_runner", "sample"),
)


def profile_rows(profile: cProfile.Profile, total: float) -> list[tuple[str, float, float]]:
    stats = pstats.Stats(profile)
    rows = []
    for label, fragment, name in PROFILE_ROWS:
        cumulative = 0.0
        for (filename, _, func), (_, _, _, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
            if func == name and fragment in filename:
                cumulative += ct
        rows.append((label, cumulative * 1e3, 100 * cumulative / total if total else 0.0))
    return rows


def where_the_time_goes(out: dict[str, Any]) -> None:
    network = NETWORKS["small_env"]
    algo = build(ppo_config(network, lean=False, batch=BATCH, minibatch=256))
    try:
        learner = algo.learner_group._learner
        episodes = algo.env_runner.sample(num_timesteps=BATCH)
        timed_update(learner, episodes, 1, 256)
        data = copy.deepcopy(episodes)
        profile = cProfile.Profile()
        from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

        start = time.perf_counter()
        profile.enable()
        learner.update(
            episodes=data,
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: BATCH},
            num_epochs=10,
            minibatch_size=256,
            shuffle_batch_per_epoch=True,
        )
        profile.disable()
        total = time.perf_counter() - start
    finally:
        algo.stop()
    print(
        f"\nwhere RLlib's update() goes: batch {BATCH}, minibatch 256, 10 epochs, profiled "
        f"({total * 1e3:.0f} ms under the profiler)"
    )
    rows = profile_rows(profile, total)
    for label, ms, share in rows:
        print(f"  {label:<46} {ms:>8.1f} ms {share:>5.1f}%")
    out["profile_update"] = {"total_ms": total * 1e3, "rows": rows}

    train_algo = build(ppo_config(network, lean=False, batch=TRAIN_BATCH, minibatch=TRAIN_BATCH))
    try:
        for _ in range(3):
            train_algo.train()
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        for _ in range(5):
            train_algo.train()
        profile.disable()
        total = (time.perf_counter() - start) / 5
    finally:
        train_algo.stop()
    print(
        f"\nwhere RLlib's train() goes: batch {TRAIN_BATCH}, minibatch {TRAIN_BATCH}, "
        f"{TRAIN_EPOCHS} epochs, per train() ({total * 1e3:.0f} ms under the profiler)"
    )
    rows = [(label, ms / 5, share) for label, ms, share in profile_rows(profile, total * 5)]
    for label, ms, share in rows:
        print(f"  {label:<46} {ms:>8.1f} ms {share:>5.1f}%")
    out["profile_train"] = {"total_ms": total * 1e3, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dqn", action="store_true", help="also DQN's per-update cost")
    parser.add_argument("--skip-updates", action="store_true", help="only train() and profile")
    parser.add_argument("--core", type=int, default=None, help="pin to this CPU (default: last)")
    parser.add_argument(
        "--networks", default=",".join(DEFAULT_NETWORKS), help=f"of {', '.join(NETWORKS)}"
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: only the PPO update, RLlib's learner and plain torch on GPU and CPU",
    )
    parser.add_argument(
        "--minibatches", default=",".join(map(str, MINIBATCHES)), help="minibatch sizes"
    )
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run (the test): DQN's replay buffer filled by 2 train() calls, not 20",
    )
    args = parser.parse_args(argv)
    networks = [n.strip() for n in args.networks.split(",") if n.strip()]
    if set(networks) - set(NETWORKS):
        raise SystemExit(f"--networks: one of {', '.join(NETWORKS)}")
    minibatches = [int(m) for m in args.minibatches.split(",") if m.strip()]

    warnings.filterwarnings("ignore")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    core = pin_to_one_cpu(args.core, default="last")
    import ray
    import torch

    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device on this machine", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    ray.init(num_cpus=1, num_gpus=1 if gpu else 0, include_dashboard=False, log_to_driver=False)
    print("command:", command_line())
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, ray {ray.__version__}, "
        f"{cpu_model()}, pinned to core #{core} of {os.cpu_count()}, one torch thread, "
        f"load average {os.getloadavg()[0]:.2f} at the start; {args.rounds} interleaved rounds"
        + (f"; GPU {torch.cuda.get_device_name(0)}" if gpu else "")
    )
    out: dict[str, Any] = {"ppo_updates": [], "ppo_train": [], "dqn_updates": []}
    try:
        if gpu:
            ppo_updates(args.rounds, out, networks, minibatches, GPU_PPO_ARMS)
            return 0
        if not args.skip_updates:
            ppo_updates(args.rounds, out, networks, minibatches)
        ppo_train(args.rounds, out)
        if args.dqn:
            dqn_updates(
                args.rounds, out, networks, minibatches, warm_trains=2 if args.quick else 20
            )
        where_the_time_goes(out)
    finally:
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
