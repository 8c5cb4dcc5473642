"""What MLflow users expect on every run: where it came from (MLflow's source and git tags).

The tags MLflow itself sets when a script logs a run (``mlflow.source.name``,
``mlflow.source.type``, ``mlflow.source.git.commit``, ``.branch``, ``.repoURL``), read
for the experiment file's git repository with MLflow's own helpers, and whether the
working tree had changes (``workbench.git.dirty``). Outside a git repository, or where
git is not installed, only the source tags are set: nothing here fails a run."""

from __future__ import annotations

import contextlib
from pathlib import Path

from mlflow.utils.git_utils import get_git_branch, get_git_commit, get_git_repo_url
from mlflow.utils.mlflow_tags import (
    MLFLOW_GIT_BRANCH,
    MLFLOW_GIT_COMMIT,
    MLFLOW_GIT_REPO_URL,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
)

from workbench.names import GIT_DIRTY_TAG


def source_tags(experiment_file: Path) -> dict[str, str]:
    """MLflow's source tags for a run of `experiment_file`, with git's where there is one."""
    path = experiment_file.expanduser().resolve()
    tags = {MLFLOW_SOURCE_NAME: str(path), MLFLOW_SOURCE_TYPE: "LOCAL"}
    folder = str(path.parent)
    commit = get_git_commit(folder)  # None outside a repository or without git
    if commit is None:
        return tags
    tags[MLFLOW_GIT_COMMIT] = commit
    branch = get_git_branch(folder)  # None on a detached HEAD
    if branch:
        tags[MLFLOW_GIT_BRANCH] = branch
    url = get_git_repo_url(folder)  # credentials stripped by MLflow
    if url:
        tags[MLFLOW_GIT_REPO_URL] = url
    dirty = _is_dirty(folder)
    if dirty is not None:
        tags[GIT_DIRTY_TAG] = str(dirty).lower()
    return tags


def _is_dirty(folder: str) -> bool | None:
    """Whether the repository's tracked files have changes (None when git cannot say)."""
    with contextlib.suppress(Exception):  # GitPython: no git, no repository, a broken one
        import git

        repo = git.Repo(folder, search_parent_directories=True)
        return bool(repo.is_dirty(untracked_files=False))
    return None
