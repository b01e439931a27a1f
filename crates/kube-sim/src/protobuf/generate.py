#!/usr/bin/env python3
"""Writes schema.txt: the protobuf fields of the kinds the simulator stores.

Field numbers and wire types come from the `k8s-pb` crate (prost code
generated from Kubernetes' generated.proto files); JSON names and which
fields are required come from `k8s-openapi` (the crate the project already
uses). Both are read from cargo's registry sources:

    cargo info k8s-pb@0.9.0 >/dev/null   # fetches the crate source
    python3 src/sim/protobuf/generate.py > src/sim/protobuf/schema.txt

Format (one record a line, `#` starts a comment):

    = <apiVersion> <kind> <message>       a kind the decoder accepts
    @ <message>                           starts a message
    <tag> <jsonName> <label> <type> [!]   one field of it

label: `o` singular, `r` repeated, `m` map with string keys (type is then
the value's), `i` inline (a Go struct embedded with `json:",inline"`: its
fields are written into the parent object). type: string, bytes, bool, int32, int64, double, or a message
name. `!` keeps a zero value (Go prints it: a required field, or a pointer
where zero means something); other zero scalars are dropped, as Go's
omitempty does for a field the client never set (gogo-protobuf writes every
non-pointer field, set or not).
"""

import glob
import os
import re
import sys

REGISTRY = os.path.expanduser("~/.cargo/registry/src")
PB = sorted(glob.glob(f"{REGISTRY}/*/k8s-pb-0.9.0/src"))[-1]
OPENAPI = sorted(glob.glob(f"{REGISTRY}/*/k8s-openapi-0.29.0/src/v1_37"))[-1]

# (apiVersion, kind, message): the kinds the simulator stores, the Scale of
# /scale, and DeleteOptions (a typed client's DELETE body, whatever group
# version it names).
ROOTS = [
    ("v1", "Namespace", "api.core.v1.Namespace"),
    ("v1", "Pod", "api.core.v1.Pod"),
    ("v1", "Service", "api.core.v1.Service"),
    ("v1", "Node", "api.core.v1.Node"),
    ("v1", "Secret", "api.core.v1.Secret"),
    ("v1", "ConfigMap", "api.core.v1.ConfigMap"),
    ("v1", "Event", "api.core.v1.Event"),
    ("v1", "ServiceAccount", "api.core.v1.ServiceAccount"),
    ("events.k8s.io/v1", "Event", "api.events.v1.Event"),
    ("coordination.k8s.io/v1", "Lease", "api.coordination.v1.Lease"),
    ("apps/v1", "Deployment", "api.apps.v1.Deployment"),
    ("autoscaling/v1", "Scale", "api.autoscaling.v1.Scale"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "api.rbac.v1.ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "Role", "api.rbac.v1.Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "api.rbac.v1.RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "api.rbac.v1.ClusterRoleBinding"),
    (
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    ),
    ("meta.k8s.io/v1", "DeleteOptions", "apimachinery.pkg.apis.meta.v1.DeleteOptions"),
]

# Messages with a JSON form of their own: the decoder converts them by name
# and does not look inside.
SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration",
    "apimachinery.pkg.apis.meta.v1.FieldsV1",
    "apimachinery.pkg.api.resource.Quantity",
    "apimachinery.pkg.util.intstr.IntOrString",
    "apimachinery.pkg.runtime.RawExtension",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.Json",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrArray",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrBool",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrStringArray",
}
# What the special messages refer to, so that those get written too.
SPECIAL_REFS = {
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrArray": [
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps"
    ],
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrBool": [
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps"
    ],
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrStringArray": [
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps"
    ],
}

# Optional pointer fields (Go `*int32`, `*bool`, `*string`, …) whose zero
# value means something: kept when zero. Message short name → JSON names.
POINTERS = {
    "DeploymentSpec": {"replicas", "revisionHistoryLimit", "progressDeadlineSeconds"},
    "PodSpec": {
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "automountServiceAccountToken",
        "shareProcessNamespace", "priority", "enableServiceLinks", "hostUsers",
        "setHostnameAsFQDN", "runtimeClassName", "preemptionPolicy",
    },
    "PodSecurityContext": {"runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup"},
    "SecurityContext": {
        "privileged", "runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem",
        "allowPrivilegeEscalation",
    },
    "Probe": {"terminationGracePeriodSeconds"},
    "ConfigMap": {"immutable"},
    "Secret": {"immutable"},
    "ServiceAccount": {"automountServiceAccountToken"},
    "ConfigMapVolumeSource": {"defaultMode", "optional"},
    "SecretVolumeSource": {"defaultMode", "optional"},
    "ProjectedVolumeSource": {"defaultMode"},
    "DownwardAPIVolumeSource": {"defaultMode"},
    "DownwardAPIVolumeFile": {"mode"},
    "KeyToPath": {"mode"},
    "ConfigMapKeySelector": {"optional"},
    "SecretKeySelector": {"optional"},
    "ConfigMapEnvSource": {"optional"},
    "SecretEnvSource": {"optional"},
    "ConfigMapProjection": {"optional"},
    "SecretProjection": {"optional"},
    "ServiceAccountTokenProjection": {"expirationSeconds"},
    "Toleration": {"tolerationSeconds"},
    "ServiceSpec": {"allocateLoadBalancerNodePorts"},
    "ClientIpConfig": {"timeoutSeconds"},
    "TopologySpreadConstraint": {"minDomains"},
    "LeaseSpec": {"holderIdentity", "leaseDurationSeconds", "leaseTransitions"},
    "DeleteOptions": {"gracePeriodSeconds", "orphanDependents", "ignoreStoreReadErrorWithClusterBreakingPotential"},
    "JsonSchemaProps": {
        "maximum", "minimum", "maxLength", "minLength", "maxItems", "minItems",
        "maxProperties", "minProperties", "multipleOf", "x-kubernetes-preserve-unknown-fields",
    },
}

