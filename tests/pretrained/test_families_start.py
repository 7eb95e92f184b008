"""`model.init_from` with every converter family behind one registry: a Hugging Face ViT, AST, GPT-2 or BART
directory starts the ViT, AST, LM or translation recipe. The weights land in the network the recipe's data sizes: RGB
patch weights are adapted to grey images, the images are resized to the size the weights were trained at, and a
position grid of another clip length is resampled; audio is resampled and binned as the weights' features were."""

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from timm.models import adapt_input_conv

from attnzoo import pretrained
from attnzoo.config import ConfigError, load
from attnzoo.run import build
from tests.helpers import smoke_overrides
from tests.helpers.audio import speech_commands
from tests.helpers.hf import SIZES, save_ast, save_bart, save_encoder, save_gpt2, save_vit

ROOT = Path(__file__).resolve().parents[2]
PINNED = ["trainer.precision=32-true", "trainer.accelerator=cpu", "run.baseline=false"]
TEXTS = ["The for statement is used to iterate over the elements of a sequence."] * 20


def _built(recipe: str, source: Path, *extra: str):
    cfg = load([ROOT / "recipes" / f"{recipe}.yaml"])
    overrides = smoke_overrides(cfg, started=True)  # the sizes are the checkpoint's
    return build(load([ROOT / "recipes" / f"{recipe}.yaml"], [*overrides, *PINNED, f"model.init_from={source}",
                                                                *extra]))  # fmt: skip


def test_the_registry_finds_each_family(tmp_path):
    save_vit(tmp_path / "vit")
    save_ast(tmp_path / "ast")
    save_gpt2(tmp_path / "gpt2", TEXTS)
    save_encoder("bert", tmp_path / "bert")
    save_bart(tmp_path / "bart", TEXTS)
    names = ("vit", "ast", "gpt2", "bert", "bart")
    kinds = {name: pretrained.convert(tmp_path / name).model_kind for name in names}
    assert kinds == {"vit": "vit", "ast": "ast", "gpt2": "lm", "bert": "text", "bart": "seq2seq"}
    with pytest.raises(ValueError, match="timm_name='vit_tiny_patch16_224' is for timm ViT files.*read as hf_bert"):
        pretrained.convert(tmp_path / "bert", timm_name="vit_tiny_patch16_224")


SAVERS = {"vit": save_vit, "ast": save_ast, "lm": lambda p: save_gpt2(p, TEXTS),
          "text_cls": lambda p: save_encoder("bert", p), "translation": lambda p: save_bart(p, TEXTS)}  # fmt: skip


@pytest.mark.parametrize("recipe", list(SAVERS))
def test_pretrained_weights_are_fine_tuned_at_a_low_learning_rate_unless_one_is_set(recipe, tmp_path, caplog):
    """Every recipe fine-tuned a BERT, ViT, AST, GPT-2 or BART at the rate of its small model from random weights
    (2e-3 to 3e-3): tens of times what pretrained weights are fine-tuned at, so the first steps overwrote them."""
    source = tmp_path / recipe
    SAVERS[recipe](source)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, cfg = _built(recipe, source)
    assert cfg.section("task")["optimizer"]["lr"] == task.optimizer_spec["lr"] == 5e-5
    assert "task.optimizer.lr: auto -> 5e-05 (fine-tuning pretrained weights: from random weights" in caplog.text
    assert task.net.started_from["origin"] == task.net.started_from["source"]  # recorded for runs started from this
    _, task, cfg = _built(recipe, source, "task.optimizer.lr=1e-4")
    assert cfg.section("task")["optimizer"]["lr"] == task.optimizer_spec["lr"] == 1e-4


