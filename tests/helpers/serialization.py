"""The serialization settings the SDK tests and the template builders serialize tasks with."""

from __future__ import annotations

from flytekit.configuration import Image, ImageConfig, SerializationSettings

IMAGE = "ghcr.io/example/train:1.0"
SETTINGS = SerializationSettings(
    project="proj",
    domain="dev",
    version="v1",
    image_config=ImageConfig(default_image=Image(name="default", fqn="ghcr.io/example/train", tag="1.0")),
    env={},
)
"""Project `proj`, domain `dev`, version `v1`, default image `ghcr.io/example/train:1.0`."""
