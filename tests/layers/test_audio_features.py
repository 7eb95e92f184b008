"""Audio features of the AST front end: log-mel (Kaldi fbank or torchaudio mel spectrogram) and SpecAugment."""

import pytest
import torch
import torchaudio

from attnzoo.layers.audio_features import LogMel, SpecAugment

RATE = 8000


def test_spec_augment_masks_only_in_training():
    feats = torch.randn(8, 32, 50) + 5
    aug = SpecAugment(freq_mask=8, time_mask=10, num_masks=2)
    assert torch.equal(aug.eval()(feats), feats)
    out = aug.train()(feats)
    masked = out == 0
    assert masked.any() and torch.equal(out[~masked], feats[~masked])
    assert not torch.equal(masked[0], masked[1])  # each clip gets its own masks


def test_spec_augment_stretch_moves_formants_and_words_per_clip_in_training_only():
    torch.manual_seed(0)
    feats = torch.zeros(64, 32, 99)  # a "formant" at bin 12 and a "word onset" at frame 29
    feats[:, 12] = 1.0
    feats[:, :, 29] += 2.0
    aug = SpecAugment(freq_mask=0, time_mask=0, num_masks=0, stretch=0.2)
    assert torch.equal(aug.eval()(feats), feats)
    out = aug.train()(feats)
    assert out.shape == feats.shape
    formant = out[:, :, :20].mean(2).argmax(1).float()  # [B], the formant's bin after stretching
    onset = out[:, 20:].mean(1).argmax(1).float()  # [B], the onset's frame
    # frequency scaled about bin 0 by 1 +- 0.2 -> bin 12 lands in [12 / 1.2, 12 / 0.8] = [10, 15];
    # time about the middle frame 49 -> frame 29 lands in [49 - 20 / 0.8, 49 - 20 / 1.2] = [24, 32.3]
    assert formant.min() >= 9 and formant.max() <= 15 and formant.unique().numel() >= 3
    assert onset.min() >= 24 and onset.max() <= 33 and onset.unique().numel() >= 3
    assert torch.equal(SpecAugment(freq_mask=0, time_mask=0, stretch=0.0).train()(feats), feats)
    with pytest.raises(ValueError, match=r"stretch \(1.5\) must be in \[0, 1\)"):
        SpecAugment(stretch=1.5)


@pytest.mark.parametrize("kind", ["fbank", "melspec"])
def test_logmel_frame_count_and_fp32_under_autocast(kind):
    m = LogMel(sample_rate=RATE, n_mels=32, kind=kind)
    x = torch.randn(3, 5000) * 0.1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(x)
    assert out.shape == (3, 32, m.num_frames(5000)) and out.dtype == torch.float32 and torch.isfinite(out).all()
    if kind == "fbank":  # batched (vmap) equals Kaldi's per-clip fbank
        ref = torchaudio.compliance.kaldi.fbank(
            x[1:2] * 32768, sample_frequency=RATE, num_mel_bins=32, htk_compat=True, window_type="hanning", dither=0.0
        )
        torch.testing.assert_close(out[1], ref.T)
