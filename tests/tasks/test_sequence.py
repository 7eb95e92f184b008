"""Sequence tasks: the training loss, BLEU/chrF of decoded text, perplexity, and the examples they write."""

import json
import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from attnzoo.models import CausalLM, Seq2Seq
from attnzoo.run.metrics import batch_samples
from attnzoo.tasks import TASKS, LanguageModelTask, Seq2SeqTask
from attnzoo.tasks.sequence import sequence_loss

PAD, BOS, EOS = 0, 1, 2
WORDS = ["<pad>", "<bos>", "<eos>", *"the cat sat on a mat dog ran to red house big small".split()]
SENTENCES = ["the cat sat on a mat", "a dog ran to the red house", "the big cat ran to a small house"]


class WordData(L.LightningDataModule):
    """Pairs whose target is the source: one val batch, decoded word by word."""

    def __init__(self) -> None:
        super().__init__()
        ids = [[WORDS.index(w) for w in s.split()] for s in SENTENCES]
        n = max(map(len, ids)) + 1
        src = torch.full((len(ids), n), PAD)
        tgt_in = torch.full((len(ids), n), PAD)
        labels = torch.full((len(ids), n), -100)
        for i, row in enumerate(ids):
            src[i, : len(row)] = torch.tensor(row)
            tgt_in[i, : len(row) + 1] = torch.tensor([BOS, *row])
            labels[i, : len(row) + 1] = torch.tensor([*row, EOS])
        self.batch = {
            "src": src,
            "src_padding_mask": src == PAD,
            "tgt_in": tgt_in,
            "tgt_padding_mask": tgt_in == PAD,
            "labels": labels,
            "src_text": SENTENCES,
            "tgt_text": SENTENCES,
        }

    def val_dataloader(self):
        return DataLoader([self.batch], batch_size=None)

    test_dataloader = val_dataloader

    def decode(self, ids):
        ids = ids.tolist()
        ids = ids[: ids.index(EOS)] if EOS in ids else ids
        return " ".join(WORDS[i] for i in ids if i > EOS)

    def encode_prompt(self, text, unknown=None):  # as the LM data's: the words it cannot encode go to `unknown`
        return [BOS, *(WORDS.index(w) for w in text.split())]


def _trainer(tmp_path):
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        precision="32-true",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )


def _seq2seq_task(**kw):
    net = Seq2Seq(vocab_size=len(WORDS), max_len=16, dim=16, encoder_depth=1, decoder_depth=1, num_heads=2)
    return Seq2SeqTask(net=net, pad_id=PAD, bos_id=BOS, eos_id=EOS, max_len=16, **kw)


def test_tasks_are_registered():
    assert TASKS["seq2seq"] is Seq2SeqTask and TASKS["lm"] is LanguageModelTask


def test_logged_metrics_name_what_run_monitor_may_follow():
    assert _seq2seq_task().logged_metrics() == ["train/loss", "val/loss", "val/bleu", "val/chrf"]
    net = CausalLM(vocab_size=len(WORDS), max_len=16, dim=16, depth=1, num_heads=2)
    task = LanguageModelTask(net=net, pad_id=PAD, bos_id=BOS, eos_id=EOS, max_len=16)
    assert f"val/{task.monitor}" in task.logged_metrics() and task.monitor_mode == "min"


def test_label_smoothed_loss_mixes_the_target_with_the_uniform_distribution_over_labelled_positions():
    logits = torch.randn(2, 3, 7)
    labels = torch.tensor([[1, 4, -100], [6, -100, -100]])
    eps = 0.2
    logp = logits.log_softmax(-1)
    rows = [(b, t) for b in range(2) for t in range(3) if labels[b, t] != -100]
    expected = sum((1 - eps) * -logp[b, t, labels[b, t]] - eps * logp[b, t].mean() for b, t in rows) / len(rows)
    torch.testing.assert_close(sequence_loss(logits, labels, eps), expected)
    torch.testing.assert_close(
        sequence_loss(logits, labels), F.cross_entropy(logits[labels != -100], labels[labels != -100])
    )


@pytest.mark.parametrize("split", ["val", "test"])
def test_bleu_and_chrf_of_perfect_translations_are_100_and_examples_are_written(split, tmp_path, monkeypatch):
    data, task = WordData(), _seq2seq_task(beam_size=2)
    used = []

    def perfect(src, mask, *, beam_size):  # the references themselves, as generated ids (eos, then padding)
        used.append(beam_size)
        return data.batch["labels"].clamp_min(PAD)

    monkeypatch.setattr(task, "translate", perfect)
    task.examples_dir = tmp_path  # as fit sets it: the run directory
    run = _trainer(tmp_path).validate if split == "val" else _trainer(tmp_path).test
    (metrics,) = run(task, datamodule=data, verbose=False)
    assert metrics[f"{split}/bleu"] == pytest.approx(100.0) and metrics[f"{split}/chrf"] == pytest.approx(100.0)
    assert used == [1 if split == "val" else 2]  # greedy on validation, beam search on test
    examples = json.loads((tmp_path / "examples.json").read_text())[split]
    assert [e["hyp"] for e in examples] == SENTENCES and [e["ref"] for e in examples] == SENTENCES
    assert SENTENCES[0] in (tmp_path / "examples.txt").read_text()


def test_bleu_of_wrong_translations_is_below_100(tmp_path, monkeypatch):
    data, task = WordData(), _seq2seq_task()
    wrong = data.batch["labels"].clamp_min(PAD).clone()
    wrong[:, 1] = WORDS.index("dog")  # one word replaced in every sentence
    monkeypatch.setattr(task, "translate", lambda src, mask, *, beam_size: wrong)
    (metrics,) = _trainer(tmp_path).validate(task, datamodule=data, verbose=False)
    assert 0 < metrics["val/bleu"] < 80 and 0 < metrics["val/chrf"] < 100


