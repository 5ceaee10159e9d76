"""Task-level settings outside `custom`: secret requests, the task timeout and interruptible (spot) placement.

The template `flytekit_secrets_spot.json` is what flytekit serializes for `train_on_spot` below (regenerate with
`--update-golden`); its golden job is `tests/data/jobs/secrets_timeout_spot.yaml` (see `GOLDEN` in
tests/targets/pytorchjob/test_writer.py).
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
from collections import OrderedDict

import pytest
from flyteidl.core import security_pb2
from flytekit import Secret
from flytekit.tools.translator import get_serializable
from google.protobuf import json_format, text_format

from backend_plugin.config import BackendConfig, ConfigError
from backend_plugin.errors import TemplateError
from backend_plugin.secrets import SECRET_ANNOTATION_PREFIX, SECRETS_LABEL, encode_secret
from flytekitplugins_pytorch import pytorch_task
from tests import golden as golden_files
from tests.helpers.jobs import SPOT, TEMPLATES, build, load, pod, specs
from tests.helpers.serialization import SETTINGS

TEMPLATE = "flytekit_secrets_spot"


@pytorch_task(
    workers_count=2,
    per_replica_cpu_request="500m",
    per_replica_memory_request="4Gi",
    per_replica_memory_limit="8Gi",
    per_replica_gpu_limit="1",
    secret_requests=[Secret(group="wandb", key="api_key")],
    timeout=datetime.timedelta(hours=2, seconds=30),
    interruptible=True,
)
def train_on_spot(epochs: int) -> float:
    """A GPU job that logs to W&B, may run on spot nodes and must finish within two hours."""
    return float(epochs)


def test_committed_template_is_what_flytekit_serializes():
    template = json_format.MessageToDict(
        get_serializable(OrderedDict(), SETTINGS, train_on_spot).template.to_flyte_idl()
    )
    template["metadata"].pop("runtime", None)  # the flytekit version; irrelevant to the backend
    path = TEMPLATES / f"{TEMPLATE}.json"
    committed = json.loads(golden_files.text(path, json.dumps(template, indent=2, sort_keys=True) + "\n"))
    assert committed == template
    assert committed["securityContext"] == {"secrets": [{"group": "wandb", "key": "api_key"}]}
    assert committed["metadata"]["timeout"] == "7230s" and committed["metadata"]["interruptible"] is True


# ---------------------------------------------------------------------------------------------------------------
# secrets


def _decode(annotation: str) -> security_pb2.Secret:
    """What flytepropeller's webhook does with an annotation value: base32 (its alphabet) -> text proto."""
    std = annotation.translate(str.maketrans("abcdefghijklmnopqrstuvwxyz123456", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"))
    text = base64.b32decode(std + "=" * (-len(std) % 8)).decode("utf-8")
    return text_format.Parse(text, security_pb2.Secret())


# Expected values are flytepropeller's own test vectors (Go: secrets.MarshalSecretsToMapStrings).
ENCODINGS = {
    "group-key-env": (
        {"group": "my_group", "key": "my_key", "mount_requirement": security_pb2.Secret.ENV_VAR},
        "m4zg54lqhiqce2lzl4txe22voarau12fpe4caitnpfpwwzlzeifg122vnz1f53tfof1ws3tfnvsw34b1ebcu3vs6kzavecq",
    ),
    "key-only": ({"key": "my_key"}, "nnsxsoraejwxsx2lmv3secq"),
    "quote-backslash-unescaped-apostrophe": ({"group": ";':/\\"}, "m4zg54lqhiqceozhhixvyxbcbi"),
}


@pytest.mark.parametrize("case", sorted(ENCODINGS), ids=sorted(ENCODINGS))
def test_encode_secret_matches_flytepropeller(case: str):
    fields, expected = ENCODINGS[case]
    secret = security_pb2.Secret(**fields)
    assert encode_secret(secret) == expected
    assert _decode(expected) == secret


@pytest.mark.parametrize(
    "fields",
    [
        {"group": "grüppe", "key": 'k\t\n"ey'},
        {"group": "g", "group_version": "v2", "key": "k", "mount_requirement": security_pb2.Secret.FILE},
        {"group": "g", "env_var": "WANDB_API_KEY"},
    ],
    ids=["non-ascii-and-escapes", "all-core-fields", "env-var-name"],
)
def test_encoded_secret_decodes_back(fields: dict):
    secret = security_pb2.Secret(**fields)
    encoded = encode_secret(secret)
    assert encoded == encoded.lower() and "=" not in encoded
    assert _decode(encoded) == secret


@pytest.mark.parametrize("template_name", ["hand_gpu_seed", "hand_elastic", "official_pod_template", "legacy_v0"])
def test_secrets_mark_every_replica_pod(template_name: str):
    template = load(template_name)
    template["securityContext"] = {
        "secrets": [{"group": "wandb", "key": "api_key"}, {"group": "hf", "key": "token", "mountRequirement": "FILE"}]
    }
    job = build(template)
    for role, rs in specs(job).items():
        meta = rs["template"]["metadata"]
        assert meta["labels"][SECRETS_LABEL] == "true", role
        secrets = {k: _decode(v) for k, v in meta["annotations"].items() if k.startswith(SECRET_ANNOTATION_PREFIX)}
        assert secrets == {
            "flyte.secrets/s0": security_pb2.Secret(group="wandb", key="api_key"),
            "flyte.secrets/s1": security_pb2.Secret(
                group="hf", key="token", mount_requirement=security_pb2.Secret.FILE
            ),
        }, role
    assert SECRETS_LABEL not in job["metadata"]["labels"]  # the webhook mutates pods, not the job


@pytest.mark.parametrize("context", [None, {}, {"secrets": []}], ids=["absent", "empty-context", "empty-list"])
def test_no_secrets_no_webhook_label(context):
    template = load("hand_gpu_seed")
    if context is not None:
        template["securityContext"] = context
    job = build(template)
    for rs in specs(job).values():
        meta = rs["template"]["metadata"]
        assert SECRETS_LABEL not in meta["labels"]
        assert not [k for k in meta["annotations"] if k.startswith(SECRET_ANNOTATION_PREFIX)]


def test_secret_annotations_win_over_execution_annotations():
    template = load("hand_gpu_seed")
    template["securityContext"] = {"secrets": [{"group": "wandb", "key": "api_key"}]}
    job = build(template, annotations={"flyte.secrets/s0": "stale"})
    expected = encode_secret(security_pb2.Secret(group="wandb", key="api_key"))
    for rs in specs(job).values():
        assert rs["template"]["metadata"]["annotations"]["flyte.secrets/s0"] == expected


BAD_SECRETS = {
    "context-not-a-dict": (["x"], r"securityContext=\['x'\].*SecurityContext"),
    "secrets-not-a-list": ({"secrets": {"group": "a"}}, r"securityContext.secrets=\{'group': 'a'\}.*list"),
    "secret-not-a-dict": ({"secrets": ["wandb"]}, r"securityContext.secrets(\[0\])?='wandb'.*(Secret dict|a dict)"),
    "unknown-key": ({"secrets": [{"grp": "wandb"}]}, r"(securityContext|Secret).*grp"),
    "bad-mount": ({"secrets": [{"group": "a", "mountRequirement": "USB"}]}, r"securityContext.secrets\[0\].*USB"),
    "bad-mount-number": (
        {"secrets": [{"group": "a", "mountRequirement": 7}]},
        r"secrets\[0\].mountRequirement=7.*\['ANY', 'ENV_VAR', 'FILE'\]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SECRETS), ids=sorted(BAD_SECRETS))
def test_invalid_secrets(case: str):
    context, message = BAD_SECRETS[case]
    template = load("hand_gpu_seed")
    template["securityContext"] = context
    with pytest.raises(TemplateError, match=message):
        build(template)


# ---------------------------------------------------------------------------------------------------------------
# timeout -> activeDeadlineSeconds


TIMEOUTS = {
    "whole-seconds": ("7230s", None, None, 7230),
    "fraction-rounds-up": ("0.5s", None, None, 1),
    "zero-fraction": ("3600.000s", None, None, 3600),
    "zero-means-none": ("0s", None, None, None),
    "zero-falls-back-to-backend": ("0s", None, 86400, 86400),
    "timeout-beats-backend-default": ("600s", None, 86400, 600),
    "no-timeout-backend-default": (None, None, 86400, 86400),
    "run-policy-wins": ("7230s", 900, 86400, 900),
}


@pytest.mark.parametrize("case", sorted(TIMEOUTS), ids=sorted(TIMEOUTS))
def test_timeout_sets_active_deadline(case: str):
    timeout, run_policy, backend, expected = TIMEOUTS[case]
    template = load("hand_gpu_seed")
    template.setdefault("metadata", {}).pop("timeout", None)
    if timeout is not None:
        template["metadata"]["timeout"] = timeout
    template["custom"].pop("runPolicy", None)
    if run_policy is not None:
        template["custom"]["runPolicy"] = {"activeDeadlineSeconds": run_policy}
    job = build(template, BackendConfig.from_dict(dict(active_deadline_seconds=backend)))
    assert job["spec"]["runPolicy"].get("activeDeadlineSeconds") == expected


@pytest.mark.parametrize(
    "value", ["1h", "-5s", "5", 3600, "1.5e3s"], ids=["unit-h", "negative", "no-unit", "int", "exp"]
)
def test_invalid_timeout(value):
    template = load("hand_gpu_seed")
    template.setdefault("metadata", {})["timeout"] = value
    # The template's type check may catch it first (protobuf's message names the field), else the builder does.
    with pytest.raises(TemplateError, match=rf"metadata.timeout={value!r}.*duration like '3600s'|timeout field"):
        build(template)


# ---------------------------------------------------------------------------------------------------------------
# interruptible


GKE_SPOT_TOLERATION = {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    "template_flag, execution_flag, applied",
    [
        (True, None, True),
        (False, None, False),
        (None, None, False),
        (True, False, False),
        (False, True, True),
    ],
    ids=["template", "template-off", "template-unset", "execution-turns-off", "execution-turns-on"],
)
def test_interruptible_placement_on_every_replica(template_flag, execution_flag, applied):
    template = load("hand_per_role")  # CPU master, GPU workers: the spot settings reach both
    template.setdefault("metadata", {}).pop("interruptible", None)
    if template_flag is not None:
        template["metadata"]["interruptible"] = template_flag
    job = build(template, SPOT, interruptible=execution_flag)
    for role in ("Master", "Worker"):
        spec = pod(job, role)
        assert (GKE_SPOT_TOLERATION in spec.get("tolerations", [])) is applied, role
        assert (spec.get("nodeSelector", {}).get("cloud.google.com/gke-spot") == "true") is applied, role
    # GPU tolerations are kept next to the spot ones
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod(job, "Worker")["tolerations"]


def test_interruptible_without_config_changes_nothing():
    template = load("hand_per_role")
    plain = build(copy.deepcopy(template))
    template.setdefault("metadata", {})["interruptible"] = True
    assert build(template) == plain


def test_interruptible_merges_with_pod_template_selector_and_tolerations():
    template = load("hand_pod_template")
    template["metadata"] = {"interruptible": True}
    spec = template["k8sPod"]["podSpec"]
    spec["nodeSelector"] = {"cloud.google.com/gke-spot": "false", "disk": "ssd"}
    spec["tolerations"] = [dict(GKE_SPOT_TOLERATION)]
    job = build(template, SPOT)
    for role in specs(job):
        merged = pod(job, role)
        assert merged["nodeSelector"] == {"cloud.google.com/gke-spot": "true", "disk": "ssd"}  # config wins
        assert merged["tolerations"].count(GKE_SPOT_TOLERATION) == 1


def test_interruptible_must_be_a_bool():
    template = load("hand_gpu_seed")
    template["metadata"] = {"interruptible": "yes"}
    with pytest.raises(TemplateError, match=r"metadata.interruptible='yes'.*true or false|metadata.interruptible"):
        build(template)


BAD_SPOT_CONFIG = {
    "tolerations-not-a-list": (
        {"interruptible_tolerations": {"key": "spot"}},
        r"interruptible_tolerations=\{'key': 'spot'\}.*list",
    ),
    "bad-operator": (
        {"interruptible_tolerations": [{"key": "spot", "operator": "In"}]},
        r"interruptible_tolerations\[0\]: operator='In'",
    ),
    "unknown-toleration-key": (
        {"interruptible_tolerations": [{"kee": "spot"}]},
        r"interruptible_tolerations\[0\]: unknown toleration keys \['kee'\]",
    ),
    "selector-not-a-map": (
        {"interruptible_node_selector": ["spot"]},
        r"interruptible_node_selector=\['spot'\].*label -> value",
    ),
    "bad-selector-key": (
        {"interruptible_node_selector": {"bad key": "x"}},
        r"interruptible_node_selector key 'bad key'.*label key",
    ),
    "bad-selector-value": (
        {"interruptible_node_selector": {"spot": "yes please"}},
        r"interruptible_node_selector\['spot'\]='yes please'.*label value",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SPOT_CONFIG), ids=sorted(BAD_SPOT_CONFIG))
def test_invalid_interruptible_config(case: str):
    fields, message = BAD_SPOT_CONFIG[case]
    with pytest.raises(ConfigError, match=message):
        BackendConfig.from_dict(fields)


def test_interruptible_config_from_yaml_and_not_from_env():
    config = BackendConfig.from_yaml(
        "interruptible-tolerations:\n"
        "  - {key: cloud.google.com/gke-spot, operator: Equal, value: 'true', effect: NoSchedule}\n"
        "interruptible-node-selector: {cloud.google.com/gke-spot: 'true'}\n"
    )
    assert config.value("interruptible_tolerations") == SPOT.value("interruptible_tolerations")
    assert config.value("interruptible_node_selector") == SPOT.value("interruptible_node_selector")
    with pytest.raises(ConfigError, match=r"PYTORCHJOB_INTERRUPTIBLE_NODE_SELECTOR cannot be set from the environment"):
        BackendConfig.from_env(environ={"PYTORCHJOB_INTERRUPTIBLE_NODE_SELECTOR": "a=b"})
    assert (
        BackendConfig().value("interruptible_tolerations") == []
        and BackendConfig().value("interruptible_node_selector") == {}
    )
