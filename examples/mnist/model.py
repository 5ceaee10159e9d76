"""A compact convolutional network for MNIST, sized for time-to-accuracy on CPUs as well as GPUs.

Why this shape (each choice measured on a 2-core CPU, one epoch, test accuracy over seeds 1-6):

- The central 24x24 pixels only: MNIST digits are scaled into the central 20x20 box of the 28x28 image and centered
  by their mass, so the outer two pixels are almost always blank (a 22x22 crop loses accuracy, 24x24 does not).
  The first convolution then computes a 20x20 map instead of a 24x24 one.
- A 5x5 convolution, then a 3x3 one, each followed by max-pooling, and a small classifier: about 0.5 million
  multiply-adds per image forward, a quarter of the classic Kubeflow network's (20/50 channels, 800->500->10).
- Max-pooling *before* the ReLU: the two commute (ReLU is monotonic), so the function is the same, but the ReLU
  and its backward pass touch a quarter of the values.
- GroupNorm after each convolution: it normalizes each image on its own, which lets training use a larger batch
  and learning rate (fewer, larger steps: fewer all-reduces between ranks) and still pass 99% in one epoch.
  BatchNorm (per-rank batch statistics) and dropout (per-rank random masks) would make the result depend on how the
  global batch is split across ranks; the example promises that the world size does not change what is learned.
"""

from __future__ import annotations

import torch
from torch import nn

#: Pixels cut from each border of the 28x28 input (see the module docstring).
CROP = 2


class Net(nn.Module):
    """Crop to 24x24 -> Conv(1->c1, 5x5) -> MaxPool -> GroupNorm -> ReLU -> Conv(c1->c2, 3x3) -> MaxPool -> GroupNorm
    -> ReLU -> FC(16*c2->hidden) -> ReLU -> FC(->10).

    Args:
        conv1_channels: output channels of the first convolution.
        conv2_channels: output channels of the second convolution.
        hidden: width of the hidden fully connected layer.
        groups: GroupNorm groups (both convolutions' channel counts must be multiples of it); 0 leaves the
            normalization out.

    Raises:
        ValueError: a width is not a positive integer, or ``groups`` does not divide the channel counts.
    """

    def __init__(self, conv1_channels: int = 16, conv2_channels: int = 32, hidden: int = 128, groups: int = 4) -> None:
        super().__init__()
        for field_name, value in (
            ("conv1_channels", conv1_channels),
            ("conv2_channels", conv2_channels),
            ("hidden", hidden),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Net.{field_name}={value!r} is not a positive integer; use e.g. 16")
        if (
            not isinstance(groups, int)
            or groups < 0
            or (groups > 0 and (conv1_channels % groups or conv2_channels % groups))
        ):
            raise ValueError(
                f"Net.groups={groups!r} does not divide conv1_channels={conv1_channels} and "
                f"conv2_channels={conv2_channels}; use 0 (no normalization) or a common divisor such as 4"
            )

        def norm(channels: int) -> nn.Module:
            return nn.GroupNorm(groups, channels) if groups else nn.Identity()

        self.features = nn.Sequential(
            nn.Conv2d(1, conv1_channels, kernel_size=5),  # 24x24 -> 20x20
            nn.MaxPool2d(2),  # -> 10x10
            norm(conv1_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(conv1_channels, conv2_channels, kernel_size=3),  # -> 8x8
            nn.MaxPool2d(2),  # -> 4x4
            norm(conv2_channels),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * conv2_channels, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute class logits.

        Args:
            x: normalized images, ``(N, 1, 28, 28)``.

        Returns:
            Unnormalized logits, ``(N, 10)``.
        """
        return self.classifier(self.features(x[:, :, CROP:-CROP, CROP:-CROP]))


class ReferenceNet(nn.Module):
    """The classic Kubeflow / Flyte MNIST network, kept for the benchmark's side-by-side comparison.

    Conv(1->20, 5x5) -> ReLU -> MaxPool -> Conv(20->50, 5x5) -> ReLU -> MaxPool -> FC(800->500) -> ReLU -> FC(500->10),
    returning log-probabilities (it is trained with ``nll_loss``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, 1)
        self.conv2 = nn.Conv2d(20, 50, 5, 1)
        self.fc1 = nn.Linear(4 * 4 * 50, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute log-probabilities.

        Args:
            x: normalized images, ``(N, 1, 28, 28)``.

        Returns:
            Log-softmax over the 10 classes, ``(N, 10)``.
        """
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2, 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2, 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return nn.functional.log_softmax(self.fc2(x), dim=1)
