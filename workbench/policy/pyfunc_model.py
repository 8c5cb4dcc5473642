"""The MLflow pyfunc model of an exported policy, as MLflow's "models from code" file.

MLflow copies this file into the logged model and runs it when the model is loaded
(``mlflow.pyfunc.load_model``, ``mlflow models serve``), so it imports only what serving
needs: MLflow, numpy and torch. No Ray, no RLlib, no workbench: the policy is the
``torch.export`` program `workbench.policy.export` wrote (the model's ``policy``
artifact). ``predict`` takes a batch of observations (an array, a list of lists or a
DataFrame whose rows are observations) and returns the actions the env takes."""

from __future__ import annotations

from typing import Any

import mlflow
import numpy as np
import torch
from mlflow.pyfunc.model import PythonModel, PythonModelContext

ARTIFACT = "policy"  # the model's artifact: the torch.export program (policy.pt2)


class PolicyModel(PythonModel):
    """Observations in, the env's actions out, through the exported program."""

    def load_context(self, context: PythonModelContext) -> None:
        self._program = torch.export.load(context.artifacts[ARTIFACT]).module()

    def predict(
        self,
        context: PythonModelContext | None,
        model_input: np.ndarray,
        params: dict[str, Any] | None = None,
    ) -> np.ndarray:
        observations = np.asarray(model_input, dtype=np.float32)
        if observations.ndim == 1:  # one observation
            observations = observations[None, :]
        with torch.no_grad():
            actions: np.ndarray = self._program(torch.from_numpy(observations)).numpy()
        return actions


mlflow.models.set_model(PolicyModel())
