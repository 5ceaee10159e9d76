"""BackendConfig: defaults, YAML, environment overrides, validation messages, GPU queries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from backend_plugin.config import (
    _KEYS,
    KEYS,
    AcceleratorPlacement,
    BackendConfig,
    ConfigError,
    _section_type,
    load_config,
)


def test_defaults():
    config = BackendConfig()
    assert config.value("gpu_resource_name") == "nvidia.com/gpu"
    assert config.value("default_annotations") == {
        "sidecar.istio.io/inject": "false",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    }
    assert config.gpu.tolerations_for(["nvidia.com/gpu"]) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "flyte/gpu", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"},
    ]
    assert config.value("shm_enabled") and config.value("shm_size") is None
    assert config.value("clean_pod_policy") == "Running"


@pytest.mark.parametrize(
    "name, is_gpu",
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.5gb", True),
        ("amd.com/gpu", True),
        ("gpu.intel.com/i915", True),
        ("cpu", False),
        ("memory", False),
        ("example.com/fpga", False),
    ],
    ids=lambda v: str(v),
)
def test_is_gpu_resource(name: str, is_gpu: bool):
    assert BackendConfig().gpu.is_gpu_resource(name) is is_gpu


def test_mig_gets_nvidia_tolerations_and_amd_gets_none_by_default():
    config = BackendConfig()
    assert config.gpu.tolerations_for(["nvidia.com/mig-3g.20gb"]) == config.gpu.tolerations_for(["nvidia.com/gpu"])
    assert config.gpu.tolerations_for(["amd.com/gpu"]) == []


def test_from_yaml_path_and_string(tmp_path: Path):
    text = """
    namespace: ml
    gpu-resource-name: amd.com/gpu
    gpu_tolerations:
      amd.com/gpu: [{key: amd.com/gpu, operator: Exists, effect: NoSchedule}]
    accelerators:
      MI300X: {node_selector: {amd.com/gpu.product: MI300X}}
    shm_size: 8Gi
    """
    path = tmp_path / "backend.yaml"
    path.write_text(text)
    for source in (path, str(path), text):
        config = BackendConfig.from_yaml(source)
        assert config.value("namespace") == "ml" and config.value("gpu_resource_name") == "amd.com/gpu"
        assert config.gpu.tolerations_for(["amd.com/gpu"]) == [
            {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        placement = config.gpu.placement_for("MI300X")
        assert placement.node_selector == {"amd.com/gpu.product": ["MI300X"]}
        assert placement.resolved_tolerations() == [
            {"key": "amd.com/gpu.product", "operator": "Equal", "value": "MI300X", "effect": "NoSchedule"}
        ]
    assert BackendConfig.from_yaml("") == BackendConfig()


def test_from_env_overrides_yaml(tmp_path: Path):
    path = tmp_path / "backend.yaml"
    path.write_text("namespace: ml\nsuspend: false\nbackoff_limit: 1\n")
    env = {
        "PYTORCHJOB_CONFIG": str(path),
        "PYTORCHJOB_SUSPEND": "true",
        "PYTORCHJOB_BACKOFF_LIMIT": "3",
        "PYTORCHJOB_TTL_SECONDS_AFTER_FINISHED": "",
        "PYTORCHJOB_SHM_SIZE": "1e3",
        "UNRELATED": "x",
    }
    config = load_config(env)
    assert config.value("namespace") == "ml"
    assert config.value("suspend") is True and config.value("backoff_limit") == 3
    assert config.value("ttl_seconds_after_finished") is None
    assert config.value("shm_size") == "1e3"
    assert BackendConfig.from_env(prefix="X_", environ={"X_NAMESPACE": "other"}).job.namespace == "other"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"namespace": "ML_Team"}, "namespace='ML_Team' is not a DNS-1123 label"),
        ({"job_name_prefix": "9x-"}, "job_name_prefix='9x-' must be empty or start with a-z"),
        ({"gpu_resource_name": "gpu"}, "gpu_resource_name='gpu' is not an extended resource name"),
        ({"clean_pod_policy": "Sometimes"}, "clean_pod_policy='Sometimes' is not one of ['None', 'Running', 'All']"),
        ({"shm_size": "8Gx"}, "shm_size='8Gx' is not a Kubernetes quantity"),
        ({"backoff_limit": -1}, "backoff_limit=-1 must be a non-negative integer"),
        ({"active_deadline_seconds": 0}, "active_deadline_seconds=0 is not allowed"),
        ({"suspend": "yes"}, "suspend='yes' must be true or false"),
        ({"rdzv_backend": "zookeeper"}, "rdzv_backend='zookeeper' is not one of"),
        (
            {"gpu_tolerations": {"nvidia.com/gpu": [{"key": "a", "operator": "Maybe"}]}},
            "gpu_tolerations['nvidia.com/gpu']: operator='Maybe' is not one of ['Exists', 'Equal']",
        ),
        (
            {"gpu_tolerations": {"nvidia.com/gpu": [{"key": "a", "operator": "Exists", "value": "b"}]}},
            "operator Exists must not have a value",
        ),
        ({"accelerators": {"A100": {"node_selector": {}}}}, "node_selector is empty"),
        ({"accelerators": {"A100": {"selector": {"a": "b"}}}}, "accelerators['A100']"),
        ({"default_labels": {"team": "a b"}}, "default_labels['team']='a b' is not a Kubernetes label value"),
        ({"mig_resource_template": "nvidia.com/mig"}, "must contain '{partition}'"),
        # `$` matched before a final newline; the shared patterns end in \Z
        ({"namespace": "flyte\n"}, "namespace='flyte\\n' is not a DNS-1123 label"),
        ({"service_account": "sa\n"}, "service_account='sa\\n' is not a DNS-1123 subdomain"),
        ({"job_name_prefix": "pt-\n"}, "job_name_prefix='pt-\\n' must be empty or start with a-z"),
        (
            {"interruptible_node_selector": {"spot": "true\n"}},
            "interruptible_node_selector['spot']='true\\n' is not a Kubernetes label value",
        ),
        ({"default_labels": {"team\n": "ml"}}, "is not a Kubernetes label key"),
        ({"progress_read_interval_s": 0}, "progress_read_interval_s=0 must be a positive number of seconds"),
        ({"status": {"progress_read_interval_s": "30s"}}, "progress_read_interval_s='30s' must be a positive number"),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, str) else None,
)
def test_invalid_values_are_named(kwargs: dict, message: str):
    with pytest.raises(ConfigError) as info:
        BackendConfig.from_dict(kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"PYTORCHJOB_CONFIG": "/nonexistent.yaml"}, "PYTORCHJOB_CONFIG='/nonexistent.yaml' is not a readable file"),
        ({"PYTORCHJOB_DEFAULT_LABELS": "a=b"}, "PYTORCHJOB_DEFAULT_LABELS cannot be set from the environment"),
        ({"PYTORCHJOB_BACKOFF_LIMIT": "many"}, "backoff_limit='many' must be a non-negative integer"),
    ],
    ids=["missing-file", "mapping-field", "bad-scalar"],
)
def test_env_errors(env: dict, message: str):
    with pytest.raises(ConfigError) as info:
        load_config(env)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("gpu_resource: amd.com/gpu\n", "unknown backend config key 'gpu_resource'; did you mean 'gpu_resource_name'"),
        ("namepsace: ml\n", "unknown backend config key 'namepsace'; did you mean 'namespace'"),
        ("job-name-prefx: x-\n", "unknown backend config key 'job-name-prefx'; did you mean 'job_name_prefix'"),
    ],
    ids=["missing-suffix", "swapped-letters", "dashes-and-dropped-letter"],
)
def test_unknown_yaml_key_suggests_the_nearest(yaml_text: str, message: str):
    with pytest.raises(ConfigError) as info:
        BackendConfig.from_yaml(yaml_text)
    assert message in str(info.value)  # the nearest key first


def test_unknown_yaml_key_far_from_every_key_lists_them_all():
    with pytest.raises(ConfigError) as info:
        BackendConfig.from_yaml("colour: blue\n")
    text = str(info.value)
    assert "did you mean" not in text
    assert "valid options: " in text
    assert all(f.name in text for f in dataclasses.fields(BackendConfig))


def test_unlisted_accelerator_uses_the_default_label():
    assert BackendConfig().gpu.placement_for("NVIDIA-H100-80GB-HBM3") == AcceleratorPlacement(
        node_selector={"nvidia.com/gpu.product": ["NVIDIA-H100-80GB-HBM3"]}
    )


def test_config_targets_are_the_registered_kinds_and_auto():
    """`BackendConfig.target` is checked when the config is built, before any kind is imported: its list of values
    must stay the registry's."""
    from backend_plugin.config import TARGETS
    from backend_plugin.targets.registry import BY_CONFIG, KINDS

    assert TARGETS == (*BY_CONFIG, "auto") and len(BY_CONFIG) == len(KINDS)