SCALARS = {"string", "bytes", "bool", "int32", "int64", "double"}


def module_of(path, root):
    rel = os.path.relpath(os.path.dirname(path), root)
    return rel.replace(os.sep, ".")


def norm(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


def resolve(module, rust_type):
    """A prost type path (`super::super::Foo`, `Foo`) to a message name."""
    rust_type = re.sub(r"\s", "", rust_type).replace(",>", ">").rstrip(",")
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        while rust_type.startswith(wrapper):
            rust_type = rust_type[len(wrapper):-1]
    parts = rust_type.split("::")
    base = module.split(".")
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    return ".".join(base + parts)


def struct_fields(body):
    """(attrs, rust name, rust type) of each prost field of a struct body."""
    parts = re.split(r"#\[prost\(", body)[1:]
    for part in parts:
        attrs, rest = part.split(")]", 1)
        rest = re.split(r"\n\s*(?:///|#\[)", rest)[0]
        m = re.match(r"\s*pub\s+(?:r#)?(\w+)\s*:\s*(.*),\s*$", rest, re.S)
        assert m, rest
        yield attrs, m.group(1), m.group(2)


def read_pb():
    messages = {}
    for path in glob.glob(f"{PB}/**/mod.rs", recursive=True):
        module = module_of(path, PB)
        text = open(path).read()
        for m in re.finditer(r"pub struct (\w+) \{(\}|.*?\n\})", text, re.S):
            name = f"{module}.{m.group(1)}" if module != "." else m.group(1)
            fields = []
            for attrs, rust_name, rust_type in struct_fields(m.group(2)[:-1]):
                tag = int(re.search(r'tag = "(\d+)"', attrs).group(1))
                mp = re.match(r'btree_map = "string, (\w+)"', attrs)
                if mp:
                    label = "m"
                    kind = mp.group(1)
                    if kind == "message":
                        value = re.search(r"BTreeMap<[^,]*String,(.*)>$", rust_type.replace(" ", "").replace("\n", ""), re.S)
                        kind = resolve(module, value.group(1))
                else:
                    kind = attrs.split(",")[0].split("=")[0].strip()
                    label = "r" if "repeated" in attrs else "o"
                    if kind == "message":
                        kind = resolve(module, rust_type)
                fields.append((tag, rust_name, label, kind))
            messages[name] = fields
    return messages


def read_openapi():
    """Message name → {normalized name: (json name, required)}."""
    types = {}
    for path in glob.glob(f"{OPENAPI}/**/*.rs", recursive=True):
        text = open(path).read()
        m = re.search(r"pub struct (\w+) \{(.*?)\n\}", text, re.S)
        if not m:
            continue
        module = module_of(path, OPENAPI)
        rust_fields = dict(re.findall(r"pub (\w+): ([^\n]*),\n", m.group(2)))
        names = {}
        for json_name, key in re.findall(r'"([^"]+)" => Field::Key_(\w+),', text):
            required = not rust_fields.get(key, "Option<").startswith("Option<")
            names[norm(json_name)] = (json_name, required)
        types[f"{module}.{m.group(1)}".lower()] = names
    return types


def camel(rust_name):
    head, *rest = rust_name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def main():
    messages = read_pb()
    openapi = read_openapi()
    out = [
        "# Generated by generate.py from k8s-pb 0.9.0 (field numbers) and",
        "# k8s-openapi 0.29 v1_37 (JSON names, required fields). Do not edit.",
    ]
    for api_version, kind, msg in ROOTS:
        assert msg in messages, msg
        out.append(f"= {api_version} {kind} {msg}")
    seen, queue, kept = set(), [m for _, _, m in ROOTS], set()
    while queue:
        msg = queue.pop(0)
        if msg in seen:
            continue
        seen.add(msg)
        if msg in SPECIAL:
            queue.extend(SPECIAL_REFS.get(msg, []))
            continue
        names = openapi.get(msg.lower(), {})
        short = msg.rsplit(".", 1)[1]
        out.append(f"@ {msg}")
        for tag, rust_name, label, kind in messages[msg]:
            if norm(rust_name) not in names and kind in messages and names and all(
                norm(f[1]) in names for f in messages[kind]
            ):
                # A Go struct embedded with `json:",inline"`: its fields are the parent's.
                label = "i"
            json_name, required = names.get(norm(rust_name), (camel(rust_name), False))
            pointer = json_name in POINTERS.get(short, ())
            if pointer:
                kept.add((short.lower(), json_name))
            keep = required or pointer
            if kind not in SCALARS:
                assert kind in messages, (msg, rust_name, kind)
                queue.append(kind)
            out.append(f"{tag} {json_name} {label} {kind}" + (" !" if keep else ""))
    for short, fields in POINTERS.items():
        for field in fields:
            if (short.lower(), field) not in kept:
                sys.exit(f"pointer field {short}.{field} not found")
    print("\n".join(out))


main()
