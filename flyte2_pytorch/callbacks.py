"""Live progress callbacks for the HF Transformers ``Trainer`` and Lightning (``pytorch_core.callbacks``).

``from flyte2_pytorch.callbacks import HFProgressCallback``, then
``Trainer(..., callbacks=[HFProgressCallback()])``. Lightning needs nothing: a ``Trainer`` built inside a ``pytorch``
task gets ``LightningProgressCallback`` by itself. The classes are made at first use, so importing this module imports
neither library.
"""

from __future__ import annotations

from pytorch_core import callbacks as _callbacks
from pytorch_core.callbacks import lightning_callbacks, pytorch_lightning_callbacks

# and, made at first use (``__getattr__``): HFProgressCallback, LightningProgressCallback,
# PyTorchLightningProgressCallback.
__all__ = [
    "lightning_callbacks",
    "pytorch_lightning_callbacks",
]


def __getattr__(name: str) -> type:
    """The callback class ``name`` of ``pytorch_core.callbacks``.

    Args:
        name: ``HFProgressCallback``, ``LightningProgressCallback`` or ``PyTorchLightningProgressCallback``.

    Returns:
        type: the class.

    Raises:
        AttributeError: any other name.
    """
    cls: type = getattr(_callbacks, name)
    return cls
