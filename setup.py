"""Packaging for flytekitplugins-pytorch.

torch is deliberately an optional extra: defining, serializing and registering a task never imports torch,
so the image that runs `pyflyte register` does not need a multi-GB torch install.
Install torch==2.13.0 first where a CPU-only wheel matters (an unpinned torch pulls CUDA packages).
"""

from setuptools import find_packages, setup

TORCH = "torch==2.13.0"

setup(
    name="flytekitplugins-pytorch",
    version="0.1.0",
    description="Flyte plugin: distributed PyTorch tasks that run locally as real multi-process jobs "
    "and on Kubernetes as Kubeflow PyTorchJobs",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(
        include=[
            "flytekitplugins_pytorch",
            "flytekitplugins_pytorch.*",
            "backend_plugin",
            "backend_plugin.*",
            "pytorch_contract",
        ]
    ),
    package_data={"backend_plugin": ["deploy/*.yaml", "deploy/*.md"]},
    install_requires=[
        "flytekit>=1.16,<2",
        "flyteidl>=1.16",
        "protobuf>=4.21",
        "dataclasses-json>=0.5.9",
        "pyyaml>=6",
    ],
    extras_require={
        "torch": [TORCH],
        "backend": ["kubernetes>=29", "flytekit[connector]>=1.16,<2"],
        "examples": [TORCH, "matplotlib>=3.7"],
        "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5,<10"],
        "test": [
            TORCH,
            "kubernetes>=29",
            "flytekit[connector]>=1.16,<2",
            "matplotlib>=3.7",
            "jsonschema>=4.17",
            "kubernetes-validate>=1.30",
            # flytekit's official plugin: only to prove our backend runs the templates it writes.
            "flytekitplugins-kfpytorch>=1.16,<2",
            "hypothesis>=6.100",
            "pytest>=8",
            "pytest-timeout>=2.3",
            "ruff>=0.6",
        ],
    },
    entry_points={
        "flytekit.plugins": [
            "pytorch=flytekitplugins_pytorch",
            # the connector registers itself for task type "pytorch"; importing it loads no kubernetes
            "pytorch_connector=backend_plugin.connector",
        ],
        "console_scripts": ["pytorchjob=backend_plugin.cli:main"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
    ],
)
