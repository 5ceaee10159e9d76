"""Each rule of `pytorch_contract` against its upstream source, with valid neighbours beside the invalid values.

Every verdict below is the upstream function's, read from its source:

- label and annotation keys, toleration keys: apimachinery `validation.IsQualifiedName` (`content.IsLabelKey`);
  label values: `IsValidLabelValue`;
- environment variable names: `IsRelaxedEnvVarName` (Kubernetes 1.32 and later; what no version accepts is refused)
  and `IsEnvVarName` (before 1.32; a warning naming the version);
- tolerations: `ValidateTolerations` (operators `Lt`/`Gt` only behind the alpha `TaintTolerationComparisonOperators`
  gate: a warning);
- container names: `validateContainers` / `validateInitContainers` (`IsDNS1123Label`, unique in the pod);
- image references: distribution/reference `ParseNormalizedNamed`, as the kubelet calls it, with go-digest `Parse`;
- quantities: apimachinery `resource.ParseQuantity` and the CRDs' quantity pattern; integer resources
  (`ValidateResourceQuantityValue`: `MilliValue() % 1000 == 0`);
- CRD patterns: Go's `regexp` (RE2) as the API server runs them (`$` is the end of the text);
- queue names: Kueue's `ValidateQueueName` (`IsDNS1123Subdomain` of the `kueue.x-k8s.io/queue-name` label, whose
  value is at most 63 characters); a Volcano `Queue`'s name is a DNS-1123 subdomain.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from pytorch_contract.crd_patterns import compile_pattern, pattern_matches
from pytorch_contract.k8s_metadata import annotation_problems, label_problems
from pytorch_contract.k8s_names import (
    DNS1123_SUBDOMAIN,
    LABEL_VALUE,
    container_name_problem,
    env_var_name_problem,
    image_reference_problem,
    queue_name_problem,
    relaxed_env_var_name_problem,
)
from pytorch_contract.pod_rules import (
    container_name_problems,
    env_name_problems,
    env_name_warnings,
    toleration_problems,
    toleration_warnings,
)
from pytorch_contract.quantity import (
    MAX_WHOLE_QUANTITY,
    QuantityError,
    is_quantity,
    is_whole_quantity,
    parse_quantity,
    quantity_problem,
)

WHERE = "setting"

# ---------------------------------------------------------------------------------------------------------------
# Environment variable names: (name, refused by every version, refused before 1.32)

ENV_NAMES = [
    ("MY_VAR", False, False),
    ("my.env-name", False, False),
    ("-x", False, False),  # IsEnvVarName's first character may be '-', '.' or '_'
    ("_", False, False),
    ("1ABC", False, True),  # a leading digit: only the relaxed rule takes it
    ("MY VAR", False, True),
    ("a:b", False, True),
    ("$HOME", False, True),
    ("x[0]", False, True),
    ("~", False, True),
    (" ", False, True),  # a space is printable (Go's unicode.IsPrint)
    ("..x", False, True),  # hasChDirPrefix: only IsEnvVarName checks it
    (".", False, True),
    ("..", False, True),
    ("A=B", True, True),
    ("=", True, True),
    ("", True, True),
    ("A\tB", True, True),  # a tab is not printable
    ("A\nB", True, True),
    ("CL\u00c9", True, True),  # not ASCII
    ("\x7f", True, True),
]


@pytest.mark.parametrize(("name", "refused", "old_refuse"), ENV_NAMES, ids=[repr(n[0]) for n in ENV_NAMES])
def test_env_names_relaxed_and_strict(name: str, refused: bool, old_refuse: bool) -> None:
    assert (relaxed_env_var_name_problem(name) is not None) is refused
    assert (env_var_name_problem(name) is not None) is old_refuse
    problems = env_name_problems([name], WHERE)
    warnings = env_name_warnings([name], WHERE)
    assert bool(problems) is refused
    assert bool(warnings) is (old_refuse and not refused)  # a refused name is not also warned about
    for message in problems + warnings:
        assert message.startswith(f"{WHERE}: {name!r}")
    for message in warnings:
        assert "1.32" in message and "RelaxedEnvironmentVariableValidation" in message


def test_env_names_that_are_not_strings_are_refused() -> None:
    assert env_name_problems([None, 3], WHERE) and env_name_warnings([None, 3], WHERE) == []


# ---------------------------------------------------------------------------------------------------------------
# Label and annotation keys and values (IsQualifiedName, IsValidLabelValue)

LABELS = [
    ({"team": "ml"}, True),
    ({"example.com/team": "ml"}, True),
    ({"a" * 63: "v"}, True),
    ({"a" * 64: "v"}, False),
    ({"p" * 253 + "/n": "v"}, True),
    ({"p" * 254 + "/n": "v"}, False),
    ({"/n": "v"}, False),  # empty prefix
    ({"a/b/c": "v"}, False),
    ({"Example.com/team": "v"}, False),  # the prefix is a lower-case DNS subdomain
    ({"example.com/Team_1.x": "v"}, True),  # the name part takes upper case, '_' and '.'
    ({"team-": "v"}, False),
    ({"team": ""}, True),  # an empty label value
    ({"team": "v" * 63}, True),
    ({"team": "v" * 64}, False),
    ({"team": "ml team"}, False),
    ({"team": "ml\n"}, False),
    ({"team": "-ml"}, False),
]


@pytest.mark.parametrize(("labels", "ok"), LABELS, ids=[repr(next(iter(c[0].items())))[:40] for c in LABELS])
def test_label_keys_and_values(labels: dict[str, str], ok: bool) -> None:
    assert (label_problems(labels, WHERE) == []) is ok


@pytest.mark.parametrize(
    ("key", "ok"),
    [("Example.com/team", True), ("EXAMPLE.COM/Team", True), ("example.com/team!", False), ("a/b/c", False)],
)
def test_annotation_keys_are_checked_lower_cased(key: str, ok: bool) -> None:
    """`ValidateAnnotations` checks `IsQualifiedName(strings.ToLower(k))`: an upper-case prefix passes there."""
    assert (annotation_problems({key: "v"}, WHERE) == []) is ok


# ---------------------------------------------------------------------------------------------------------------
# Tolerations (ValidateTolerations): (toleration, refused, warned)

TOLERATIONS = [
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, False, False),
    ({"key": "k", "value": "v"}, False, False),  # an empty operator means Equal
    ({"key": "k", "operator": "Equal", "value": ""}, False, False),  # Equal with an empty value
    ({"operator": "Exists"}, False, False),  # no key: tolerates everything
    ({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}, False, False),
    ({"key": "k", "operator": "Exists", "value": "v"}, True, False),
    ({"value": "v"}, True, False),  # no key needs Exists
    ({"key": "k", "operator": "Equal", "value": "a b"}, True, False),
    ({"key": "k", "operator": "exists"}, True, False),  # operators are case-sensitive
    ({"key": "k", "operator": "In"}, True, False),
    ({"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}, True, False),
    ({"key": "k", "effect": "Evict"}, True, False),
    ({"key": "k!", "operator": "Exists"}, True, False),
    ({"key": "node.kubernetes.io/sla", "operator": "Gt", "value": "950"}, False, True),  # alpha gate, 1.35+
    ({"key": "sla", "operator": "Lt", "value": "5"}, False, True),
    ({"operator": "Gt", "value": "5"}, True, True),  # no key still needs Exists
]


@pytest.mark.parametrize(("toleration", "refused", "warned"), TOLERATIONS, ids=[repr(t[0])[:50] for t in TOLERATIONS])
def test_tolerations(toleration: dict, refused: bool, warned: bool) -> None:
    problems = toleration_problems([toleration], WHERE)
    warnings = toleration_warnings([toleration], WHERE)
    assert bool(problems) is refused, problems
    assert bool(warnings) is warned, warnings
    assert all(m.startswith(f"{WHERE}[0]: ") for m in problems + warnings)
    assert all("TaintTolerationComparisonOperators" in m for m in warnings)


# ---------------------------------------------------------------------------------------------------------------
# Container names (validateContainers: IsDNS1123Label, unique)

CONTAINER_NAMES = [
    ("primary", True),
    ("sidecar-1", True),
    ("1sidecar", True),  # a DNS-1123 label may start with a digit
    ("a" * 63, True),
    ("Sidecar", False),
    ("side_car", False),
    ("-a", False),
    ("a-", False),
    ("a.b", False),
    ("a" * 64, False),
    ("", False),
    (None, False),
]


@pytest.mark.parametrize(("name", "ok"), CONTAINER_NAMES, ids=[repr(n)[:20] for n, _ in CONTAINER_NAMES])
def test_container_names(name: object, ok: bool) -> None:
    assert (container_name_problem(name) is None) is ok
    problems = container_name_problems([name], [], WHERE)
    assert (problems == []) is ok
    assert all(m.startswith(f"{WHERE}: container name {name!r}") for m in problems)


@pytest.mark.parametrize(
    ("containers", "init_containers", "ok"),
    [
        (["primary", "sidecar"], ["setup"], True),
        (["primary", "primary"], [], False),
        (["primary"], ["primary"], False),  # init containers share the pod's names
        (["primary"], ["setup", "setup"], False),
    ],
)
def test_container_names_are_unique_in_the_pod(containers: list, init_containers: list, ok: bool) -> None:
    assert (container_name_problems(containers, init_containers, WHERE) == []) is ok


# ---------------------------------------------------------------------------------------------------------------
# Image references (distribution/reference ParseNormalizedNamed + go-digest Parse)

HEX64 = "0123456789abcdef" * 4
IMAGES = [
    ("ubuntu", True),  # Docker Hub's library/ubuntu, the kubelet adds :latest
    ("ubuntu:22.04", True),
    ("localhost/x", True),
    ("localhost:5000/team/x:1", True),
    ("ghcr.io/org/train:1.0", True),
    ("Example.com/org/train", True),  # an upper-case registry is a registry
    ("[::1]:5000/x", True),
    ("a__b", True),
    ("a--b", True),
    ("ghcr.io/org/train@sha256:" + HEX64, True),
    ("ghcr.io/org/train:1.0@sha256:" + HEX64, True),
    ("x@sha384:" + "a" * 96, True),
    ("x@sha512:" + "a" * 128, True),
    (HEX64 + ":latest", True),  # only the whole string reads as an image ID
    ("ghcr.io/" + HEX64, True),
    ("ubuntu:" + "t" * 128, True),
    ("a" * 247, True),  # library/ + 247 = 255
    ("reg.io/" + "a" * 255, True),  # the registry does not count
    ("x@sha256:" + "a" * 32, False),  # sha256 takes 64 digits
    ("x@sha256:" + HEX64.upper(), False),  # go-digest takes lower-case hex only
    ("x@md5:" + "a" * 32, False),  # not an algorithm go-digest registers
    ("x@SHA256:" + HEX64, False),
    ("x@sha256:" + HEX64 + "0", False),
    (HEX64, False),  # a bare 64-hex repository name
    ("Ubuntu", False),
    ("ghcr.io/MyOrg/train", False),
    ("localhost:5000/Foo:1", False),
    ("a" * 248, False),
    ("reg.io/" + "a" * 256, False),
    ("ubuntu:" + "t" * 129, False),
    ("ubuntu:-x", False),
    ("ubuntu:", False),
    ("x@", False),
    ("a___b", False),
    ("-a", False),
    ("a//b", False),
    (" ubuntu", False),
    ("ubuntu\n", False),
    ("", False),
]


@pytest.mark.parametrize(("image", "ok"), IMAGES, ids=[repr(i)[:40] for i, _ in IMAGES])
def test_image_references(image: str, ok: bool) -> None:
    problem = image_reference_problem(image)
    assert (problem is None) is ok, problem


def test_image_messages_name_the_part() -> None:
    assert "upper-case" in (image_reference_problem("Ubuntu") or "") and "'Ubuntu'" in image_reference_problem("Ubuntu")
    assert "'md5'" in (image_reference_problem("x@md5:" + "a" * 32) or "")
    assert "64 lower-case hex digits" in (image_reference_problem("x@sha256:" + "a" * 32) or "")
    assert "image ID" in (image_reference_problem(HEX64) or "")


# ---------------------------------------------------------------------------------------------------------------
# Quantities (ParseQuantity and the CRD pattern), and whole amounts for integer resources

QUANTITIES = [
    ("500m", Decimal("0.5")),
    ("2", Decimal(2)),
    ("+2", Decimal(2)),
    ("2.0", Decimal(2)),
    ("1.", Decimal(1)),
    (".5", Decimal("0.5")),
    ("4Gi", Decimal(4 * 2**30)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("1e+3", Decimal(1000)),
    ("1e-3", Decimal("0.001")),
    ("1E", Decimal(10**18)),  # exa, not an exponent
    ("-1", Decimal(-1)),  # a quantity; `quantity_problem` refuses it as a resource amount
    ("1e100", Decimal("1e100")),  # no upper bound on a decimal exponent
    ("1e4294967296", Decimal(1)),  # ParseQuantity keeps the exponent as an int32
    ("0.0000000001", Decimal("1e-9")),  # rounded up to a whole nano-unit
    ("8Ei", Decimal(2**63 - 1)),  # binary values are capped at 2^63-1
    ("1e1.5", None),  # the pattern takes it, ParseQuantity does not
    ("1Gi\n", None),  # RE2's `$` is the end of the text
    ("+", None),  # ParseQuantity reads 0, the pattern refuses it
    (".", None),
    ("1e", None),
    ("1K", None),
    ("1ki", None),
    (" 1", None),
    ("1e9223372036854775808", None),  # the exponent is not an int64
    ("\u0661", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "value"), QUANTITIES, ids=[repr(t) for t, _ in QUANTITIES])
def test_quantities(text: str, value: Decimal | None) -> None:
    assert is_quantity(text) is (value is not None)
    if value is None:
        with pytest.raises(QuantityError):
            parse_quantity(text)
        assert quantity_problem(text) is not None
    else:
        assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("amount", "whole"),
    [
        ("2", True), (2, True), ("2.0", True), ("2000m", True), ("1e1", True), ("+2", True), ("0", True),
        ("1Ki", True), (str(MAX_WHOLE_QUANTITY), True),
        ("1.5", False), ("500m", False), ("1.0001", False), ("1000001u", False), ("1n", False),
        (str(MAX_WHOLE_QUANTITY + 1), False), ("1e1.5", False), ("x", False),
    ],
)  # fmt: skip
def test_whole_amounts_for_integer_resources(amount: object, whole: bool) -> None:
    """`ValidateResourceQuantityValue`: an integer resource (GPUs) needs `MilliValue() % 1000 == 0`, where
    `MilliValue` rounds up to a thousandth."""
    assert is_whole_quantity(amount) is whole
    assert (quantity_problem(amount, whole=True) is None) is whole


@pytest.mark.parametrize(
    ("amount", "negative_ok", "expected"),
    [("-1", False, "negative"), ("-1", True, None), ("1Gi", False, None), ("1Gi\n", False, "not a Kubernetes")],
)
def test_quantity_problem_for_resource_amounts(amount: str, negative_ok: bool, expected: str | None) -> None:
    problem = quantity_problem(amount, negative_ok=negative_ok)
    assert problem is None if expected is None else (problem is not None and expected in problem)


# ---------------------------------------------------------------------------------------------------------------
# CRD patterns as the API server runs them (Go regexp, RE2 syntax)

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""The CRDs' quantity pattern (backend_plugin/crds)."""


