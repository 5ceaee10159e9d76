"""Kubernetes quantities: the parser lives in `pytorch_contract.quantity` (shared with the backend, no flytekit).

This module keeps the SDK's import path working.
"""

from pytorch_contract.quantity import QuantityError, QuantityLike, is_quantity, parse_quantity

__all__ = ["QuantityError", "parse_quantity", "is_quantity", "QuantityLike"]
