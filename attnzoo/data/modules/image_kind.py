"""What kind of images a folder holds, and the transforms that suit drawings as well as photographs.

`inspect_images` tells drawings, text and symbols (strokes on a flat background) from photographs, and whether
drawings come in both polarities (light-on-dark and dark-on-light) within every class. `Ink` reads a drawing as
the distance of each pixel from its background colour, so both polarities look alike. `SafeTrivialAugment` is
TrivialAugment restricted to operations that cannot change what a drawing or a photograph shows: no solarize,
posterize or equalize (which can swap strokes and background), and shifts, rotations and shears small enough to
keep the object inside the image.

Notation: C channels, H x W pixels, N images.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import PIL.Image
import torch
from torchvision.transforms import v2

Tensor = torch.Tensor

FLAT = 24  # grey levels (of 255) from the background colour a pixel of a flat background stays within
DRAWING_BACKGROUND = 0.5  # images whose median share of background pixels is at least this are drawings
POLARITY_SHARE = 0.1  # mixed polarity: each class has at least this share of either polarity


def background(image: Tensor) -> Tensor:
    """The background colour of uint8 images [..., C, H, W]: the median of their border pixels, [..., C, 1, 1]."""
    border = torch.cat([image[..., 0, :], image[..., -1, :], image[..., :, 0], image[..., :, -1]], -1)  # [.., C, 2H+2W]
    return border.median(-1).values[..., None, None]


def inspect_images(images: Sequence[Tensor], labels: Sequence[int]) -> tuple[bool, bool, str]:
    """(drawing, mixed_polarity, why) for a sample of uint8 images [C, H, W] and their class indices."""
    shares, light = [], []
    for image in images:
        bg = background(image).to(torch.int16)  # [C, 1, 1]
        off = (image.to(torch.int16) - bg).abs().amax(0)  # [H, W]
        shares.append((off <= FLAT).float().mean().item())
        light.append(bg.float().mean().item() > 127.5)
    flat = sorted(shares)[len(shares) // 2]
    drawing = flat >= DRAWING_BACKGROUND
    kind = "drawings (flat backgrounds)" if drawing else "photographs (textured backgrounds)"
    why = f"{len(images)} train images: median {flat:.0%} of pixels within {FLAT}/255 of the border colour: {kind}"
    by_class: dict[int, list[bool]] = {}
    for label, is_light in zip(labels, light, strict=True):
        by_class.setdefault(int(label), []).append(is_light)
    share = min(min(sum(v), len(v) - sum(v)) / len(v) for v in by_class.values())
    mixed = drawing and share >= POLARITY_SHARE
    if drawing:
        why += f"; every class at least {share:.0%} of either polarity" if mixed else "; one polarity"
    return drawing, mixed, why


class Ink(v2.Transform):
    """uint8 images [C, H, W] -> the largest channel distance from the background colour, in every channel.

    Strokes become bright and the background dark whatever the drawing's colours and polarity.
    """

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if not isinstance(inpt, Tensor) or inpt.dtype != torch.uint8:
            return inpt
        off = (inpt.to(torch.int16) - background(inpt).to(torch.int16)).abs().amax(-3, keepdim=True)  # [.., 1, H, W]
        return off.to(torch.uint8).expand_as(inpt).contiguous().as_subclass(type(inpt))


class SafeTrivialAugment(v2.TrivialAugmentWide):
    """TrivialAugment (one random operation per image) without operations that can change a label.

    Left out: Solarize and Posterize (strokes and background trade places or merge), Equalize; magnitudes are
    bounded: shifts up to 10% of the side, rotations up to 15 degrees, shears up to 0.2, brightness, colour,
    contrast and sharpness changes up to 40%. What a shift, rotation or shear uncovers is filled with the image's
    background colour (`background`), not black: black bars on white paper read as strokes.
    """

    def _apply_image_or_video_transform(
        self, image: Any, transform_id: str, magnitude: float, interpolation: Any, fill: dict[Any, Any]
    ) -> Any:
        pixels = v2.functional.pil_to_tensor(image) if isinstance(image, PIL.Image.Image) else image
        if isinstance(pixels, Tensor) and pixels.dtype == torch.uint8 and pixels.dim() >= 3:
            colour = background(pixels).flatten(-3)  # [..., C]: per image (of a batch), per channel
            colour = colour.reshape(-1, colour.shape[-1]).median(0).values  # [C]: one fill a call takes
            fill = {"others": [float(v) for v in colour.tolist()]}  # this call's, never kept on the transform
        return super()._apply_image_or_video_transform(image, transform_id, magnitude, interpolation, fill)

    _AUGMENTATION_SPACE = {
        "Identity": (lambda num_bins, height, width: None, False),
        "ShearX": (lambda num_bins, height, width: torch.linspace(0.0, 0.2, num_bins), True),
        "ShearY": (lambda num_bins, height, width: torch.linspace(0.0, 0.2, num_bins), True),
        "TranslateX": (lambda num_bins, height, width: torch.linspace(0.0, 0.1 * width, num_bins), True),
        "TranslateY": (lambda num_bins, height, width: torch.linspace(0.0, 0.1 * height, num_bins), True),
        "Rotate": (lambda num_bins, height, width: torch.linspace(0.0, 15.0, num_bins), True),
        "Brightness": (lambda num_bins, height, width: torch.linspace(0.0, 0.4, num_bins), True),
        "Color": (lambda num_bins, height, width: torch.linspace(0.0, 0.4, num_bins), True),
        "Contrast": (lambda num_bins, height, width: torch.linspace(0.0, 0.4, num_bins), True),
        "Sharpness": (lambda num_bins, height, width: torch.linspace(0.0, 0.4, num_bins), True),
        "AutoContrast": (lambda num_bins, height, width: None, False),
    }


LABEL_CHANGING = ("Solarize", "Posterize", "Equalize", "Invert")  # what `SafeTrivialAugment` never applies
