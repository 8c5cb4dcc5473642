"""The plain-torch references of ``benchmarks/learner_overhead.py``: PPO's and DQN's
updates as a user would write them in torch alone, timed the same way as RLlib's learners."""

from __future__ import annotations

import itertools
import time
from typing import Any


def mlp(sizes: list[int], activation: str, out: int) -> Any:
    import torch

    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[activation]
    layers: list[Any] = []
    for a, b in itertools.pairwise(sizes):
        layers += [torch.nn.Linear(a, b), act()]
    layers.append(torch.nn.Linear(sizes[-1], out))
    return torch.nn.Sequential(*layers)


class PlainPPO:
    """The networks, loss and optimizer of RLlib's PPO on CartPole in plain torch: one
    minibatch update per call of ``step`` on preassembled tensors."""

    def __init__(self, network: dict[str, Any], size: int, fused: bool, gpu: bool = False) -> None:
        import torch

        device = torch.device("cuda" if gpu else "cpu")
        hidden = list(network["fcnet_hiddens"])
        act = network["fcnet_activation"]
        self.pi = mlp([4, *hidden], act, 2).to(device)
        self.vf = mlp([4, *hidden], act, 1).to(device)
        params = [*self.pi.parameters(), *self.vf.parameters()]
        self.params = params
        self.opt = torch.optim.Adam(params, lr=5e-5, **({"fused": True} if fused else {}))
        g = torch.Generator().manual_seed(0)
        self.obs = torch.randn(size, 4, generator=g).to(device)
        self.actions = torch.randint(0, 2, (size,), generator=g).to(device)
        self.old_logits = torch.randn(size, 2, generator=g).to(device)
        self.old_logp = torch.log_softmax(self.old_logits, -1).gather(-1, self.actions[:, None])[
            :, 0
        ]
        self.adv = torch.randn(size, generator=g).to(device)
        self.targets = torch.randn(size, generator=g).to(device)
        self.mask = torch.ones(size, dtype=torch.bool, device=device)
        self.kl_coeff = torch.tensor(0.2, device=device)

    def step(self) -> None:
        import torch

        mask = self.mask
        n = torch.sum(mask)
        logits = self.pi(self.obs)
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(-1, self.actions[:, None])[:, 0]
        ratio = torch.exp(logp - self.old_logp)
        old_logp_all = torch.log_softmax(self.old_logits, -1)
        kl = torch.sum(old_logp_all.exp() * (old_logp_all - logp_all), -1)
        mean_kl = torch.sum(kl[mask]) / n
        entropy = -torch.sum(logp_all.exp() * logp_all, -1)
        surrogate = torch.min(self.adv * ratio, self.adv * torch.clamp(ratio, 0.7, 1.3))
        values = self.vf(self.obs).squeeze(-1)
        vf_loss = torch.clamp(torch.pow(values - self.targets, 2.0), 0, 10.0)
        total = torch.sum((-surrogate + 1.0 * vf_loss - 0.0 * entropy)[mask]) / n
        total = total + self.kl_coeff * mean_kl
        self.opt.zero_grad(set_to_none=True)
        total.backward()
        self.opt.step()


class PlainDQN:
    """Double-Q DQN with a Huber loss and Adam in plain torch (RLlib's DQN loss, dueling
    off), on preassembled tensors."""

    def __init__(self, network: dict[str, Any], size: int) -> None:
        import torch

        hidden = list(network["fcnet_hiddens"])
        act = network["fcnet_activation"]
        self.q = mlp([4, *hidden], act, 2)
        self.target = mlp([4, *hidden], act, 2)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=5e-4)
        g = torch.Generator().manual_seed(0)
        self.obs = torch.randn(size, 4, generator=g)
        self.next_obs = torch.randn(size, 4, generator=g)
        self.actions = torch.randint(0, 2, (size,), generator=g)
        self.rewards = torch.ones(size)
        self.done = torch.zeros(size)

    def step(self) -> None:
        import torch

        q = self.q(self.obs).gather(-1, self.actions[:, None])[:, 0]
        with torch.no_grad():
            best = self.q(self.next_obs).argmax(-1)
            q_next = self.target(self.next_obs).gather(-1, best[:, None])[:, 0]
            target = self.rewards + 0.99 * (1.0 - self.done) * q_next
        loss = torch.nn.functional.huber_loss(q, target)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def synchronize() -> None:
    """Waits for queued GPU work, so that a timer stops after it (nothing without CUDA)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def plain_seconds(model: Any, steps: int) -> float:
    model.step()  # warm
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        model.step()
    synchronize()
    return (time.perf_counter() - start) / steps
