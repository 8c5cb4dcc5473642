"""PBT workbench: Ray Tune population search over RLlib and sim_ext, tracked in MLflow."""

__version__ = "0.1.0"
