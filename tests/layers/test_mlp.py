"""attnzoo's `Mlp` is timm's with its dropouts skipped in eval: same parameters, same outputs in both modes."""

import pytest
import torch
from timm.layers import Mlp as TimmMlp

from attnzoo.layers import Mlp


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("drop", [0.0, 0.3])
def test_mlp_matches_timm(training, drop):
    torch.manual_seed(0)
    theirs = TimmMlp(16, 48, drop=drop, norm_layer=torch.nn.LayerNorm)
    ours = Mlp(16, 48, drop=drop, norm_layer=torch.nn.LayerNorm)
    ours.load_state_dict(theirs.state_dict())  # the same parameter names
    with torch.no_grad():
        ours.norm.weight.uniform_(0.5, 1.5)
        theirs.norm.weight.copy_(ours.norm.weight)
    ours.train(training), theirs.train(training)
    x = torch.randn(2, 5, 16)
    torch.manual_seed(1)
    want = theirs(x)
    torch.manual_seed(1)
    torch.testing.assert_close(ours(x), want, atol=0, rtol=0)
    assert (want == 0).any() == (training and drop > 0)  # dropout ran only where it should
