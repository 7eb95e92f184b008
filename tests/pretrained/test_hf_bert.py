"""Hugging Face BERT and RoBERTa converted to attnzoo's text classifier: the same hidden states (1e-5, fp32) as
`transformers` on small random models saved to disk, with padding; attention overrides apply; a fit starts from one."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from attnzoo.pretrained import convert, load
from attnzoo.run.rundir import load_run
from tests.helpers import QUICK, ROOT
from tests.helpers.hf import SIZES, save_encoder


def _inputs(family: str, path, *, processor: bool = True):
    """(HF input ids, attention mask; attnzoo tokens, padding mask) of three texts of 12, 7 and 3 words, tokenized
    and padded as a run does (the folder's tokenizer.json through attnzoo's data path). Without `processor` the
    tokenizer adds no [CLS]: HF's ids get it in front (attnzoo prepends its cls token, the [CLS] embedding)."""
    from attnzoo.data.modules.batching import PadCollate
    from attnzoo.data.tokenizers.factory import make_tokenizer

    tok = make_tokenizer(str(path / "tokenizer.json"))
    torch.manual_seed(1)
    texts = [" ".join(f"w{int(i)}" for i in torch.randint(0, 40, (n,))) for n in (12, 7, 3)]
    batch = PadCollate(pad_id=tok.pad_id)([(torch.tensor(tok.encode(t)), torch.tensor(0)) for t in texts])
    tokens, padding = batch["tokens"], batch["padding_mask"]
    ids, mask = tokens, (~padding).long()
    if not processor:
        first = {"bert": 2, "roberta": 0}[family]  # [CLS] / <s> in tests.helpers.hf.SPECIALS
        ids = torch.cat([torch.full((3, 1), first), tokens], dim=1)
        mask = torch.cat([torch.ones(3, 1, dtype=torch.long), mask], dim=1)
    assert padding.any() and (processor == bool((tokens[:, 0] == ids[0, 0]).all()))
    return ids, mask, tokens, padding


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("processor", [True, False], ids=["cls-from-tokenizer", "cls-prepended"])
@pytest.mark.parametrize("attention", [{}, {"backend": "sdpa"}, {"pattern": {"kind": "sliding_window", "window": 64}}])
def test_hidden_states_equal_transformers(family, processor, attention, tmp_path):
    hf = save_encoder(family, tmp_path, processor=processor)
    ids, mask, tokens, padding = _inputs(family, tmp_path, processor=processor)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask)
    net = load(tmp_path, num_classes=3, attention={"backend": "eager", **attention}).eval()
    assert net.pooling == ("first" if processor else "cls")
    with torch.no_grad():
        got = net.features(tokens, padding)  # [B, L, C]; [B, 1 + L, C] with the cls token prepended
        pooled = torch.tanh(net.pooler(got[:, 0]))
    keep = mask.bool()  # rows of real tokens (padded rows see the same keys, but only these are BERT's output)
    torch.testing.assert_close(got[keep], want.last_hidden_state[keep], rtol=0, atol=1e-5)
    torch.testing.assert_close(pooled, want.pooler_output, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "roberta"])  # RoBERTa's head (dense, tanh, out_proj) started new
def test_a_sequence_classifier_keeps_its_head_for_the_same_labels(tmp_path, family):
    hf = save_encoder(family, tmp_path, classes=3)
    ids, mask, tokens, padding = _inputs(family, tmp_path)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask).logits
        got = load(tmp_path, num_classes=3).eval()(tokens, padding)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    new = load(tmp_path, num_classes=5)  # another label set: the head starts new, the rest is BERT's
    assert new.head.weight.shape == (5, SIZES["hidden_size"])


@pytest.mark.parametrize("key", ["is_decoder", "add_cross_attention"])
def test_a_bert_decoder_is_refused_naming_the_key(tmp_path, key):
    save_encoder("bert", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, key: True}))  # BertModel masks causally then
    with pytest.raises(ValueError, match=f"config.json: {key}: true is not supported \\(a bert decoder"):
        load(tmp_path, num_classes=2)


def test_load_takes_the_label_count_from_a_classifiers_head_and_asks_for_it_without_one(tmp_path):
    save_encoder("bert", tmp_path / "classifier", classes=3)
    assert load(tmp_path / "classifier").head.weight.shape == (3, SIZES["hidden_size"])
    save_encoder("bert", tmp_path / "encoder")
    with pytest.raises(ValueError, match=r"does not give \['num_classes'\] \(it has no head of its own\); pass it: "
                                         r"load\(path, num_classes=\.\.\.\)"):  # fmt: skip
        load(tmp_path / "encoder")
    assert load(tmp_path / "encoder", num_classes=2).head.weight.shape == (2, SIZES["hidden_size"])


def test_python_load_checks_its_overrides_before_torch_does(tmp_path):
    """num_classes="2" / -1 came out as torch's "empty(): argument 'size'" / "negative dimension"; 0 built a head
    of no outputs; attention="causal" as "dictionary update sequence element #0 has length 1"; attention=None
    replaced the checkpoint's attention options, so its qkv biases "had no place"."""
    save_encoder("bert", tmp_path, classes=3)
    for bad in ("2", -1, 0, 2.0, True):
        with pytest.raises(ValueError, match=rf"model.num_classes \({bad!r}\) must be an int >= 1"):
            load(tmp_path, num_classes=bad)
    with pytest.raises(ValueError, match=r"model.attention: expected a mapping .*got str 'causal'; give a mapping: "
                                         r"\{'pattern': 'causal'\}"):  # fmt: skip
        load(tmp_path, attention="causal")
    kept = load(tmp_path, attention=None)
    assert kept.encoder.blocks[0].attn.qkv.bias is not None
    torch.testing.assert_close(kept.state_dict(), load(tmp_path).state_dict(), atol=0, rtol=0)


