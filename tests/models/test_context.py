"""Every model tells its attention layers the length of the sequences they see (`seq_len`, derived once)."""

import pytest
import torch

from attnzoo.attention.variants import LinformerAttention
from attnzoo.models import MODELS

LINFORMER = {"kind": "linformer"}  # takes seq_len from the model and refuses longer keys
CASES = {
    "vit": (
        dict(img_size=16, patch_size=4, in_chans=1, num_classes=3, embed_dim=32, depth=1, num_heads=4),
        lambda: (torch.randn(2, 1, 16, 16),),
    ),
    "ast": (
        dict(num_classes=3, sample_rate=8000, n_mels=32, target_frames=98, embed_dim=32, depth=1, num_heads=2),
        lambda: (torch.randn(2, 8000),),  # 1 s: the 98 training frames
    ),
    "text": (
        dict(vocab_size=50, num_classes=3, max_len=12, dim=32, depth=1, num_heads=4),
        lambda: (torch.randint(1, 50, (2, 12)),),  # the longest text
    ),
    "mlm": (  # the text encoder with a token head
        dict(vocab_size=50, max_len=12, dim=32, depth=1, num_heads=4),
        lambda: (torch.randint(1, 50, (2, 12)),),
    ),
    "text_image": (
        dict(num_classes=3, img_size=16, patch_size=4, image_dim=32, text_dim=32, num_heads=4, max_len=24),
        lambda: (torch.randn(2, 3, 16, 16), torch.randint(1, 257, (2, 24))),
    ),
    "seq2seq": (  # linformer in the encoder; the decoder's self-attention is masked, which linformer cannot be
        dict(vocab_size=50, max_len=12, dim=32, encoder_depth=1, decoder_depth=1, num_heads=4, decoder_attention={}),
        lambda: (torch.randint(1, 50, (2, 12)), torch.randint(1, 50, (2, 12))),
    ),
}
# models whose every attention layer is masked self-attention: linformer is refused when they are built
REFUSED = {"lm": dict(vocab_size=50, max_len=12, dim=32, depth=1, num_heads=4)}


def test_every_model_has_a_case():
    assert set(CASES) | set(REFUSED) == set(MODELS)


@pytest.mark.parametrize("kind", list(REFUSED))
def test_models_that_cannot_take_linformer_say_so(kind):
    with pytest.raises(ValueError, match="linformer' cannot use a pattern"):
        MODELS[kind](**REFUSED[kind], attention=LINFORMER)


@pytest.mark.parametrize("kind", list(CASES))
def test_seq_len_is_the_longest_sequence_each_layer_sees(kind):
    options, inputs = CASES[kind]
    model = MODELS[kind](**options, attention=LINFORMER).eval()
    layers = [m for m in model.modules() if isinstance(m, LinformerAttention)]
    assert layers
    seen = {}

    def record(module, args):  # self-attention: the keys are the input tokens
        seen[module] = max(seen.get(module, 0), args[0].shape[1])

    for layer in layers:
        layer.register_forward_pre_hook(record)
    model(*inputs())
    assert [seen[m] for m in layers] == [m.seq_len for m in layers]
