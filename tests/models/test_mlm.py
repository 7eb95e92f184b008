"""`MaskedLM`: the text classifier's encoder under other names nowhere, a tied or untied prediction head, logits of
the selected positions only, and padding that changes nothing."""

import pytest
import torch

from attnzoo.models import MaskedLM, TextClassifier

SIZES = {"vocab_size": 40, "dim": 16, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0, "max_len": 32}


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_its_encoder_tensors_are_the_classifiers_by_name_and_shape(position):
    mlm = MaskedLM(**SIZES, position=position).state_dict()
    cls = TextClassifier(**SIZES, position=position, num_classes=3, pooling="mean").state_dict()
    encoder = {k: v.shape for k, v in cls.items() if not k.startswith("head.")}
    assert {k: v.shape for k, v in mlm.items() if not k.startswith("mlm_head.")} == encoder


@pytest.mark.parametrize("tied", [True, False])
def test_the_head_reads_the_embedding_table_when_tied(tied):
    net = MaskedLM(**SIZES, tie_embeddings=tied)
    names = dict(net.named_parameters())
    assert ("mlm_head.weight" in names) is not tied
    tokens = torch.randint(5, 40, (2, 7))
    net(tokens).sum().backward()
    assert (net.embed.weight.grad[tokens.unique()].abs().sum(1) > 0).all()
    if tied:  # a gradient reaches rows of tokens that never occur, through the output projection only
        unseen = torch.ones(40, dtype=torch.bool)
        unseen[tokens.unique()] = False
        unseen[0] = False  # padding row
        assert (net.embed.weight.grad[unseen].abs().sum(1) > 0).all()


def test_selected_positions_give_their_rows_of_the_full_logits_and_padding_changes_nothing():
    net = MaskedLM(**SIZES, drop_rate=0.0).eval()
    tokens = torch.randint(5, 40, (3, 9))
    padding = torch.zeros(3, 9, dtype=torch.bool)
    padding[1, 6:] = True
    tokens = tokens.masked_fill(padding, 0)
    select = torch.zeros(3, 9, dtype=torch.bool)
    select[0, 2] = select[1, 5] = select[2, 0] = True
    with torch.no_grad():
        full = net(tokens, padding)  # [B, L, V]
        picked = net(tokens, padding, select=select)  # [N, V]
        longer = net(torch.cat([tokens, torch.zeros(3, 4, dtype=torch.long)], 1),
                     torch.cat([padding, torch.ones(3, 4, dtype=torch.bool)], 1))  # fmt: skip
    assert full.shape == (3, 9, 40) and picked.shape == (3, 40)
    torch.testing.assert_close(picked, full[select])
    torch.testing.assert_close(longer[:, :9][~padding], full[~padding], atol=1e-5, rtol=1e-5)
    assert full.abs().max() < 20  # logits start O(1): the tied table's rows are divided by sqrt(dim)