@pytest.mark.parametrize("recipe", ["text_cls", "vit"])
def test_pretrained_weights_are_fine_tuned_for_a_few_epochs_unless_a_budget_is_set(recipe, tmp_path, caplog):
    """trainer.max_epochs: auto took the recipe's budget for its small model from random weights (~2,000 steps, up to
    100-200 epochs): days of CPU for a BERT-base or ViT-B, where 3 epochs are the usual fine-tuning."""
    import math

    from attnzoo.run.start import FINETUNE_EPOCHS, FINETUNE_STEPS

    source = tmp_path / recipe
    SAVERS[recipe](source)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data, _, cfg = _built(recipe, source)
    per_epoch = len(data.train_dataloader())
    expected = min(FINETUNE_EPOCHS[1], max(FINETUNE_EPOCHS[0], math.ceil(FINETUNE_STEPS / per_epoch)))
    assert cfg.section("trainer")["max_epochs"] == expected
    assert (
        f"trainer.max_epochs: auto -> {expected} (fine-tuning pretrained weights: {per_epoch} steps an" in caplog.text
    )
    _, _, cfg = _built(recipe, source, "trainer.max_epochs=2")
    assert cfg.section("trainer")["max_epochs"] == 2
    # two processes, and two batches a step: the steps an epoch are counted as the optimizer takes them
    _, _, cfg = _built(recipe, source, "trainer.devices=2", "trainer.accumulate_grad_batches=2")
    steps = math.ceil(per_epoch / 4)
    assert cfg.section("trainer")["max_epochs"] == min(
        FINETUNE_EPOCHS[1], max(FINETUNE_EPOCHS[0], math.ceil(300 / steps))
    )
    # the recipe's one thread is for its small model: a hint, where the machine has more cores
    hint = "trainer.num_threads: 1 (set in" in caplog.text and "a pretrained model's large matrices" in caplog.text
    assert hint == (len(os.sched_getaffinity(0)) > 1)


def test_a_vit_directory_starts_the_vit_recipe_on_grey_images(tmp_path, caplog):
    source = tmp_path / "vit"
    save_vit(source)
    converted = pretrained.convert(source)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        data, task, cfg = _built("vit", source)
    net = task.net
    assert cfg.section("data")["img_size"] == 32 and cfg.section("model")["embed_dim"] == SIZES["hidden_size"]
    assert "data.img_size: None -> 32" in caplog.text and "adapted from 3 to 1 input channels" in caplog.text
    rgb = converted.state_dict["patch_embed.proj.weight"]
    torch.testing.assert_close(net.patch_embed.proj.weight, adapt_input_conv(1, rgb))
    for key in ("pos_embed", "encoder.blocks.1.attn.qkv.weight", "encoder.blocks.1.mlp.fc2.bias"):
        torch.testing.assert_close(net.state_dict()[key], converted.state_dict[key])
    assert net.started_from["new"] == ["head.weight", "head.bias"]  # MNIST's 10 classes, not the checkpoint's 4
    batch = next(iter(data.train_dataloader()))
    assert batch["image"].shape[1:] == (1, 32, 32)  # the images are resized to what the weights were trained at


IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}