def test_translate_greedy_and_beam_return_generated_ids():
    task = _seq2seq_task(beam_size=3).eval()
    batch = WordData().batch
    for beam in (1, 3):
        ids = task.translate(batch["src"], batch["src_padding_mask"], beam_size=beam)
        assert ids.shape[0] == 3 and ids.dtype == torch.long and ids.shape[1] <= 16


def _lm(data: WordData, prompt: str, sample_tokens: int) -> tuple[CausalLM, LanguageModelTask, dict]:
    """A small LM, its task, and the word data's targets as one LM batch."""
    net = CausalLM(vocab_size=len(WORDS), max_len=16, dim=16, depth=1, num_heads=2)
    task = LanguageModelTask(net=net, pad_id=PAD, bos_id=BOS, eos_id=EOS, max_len=16, prompt=prompt,
                             sample_tokens=sample_tokens)  # fmt: skip
    names = {"tokens": "tgt_in", "labels": "labels", "padding_mask": "tgt_padding_mask"}
    return net, task, {key: data.batch[name] for key, name in names.items()}


def test_perplexity_is_exp_of_the_mean_token_loss_and_a_sample_is_written(tmp_path):
    data = WordData()
    net, task, batch = _lm(data, "the cat", 4)
    data.val_dataloader = lambda: DataLoader([batch], batch_size=None)
    task.examples_dir = tmp_path
    (metrics,) = _trainer(tmp_path).validate(task, datamodule=data, verbose=False)
    with torch.no_grad():
        expected = math.exp(float(sequence_loss(net.eval()(batch["tokens"]), batch["labels"])))
    assert metrics["val/ppl"] == pytest.approx(expected, rel=1e-4)
    (sample,) = json.loads((tmp_path / "examples.json").read_text())["val"]
    assert sample["prompt"] == "the cat" and sample["sample"].startswith("the cat")


def test_the_eval_loss_is_the_mean_over_tokens_whatever_the_batches(tmp_path):
    # each batch's mean was weighted by its sentence count: batches of short and of long sentences weighed alike,
    # and a translation run's test/loss moved from 0.58 to 0.69 with data.eval_batch_size (exp(loss) != ppl)
    data = WordData()
    net, task, whole = _lm(data, "the", 1)
    short = data.batch["labels"][:1].clone()
    short[0, 3:] = -100  # the first sentence cut to 3 labelled tokens: a batch of few tokens beside one of many
    parts = [{**{k: v[:1] for k, v in whole.items()}, "labels": short}, {k: v[1:] for k, v in whole.items()}]
    data.val_dataloader = lambda: DataLoader(parts, batch_size=None)
    task.examples_dir = tmp_path
    (metrics,) = _trainer(tmp_path).validate(task, datamodule=data, verbose=False)
    with torch.no_grad():
        logits = net.eval()(whole["tokens"])
    labels = torch.cat([short, whole["labels"][1:]])
    expected = float(sequence_loss(logits, labels))  # one mean over every labelled token of the split
    assert metrics["val/loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["val/ppl"] == pytest.approx(math.exp(expected), rel=1e-4)


def test_lm_generation_is_greedy_at_temperature_zero_and_stops_at_the_context_length():
    net = CausalLM(vocab_size=len(WORDS), max_len=8, dim=16, depth=1, num_heads=2).eval()
    task = LanguageModelTask(net=net, pad_id=PAD, bos_id=BOS, eos_id=EOS, max_len=8, temperature=0.0)
    prompt = torch.tensor([[BOS, 3, 4]])
    out = task.generate(prompt, max_new_tokens=50)
    assert out.shape[1] <= 8 - 3 + 1  # the context filled, and the token its last position predicts
    with torch.no_grad():
        first = net(prompt)[0, -1].argmax()
    assert out[0, 0] == first
    # a prompt as long as the context still predicts one token, from its last position (it was refused)
    full = torch.tensor([[BOS, *([3, 4] * 3), 3]])  # [1, 8]
    with torch.no_grad():
        assert task.generate(full, max_new_tokens=5).tolist() == [[int(net(full)[0, -1].argmax())]]
    with pytest.raises(ValueError, match="the model reads at most 8"):
        task.generate(torch.ones(1, 9, dtype=torch.long), max_new_tokens=1)


def test_batch_samples_counts_classification_and_sequence_batches():
    assert batch_samples({"image": torch.zeros(5, 3), "label": torch.zeros(4)}) == 4
    assert batch_samples({"src_text": ["a", "b"], "src": torch.zeros(2, 7), "labels": torch.zeros(2, 7)}) == 2


def test_the_test_examples_are_headed_with_the_step_of_the_checkpoint_they_come_from(tmp_path, monkeypatch):
    # "# test (epoch 40, step 160)" headed hypotheses of best.ckpt from step 152: the trainer's last step
    data, task = WordData(), _seq2seq_task(beam_size=2)
    monkeypatch.setattr(task, "translate", lambda src, mask, *, beam_size: data.batch["labels"].clamp_min(PAD))
    task.examples_dir = tmp_path
    _trainer(tmp_path).validate(task, datamodule=data, verbose=False)
    task.on_load_checkpoint({"epoch": 3, "global_step": 7})  # what Lightning calls when test loads best.ckpt
    _trainer(tmp_path).test(task, datamodule=data, verbose=False)
    text = (tmp_path / "examples.txt").read_text()
    assert "# test (epoch 3, step 7)" in text and "# val (epoch 0, step 0)" in text
