"""LightningModules: `TASKS` maps a config `task.kind` to a class that receives the built network as `net`."""

from .classification import ClassificationTask
from .objectives import OBJECTIVES, Objective

TASKS = {"classification": ClassificationTask}

__all__ = ["OBJECTIVES", "TASKS", "ClassificationTask", "Objective"]