def test_the_quantity_pattern_is_the_crds() -> None:
    crd = Path(__file__).resolve().parents[2] / "backend_plugin" / "crds" / "kubeflow.org_pytorchjobs.yaml"
    assert f"pattern: {QUANTITY_PATTERN}\n" in crd.read_text()


PATTERNS = [
    (QUANTITY_PATTERN, "1Gi", True),
    (QUANTITY_PATTERN, "1Gi\n", False),  # Python's `$` alone would take it
    (QUANTITY_PATTERN, "1e1.5", True),  # the pattern's own verdict (ParseQuantity's is the quantity rule's)
    (QUANTITY_PATTERN, "-1", True),
    (QUANTITY_PATTERN, "\u0661", False),
    (r"^[0-9]+\z", "1\n", False),
    (r"^\d+$", "\u0661", False),  # RE2's \d is ASCII
    (r"^\w+$", "\u00e9", False),
    (r"^\s$", "\v", False),  # RE2's \s has no vertical tab
    (r"^\s$", "\t", True),
    (r"^[[:xdigit:]]+$", "aF09", True),
    (r"^[[:xdigit:]]+$", "g", False),
    (r"^(?<name>a)$", "a", True),
    (r"^\Qa.b\E$", "a.b", True),
    (r"^\Qa.b\E$", "axb", False),
    (r"(?m)^a$", "a\nb", True),
    (r"b", "abc", True),  # unanchored, as MatchString
    (r"[$]", "$", True),  # a '$' in a class is a character
]


