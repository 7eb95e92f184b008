"""Sequence tasks: translation (`Seq2SeqTask`) and language modelling (`LanguageModelTask`); the network is injected.

Both train with teacher forcing: cross entropy over the next tokens, label -100 ignored (padding). Translation
decodes on validation (greedy) and test (beam search) and scores the text with sacreBLEU-compatible BLEU and chrF
(torchmetrics, 0-100); the language model reports perplexity and logs a sample from a prompt. A few examples of
every evaluation go to the log and to `<run dir>/examples.txt` and `examples.json` (rank 0).

Notation: B batch, S source tokens, T target tokens, V vocabulary.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.text import CHRFScore, Perplexity, SacreBLEUScore

from ..attention.specs import build
from ..data.modules.batching import IGNORE_INDEX
from ..data.tokenizers.subword import unknown_note
from ..generation import beam_search, greedy, sample
from ..util.checks import WRITES, is_count, shown
from .optim import SCHEDULES, configure_optimizers, optimizer_spec
from .preflight import SetupError, check_trainable_backends

log = logging.getLogger("attnzoo")
Tensor = torch.Tensor
EXAMPLES_FILE = "examples"  # <run dir>/examples.txt and examples.json
EXAMPLES_KEY = "attnzoo_examples"  # the checkpoint's copy of them


def sequence_loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross entropy over the labelled positions: logits [B, L, V], labels [B, L] (-100 = none), in fp32."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing
    )


class _SequenceTask(L.LightningModule):
    """What both tasks share: optimizer and schedule from config, examples written to the run directory, and the
    val/test hooks (a task writes `_evaluate` for a batch and `_epoch_end` for a split)."""

    monitor: str
    monitor_mode: str
    metric_names: tuple[str, ...]

    def __init__(
        self,
        *,
        net: nn.Module,
        optimizer: Mapping[str, Any] | None,
        scheduler: Mapping[str, Any] | str | None,
        num_examples: int,
    ) -> None:
        super().__init__()
        if num_examples < 0:
            raise ValueError(f"task.num_examples ({num_examples}) must be >= 0")
        self.net = net
        self.optimizer_spec = optimizer_spec(optimizer, {"kind": "adamw", "lr": 1e-3})
        self.schedule = build(scheduler, SCHEDULES, "task.scheduler")
        self.num_examples = num_examples
        self.examples: dict[str, list[dict[str, str]]] = {}
        self._made_at: dict[str, tuple[int, int]] = {}  # split -> (epoch, step) of the weights its examples show
        self._loaded_at: tuple[int, int] | None = None  # (epoch, step) of the checkpoint last loaded (a test's)
        # where examples.txt / examples.json go: the run directory (`attnzoo.run.make_trainer` sets it); None writes
        # no file (`attnzoo.evaluate` puts the examples in its report instead of the run's files or the working dir)
        self.examples_dir: Path | None = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # the examples the run directory shows, so that a resume rewrites the files with them still in
        made_at = {split: list(at) for split, at in self._made_at.items()}
        checkpoint[EXAMPLES_KEY] = {"examples": self.examples, "made_at": made_at}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._loaded_at = (int(checkpoint.get("epoch", 0)), int(checkpoint.get("global_step", 0)))
        kept = checkpoint.get(EXAMPLES_KEY)
        # a resumed run's first load (fit's checkpoint): a resume of a finished run that only tests again wrote the
        # test examples alone over the val ones; a test's best checkpoint after it, and evaluate (no files), keep theirs
        if kept and not self.examples and self.examples_dir is not None:
            self.examples = {split: list(rows) for split, rows in kept["examples"].items()}
            self._made_at = {split: (int(at[0]), int(at[1])) for split, at in kept["made_at"].items()}

    @staticmethod
    def saved_state_error(checkpoint: dict[str, Any]) -> str | None:
        """What in a checkpoint's copy of the examples (`on_save_checkpoint`) is not what attnzoo fit writes, or None
        (checked before a resume: `attnzoo.run.resume_check`); a checkpoint without one is fine."""
        kept = checkpoint.get(EXAMPLES_KEY)
        if not kept:
            return None
        form = (
            f"where {WRITES} is a dict of 'examples' (split -> a list of dicts of text) and 'made_at' "
            "(split -> [epoch, step])"
        )
        if (
            not isinstance(kept, dict)
            or not isinstance(kept.get("examples"), dict)
            or not isinstance(kept.get("made_at"), dict)
        ):
            return f"its {EXAMPLES_KEY} is {shown(kept)}, {form}"
        for split, rows in kept["examples"].items():
            texts = isinstance(rows, list) and all(
                isinstance(row, dict) and all(isinstance(t, str) for t in (*row, *row.values())) for row in rows
            )
            if not isinstance(split, str) or not texts:
                return f"its {EXAMPLES_KEY}['examples'][{split!r}] is {shown(rows)}, {form}"
        for split, at in kept["made_at"].items():
            counts = isinstance(at, list | tuple) and len(at) == 2
            if not isinstance(split, str) or not counts or not all(is_count(n) for n in at):
                return f"its {EXAMPLES_KEY}['made_at'][{split!r}] is {shown(at)}, {form}"
        return None

    def on_fit_end(self) -> None:
        # a test of the final weights (no best checkpoint) shows those of the last validation, when it saw them;
        # not the checkpoint a resume started from, nor current_epoch, which counts the epoch just ended
        last = self._made_at.get("val")
        self._loaded_at = last if last is not None and last[1] == self.global_step else None

    def setup(self, stage: str) -> None:
        if stage == "fit":  # before the first step: a backend the device cannot train
            check_trainable_backends(self.net, self.trainer.strategy.root_device.type)

    def logged_metrics(self) -> list[str]:
        """The names this task logs during fit (what `run.monitor` may name)."""
        return ["train/loss", "val/loss", *(f"val/{m}" for m in self.metric_names)]

    def _logged_eval_loss(self, split: str, logits: Tensor, labels: Tensor) -> None:
        """The split's loss, logged as the mean over its labelled tokens (each batch weighted by its token count:
        by its sentence count, batches of short and of long sentences weighed alike, and the loss moved with
        data.eval_batch_size)."""
        tokens = int((labels != IGNORE_INDEX).sum())
        if tokens:  # a batch without a labelled token adds nothing (its mean would be nan)
            self.log(f"{split}/loss", sequence_loss(logits, labels), sync_dist=True, batch_size=tokens)

    def _logged_train_loss(self, loss: Tensor, batch_size: int) -> Tensor:
        """`loss`, logged as the step's train/loss: the mean over DDP processes (each sees its part of the batch)."""
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, sync_dist=True, batch_size=batch_size)
        return loss

    def _text(self) -> Any:
        """The DataModule that turns ids into text (`decode`, `encode_source` / `encode_prompt`)."""
        data = getattr(self.trainer, "datamodule", None)
        if data is None or not hasattr(data, "decode"):
            raise RuntimeError(f"{type(self).__name__} needs a DataModule with decode(ids) (translation or lm data)")
        return data

    def _write_examples(self, split: str, rows: list[dict[str, str]]) -> None:
        """Log `rows` and rewrite examples.txt / examples.json with every split's latest examples (rank 0)."""
        if not rows or self.trainer.sanity_checking:
            return
        self.examples[split] = rows
        testing = self.trainer.testing and self._loaded_at is not None  # the best checkpoint's weights, not the last
        self._made_at[split] = self._loaded_at if testing else (self.current_epoch, self.global_step)
        if not self.trainer.is_global_zero:
            return
        for row in rows:
            log.info("%s example: %s", split, " | ".join(f"{k}: {v}" for k, v in row.items()))
        run_dir = self.examples_dir
        if run_dir is None or not run_dir.is_dir():
            return
        lines = []
        for name, kept in self.examples.items():
            epoch, step = self._made_at.get(name, (self.current_epoch, self.global_step))
            lines.append(f"# {name} (epoch {epoch}, step {step})")
            for row in kept:
                lines.extend(f"{k}: {v}" for k, v in row.items())
                lines.append("")
        (run_dir / f"{EXAMPLES_FILE}.txt").write_text("\n".join(lines), encoding="utf-8")
        (run_dir / f"{EXAMPLES_FILE}.json").write_text(
            json.dumps(self.examples, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )

    def _evaluate(self, batch: dict[str, Any], split: str) -> None:
        """Loss and metric updates of one val or test batch."""
        raise NotImplementedError

    def _epoch_end(self, split: str) -> None:
        """Metrics of the split logged and reset; examples written."""
        raise NotImplementedError

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._epoch_end("val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._epoch_end("test")

    def configure_optimizers(self) -> Any:
        total = int(self.trainer.estimated_stepping_batches) if self.schedule is not None else 0
        return configure_optimizers(self.net, self.optimizer_spec, self.schedule, total)


class Seq2SeqTask(_SequenceTask):
    """Translation: label-smoothed cross entropy with teacher forcing; BLEU and chrF of decoded text.

    Logs `{split}/loss`, `val/bleu`, `val/chrf` (greedy decoding) and `test/bleu`, `test/chrf` (beam search).

    Args:
        net: an encoder-decoder (`attnzoo.models.Seq2Seq`): `net(src, tgt_in, src_padding_mask)` -> logits [B, T, V],
            and the generation protocol (`attnzoo.generation`).
        pad_id, bos_id, eos_id, max_len: from the data.
        label_smoothing: epsilon of the training loss (validation and test losses use none).
        optimizer: `{kind: adamw, lr: ..., ...}`, any timm optimizer and its options; None is AdamW,
            lr 1e-3.
        scheduler: `{kind: cosine | constant, warmup: ...}` stepped every optimizer step, or None.
        beam_size, length_penalty: test-time beam search (`attnzoo.generation.beam_search`).
        max_new_tokens: the longest translation generated (default: max_len).
        num_examples: source / reference / hypothesis lines logged and written per evaluation.
        bleu_tokenize: how BLEU splits text into words (sacreBLEU's `tokenize`), from the data
            (`data.bleu_tokenize`: "zh" or "char" for targets in a script without spaces between words).
    """

    def __init__(
        self,
        *,
        net: nn.Module,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        max_len: int,
        bleu_tokenize: str = "13a",
        label_smoothing: float = 0.1,
        optimizer: Mapping[str, Any] | None = None,
        scheduler: Mapping[str, Any] | str | None = "cosine",
        beam_size: int = 4,
        length_penalty: float = 1.0,
        max_new_tokens: int | None = None,
        num_examples: int = 5,
    ) -> None:
        super().__init__(net=net, optimizer=optimizer, scheduler=scheduler, num_examples=num_examples)
        self.check_config(dict(label_smoothing=label_smoothing, beam_size=beam_size))
        if max_new_tokens is not None and not 1 <= max_new_tokens <= max_len:
            raise ValueError(f"task.max_new_tokens ({max_new_tokens}) must be in [1, max_len ({max_len})]")
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.label_smoothing = label_smoothing
        self.beam_size, self.length_penalty = beam_size, length_penalty
        self.max_new_tokens = max_new_tokens or max_len
        self.monitor, self.monitor_mode, self.metric_names = "bleu", "max", ("bleu", "chrf")
        self.monitor_floor = 0.0  # BLEU before any 4-gram matches: early stopping waits for it to move
        self.bleu_tokenize = bleu_tokenize
        self.bleu = nn.ModuleDict({s: SacreBLEUScore(tokenize=bleu_tokenize) for s in ("val", "test")})
        self.chrf = nn.ModuleDict({s: CHRFScore() for s in ("val", "test")})
        self._kept: list[dict[str, str]] = []

    def training_error(self) -> str | None:
        """What makes the run's test pass fail after training, that a new or resumed run is refused for (a saved run
        is still loaded: `translate --beam N` chooses its own beam): a beam wider than the vocabulary."""
        from ..generation.beam import too_wide

        table = getattr(getattr(self.net, "embed", None), "embed", None)  # Seq2Seq's shared token table
        why = too_wide(self.beam_size, table.num_embeddings) if isinstance(table, nn.Embedding) else None
        return f"task.beam_size ({self.beam_size}) {why}" if why else None  # as translate refuses it

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """Raise ValueError for `task.label_smoothing`, `beam_size`, `length_penalty` or `num_examples` out of range
        (the test-time beam search would refuse after training); config validation calls it with the `task:`
        options."""
        from ..generation.beam import bad_length_penalty

        smoothing, beam = options.get("label_smoothing", 0.1), options.get("beam_size", 4)
        why = bad_length_penalty(options.get("length_penalty", 1.0))
        if why:
            raise ValueError(f"task.length_penalty {why}")
        if _number(smoothing) and not 0.0 <= smoothing < 1.0:
            raise ValueError(f"task.label_smoothing ({smoothing}) must be in [0, 1)")
        if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
            raise ValueError(f"task.beam_size ({beam!r}) must be an int >= 1")
        new = options.get("max_new_tokens")
        if _number(new) and new < 1:
            raise ValueError(f"task.max_new_tokens ({new}) must be >= 1 (and at most the data's max_len)")
        _check_examples(options)

    def forward(self, src: Tensor, tgt_in: Tensor, src_padding_mask: Tensor | None = None) -> Tensor:
        return self.net(src, tgt_in, src_padding_mask)

    @staticmethod
    def net_inputs(batch: dict[str, Any]) -> dict[str, Tensor]:
        """The keyword arguments of `net` in a batch (teacher forcing)."""
        return {"src": batch["src"], "tgt_in": batch["tgt_in"], "src_padding_mask": batch["src_padding_mask"]}

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        logits = self.net(**self.net_inputs(batch))  # [B, T, V]
        loss = sequence_loss(logits, batch["labels"], self.label_smoothing)
        return self._logged_train_loss(loss, batch["src"].shape[0])

    def translate(self, src: Tensor, src_padding_mask: Tensor | None, *, beam_size: int = 1) -> Tensor:
        """Token ids [B, T'] of the translations of src [B, S]: greedy (beam_size 1) or beam search."""
        if beam_size == 1:
            return greedy(
                self.net,
                src=src,
                src_padding_mask=src_padding_mask,
                bos_id=self.bos_id,
                eos_id=self.eos_id,
                pad_id=self.pad_id,
                max_new_tokens=self.max_new_tokens,
            )
        out = beam_search(
            self.net,
            src=src,
            src_padding_mask=src_padding_mask,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            max_new_tokens=self.max_new_tokens,
            beam_size=beam_size,
            length_penalty=self.length_penalty,
        )
        return out.tokens

    def _evaluate(self, batch: dict[str, Any], split: str) -> None:
        n = batch["src"].shape[0]
        logits = self.net(**self.net_inputs(batch))
        self._logged_eval_loss(split, logits, batch["labels"])
        beam = 1 if split == "val" else self.beam_size
        ids = self.translate(batch["src"], batch["src_padding_mask"], beam_size=beam)
        data = self._text()
        hyps = [data.decode(row) for row in ids]
        scored = getattr(data, "scored", str.strip)  # references as the tokenizer normalizes text (NFKC)
        refs = [[scored(t)] for t in batch["tgt_text"]]
        self.bleu[split].update(hyps, refs)
        self.chrf[split].update(hyps, refs)
        want = self.num_examples - len(self._kept)
        if want > 0:  # rows spread over the batch (batches are bucketed by length: short to long)
            k = min(want, n)
            rows = sorted({round(j * (n - 1) / max(1, k - 1)) for j in range(k)})
            for i in rows:
                self._kept.append({"src": batch["src_text"][i], "ref": batch["tgt_text"][i], "hyp": hyps[i]})

    def _epoch_end(self, split: str) -> None:
        # torchmetrics syncs the sufficient statistics across processes in compute(); 0-1 -> sacreBLEU's 0-100
        self.log(f"{split}/bleu", 100 * self.bleu[split].compute(), prog_bar=split == "val")
        self.log(f"{split}/chrf", 100 * self.chrf[split].compute())
        self.bleu[split].reset()
        self.chrf[split].reset()
        self._write_examples(split, self._kept)
        self._kept = []

    def on_validation_epoch_start(self) -> None:
        self._kept = []

    def on_test_epoch_start(self) -> None:
        self._kept = []


class LanguageModelTask(_SequenceTask):
    """Causal language modelling: next-token cross entropy; perplexity on validation and test; a sample logged.

    Logs `{split}/loss` and `{split}/ppl` (exp of the mean loss per token over the split); at every validation
    and test end, the continuation of `prompt` (sampled with `temperature` / `top_k` / `top_p` from a fixed seed,
    or greedy with temperature 0).

    Args:
        net: a decoder-only model (`attnzoo.models.CausalLM`): `net(tokens)` -> logits [B, L, V].
        pad_id, bos_id, eos_id, max_len: from the data.
        optimizer, scheduler: as `Seq2SeqTask`.
        prompt: the text a sample continues ("" starts a document).
        sample_tokens: tokens generated for the sample.
        temperature, top_k, top_p: how the sample is drawn (`attnzoo.generation.sample`); temperature 0 is greedy.
        num_examples: 0 turns the sample off.
    """

    def __init__(
        self,
        *,
        net: nn.Module,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        max_len: int,
        optimizer: Mapping[str, Any] | None = None,
        scheduler: Mapping[str, Any] | str | None = "cosine",
        prompt: str = "",
        sample_tokens: int = 48,
        temperature: float = 0.8,
        top_k: int | None = 40,
        top_p: float | None = None,
        num_examples: int = 1,
    ) -> None:
        super().__init__(net=net, optimizer=optimizer, scheduler=scheduler, num_examples=num_examples)
        self.check_config(dict(temperature=temperature, sample_tokens=sample_tokens, top_k=top_k, top_p=top_p))
        self.pad_id, self.bos_id, self.eos_id, self.max_len = pad_id, bos_id, eos_id, max_len
        self.prompt, self.sample_tokens = prompt, sample_tokens
        self._prompt_checked = False
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.monitor, self.monitor_mode, self.metric_names = "ppl", "min", ("ppl",)
        self.ppl = nn.ModuleDict({s: Perplexity(ignore_index=IGNORE_INDEX) for s in ("val", "test")})

    @classmethod
    def check_config(cls, options: Mapping[str, Any], named: Mapping[str, str] | None = None) -> None:
        """Raise ValueError for a sampling option (`task.temperature`, `sample_tokens`, `top_k`, `top_p`) the first
        sample would refuse after an epoch of training; config validation calls it with the `task:` options, and
        `generate` with its flags' (`named`: option -> the name an error gives it, e.g. "--top-k")."""
        name = {k: f"task.{k}" for k in ("temperature", "sample_tokens", "top_k", "top_p")} | dict(named or {})
        temperature, tokens = options.get("temperature", 0.8), options.get("sample_tokens", 48)
        top_k, top_p = options.get("top_k"), options.get("top_p")
        if _number(temperature) and not 0 <= temperature < math.inf:  # nan and inf too
            raise ValueError(f"{name['temperature']} ({temperature}) must be a finite number >= 0 (0: greedy)")
        if _number(tokens) and tokens < 1:
            raise ValueError(f"{name['sample_tokens']} ({tokens}) must be >= 1")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(
                f"{name['top_k']} ({top_k!r}) must be an int >= 1 (the most likely tokens kept when sampling), or "
                "null for no top-k cut"
            )
        if top_p is not None and not (_number(top_p) and 0 < top_p <= 1):
            raise ValueError(
                f"{name['top_p']} ({top_p!r}) must be in (0, 1] (the probability the kept tokens reach), or null for "
                "no nucleus cut"
            )
        _check_examples(options)

    def setup(self, stage: str) -> None:
        """Before training or scoring: the prompt of the samples fits the context (checked now, not after an epoch)."""
        super().setup(stage)
        data = getattr(self.trainer, "datamodule", None)
        if stage == "predict" or not self.num_examples or data is None or not hasattr(data, "encode_prompt"):
            return
        if self._prompt_checked:  # fit's test pass after training: said once
            return
        self._prompt_checked = True
        unknown: list[str] = []
        tokens = len(data.encode_prompt(self.prompt, unknown))  # bos first
        if unknown:
            log.warning("task.prompt (%s) holds %s, and the samples leave them out", _short(self.prompt),
                        unknown_note(unknown))  # fmt: skip
        if self.room(tokens) < 1:
            raise SetupError(
                f"task.prompt ({_short(self.prompt)}) is {tokens} tokens with the beginning of document, and the model "
                f"reads at most {self.max_len} (data.block_size): no room to sample; give a prompt of at most "
                f"{self.max_len - 1} tokens, or task.num_examples=0 for no samples"
            )
        if self.sample_tokens > self.room(tokens):
            log.warning(
                "task.sample_tokens (%d) is capped to %d: the model reads at most %d tokens (data.block_size), the "
                "prompt takes %d with the beginning of document", self.sample_tokens, self.room(tokens), self.max_len,
                tokens,
            )  # fmt: skip

    def forward(self, tokens: Tensor) -> Tensor:
        return self.net(tokens)

    @staticmethod
    def net_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The keyword arguments of `net` in a batch."""
        return {"tokens": batch["tokens"]}

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = sequence_loss(self.net(**self.net_inputs(batch)), batch["labels"])
        return self._logged_train_loss(loss, batch["tokens"].shape[0])

    def room(self, prompt_tokens: int) -> int:
        """How many tokens can continue a prompt of `prompt_tokens` (bos included): the context holds `max_len`
        tokens, and the last one read still predicts one more."""
        return self.max_len - prompt_tokens + 1

    def generate(self, prompt: Tensor, *, max_new_tokens: int, seed: int = 0) -> Tensor:
        """Ids [1, T] continuing prompt [1, P] (bos first), drawn as configured; stops at eos or the context end."""
        room = self.room(prompt.shape[1])
        if room < 1:
            raise ValueError(f"the prompt has {prompt.shape[1]} tokens; the model reads at most {self.max_len}")
        common = dict(prompt=prompt, eos_id=self.eos_id, pad_id=self.pad_id, max_new_tokens=min(max_new_tokens, room))
        if self.temperature == 0:
            return greedy(self.net, **common)
        generator = torch.Generator(device=prompt.device).manual_seed(seed)
        return sample(
            self.net, **common, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, generator=generator
        )

    def _evaluate(self, batch: dict[str, Tensor], split: str) -> None:
        logits = self.net(**self.net_inputs(batch))  # [B, L, V]
        self._logged_eval_loss(split, logits, batch["labels"])
        self.ppl[split].update(logits.float(), batch["labels"])

    def _epoch_end(self, split: str) -> None:
        self.log(f"{split}/ppl", self.ppl[split].compute(), prog_bar=split == "val")
        self.ppl[split].reset()
        if self.num_examples and not self.trainer.sanity_checking:
            data = self._text()
            prompt = torch.tensor([data.encode_prompt(self.prompt)], device=self.device)
            ids = self.generate(prompt, max_new_tokens=self.sample_tokens)
            text = data.decode(torch.cat([prompt[0], ids[0]]))  # the prompt and its continuation
            self._write_examples(split, [{"prompt": self.prompt, "sample": text}])


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _check_examples(options: Mapping[str, Any]) -> None:
    value = options.get("num_examples", 0)
    if _number(value) and value < 0:
        raise ValueError(f"task.num_examples ({value}) must be >= 0")