@pytest.mark.parametrize("task", ["BertForTokenClassification", "BertForMultipleChoice"])
def test_a_classifier_that_is_not_a_sequence_classifier_leaves_its_head(tmp_path, task):
    # their classifier.weight was read as a head over the sentence: a token tagger's 5 tags became 5 "classes", and
    # a multiple-choice scorer a 1-class head, with "none new" in the log
    import transformers

    save_encoder("bert", tmp_path)
    config = transformers.BertConfig.from_pretrained(tmp_path)
    config.num_labels = 5
    getattr(transformers, task)(config).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [task]
    with pytest.raises(ValueError, match=r"does not give \['num_classes'\] \(it has no head of its own\)"):
        load(tmp_path)
    assert load(tmp_path, num_classes=3).head.weight.shape == (3, SIZES["hidden_size"])


def test_weights_deeper_than_config_json_says_are_refused(tmp_path):
    save_encoder("bert", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(
        ValueError,
        match=r"the weights hold layers that config\.json's num_hidden_layers \(1\) does "
        r"not \(first: 'encoder\.layer\.1\.",
    ):
        load(tmp_path, num_classes=2)


def test_a_tensor_of_another_shape_than_config_json_implies_is_refused_naming_the_file_and_tensor(tmp_path):
    # a key / value cut to half its rows loaded as grouped-query heads ("k/v heads repeated 2 -> 4 ... the same
    # function"), and a position table longer than config.json says was cut without a word
    from safetensors.torch import load_file, save_file

    save_encoder("bert", tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    original = dict(weights)
    for name in ("key", "value"):
        for part in ("weight", "bias"):
            key = f"encoder.layer.1.attention.self.{name}.{part}"
            weights[key] = weights[key][:16].contiguous()
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'encoder\.layer\.1\.attention\.self\.key\."
                       r"weight' has shape \[16, 32\], but config\.json implies \[32, 32\]"):  # fmt: skip
        load(tmp_path, num_classes=2)
    save_file(original, tmp_path / "model.safetensors")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 12}))
    with pytest.raises(ValueError, match=r"tensor 'embeddings\.position_embeddings\.weight' has shape \[24, 32\], but "
                       r"config\.json implies \[12, 32\]"):  # fmt: skip
        load(tmp_path, num_classes=2)


def test_python_load_with_fewer_blocks_says_which_are_dropped(tmp_path, caplog):
    import logging

    save_encoder("bert", tmp_path)
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        net = load(tmp_path, num_classes=2, depth=1)
    assert len(net.encoder.blocks) == 1
    assert "depth=1, and bert (HF)" in caplog.text and "has 2 blocks: the first 1 are loaded" in caplog.text


@pytest.mark.parametrize("index", ["model.safetensors", "pytorch_model.bin"])
def test_a_sharded_checkpoint_loads_every_shard_its_index_names(tmp_path, index):
    """Big models come as shards and an index (`save_pretrained(max_shard_size=...)`): the same tensors as one file."""
    hf = save_encoder("bert", tmp_path / "one", classes=3)
    sharded = tmp_path / "sharded"
    hf.save_pretrained(sharded, max_shard_size="20KB")  # safetensors shards
    shutil.copy(tmp_path / "one" / "tokenizer.json", sharded)
    if index == "pytorch_model.bin":  # the older format: the same shards as torch.save files
        from safetensors.torch import load_file

        record = json.loads((sharded / "model.safetensors.index.json").read_text())
        for shard in sorted(set(record["weight_map"].values())):
            torch.save(load_file(sharded / shard), sharded / shard.replace(".safetensors", ".bin"))
            (sharded / shard).unlink()
        record["weight_map"] = {k: v.replace(".safetensors", ".bin") for k, v in record["weight_map"].items()}
        (sharded / "pytorch_model.bin.index.json").write_text(json.dumps(record))
        (sharded / "model.safetensors.index.json").unlink()
    assert (sharded / f"{index}.index.json").is_file() and len(list(sharded.glob("*-of-*"))) > 2
    one, many = convert(tmp_path / "one").state_dict, convert(sharded).state_dict
    assert one.keys() == many.keys()
    for key, value in one.items():
        torch.testing.assert_close(many[key], value, rtol=0, atol=0)
    index_file = sharded / f"{index}.index.json"
    record = json.loads(index_file.read_text())
    record["weight_map"]["pooler.dense.weight"] = "../elsewhere.safetensors"
    index_file.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"names the shard '\.\./elsewhere\.safetensors'; shards are files beside"):
        convert(sharded)


def test_a_long_text_cut_to_max_len_keeps_its_final_sep(tmp_path):
    """A text longer than data.max_len is cut as BERT's own truncation cuts it: [CLS] w w ... [SEP]."""
    from attnzoo.data.tokenizers.factory import make_tokenizer
    from attnzoo.data.tokenizers.tokenize import truncate

    save_encoder("bert", tmp_path)
    tok = make_tokenizer(str(tmp_path / "tokenizer.json"))
    ids = tok.encode(" ".join(f"w{i}" for i in range(20)))
    cls_id, sep_id = tok.tok.token_to_id("[CLS]"), tok.tok.token_to_id("[SEP]")
    assert tok.tail == 1 and ids[0] == cls_id and ids[-1] == sep_id
    assert truncate(tok, ids, 8) == [*ids[:7], sep_id]
    assert truncate(tok, ids, len(ids)) == ids