def test_a_vit_directorys_pixel_normalization_is_the_datas_unless_the_config_sets_one(tmp_path, caplog):
    # a ViT whose preprocessor_config.json normalizes with ImageNet's statistics (DeiT-style checkpoints) was fed
    # pixels normalized with 0.5 / 0.5, attnzoo's default, with nothing logged
    source = tmp_path / "vit"
    save_vit(source)
    (source / "preprocessor_config.json").write_text(json.dumps({"do_normalize": True, **IMAGENET}))
    with caplog.at_level(logging.INFO, logger="attnzoo"):  # another data key on the command line: mean stays unset
        data, _, cfg = _built("vit", source, "data.batch_size=8")
    assert (cfg.section("data")["mean"], cfg.section("data")["std"]) == (IMAGENET["image_mean"], IMAGENET["image_std"])
    assert "data.mean: None -> [0.485, 0.456, 0.406] (as model.init_from's weights were trained)" in caplog.text
    white = torch.full((1, 8, 8), 255, dtype=torch.uint8)  # the embedded digits are grey: the channels' mean
    level = (1 - sum(IMAGENET["image_mean"]) / 3) / (sum(IMAGENET["image_std"]) / 3)
    assert data.input_transform()(white).flatten()[0].item() == pytest.approx(level, rel=1e-5)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnzoo"):
        _, _, cfg = _built("vit", source, "data.mean=[0.5]", "data.std=[0.5]")
    assert (
        cfg.section("data")["mean"] == [0.5]
        and "data.mean: [0.5] (set in the command line ('data.mean=[0.5]')), not" in caplog.text
    )
    _, _, cfg = _built("vit", source, f"data.mean={IMAGENET['image_mean']}")  # the checkpoint's own: no change
    assert cfg.section("data")["std"] == IMAGENET["image_std"]
    _, _, cfg = _built("vit", source, "data.mean=null")  # null named on the command line: attnzoo's 0.5, both
    assert cfg.section("data").get("mean") is None and cfg.section("data").get("std") is None
    (source / "preprocessor_config.json").write_text(json.dumps({"do_normalize": False}))
    assert pretrained.convert(source).data == {"mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
    (source / "preprocessor_config.json").write_text(json.dumps({"image_mean": 0.5, "image_std": [0.5]}))
    with pytest.raises(ConfigError, match=r"preprocessor_config.json': image mean 0.5 and std \[0.5\] must be lists"):
        _built("vit", source)
    (source / "preprocessor_config.json").unlink()
    assert pretrained.convert(source).data == {}  # the processor's default, 0.5: attnzoo's


def test_the_tensors_a_converter_leaves_out_are_reported_as_dropped(tmp_path, caplog):
    # a BertForMaskedLM folder (what a pretrained BERT is): its MLM head was logged apart, and the start said "none
    # dropped" (summary.json: "dropped": [])
    import transformers

    from tests.helpers.hf import VOCAB, tokenizer

    config = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=24, pad_token_id=0, **SIZES)
    transformers.BertForMaskedLM(config).save_pretrained(tmp_path / "mlm")
    tokenizer("bert").save(str(tmp_path / "mlm" / "tokenizer.json"))
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, _ = _built("text_cls", tmp_path / "mlm")
    dropped = task.net.started_from["dropped"]
    assert any(k.startswith("cls.predictions") for k in dropped), dropped
    assert "none dropped" not in caplog.text and f"{len(dropped)} dropped (" in caplog.text


def test_an_ast_directory_starts_the_ast_recipe_with_positions_resampled_along_time(tmp_path, caplog):
    source = tmp_path / "ast"
    save_ast(source)
    converted = pretrained.convert(source)
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, cfg = _built("ast", source)
    net = task.net
    for key in ("feature_mean", "feature_std"):  # the config recorded this data's, which the checkpoint's replaced
        assert cfg.section("model")[key] == converted.options[key] == pytest.approx(float(getattr(net, key)))
        assert f"model.{key}: " in caplog.text and "(model.init_from's: its weights were trained on" in caplog.text
    assert "data.sample_rate: auto -> 16000" in caplog.text and "data.n_mels: auto -> 128" in caplog.text
    assert (net.logmel.sample_rate, net.logmel.n_mels) == (16000, 128)  # features as the weights were trained on
    assert "resampled from 5 x 12 to 9 x 12 " in caplog.text  # the checkpoint's 64 frames, the recipe's longer clips
    assert net.pos_embed.shape[1] != converted.state_dict["pos_embed"].shape[1]
    key = "encoder.blocks.0.attn.qkv.weight"
    torch.testing.assert_close(net.state_dict()[key], converted.state_dict[key])


def test_a_start_from_an_ast_run_computes_the_features_its_weights_and_statistics_were_made_for(tmp_path, caplog):
    # from an attnzoo AST run (itself from a 128-mel checkpoint) the new run's data chose 32 mels at 8 kHz, and kept
    # the run's feature mean and std, which are those of 128-mel features
    save_ast(tmp_path / "ast")
    _, task, cfg = _built("ast", tmp_path / "ast")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(cfg.to_yaml())
    torch.save({"state_dict": task.state_dict()}, run / "checkpoints" / "best.ckpt")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, again, cfg2 = _built("ast", run)
    assert (again.net.logmel.sample_rate, again.net.logmel.n_mels) == (16000, 128)
    assert cfg2.section("model")["feature_mean"] == cfg.section("model")["feature_mean"]
    assert "data.n_mels: auto -> 128 (as model.init_from's weights were trained)" in caplog.text


