"""Kubeconfig files: one per identity, each naming the cluster's API server and CA."""

from __future__ import annotations

from pathlib import Path

import yaml


def write(
    path: Path,
    server: str,
    ca_file: Path,
    *,
    user: str,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """Write a kubeconfig for `user` (a client certificate, or a bearer token) at `path`."""
    creds: dict[str, str] = {}
    if cert_file is not None and key_file is not None:
        creds = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    if token is not None:
        creds = {"token": token}
    context: dict[str, str] = {"cluster": "devcluster", "user": user}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path