def test_a_tokenizer_file_that_appends_nothing_and_knows_no_unknown_token_reads(tmp_path):
    """A closed vocabulary (DNA bases, no [UNK]) and no post-processor: nothing to keep at the end of a cut text."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from attnzoo.data.tokenizers.factory import make_tokenizer
    from attnzoo.data.tokenizers.tokenize import truncate

    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "A": 1, "C": 2, "G": 3, "T": 4}))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "dna.json"))
    dna = make_tokenizer(str(tmp_path / "dna.json"))
    assert dna.tail == 0 and truncate(dna, dna.encode("A C G T G"), 3) == [1, 2, 3]


def test_a_sequence_classifiers_head_follows_the_names_of_its_labels(tmp_path, caplog):
    """config.json's id2label against the data's labels (neg, neu, pos): the same names in another order reorder
    the head's rows, other names start a new head, placeholders (LABEL_0, ...) keep the head by class id."""
    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_encoder("bert", tmp_path / "bert", classes=3)
    rows = "".join(f"w{i} w{i + 1},{label}\n" for i, label in enumerate(["pos", "neg", "neu"] * 4))
    for split in ("train", "val", "test"):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + rows)
    splits = [f"data.{split}={tmp_path / f'{split}.csv'}" for split in ("train", "val", "test")]
    config = json.loads((tmp_path / "bert" / "config.json").read_text())

    def head(*names: str) -> torch.Tensor:
        config["id2label"] = dict(enumerate(names))
        (tmp_path / "bert" / "config.json").write_text(json.dumps(config))
        recipe = ROOT / "recipes" / "text_cls.yaml"
        _, task, _ = build(load_config([recipe], [*splits, f"model.init_from={tmp_path / 'bert'}"]))
        assert task.net.head.weight.shape == (3, SIZES["hidden_size"])
        return torch.cat([task.net.head.weight, task.net.head.bias[:, None]], dim=1).detach()

    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "bert" / "model.safetensors")
    weights["classifier.bias"] = torch.randn(3)  # HF starts it at zeros: a reorder would not show
    save_file(weights, tmp_path / "bert" / "model.safetensors", metadata={"format": "pt"})
    theirs = torch.cat([weights["classifier.weight"], weights["classifier.bias"][:, None]], dim=1)
    with caplog.at_level("INFO", logger="attnzoo"):
        assert torch.equal(head("pos", "neg", "neu"), theirs[[1, 2, 0]])  # the data's order: neg, neu, pos
        assert "the same 3 labels in another order" in caplog.text
        assert torch.equal(head("LABEL_0", "LABEL_1", "LABEL_2"), theirs)
        assert not torch.equal(head("bad", "fine", "good"), theirs)
        assert "the label set differs from the checkpoint's (3 classes there, 3 here)" in caplog.text


def test_the_conversion_describes_the_model_and_brings_the_tokenizer(tmp_path):
    hf = save_encoder("bert", tmp_path)
    converted = convert(tmp_path)
    assert converted.model_kind == "text" and converted.tokenizer == tmp_path / "tokenizer.json"
    assert converted.options["drop_rate"] == hf.config.hidden_dropout_prob == 0.1  # BERT's, not the recipe's 0.4
    assert converted.options["norm"] == "post" and converted.options["norm_eps"] == 1e-12
    assert converted.options["max_len"] == 24 and converted.options["token_types"] == 2  # [CLS] from the tokenizer
    assert converted.source == f"bert (HF) {tmp_path}"


def test_a_directory_without_tokenizer_json_says_how_to_write_it_or_takes_the_one_named(tmp_path):
    # data.tokenizer=<its tokenizer.json> was refused all the same ("has no tokenizer.json"), as README says it is not
    from attnzoo.config import ConfigError
    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_encoder("bert", tmp_path / "bert")
    (tmp_path / "bert" / "tokenizer.json").rename(tmp_path / "tok.json")
    with pytest.raises(ValueError, match="has no tokenizer.json, vocab.txt or vocab.json.*or name it: data.tokenizer="):
        convert(tmp_path / "bert")
    assert convert(tmp_path / "bert", tokenizer=tmp_path / "tok.json").tokenizer == tmp_path / "tok.json"
    with pytest.raises(
        ValueError,
        match=r"has no tokenizer.json, vocab.txt or vocab.json \+ merges.txt, and the tokenizer named, "
        r"'.*missing.json', is no file",
    ):
        convert(tmp_path / "bert", tokenizer=tmp_path / "missing.json")
    assert load(tmp_path / "bert", tokenizer=tmp_path / "tok.json", num_classes=3).head.out_features == 3
    texts = "".join(f"word{i % 5} film,{'ab'[i % 2]}\n" for i in range(24))
    (tmp_path / "train.csv").write_text("text,label\n" + texts)
    files = [f"data.train={tmp_path / 'train.csv'}", "run.baseline=false"]
    given = [f"model.init_from={tmp_path / 'bert'}", f"data.tokenizer={tmp_path / 'tok.json'}"]
    _, task, cfg = build(load_config([ROOT / "recipes" / "text_cls.yaml"], [*QUICK, *files, *given]))
    assert cfg.section("data")["tokenizer"] == str(tmp_path / "tok.json") and task.net.started_from["loaded"]
    # a vocab.txt named that the weights cannot start from: the error named model.init_from, which was fine
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nword\n")
    vocab = [f"model.init_from={tmp_path / 'bert'}", f"data.tokenizer={tmp_path / 'vocab.txt'}"]
    with pytest.raises(ConfigError, match=r"^data.tokenizer: .*vocab.txt' has no cls_token '\[CLS\]'.* \(set in the "
                       r"command line .*name the tokenizer.json, vocab.txt or vocab.json"):  # fmt: skip
        build(load_config([ROOT / "recipes" / "text_cls.yaml"], [*QUICK, *files, *vocab]))