@pytest.mark.parametrize(
    "accelerator, config, warned",
    [
        ("A100", {}, True),  # GPU feature discovery writes NVIDIA-A100-SXM4-40GB / -80GB, never "A100"
        ("nvidia-tesla-a100", {}, True),  # GKE's name, under GFD's label
        ("NVIDIA-A100-SXM4-80GB", {}, False),  # a product name as GFD writes it
        ("Tesla-T4", {}, False),
        (
            "A100",
            {"accelerators": {"A100": {"node_selector": {"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB"]}}}},
            False,
        ),
        ("nvidia-tesla-a100", {"accelerator_label": "cloud.google.com/gke-accelerator"}, False),
    ],
    ids=["short-name", "cloud-name", "product-name", "tesla-t4", "mapped", "cloud-label"],
)
def test_a_placement_no_node_can_match_is_warned(accelerator, config, warned):
    problem = BackendConfig.from_dict(config).gpu.placement_problem(accelerator)
    assert (problem is not None) == warned
    if warned:
        assert f"accelerator {accelerator!r}" in problem and "`accelerators`" in problem
        assert "`accelerator_label`" in problem


def test_target_config_from_yaml_and_env():
    assert BackendConfig().target == "pytorchjob"
    assert BackendConfig.from_yaml("target: trainjob\n").target == "trainjob"
    assert BackendConfig.from_env(environ={"PYTORCHJOB_TARGET": "auto"}).target == "auto"
    with pytest.raises(ConfigError, match="target='trainjobs' is not one of"):
        BackendConfig.from_dict(dict(target="trainjobs"))
    with pytest.raises(ConfigError, match="trainjob_runtime_kind"):
        BackendConfig.from_dict(dict(trainjob_runtime_kind="Runtime"))
    with pytest.raises(ConfigError, match="trainjob_managed_by"):
        BackendConfig.from_dict(dict(trainjob_managed_by="me"))


