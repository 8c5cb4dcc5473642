"""Ray's internals in one place: Tune's subclasses and patches, and every read of a
private part of Ray that the other wings need (``ray_private``).

The workbench pins one Ray release (pyproject.toml); these modules are what must be
proven again on the next. ``tools/check_ray_internals.py`` (``make lint``) fails when
another module imports a private Ray module or reads a private attribute; the trial
wing's RLlib replacements (fast runner, lean learners) are the only other modules
allowed to. ``ray_surface`` lists the private Ray symbols relied on, checked against the
installed Ray by tests/unit/test_ray_surface.py. docs/ray-fixes.md says what each fixes.
"""
