"""PBT workbench: Ray Tune population search over RLlib and sim_ext, tracked in MLflow."""

from workbench import moved

__version__ = "0.1.0"

# Results folders from before the package's wings name classes by their old modules.
moved.install()