@pytest.mark.parametrize(("pattern", "value", "ok"), PATTERNS, ids=[f"{p[:20]}-{v!r}" for p, v, _ in PATTERNS])
def test_crd_patterns_read_as_re2(pattern: str, value: str, ok: bool) -> None:
    assert pattern_matches(pattern, value) is ok


def test_a_pattern_python_cannot_read_is_said_not_misread() -> None:
    with pytest.raises(ValueError, match="Unicode class"):
        compile_pattern(r"^\pL+$")


# ---------------------------------------------------------------------------------------------------------------
# Queue names: Kueue's job webhook (kubernetes-sigs/kueue, pkg/controller/jobframework/validation.go,
# ValidateQueueName -> ValidateLabelAsCRDName -> IsDNS1123Subdomain) on the kueue.x-k8s.io/queue-name label, whose
# value is at most 63 characters (IsValidLabelValue); Volcano's Queue is a custom resource, named by a DNS-1123
# subdomain. (name, admitted)

QUEUE_NAMES = [
    ("team-a", True),
    ("research", True),
    ("a", True),
    ("0", True),
    ("team-a.gpu", True),  # dots between parts: a subdomain
    ("q1.q2.q3", True),
    ("a" * 63, True),
    ("a" * 64, False),  # a valid subdomain, but no label value holds it
    ("Team_A", False),  # a label value Kueue refuses
    ("team_a", False),
    ("Team-A", False),
    ("TEAM", False),
    ("team a", False),
    ("-team", False),
    ("team-", False),
    ("team.", False),
    (".team", False),
    ("a..b", False),
    ("a.-b", False),
    ("a-.b", False),
    ("", False),
    ("team\n", False),
    ("tëam", False),
]


