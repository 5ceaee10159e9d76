"""A compact convolutional network for MNIST, sized for time-to-accuracy on CPUs as well as GPUs.

Why this shape: two 5x5 convolutions with max-pooling and a small classifier reach 99% test accuracy in one epoch
with Adam and a one-cycle schedule, at about a third of the multiply-adds of the classic Kubeflow network
(20/50 channels, 800->500->10). It has no BatchNorm and no dropout on purpose: both make the result depend on how
the global batch is split across ranks (per-rank statistics, per-rank random masks), and the example promises that
the world size does not change what is learned.
"""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """Conv(1->c1, 5x5) -> ReLU -> MaxPool -> Conv(c1->c2, 5x5) -> ReLU -> MaxPool -> FC(16*c2->hidden) -> FC(->10).

    Args:
        conv1_channels: output channels of the first convolution.
        conv2_channels: output channels of the second convolution.
        hidden: width of the hidden fully connected layer.

    Raises:
        ValueError: a width is not a positive integer.
    """

    def __init__(self, conv1_channels: int = 12, conv2_channels: int = 24, hidden: int = 96) -> None:
        super().__init__()
        for field_name, value in (
            ("conv1_channels", conv1_channels),
            ("conv2_channels", conv2_channels),
            ("hidden", hidden),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Net.{field_name}={value!r} is not a positive integer; use e.g. 16")
        self.features = nn.Sequential(
            nn.Conv2d(1, conv1_channels, kernel_size=5),  # 28x28 -> 24x24
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # -> 12x12
            nn.Conv2d(conv1_channels, conv2_channels, kernel_size=5),  # -> 8x8
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # -> 4x4
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
        return self.classifier(self.features(x))


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
