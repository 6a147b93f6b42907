#!/usr/bin/env python3
"""Writes apiserver/src/http/proto/schema.rs: the wire schema of the built-in kinds the embedded
API server accepts as Kubernetes protobuf (`application/vnd.kubernetes.protobuf`).

Kubernetes' protobuf field numbers live in the Go struct tags of k8s.io/api and
k8s.io/apimachinery (`protobuf:"bytes,3,opt,name=spec"`); the JSON names, `omitempty` and
pointer-ness (what a Go client's JSON would have said for the same object) live beside them.
This script reads those Go files and keeps only the facts the decoder needs: per struct, its
fields' number, JSON name, value type, cardinality, pointer and omitempty.

Usage: gen-protobuf-schema.py <kubernetes/api checkout> <kubernetes/apimachinery checkout>
(read with `git show HEAD:<path>`, so bare mirrors work too).
"""

import re
import subprocess
import sys

API, MACHINERY = sys.argv[1], sys.argv[2]

# (package alias used in Rust names, repository, path of types.go)
PACKAGES = [
    ("core.v1", API, "core/v1/types.go"),
    ("discovery.v1", API, "discovery/v1/types.go"),
    ("events.v1", API, "events/v1/types.go"),
    ("coordination.v1", API, "coordination/v1/types.go"),
    ("authorization.v1", API, "authorization/v1/types.go"),
    ("admissionregistration.v1", API, "admissionregistration/v1/types.go"),
    ("meta.v1", MACHINERY, "pkg/apis/meta/v1/types.go"),
]

# Go import aliases as the files use them -> package key.
IMPORTS = {
    "metav1": "meta.v1",
    "v1": "core.v1",
    "corev1": "core.v1",
}

# Types whose wire form and JSON form differ (custom Marshal/MarshalJSON): the decoder knows them.
SPECIAL = {
    "meta.v1.Time": "Time",
    "meta.v1.MicroTime": "MicroTime",
    "meta.v1.Duration": "Duration",
    "meta.v1.FieldsV1": "FieldsV1",
    "intstr.IntOrString": "IntOrString",
    "resource.Quantity": "Quantity",
    "runtime.RawExtension": "RawExtension",
}
SCALARS = {
    "string": "String",
    "bool": "Bool",
    "int32": "Int32",
    "int64": "Int64",
    "int": "Int64",
    "uint32": "Int64",
    "float64": "Double",
    "types.UID": "String",
    "types.NodeName": "String",
}

# The kinds served with a protobuf body, plus the options and reviews posted alongside.
ROOTS = [
    "core.v1.Namespace",
    "core.v1.Service",
    "core.v1.ConfigMap",
    "core.v1.Endpoints",
    "core.v1.Node",
    "core.v1.Pod",
    "core.v1.Event",
    "discovery.v1.EndpointSlice",
    "events.v1.Event",
    "coordination.v1.Lease",
    "admissionregistration.v1.ValidatingWebhookConfiguration",
    "meta.v1.DeleteOptions",
    "authorization.v1.SelfSubjectAccessReview",
    "authorization.v1.SelfSubjectRulesReview",
]


def read(repo, path):
    return subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout


structs = {}  # "pkg.Name" -> list of (goname, gotype, tag)
aliases = {}  # "pkg.Name" -> go type text

FIELD = re.compile(r"^\t(?:(\w+)\s+)?([\w\.\*\[\]]+(?:\[[\w\.]+\][\w\.\*\[\]]+)?)\s+`([^`]*)`")
for pkg, repo, path in PACKAGES:
    text = read(repo, path)
    current = None
    for line in text.splitlines():
        if current is None:
            m = re.match(r"^type (\w+) struct \{", line)
            if m:
                current = f"{pkg}.{m.group(1)}"
                structs[current] = []
                continue
            m = re.match(r"^type (\w+) ([\w\.\[\]\*]+)\s*$", line)
            if m:
                aliases[f"{pkg}.{m.group(1)}"] = m.group(2)
            continue
        if line.startswith("}"):
            current = None
            continue
        m = FIELD.match(line)
        if m:
            structs[current].append((m.group(1), m.group(2), m.group(3)))


def qualify(gotype, pkg):
    """`ServiceSpec` in core.v1 -> `core.v1.ServiceSpec`; `metav1.Time` stays special."""
    if gotype in SCALARS:
        return gotype
    if "." in gotype:
        alias, name = gotype.split(".", 1)
        if alias in IMPORTS:
            return f"{IMPORTS[alias]}.{name}"
        return gotype
    return f"{pkg}.{gotype}"