@pytest.mark.parametrize(("name", "admitted"), QUEUE_NAMES, ids=[repr(q[0])[:24] for q in QUEUE_NAMES])
def test_queue_names_are_what_kueue_admits(name: str, admitted: bool) -> None:
    problem = queue_name_problem(name)
    assert (problem is None) == admitted, problem
    if not admitted:
        assert "DNS-1123 subdomain of at most 63 characters" in problem and "ValidateQueueName" in problem


@pytest.mark.parametrize(("name", "admitted"), QUEUE_NAMES, ids=[repr(q[0])[:24] for q in QUEUE_NAMES])
def test_every_admitted_queue_name_is_a_label_value_and_a_volcano_queue_name(name: str, admitted: bool) -> None:
    """No false positive for Volcano: the names refused here are names no Volcano Queue can have (not a DNS-1123
    subdomain), or that the label the same value sets cannot hold (over 63 characters)."""
    subdomain = DNS1123_SUBDOMAIN.match(name) is not None
    assert admitted == (subdomain and LABEL_VALUE.match(name) is not None)


def test_a_queue_name_close_to_a_valid_one_is_offered() -> None:
    assert "did you mean 'team-a'?" in (queue_name_problem("Team_A") or "")
    assert "did you mean" not in (queue_name_problem("a..b") or "")
    assert queue_name_problem(7) is not None and "got int" in (queue_name_problem(7) or "")
