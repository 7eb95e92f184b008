"""LightningModules: `TASKS` maps a config `task.kind` to a class that receives the built network as `net`."""

from .classification import ClassificationTask
from .masked import MaskedLMTask
from .objectives import OBJECTIVES, Objective
from .sequence import LanguageModelTask, Seq2SeqTask

TASKS = {"classification": ClassificationTask, "seq2seq": Seq2SeqTask, "lm": LanguageModelTask, "mlm": MaskedLMTask}

__all__ = ["OBJECTIVES", "TASKS", "ClassificationTask", "LanguageModelTask", "MaskedLMTask", "Objective", "Seq2SeqTask"]