def resolve(gotype, pkg):
    """-> (kind, target, pkg): kind in scalar/special/struct/slice/map, following aliases."""
    for _ in range(10):
        if gotype.startswith("[]") and gotype != "[]byte":
            return ("slice", gotype[2:], pkg)
        if gotype == "[]byte":
            return ("scalar", "Bytes", pkg)
        if gotype.startswith("map["):
            key, value = re.match(r"map\[([\w\.]+)\](.+)", gotype).groups()
            return ("map", value, pkg)
        if gotype in SCALARS:
            return ("scalar", SCALARS[gotype], pkg)
        q = qualify(gotype, pkg)
        if q in SPECIAL:
            return ("special", SPECIAL[q], pkg)
        if q in structs:
            return ("struct", q, q.rsplit(".", 1)[0])
        if q in aliases:
            gotype, pkg = aliases[q], q.rsplit(".", 1)[0]
            continue
        raise SystemExit(f"unknown type {gotype} in {pkg}")
    raise SystemExit(f"alias loop at {gotype}")


def value_type(gotype, pkg, queue):
    """The Rust `Ty` of one value (no slice or map left)."""
    pointer = gotype.startswith("*")
    kind, target, tpkg = resolve(gotype.lstrip("*"), pkg)
    if kind == "scalar" or kind == "special":
        return f"Ty::{target}"
    if kind == "struct":
        queue.append(target)
        return f"Ty::Message(&{rust_const(target)})"
    raise SystemExit(f"nested collection {gotype} in {pkg}")


def rust_const(name):
    """`core.v1.ServiceSpec` -> `CORE_V1_SERVICE_SPEC`."""
    pkg, kind = name.rsplit(".", 1)
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", kind)
    return re.sub(r"[^A-Za-z0-9]", "_", f"{pkg}.{words}").upper()


seen = {}
queue = list(ROOTS)
order = []
while queue:
    name = queue.pop(0)
    if name in seen:
        continue
    pkg = name.rsplit(".", 1)[0]
    fields = []
    for goname, gotype, tag in structs[name]:
        proto = re.search(r'protobuf:"([^"]*)"', tag)
        if not proto:
            continue  # TypeMeta and json:"-" helpers carry no protobuf field
        parts = proto.group(1).split(",")
        number = int(parts[1])
        json_tag = re.search(r'json:"([^"]*)"', tag)
        json_parts = json_tag.group(1).split(",") if json_tag else [goname or ""]
        json_name = json_parts[0]
        omitempty = "omitempty" in json_parts[1:]
        inline = goname is None and (json_name == "" or "inline" in json_parts[1:])
        if json_name == "-":
            continue
        if not json_name and not inline:
            json_name = goname
        pointer = gotype.startswith("*")
        kind, target, tpkg = resolve(gotype.lstrip("*"), pkg)
        if kind == "slice":
            card = "Card::Repeated"
            ty = value_type(target, tpkg, queue)
        elif kind == "map":
            card = "Card::Map"
            ty = value_type(target, tpkg, queue)
        else:
            card = "Card::One"
            ty = value_type(gotype, pkg, queue)
        fields.append((number, json_name, ty, card, pointer, omitempty, inline))
    seen[name] = fields
    order.append(name)

out = []
out.append("// Generated by scripts/gen-protobuf-schema.py from the Go types of k8s.io/api and")
out.append("// k8s.io/apimachinery (field numbers, JSON names, pointers, omitempty). Do not edit.")
for label, repo in (("k8s.io/api", API), ("k8s.io/apimachinery", MACHINERY)):
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    out.append(f"// {label} at {commit}.")
out.append("")
out.append("use super::{Card, Field, Message, Ty};")
out.append("")
for name in sorted(order):
    out.append(f"pub(super) static {rust_const(name)}: Message = Message {{")
    out.append(f'    name: "{name}",')
    out.append("    fields: &[")
    for number, json_name, ty, card, pointer, omitempty, inline in seen[name]:
        out.append(
            f'        Field {{ number: {number}, json: "{json_name}", ty: {ty}, card: {card}, '
            f"pointer: {str(pointer).lower()}, omitempty: {str(omitempty).lower()}, "
            f"inline: {str(inline).lower()} }},"
        )
    out.append("    ],")
    out.append("};")
out.append("")
out.append("/// The top-level messages by `(apiVersion, kind)`.")
out.append("pub(super) static KINDS: &[(&str, &str, &Message)] = &[")
for root in ROOTS:
    pkg, kind = root.rsplit(".", 1)
    group, version = pkg.rsplit(".", 1)
    api_version = {
        "core": version,
        "meta": f"meta.k8s.io/{version}",
        "discovery": f"discovery.k8s.io/{version}",
        "events": f"events.k8s.io/{version}",
        "coordination": f"coordination.k8s.io/{version}",
        "authorization": f"authorization.k8s.io/{version}",
        "admissionregistration": f"admissionregistration.k8s.io/{version}",
    }[group]
    out.append(f'    ("{api_version}", "{kind}", &{rust_const(root)}),')
out.append("];")
print("\n".join(out))
print(f"{len(order)} messages", file=sys.stderr)