def loaded_test(loaded) -> dict:
    """The test metrics of a loaded run's best checkpoint."""
    import lightning as L

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    return trainer.test(loaded.task, datamodule=loaded.data, verbose=False)[0]


@pytest.mark.parametrize("tokenizer", ["tokenizer.json", "vocab.txt"])
def test_fit_starts_from_a_saved_bert_and_the_summary_names_it(tmp_path, tokenizer):
    save_encoder("bert", tmp_path / "bert")
    if tokenizer == "vocab.txt":  # a folder an older transformers saved: the vocabulary alone, read as BERT's WordPiece
        from tests.helpers.hf import tokenizer as word_level

        vocab = word_level("bert").get_vocab()
        (tmp_path / "bert" / "vocab.txt").write_text("".join(f"{t}\n" for t in sorted(vocab, key=vocab.get)))
        (tmp_path / "bert" / "tokenizer.json").unlink()
    # the recipe's smoke size, but for model.depth, which comes from the checkpoint
    smoke = ["data.batch_size=16", "data.listops.num_train=64", "data.listops.num_val=16", "data.listops.num_test=16"]
    command = [sys.executable, "-m", "attnzoo.fit", "--config", str(ROOT / "recipes" / "text_cls.yaml"),
               f"model.init_from={tmp_path / 'bert'}", "trainer.max_epochs=1", *smoke, *QUICK,
               "data.listops.max_len=20", "run.baseline=false", f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (summary_file,) = (tmp_path / "runs").rglob("summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["finished"] and summary["init_from"]["source"] == f"bert (HF) {tmp_path / 'bert'}"
    assert summary["init_from"]["new"] == ["head.weight", "head.bias"]
    config = (summary_file.parent / "config.yaml").read_text()
    assert f"tokenizer: {tmp_path / 'bert' / tokenizer}" in config and "norm: post" in config
    # the run keeps the tokenizer it came with: it loads (and tests the same) after the folder it started from moved
    shutil.rmtree(tmp_path / "bert")
    loaded = load_run(summary_file.parent)
    assert loaded.tokenizer.name == str(summary_file.parent / "tokenizer.json")
    result = loaded_test(loaded)
    assert result["test/acc"] == pytest.approx(summary["test"]["test/acc"], abs=1e-6)
    assert "model.init_from: bert (HF)" in done.stderr
    assert "tensors loaded; 2 new (head.weight, head.bias)" in done.stderr


def test_a_run_on_shorter_texts_reads_the_first_rows_of_the_position_table(tmp_path, caplog):
    import logging

    from attnzoo.config import load as load_config
    from attnzoo.run import build

    hf = save_encoder("bert", tmp_path / "bert")
    recipe = ROOT / "recipes" / "text_cls.yaml"
    small = ["data.listops.num_train=32", "data.listops.num_val=8", "data.listops.num_test=8", "run.baseline=false"]
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        start = f"model.init_from={tmp_path / 'bert'}"
        data, task, cfg = build(load_config([recipe], [*small, start, "data.max_len=10"]))
    cut = [ids for ids in data.datasets["train"].ids if len(ids) == 10]
    assert cut and all(ids[-1] == data.tokenizer.tok.token_to_id("[SEP]") for ids in cut)  # as BERT cuts its texts
    table = hf.embeddings.position_embeddings.weight
    torch.testing.assert_close(task.net.pos_embed.table[0], table[:10], rtol=0, atol=0)
    assert cfg.section("model")["max_len"] == 10 and "kept the first 10 of 24 loaded positions" in caplog.text
    # what the cut costs is said, and how to keep them all (a GPT-2 under the LM recipe's 128: generate stops there)
    assert "data.max_len: 10 (set in the command line ('data.max_len=10')) of the 24 positions model.init_from's " \
           "weights hold: the model keeps the first 10, and reads (and generates, translates) at most 10 tokens for " \
           "good; data.max_len=24 keeps them all" in caplog.text  # fmt: skip
    _, task, cfg = build(load_config([recipe], [*small, f"model.init_from={tmp_path / 'bert'}"]))  # recipe: 512
    assert cfg.section("data")["max_len"] == 24 and task.net.pos_embed.table.shape[1] == 24
    # without the table (ALiBi instead), nothing holds the texts to 24 tokens
    alibi = ["model.position=none", "model.attention.bias=alibi"]
    _, task, cfg = build(load_config([recipe], [*small, f"model.init_from={tmp_path / 'bert'}", *alibi]))
    assert cfg.section("data")["max_len"] == cfg.section("model")["max_len"] == 512
    from attnzoo.run.start import _options  # an attnzoo run's config may write its position as a mapping

    preset = {}
    _options(load_config([recipe], ["model.position=none"]), {"max_len": 24, "position": {"kind": "learned"}}, preset)
    assert "data.max_len" not in preset


def test_a_bert_start_fine_tunes_with_berts_dropout_unless_a_config_sets_one(tmp_path, caplog):
    import logging

    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_encoder("bert", tmp_path / "bert")
    recipe = ROOT / "recipes" / "text_cls.yaml"
    small = ["data.listops.num_train=32", "data.listops.num_val=8", "data.listops.num_test=8", "run.baseline=false"]
    small.append(f"model.init_from={tmp_path / 'bert'}")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, cfg = build(load_config([recipe], small))
    assert cfg.section("model")["drop_rate"] == 0.1 and task.net.drop.p == 0.1  # hidden_dropout_prob, not auto's
    assert "model.drop_rate: 'auto' (set in" in caplog.text
    _, task, cfg = build(load_config([recipe], [*small, "model.drop_rate=0.3"]))
    assert cfg.section("model")["drop_rate"] == 0.3 and task.net.drop.p == 0.3
    (tmp_path / "mine.yaml").write_text("model:\n  drop_rate: 0.25\n")  # a config file of the user's: it stays
    _, task, cfg = build(load_config([recipe, tmp_path / "mine.yaml"], small))
    assert cfg.section("model")["drop_rate"] == 0.25 and task.net.drop.p == 0.25


def test_a_bert_folder_for_another_model_kind_is_refused(tmp_path):
    from attnzoo.config import ConfigError
    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_encoder("bert", tmp_path / "bert")
    with pytest.raises(ConfigError, match=r"is a 'text' model, and this run builds model.kind 'vit'"):
        build(load_config([ROOT / "recipes" / "vit.yaml"], [f"model.init_from={tmp_path / 'bert'}"]))


def test_another_head_count_than_the_checkpoints_is_refused(tmp_path):
    """The 4-head BERT's tensors fit 2 heads of the same width too, and would compute another function."""
    from attnzoo.config import ConfigError
    from attnzoo.config import load as load_config
    from attnzoo.run.start import read_start

    save_encoder("bert", tmp_path / "bert")
    recipe, start = ROOT / "recipes" / "text_cls.yaml", f"model.init_from={tmp_path / 'bert'}"
    with pytest.raises(ConfigError, match=r"model.num_heads: 2 \(set in the command line.*weights have 4 heads"):
        read_start(load_config([recipe], [start, "model.num_heads=2"]))
    assert "model.num_heads" not in read_start(load_config([recipe], [start, "model.num_heads=4"])).options


# an override the 4-head BERT of width 32 (2 blocks, mlp_ratio 2) cannot take -> what its error says, before the network
# is built: they failed naming a tensor ("[60, 32] there and [60, 64] here"), or the model's heads, not the setting
REFUSED_OVERRIDES = {
    "model.dim=64": r"^model.dim: 64 \(set in the command line .*\), but model.init_from's weights \(bert \(HF\) .*\) "
    r"have dim 32: .*leave model.dim out",
    "model.mlp_ratio=4": r"^model.mlp_ratio: 4 \(set in the command line .* have mlp_ratio 2.0: .*leave "
    r"model.mlp_ratio out",
    "model.depth=3": r"^model.depth: 3 \(set in the command line .* have 2 blocks: block 2 would have no "
    r"weights.*leave model.depth out \(or set at most 2",
    "data.tokenizer=bytes": r"^data.tokenizer: 'bytes' \(set in the command line .*\) has 257 tokens, and "
    r"model.init_from's embedding \(bert \(HF\) .*\) has 60 rows: .*tokenizer.json.*Leave data.tokenizer out",
    "model.attention.num_kv_heads=3": r"^model.attention.num_kv_heads: 3 \(set in the command line .*\) must divide "
    r"the head count, and model.init_from's weights \(set in .*\) have 4 heads, .*give one of 1, 2, 4$",
    "model.attention.qkv_bias=false": r"^model.attention.qkv_bias: false \(set in the command line .*\), but "
    r"model.init_from's weights .* have query/key/value biases.*Leave model.attention.qkv_bias out, or set it true",
}


@pytest.mark.parametrize("override", sorted(REFUSED_OVERRIDES))
def test_an_override_the_checkpoint_cannot_take_names_the_key_and_both_values(tmp_path, override):
    from attnzoo.config import ConfigError
    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_encoder("bert", tmp_path / "bert")
    small = ["data.listops.num_train=16", "data.listops.num_val=8", "data.listops.num_test=8", "run.baseline=false"]
    overrides = [*small, f"model.init_from={tmp_path / 'bert'}", override]
    with pytest.raises(ConfigError, match=REFUSED_OVERRIDES[override]):
        build(load_config([ROOT / "recipes" / "text_cls.yaml"], overrides))


def test_a_tokenizer_kind_asked_for_gives_way_to_the_checkpoints_aloud(tmp_path, caplog):
    """`data.tokenizer=wordpiece data.vocab_size=80` on the command line was replaced by the checkpoint's
    tokenizer.json with an info line only."""
    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_encoder("bert", tmp_path / "bert")
    small = ["data.listops.num_train=16", "data.listops.num_val=8", "data.listops.num_test=8", "run.baseline=false"]
    asked = [*small, f"model.init_from={tmp_path / 'bert'}", "data.tokenizer=wordpiece", "data.vocab_size=80"]
    with caplog.at_level("WARNING", logger="attnzoo"):
        built = build(load_config([ROOT / "recipes" / "text_cls.yaml"], asked))
    assert built.cfg.section("data")["tokenizer"] == str(tmp_path / "bert" / "tokenizer.json")
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "gives way" in r.getMessage()]
    assert len(said) == 1 and "data.tokenizer: 'wordpiece' (set in the command line" in said[0]
    assert "data.vocab_size is not used" in said[0]


def test_python_load_refuses_another_size_than_the_checkpoints_naming_it(tmp_path):
    save_encoder("bert", tmp_path)
    with pytest.raises(ValueError, match=r"^dim=64, but bert \(HF\) .* has dim 32: .*leave dim out$"):
        load(tmp_path, dim=64, num_classes=2)
    with pytest.raises(ValueError, match=r"^depth=3, but bert \(HF\) .* has depth 2: .*leave depth out \(fewer"):
        load(tmp_path, depth=3, num_classes=2)
    assert len(load(tmp_path, depth=1, num_classes=2).encoder.blocks) == 1


def test_a_run_started_from_bert_resumes(tmp_path):
    from attnzoo.config import load as load_config
    from attnzoo.run import fit

    save_encoder("bert", tmp_path / "bert")
    recipe = ROOT / "recipes" / "text_cls.yaml"
    small = [*QUICK, "trainer.num_threads=1", "data.listops.num_train=32", "data.listops.num_val=8",
             "data.batch_size=8", "data.listops.num_test=8", "data.listops.max_len=20", "run.baseline=false",
             "trainer.num_sanity_val_steps=0", f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    small.append(f"model.init_from={tmp_path / 'bert'}")
    # overrides of the checkpoint's own choices (BERT pools its first token, attends to every key)
    surgery = ["model.pooling=mean", "model.attention.pattern.kind=sliding_window", "model.attention.pattern.window=4"]
    # data.max_len above BERT's 24 positions: cut to them in config.yaml, and the same command resumes (a SLURM
    # requeue runs it again as it was)
    command = [*small, *surgery, "model.drop_rate=0.3", "data.max_len=64"]
    run_dir = fit(load_config([recipe], [*command, "trainer.max_epochs=1"]))
    first = json.loads((run_dir / "summary.json").read_text())
    assert json.loads((run_dir / "init_from.json").read_text())["source"] == first["init_from"]["source"]
    # the same command with --resume: the start is read again, as it was (its config gives the recipe's values way)
    fit(load_config([recipe], [*command, "trainer.max_epochs=2"]), resume=run_dir)
    # a second run from the first's config.yaml: it names the same checkpoint, and keeps its tokenizer too
    again = fit(load_config([run_dir / "config.yaml"], ["trainer.max_epochs=1"]))
    assert again != run_dir and (again / "tokenizer.json").read_bytes() == (run_dir / "tokenizer.json").read_bytes()
    shutil.move(tmp_path / "bert", tmp_path / "moved")  # the runs need only their own files to go on
    # as `fit --resume DIR` reads it: the run's config.yaml, whose dropout (not BERT's 0.1), pooling and pattern (not
    # BERT's) the run goes on with
    for run, epochs in ((run_dir, 3), (again, 2)):
        fit(load_config([run / "config.yaml"], [f"trainer.max_epochs={epochs}"]), resume=run)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["finished"] and summary["global_step"] == epochs * first["global_step"] > 0
        assert summary["init_from"]["source"] == first["init_from"]["source"]
        model = load_config([run / "config.yaml"]).section("model")
        assert model["pooling"] == "mean" and model["attention"]["pattern"] == {"kind": "sliding_window", "window": 4}
        assert model["drop_rate"] == 0.3 and load_config([run / "config.yaml"]).section("data")["tokenizer"] == str(
            tmp_path / "bert" / "tokenizer.json"
        )  # config.yaml as it was: the resume read the run's own copy


def test_a_resume_refuses_another_start_before_it_reads_it_and_takes_the_same_one_spelled_otherwise(
    tmp_path, monkeypatch
):
    """`fit --resume DIR model.init_from=<RoBERTa>` of a run started from BERT read the other start and failed on the
    data its tokenizer gives ("this is not the data the run was trained on"). A resume continues the run's own
    checkpoint: another start, or none, is refused naming the key before anything is read; the same one, however
    spelled, resumes, and a new run starts from the other."""

    import attnzoo.run.train
    from attnzoo.config import ConfigError
    from attnzoo.config import load as load_config
    from attnzoo.run import fit

    monkeypatch.chdir(tmp_path)
    save_encoder("bert", tmp_path / "bert")
    save_encoder("roberta", tmp_path / "roberta")  # another tokenizer: its pad id is 1, BERT's 0
    recipe = ROOT / "recipes" / "text_cls.yaml"
    small = [*QUICK, "trainer.num_threads=1", "data.listops.num_train=32", "data.listops.num_val=8",
             "data.batch_size=8", "data.listops.num_test=8", "data.listops.max_len=20", "run.baseline=false",
             "trainer.num_sanity_val_steps=0", f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    run_dir = fit(load_config([recipe], [*small, f"model.init_from={tmp_path / 'bert'}", "trainer.max_epochs=1"]))
    first = json.loads((run_dir / "summary.json").read_text())
    own, bert = run_dir / "config.yaml", repr(str(tmp_path / "bert"))
    refused = [  # (configs, overrides, the new value shown)
        ([own], [f"model.init_from={tmp_path / 'roberta'}"], repr(str(tmp_path / "roberta"))),
        ([own], ["model.init_from=roberta"], "'roberta'"),
        ([own], ["model.init_from=null"], "None"),
        ([recipe], small, "None"),  # the recipe without the start
    ]
    with monkeypatch.context() as m:
        m.setattr(attnzoo.run.train, "build", lambda *a, **k: pytest.fail("the resume read its data and start"))
        for configs, overrides, new in refused:
            with pytest.raises(ConfigError) as err:
                fit(load_config(configs, [*overrides, "trainer.max_epochs=2"]), resume=run_dir)
            said = str(err.value)
            assert f"in what defines the run: model.init_from: {bert} -> {new}. model.init_from names" in said
            assert "a resume continues from the run's own checkpoint" in said
            assert f'(e.g. model.init_from="{tmp_path / "bert"}")' in said and "start a new run with the recipe" in said
    assert not (run_dir / "resumes.json").exists()
    # the same start: relative to the working directory, from the run's config.yaml and with the starting command
    fit(load_config([own], ["model.init_from=bert", "trainer.max_epochs=2"]), resume=run_dir)
    fit(load_config([recipe], [*small, "model.init_from=./bert", "trainer.max_epochs=3"]), resume=run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and summary["global_step"] == 3 * first["global_step"] > 0
    assert [r["changed"] for r in json.loads((run_dir / "resumes.json").read_text())] == [
        {"trainer.max_epochs": [1, 2]},
        {"trainer.max_epochs": [2, 3]},
    ]  # the same start is no change
    # what the refusal says to do: a new run from the recipe with the other start
    other = fit(load_config([recipe], [*small, "model.init_from=roberta", "trainer.max_epochs=1"]))
    assert json.loads((other / "summary.json").read_text())["init_from"]["source"] != first["init_from"]["source"]


def test_a_run_fine_tuned_from_bert_passes_the_fine_tuning_rate_on_to_runs_started_from_it(tmp_path, caplog):
    """A run started from an attnzoo run took the recipe's rate for small models from random weights (3e-3), also
    when that run's weights were BERT's, fine-tuned at 5e-5."""
    import logging

    from attnzoo.config import load as load_config
    from attnzoo.run import fit

    save_encoder("bert", tmp_path / "bert")
    recipe = ROOT / "recipes" / "text_cls.yaml"
    small = [*QUICK, "trainer.num_threads=1", "data.listops.num_train=32", "data.listops.num_val=8",
             "data.batch_size=8", "data.listops.num_test=8", "data.listops.max_len=20", "run.baseline=false",
             "trainer.num_sanity_val_steps=0", "trainer.max_epochs=1", f"run.dir={tmp_path / 'runs'}"]  # fmt: skip
    first = fit(load_config([recipe], [*small, f"model.init_from={tmp_path / 'bert'}"]))
    origin = f"bert (HF) {tmp_path / 'bert'}"
    assert json.loads((first / "init_from.json").read_text())["origin"] == origin
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        second = fit(load_config([recipe], [*small, f"model.init_from={first}"]))
    assert load_config([second / "config.yaml"]).section("task")["optimizer"]["lr"] == 5e-5
    assert f"was fine-tuned from {origin})" in caplog.text
    assert json.loads((second / "init_from.json").read_text())["origin"] == origin  # through the chain


def test_a_run_config_names_its_own_start_and_gives_way_to_another(tmp_path):
    """A run's config.yaml keeps its own overrides of the checkpoint it names; started from another checkpoint
    (`--config <run>/config.yaml model.init_from=<other>`), its values give way to the other's, as a recipe's do."""
    from attnzoo.config import load as load_config
    from attnzoo.run.start import read_start

    save_encoder("bert", tmp_path / "bert")
    save_encoder("roberta", tmp_path / "roberta")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    cfg = load_config([ROOT / "recipes" / "text_cls.yaml"], [f"model.init_from={tmp_path / 'bert'}"])
    options = read_start(cfg).options
    assert options["model.pooling"] == "first"
    tree = OmegaConf.to_container(cfg.tree, resolve=True)  # what the run resolved, its mean pooling included
    tree["model"].update({key.split(".", 1)[1]: value for key, value in options.items()}, pooling="mean")
    tree["data"]["tokenizer"] = str(tmp_path / "bert" / "tokenizer.json")
    (run / "config.yaml").write_text(OmegaConf.to_yaml(tree))
    same = read_start(load_config([run / "config.yaml"]))
    assert "model.pooling" not in same.options and "data.tokenizer" not in same.preset  # the run's mean, tokenizer
    other = read_start(load_config([run / "config.yaml"], [f"model.init_from={tmp_path / 'roberta'}"]))
    assert other.options["model.pooling"] == "first"
    assert other.preset["data.tokenizer"] == str(tmp_path / "roberta" / "tokenizer.json")  # ids of its embedding
    (run / "checkpoints").rmdir()  # a config.yaml in a folder without a run: a recipe like any other
    assert read_start(load_config([run / "config.yaml"])).options["model.pooling"] == "first"


def test_a_recorded_start_is_read_as_data_with_only_its_own_keys(tmp_path):
    from attnzoo.run.start import START_FILE, recorded_start

    assert recorded_start(tmp_path) is None  # none recorded (a run from scratch, or one from before)
    (tmp_path / START_FILE).write_text(json.dumps({"source": "bert (HF) x", "loaded": 3, "extra": {"a": 1}}))
    assert recorded_start(tmp_path) == {"source": "bert (HF) x", "loaded": 3}
    for broken in ("[1, 2]", "{not json", json.dumps({"source": 3})):
        (tmp_path / START_FILE).write_text(broken)
        assert recorded_start(tmp_path) is None


def test_fewer_blocks_than_the_checkpoint_has_load_the_first_ones_and_say_so(tmp_path, caplog):
    """model.depth=1 on a 2-block checkpoint dropped its last block with nothing but the list of dropped tensors."""
    import logging

    from attnzoo.config import load as load_config
    from attnzoo.run import build

    save_encoder("bert", tmp_path / "bert")
    overrides = [*QUICK, f"model.init_from={tmp_path / 'bert'}", "model.depth=1"]
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        _, task, _ = build(load_config([ROOT / "recipes" / "text_cls.yaml"], overrides))
    assert len(task.net.encoder.blocks) == 1 and SIZES["num_hidden_layers"] == 2
    assert "model.init_from's weights have 2 blocks: the first 1 are loaded, block 1 is dropped" in caplog.text


def test_a_new_run_from_a_runs_config_with_another_start_takes_that_starts_sizes(tmp_path):
    """`fit --config <run>/config.yaml model.init_from=<RoBERTa>` of a run started from BERT stopped on the pad id
    its config.yaml records (BERT's 0; RoBERTa's tokenizer gives 1) as "not the data the run was trained on"."""
    from attnzoo.config import load as load_config
    from attnzoo.run import fit

    save_encoder("bert", tmp_path / "bert")
    save_encoder("roberta", tmp_path / "roberta")
    recipe = ROOT / "recipes" / "text_cls.yaml"
    small = [*QUICK, "trainer.num_threads=1", "data.listops.num_train=32", "data.listops.num_val=8",
             "data.batch_size=8", "data.listops.num_test=8", "data.listops.max_len=20", "run.baseline=false",
             "trainer.num_sanity_val_steps=0", "trainer.max_epochs=1"]  # fmt: skip
    first = fit(load_config([recipe], [*small, f"model.init_from={tmp_path / 'bert'}", f"run.dir={tmp_path / 'a'}"]))
    other = fit(load_config([first / "config.yaml"], [f"model.init_from={tmp_path / 'roberta'}",
                                                      f"run.dir={tmp_path / 'b'}"]))  # fmt: skip
    saved = yaml.safe_load((other / "config.yaml").read_text())
    assert saved["model"]["pad_id"] == 1 and saved["model"]["init_from"] == str(tmp_path / "roberta")
    assert json.loads((other / "summary.json").read_text())["finished"]


def test_a_weights_file_or_a_folder_of_runs_given_for_a_start_names_what_to_give(tmp_path):
    """`model.init_from=roberta/model.safetensors` and `model.init_from=runs/text_cls` (the folder of timestamped
    runs) got the generic "no checkpoint attnzoo can read"."""
    save_encoder("roberta", tmp_path / "roberta")
    (weights,) = [f for f in (tmp_path / "roberta").iterdir() if f.suffix in (".safetensors", ".bin")]
    with pytest.raises(ValueError, match="no checkpoint attnzoo can read") as err:
        convert(weights)
    assert f"it is a file of the model folder {str(tmp_path / 'roberta')!r}: give the folder" in str(err.value)
    run = tmp_path / "runs" / "text_cls" / "20250101-120000"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(ValueError, match="no checkpoint attnzoo can read") as err:
        convert(tmp_path / "runs" / "text_cls")
    assert f"it holds runs: {run}: give one of them" in str(err.value)


def test_load_with_a_max_len_past_the_learned_positions_names_the_option(tmp_path):
    # load(dir, max_len=4096) said "tensor 'pos_embed.table' is [1, 512, 32] there and [1, 4096, 32] here"
    save_encoder("bert", tmp_path / "bert")
    rows = convert(tmp_path / "bert").options["max_len"]
    with pytest.raises(ValueError, match=rf"max_len={rows + 1}, but bert \(HF\) .* has learned positions for {rows} "
                                         rf"tokens: .*Give max_len <= {rows}"):  # fmt: skip
        load(tmp_path / "bert", num_classes=2, max_len=rows + 1)
    assert load(tmp_path / "bert", num_classes=2, max_len=rows - 1) is not None  # a shorter table keeps its rows


def test_a_config_json_leaving_out_keys_reads_transformers_defaults_for_them(tmp_path):
    """RoBERTa numbers its positions from pad_token_id + 1, and transformers' RobertaConfig takes 1 when config.json
    states none (BertConfig: 0); a head count left out is BERT's 12."""
    import transformers

    for family in ("roberta", "bert"):
        folder = tmp_path / family
        save_encoder(family, folder, sizes={**SIZES, "hidden_size": 48, "num_attention_heads": 12})
        config = json.loads((folder / "config.json").read_text())
        del config["pad_token_id"], config["num_attention_heads"]
        (folder / "config.json").write_text(json.dumps(config))
        hf = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
        ids, mask, tokens, padding = _inputs(family, folder)
        net = load(folder, num_classes=2).eval()
        assert net.pad_id == {"roberta": 1, "bert": 0}[family] and convert(folder).options["num_heads"] == 12
        with torch.no_grad():
            want, got = hf(input_ids=ids, attention_mask=mask).last_hidden_state, net.features(tokens, padding)
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=0, atol=1e-5)


def test_a_roberta_config_without_a_pad_id_or_not_an_object_is_refused_naming_the_file(tmp_path):
    save_encoder("roberta", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "pad_token_id": None}))
    with pytest.raises(ValueError, match=r"config.json: pad_token_id None: a roberta config needs an integer"):
        convert(tmp_path)
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"config.json': holds no JSON object \(a list\)"):
        convert(tmp_path)
