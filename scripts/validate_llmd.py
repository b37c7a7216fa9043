#!/usr/bin/env python3
"""Checks the llm-d files in deploy/kubernetes/llm-d/ that the Kubernetes API schemas do not cover.

- The InferencePool (inference.networking.k8s.io/v1) against a JSON schema of its spec written
  from the Gateway API Inference Extension v1.5.0 API reference: required fields, types, port
  ranges, 1-8 unique target ports, the failure-mode enum, and no unknown field.
- The endpoint picker's EndpointPickerConfig (the group llm-d-inference-scheduler v0.8.0
  registers): known top-level fields, every plugin with a type, unique names, every pluginRef
  naming a declared plugin, and the core-metrics-extractor's engineConfigs naming metrics
  that Tessera exports (read from the Rust source, so a renamed gauge fails here).

Exit status 1 with one line per problem; 0 and a summary line when everything holds.
"""
import json
import pathlib
import re
import sys

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
LLMD = ROOT / "deploy/kubernetes/llm-d"

PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
INFERENCE_POOL_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["endpointPickerRef", "selector", "targetPorts"],
    "properties": {
        "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
        "endpointPickerRef": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "failureMode": {"enum": ["FailOpen", "FailClose"]},
                "group": {"type": "string", "maxLength": 253},
                "kind": {"type": "string", "minLength": 1, "maxLength": 63},
                "name": {"type": "string", "minLength": 1, "maxLength": 253},
                "port": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["number"],
                    "properties": {"number": PORT},
                },
            },
        },
        "selector": {
            "type": "object",
            "additionalProperties": False,
            "required": ["matchLabels"],
            "properties": {
                "matchLabels": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 64,
                    "additionalProperties": {"type": "string", "maxLength": 63},
                }
            },
        },
        "targetPorts": {
            "type": "array",
            "minItems": 1,
            "maxItems": 8,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["number"],
                "properties": {"number": PORT},
            },
        },
    },
}

EPP_TOP = {"apiVersion", "kind", "featureGates", "plugins", "schedulingProfiles",
           "saturationDetector", "dataLayer", "flowControl", "parser"}
EPP_API_VERSION = "inference.networking.x-k8s.io/v1alpha1"


def check_pool(doc, problems):
    if doc.get("apiVersion") != "inference.networking.k8s.io/v1":
        problems.append(f"InferencePool apiVersion {doc.get('apiVersion')!r}")
    if not doc.get("metadata", {}).get("name"):
        problems.append("InferencePool without metadata.name")
    extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
    if extra:
        problems.append(f"InferencePool: unknown top-level fields {sorted(extra)}")
    spec = doc.get("spec", {})
    for err in jsonschema.Draft202012Validator(INFERENCE_POOL_SPEC).iter_errors(spec):
        path = ".".join(str(p) for p in err.absolute_path) or "spec"
        problems.append(f"InferencePool spec.{path}: {err.message}")
    numbers = [p.get("number") for p in spec.get("targetPorts", []) if isinstance(p, dict)]
    if len(numbers) != len(set(numbers)):
        problems.append("InferencePool targetPorts: port numbers must be unique")
    ref = spec.get("endpointPickerRef", {})
    if ref.get("kind", "Service") == "Service" and "port" not in ref:
        problems.append("InferencePool endpointPickerRef: port is required for a Service")


def exported_metrics():
    """Every `tessera_*` name that appears in a string literal of the server's source."""
    names = set()
    for path in (ROOT / "crates").rglob("*.rs"):
        names.update(re.findall(r"\"(tessera_[a-z_]+)", path.read_text()))
    return names


def check_epp(cfg, problems):
    if cfg.get("apiVersion") != EPP_API_VERSION or cfg.get("kind") != "EndpointPickerConfig":
        problems.append(f"epp-config: apiVersion/kind {cfg.get('apiVersion')}/{cfg.get('kind')}")
    extra = set(cfg) - EPP_TOP
    if extra:
        problems.append(f"epp-config: unknown top-level fields {sorted(extra)}")
    declared = {}
    for i, plugin in enumerate(cfg.get("plugins") or []):
        if not isinstance(plugin, dict) or not plugin.get("type"):
            problems.append(f"epp-config plugins[{i}]: no type")
            continue
        if set(plugin) - {"name", "type", "parameters"}:
            problems.append(f"epp-config plugins[{i}]: unknown fields {sorted(set(plugin) - {'name', 'type', 'parameters'})}")
        name = plugin.get("name", plugin["type"])
        if name in declared:
            problems.append(f"epp-config: plugin name {name!r} declared twice")
        declared[name] = plugin
    refs = []
    for prof in cfg.get("schedulingProfiles") or []:
        refs += [(f"profile {prof.get('name')}", p.get("pluginRef")) for p in prof.get("plugins", [])]
    for src in (cfg.get("dataLayer") or {}).get("sources", []):
        refs.append(("dataLayer source", src.get("pluginRef")))
        refs += [("dataLayer extractor", e.get("pluginRef")) for e in src.get("extractors", [])]
    for where, ref in refs:
        if ref not in declared:
            problems.append(f"epp-config {where}: pluginRef {ref!r} names no declared plugin")
    if not cfg.get("schedulingProfiles"):
        problems.append("epp-config: no scheduling profile")
    metrics = exported_metrics()
    extractors = [p for p in declared.values() if p["type"] == "core-metrics-extractor"]
    if not extractors:
        problems.append("epp-config: no core-metrics-extractor")
    for ext in extractors:
        params = ext.get("parameters") or {}
        engines = {e.get("name"): e for e in params.get("engineConfigs", [])}
        if params.get("defaultEngine") not in engines:
            problems.append(f"epp-config: defaultEngine {params.get('defaultEngine')!r} has no engineConfigs entry")
        for name, engine in engines.items():
            for key in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "cacheInfoSpec"):
                metric = str(engine.get(key, "")).split("{")[0]
                if metric not in metrics:
                    problems.append(f"epp-config engine {name}: {key} {metric!r} is not a Tessera metric")


def main():
    problems = []
    pools = [d for d in yaml.safe_load_all((LLMD / "inference-pool.yaml").read_text())
             if d and d.get("kind") == "InferencePool"]
    if len(pools) != 1:
        problems.append(f"expected one InferencePool, found {len(pools)}")
    for pool in pools:
        check_pool(pool, problems)
    check_epp(yaml.safe_load((LLMD / "epp-config.yaml").read_text()), problems)
    for p in problems:
        print(f"deploy/kubernetes/llm-d: {p}", file=sys.stderr)
    if problems:
        return 1
    print("llm-d: InferencePool and EndpointPickerConfig valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