def test_a_gpt2_directory_starts_the_lm_recipe(tmp_path):
    source = tmp_path / "gpt2"
    save_gpt2(source, TEXTS)
    converted = pretrained.convert(source)
    _, task, cfg = _built("lm", source)
    assert cfg.section("data")["tokenizer"] == str(source / "tokenizer.json")  # ids as the embedding was trained
    assert (cfg.section("model")["dim"], cfg.section("model")["depth"]) == (32, 2)
    state = task.net.state_dict()
    assert task.net.started_from["new"] == []  # a language model's head is its tied embedding: all loaded
    for key in ("embed.embed.weight", "decoder.blocks.1.mlp.fc1.weight"):
        torch.testing.assert_close(state[key], converted.state_dict[key])
    max_len = cfg.section("model")["max_len"]  # the recipe's context, cut from GPT-2's 64 positions
    table = converted.state_dict["embed.pos_embed.table"]
    torch.testing.assert_close(state["embed.pos_embed.table"], table[:, :max_len])


@pytest.mark.parametrize("family", ["lm", "translation"])
def test_a_folder_without_its_tokenizer_is_refused_unless_the_config_names_one(tmp_path, family):
    # a GPT-2 folder without tokenizer.json loaded every tensor under a BPE the lm recipe learned from its data
    source = tmp_path / family
    (save_gpt2 if family == "lm" else save_bart)(source, TEXTS)
    (source / "tokenizer.json").rename(tmp_path / "theirs.json")
    with pytest.raises(
        ConfigError,
        match=rf"{family} has no tokenizer\.json, vocab\.txt or vocab\.json \+ merges\.txt, and its weights embed the "
        r"ids of the tokenizer they were trained with.*data\.tokenizer=<its tokenizer\.json>",
    ):
        _built(family, source)
    _, task, _ = _built(family, source, f"data.tokenizer={tmp_path / 'theirs.json'}")
    assert task.net.started_from["new"] == []


@pytest.mark.parametrize("family", ["lm", "translation"])
def test_a_folder_with_vocab_json_and_merges_instead_of_tokenizer_json_gives_the_same_ids(tmp_path, family):
    # a GPT-2 or BART folder saved by an older transformers (vocab.json + merges.txt, no tokenizer.json) was refused
    from tokenizers import Tokenizer

    source = tmp_path / family
    (save_gpt2 if family == "lm" else save_bart)(source, TEXTS)
    data, _, _ = _built(family, source)
    before = [data.tokenizer.encode(text) for text in TEXTS[:1] + ["elements of a sequence, unseen words"]]
    Tokenizer.from_file(str(source / "tokenizer.json")).model.save(str(source))  # vocab.json + merges.txt
    (source / "tokenizer.json").unlink()
    (source / "tokenizer_config.json").write_text(json.dumps({"add_prefix_space": False}))
    data, task, cfg = _built(family, source)
    assert cfg.section("data")["tokenizer"] == str(source / "vocab.json")
    assert [data.tokenizer.encode(text) for text in TEXTS[:1] + ["elements of a sequence, unseen words"]] == before
    assert task.net.started_from["new"] == [] and task.net.started_from["loaded"]


