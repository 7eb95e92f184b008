"""LightningModules: `TASKS` maps a config `task.kind` to a class that receives the built network as `net`."""

from .classification import ClassificationTask
from .objectives import OBJECTIVES, Objective
from .sequence import LanguageModelTask, Seq2SeqTask

TASKS = {"classification": ClassificationTask, "seq2seq": Seq2SeqTask, "lm": LanguageModelTask}

__all__ = ["OBJECTIVES", "TASKS", "ClassificationTask", "LanguageModelTask", "Objective", "Seq2SeqTask"]
