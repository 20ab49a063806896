"""The image processor of a one-channel (grayscale) hf-norms vision model, which transformers' `pipeline` can run.

`pipeline("image-classification")` opens every image as RGB (`transformers.image_utils.load_image`), and ViT's image
processor normalises each channel with its own mean and std: with the one-element `image_mean` of a `num_channels=1`
model it fails ("mean must have 3 elements"), and with three elements it would hand the model three channels.
`GrayscaleImageProcessor` is ViT's PIL image processor that first turns each image into one channel, as PIL's
`Image.convert("L")` does (ITU-R 601-2 luma, rounded to 8 bits), whenever its `image_mean` has one element; with
three it is ViT's processor unchanged. A grayscale image passes unchanged, so the pipeline's pixel values are those
the model was trained on (`finetune` converts with `Image.convert("L")` too).

Copied next to saved checkpoints for `trust_remote_code` (`preprocessor_config.json`'s `auto_map`), so it imports
nothing from `hf_norms` (the transformers release is checked by the checkpoint's configuration file, which a pipeline
loads first); `import hf_norms` registers it with `AutoImageProcessor` so that no remote code runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image
from transformers import ViTImageProcessorPil

LUMA_WEIGHTS = (19595, 38470, 7471)  # PIL's "L" conversion: (299, 587, 114) / 1000 in 16-bit fixed point


def to_one_channel(image: Any) -> Any:
    """`image` (PIL, or a `[C, H, W]` / `[H, W, C]` uint8 array or tensor with 3 or 4 channels) as one channel, the
    value PIL's `convert("L")` gives; an image of one channel, or a float array, as it is."""
    if isinstance(image, Image.Image):
        return image if image.mode == "L" else image.convert("RGB").convert("L")
    array = image.numpy() if hasattr(image, "numpy") else np.asarray(image)
    if array.ndim != 3 or array.dtype != np.uint8:
        return image
    if array.shape[0] in (3, 4) and array.shape[-1] not in (3, 4):
        channels = array[:3]
    elif array.shape[-1] in (3, 4):
        channels = np.moveaxis(array[..., :3], -1, 0)
    else:  # one channel already
        return image
    weighted = sum(weight * channel.astype(np.uint32) for weight, channel in zip(LUMA_WEIGHTS, channels, strict=True))
    return ((weighted + 0x8000) >> 16).astype(np.uint8)


class GrayscaleImageProcessor(ViTImageProcessorPil):
    """ViT's PIL image processor, converting every image to one channel first when `image_mean` has one element."""

    def preprocess(self, images: Any, *args: Any, **kwargs: Any) -> Any:
        mean = kwargs.get("image_mean", self.image_mean)
        if mean is not None and len(np.atleast_1d(mean)) == 1:
            many = isinstance(images, (list, tuple))
            converted = [to_one_channel(image) for image in (images if many else [images])]
            images = converted if many else converted[0]
        return super().preprocess(images, *args, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The processor's fields, with its `auto_map` entry in the per-backend form AutoImageProcessor reads
        (`{"pil": "image_processing_norm.GrayscaleImageProcessor"}`): from a plain string, `pipeline`'s
        AutoVideoProcessor would guess a `GrayscaleVideoProcessor` in the same file and ask whether to run it."""
        output = super().to_dict()
        reference = (output.get("auto_map") or {}).get("AutoImageProcessor")
        if isinstance(reference, str):
            output["auto_map"] = {**output["auto_map"], "AutoImageProcessor": {"pil": reference}}
        return output


GrayscaleImageProcessor.register_for_auto_class("AutoImageProcessor")

__all__ = ["GrayscaleImageProcessor"]