def test_a_bart_directory_starts_the_translation_recipe(tmp_path):
    source = tmp_path / "bart"
    save_bart(source, TEXTS)
    converted = pretrained.convert(source)
    _, task, cfg = _built("translation", source)
    model = cfg.section("model")
    assert cfg.section("data")["tokenizer"] == str(source / "tokenizer.json")  # ids as the embedding was trained
    assert (model["dim"], model["encoder_depth"], model["decoder_depth"], model["norm"]) == (32, 2, 2, "post")
    state = task.net.state_dict()
    assert task.net.started_from["new"] == [] and task.net.started_from["dropped"] == []
    loaded = ("embed.embed.weight", "logits_bias", "decoder.blocks.1.cross_attn.kv.weight", "tgt_positions.norm.bias")
    for key in loaded:
        torch.testing.assert_close(state[key], converted.state_dict[key])
    max_len = task.net.max_len  # the recipe's data.max_len, shorter than BART's 80 positions: each table is cut
    assert max_len < 80
    for key in ("embed.pos_embed.table", "tgt_positions.pos_embed.table"):
        torch.testing.assert_close(state[key], converted.state_dict[key][:, :max_len])


def test_an_embedding_padded_past_the_tokenizer_keeps_its_rows_and_one_short_of_it_is_named(tmp_path, caplog):
    """A checkpoint whose table has more rows than its tokenizer has tokens (resize_token_embeddings with
    pad_to_multiple_of) builds the model with its rows: every row loads, and the tokenizer's ids index them."""
    source = tmp_path / "gpt2"
    save_gpt2(source, TEXTS, spare_rows=4)
    tokens = pretrained.convert(source).options["vocab_size"] - 4
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        _, task, cfg = _built("lm", source)
    assert cfg.section("model")["vocab_size"] == tokens + 4
    assert f"model.vocab_size: {tokens} (the tokenizer's tokens) -> {tokens + 4}" in caplog.text
    assert task.net.started_from["new"] == [] and task.net.started_from["dropped"] == []
    resolved = tmp_path / "resolved.yaml"  # the resolved config builds the same model again (a resume, evaluate)
    resolved.write_text(cfg.to_yaml())
    assert build(load([resolved]), init=False).task.net.embed.embed.weight.shape[0] == tokens + 4
    short = tmp_path / "short"
    save_gpt2(short, TEXTS, spare_rows=-2)
    with pytest.raises(ConfigError, match=rf"embedding of {tokens - 2} rows, and its tokenizer \(.*tokenizer.json\) "
                                          rf"has {tokens} tokens: ids {tokens - 2} to {tokens - 1}"):  # fmt: skip
        _built("lm", short)


def test_a_vocab_size_above_the_tokenizers_is_refused_without_a_checkpoint():
    with pytest.raises(ConfigError, match=r"model.vocab_size: 5000 .* contradicts the data"):
        build(load([ROOT / "recipes" / "lm.yaml"], [*PINNED, "model.vocab_size=5000"]))


def test_an_ast_directory_on_audio_files_normalizes_as_its_weights_were_trained(tmp_path, caplog):
    """Audio files would get each clip's own normalization (model.feature_norm: auto -> level); a Hugging Face AST
    was trained with its extractor's one mean and std, so the run keeps them."""
    source = tmp_path / "ast"
    save_ast(source)
    speech_commands(tmp_path / "clips")
    with caplog.at_level(logging.INFO, logger="attnzoo"):
        overrides = [*PINNED, f"model.init_from={source}", "data.source=folder", f"data.root={tmp_path / 'clips'}"]
        data, task, cfg = build(load([ROOT / "recipes" / "ast.yaml"], overrides))
    assert cfg.section("model")["feature_norm"] == "dataset" and task.net.feature_norm == "dataset"
    assert "auto -> level" not in caplog.text
    converted = pretrained.convert(source)
    assert float(task.net.feature_mean) == pytest.approx(float(converted.state_dict["feature_mean"]))
    # audio_stats.json (what data.stats_file and evaluate read) held this data's statistics, not the model's
    for built in (data, build(cfg, init=False)[0]):  # and as a resume builds it, from the run's resolved config
        recorded = json.loads(built.save_artifacts(tmp_path / "run").read_text())
        assert recorded["mean"] == pytest.approx(float(task.net.feature_mean))
        assert recorded["std"] == pytest.approx(float(task.net.feature_std))