def test_the_progress_read_interval_is_a_status_key():
    """30 s by default; set by its key, in the `status` section, or from the environment."""
    assert BackendConfig().status.progress_read_interval_s == 30.0
    assert BackendConfig.from_dict({"progress_read_interval_s": 10}).status.progress_read_interval_s == 10
    assert BackendConfig.from_yaml("status:\n  progress_read_interval_s: 60\n").status.progress_read_interval_s == 60
    assert load_config({"PYTORCHJOB_PROGRESS_READ_INTERVAL_S": "12.5"}).status.progress_read_interval_s == 12.5


def test_the_config_page_names_the_variable_rule_once_instead_of_a_column() -> None:
    """docs/reference/backend-config.md: every scalar key's variable is `PYTORCHJOB_` plus the key, said once above
    the tables, with no env-var column (whose long names broke mid-word in every cell); a value that only the file
    sets says so in its type."""
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "backend-config.md").read_text()
    headers = [line for line in page.splitlines() if line.startswith("| key |")]
    assert headers and not [h for h in headers if "env var" in h], headers
    assert not re.search(r"\| `PYTORCHJOB_[A-Z0-9_]+` \|", page)
    assert "`PYTORCHJOB_` plus the key" in page
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| ([^|]*) \|", page, re.MULTILINE)}
    defaults = BackendConfig()
    for key in KEYS:
        section, name = _KEYS[key]
        scalar = _section_type(section)().is_scalar(name)
        assert ("file only" in rows.get(key, "")) is not scalar, (key, rows.get(key))
        if scalar and defaults.value(key) != "":  # the variable the rule names is the one the config reads
            value = defaults.value(key)
            text = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
            assert BackendConfig.from_env(environ={f"PYTORCHJOB_{key.upper()}": text}).value(key) == value, key


def test_a_key_is_read_with_value_and_no_attribute_hides_a_misspelling() -> None:
    """`config.value("api_get_budget_s")` once read a key through `__getattr__`, which let mypy accept any attribute (a
    misspelled `config.api.get_budget_ss` too); a key is read with `value(key)`, a field as the attribute it is."""
    config = BackendConfig()
    assert "__getattr__" not in vars(BackendConfig)
    assert config.value("api_get_budget_s") == config.api.get_budget_s == 10.0
    assert config.value("trainjob_runtime_name") == config.kinds["trainjob"].runtime_name
    with pytest.raises(AttributeError):
        _ = config.api_get_budget_s
    with pytest.raises(KeyError, match="did you mean 'api_get_budget_s'"):
        config.value("api_get_budget")
