"""Write docs/api/reference.md from alertd's OpenAPI schema, so the API's reference page can't go stale.

    .venv/bin/python docs/gen_api.py            # (re)write the page
    .venv/bin/python docs/gen_api.py --check    # exit 1 when the page differs from what the schema makes

The schema is the one `/openapi.json` serves: `alertd.api.routes.create_app(service).openapi()`, over a
throwaway Service built from a minimal rules file in a temporary directory (as tests/api builds one). The
page is the schema's endpoints (parameters, request bodies, responses) and models, in the schema's order;
what the schema can't say (authentication, the Host check, JSON-only state changes, the envelopes) is
docs/api/index.md, written by hand. tests/docs/test_docs.py runs `--check`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent / "api" / "reference.md"
RULES = "rules:\n  - {name: loss_not_finite, metric: loss, condition: nonfinite}\n"
METHODS = ("get", "post", "put", "patch", "delete")
TAGS = {
    "health": "Health and metrics",
    None: "alertd's API (`/api/v1`)",
    "alertmanager v2": "Alertmanager's API v2 (the part amtool uses)",
}

Json = Mapping[str, Any]


def openapi() -> dict[str, Any]:
    """The schema `/openapi.json` serves, from a throwaway Service (its state directory in a temp dir)."""
    from alertd.api.routes import create_app
    from alertd.service import Service

    with tempfile.TemporaryDirectory(prefix="alertd-gen-api-") as tmp:
        rules = Path(tmp) / "rules.yaml"
        rules.write_text(RULES)
        service = Service([str(rules)], state=Path(tmp) / "state")
        try:
            app = create_app(service)
            schema: dict[str, Any] = app.openapi()
            app.state.dry_runs.close()
        finally:
            service.close()
    return schema


def cell(text: object) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def anchor(name: str) -> str:
    return "schema-" + name.lower()


def type_of(schema: Json) -> str:
    """A schema as a short type: `string`, `integer or null`, `array of [Alert](#schema-alert)`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{anchor(name)})"
    if "anyOf" in schema:
        return " or ".join(type_of(s) for s in schema["anyOf"])
    if "const" in schema:
        return f"`{schema['const']!r}`".replace("'", '"')
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return "array of " + type_of(schema.get("items", {}))
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            return "object of " + type_of(extra)
        return "object"
    if kind is None:
        return "any"
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def default_of(schema: Json) -> str:
    if "default" not in schema:
        return ""
    value = schema["default"]
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value}`"


def body_of(content: Json | None) -> str:
    """A request or response body: its media types and schema."""
    if not content:
        return ""
    parts = []
    for media, spec in content.items():
        schema = spec.get("schema") or {}
        parts.append(f"`{media}`: {type_of(schema)}" if schema else f"`{media}`")
    return "; ".join(parts)


def operation(method: str, path: str, op: Json) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | default | description |", "| --- | --- | --- | --- | --- | --- |"]
        for p in params:
            schema = p.get("schema", {})
            out.append(
                f"| `{p['name']}` | {p['in']} | {cell(type_of(schema))} | {'yes' if p.get('required') else 'no'} "
                f"| {cell(default_of(schema))} | {cell(p.get('description') or schema.get('description', ''))} |"
            )
        out.append("")
    if "requestBody" in op:
        req = op["requestBody"]
        need = " (required)" if req.get("required") else ""
        out += [f"Request body{need}: {body_of(req.get('content'))}", ""]
    rows: dict[str, list[tuple[str, str]]] = {}  # the answers by body: the shared error answers in one row
    for code, resp in op.get("responses", {}).items():
        rows.setdefault(body_of(resp.get("content")), []).append((code, resp.get("description", "")))
    out += ["| status | description | body |", "| --- | --- | --- |"]
    for body, answers in rows.items():
        codes = ", ".join(code for code, _ in answers)
        out.append(f"| {codes} | {cell(', '.join(desc for _, desc in answers))} | {cell(body)} |")
    out.append("")
    return out


def model(name: str, schema: Json) -> list[str]:
    out = [f"### {name} {{#{anchor(name)}}}", ""]
    if schema.get("description"):
        out += [schema["description"].strip(), ""]
    props: Json = schema.get("properties", {})
    if not props:
        out += [f"Type: {type_of(schema)}.", ""]
        return out
    required = set(schema.get("required", []))
    out += ["| field | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
    for field, spec in props.items():
        out.append(
            f"| `{field}` | {cell(type_of(spec))} | {'yes' if field in required else 'no'} | {cell(default_of(spec))} "
            f"| {cell(spec.get('description', ''))} |"
        )
    if schema.get("additionalProperties") is False:
        out += ["", "Other fields are refused."]
    out.append("")
    return out


def render(schema: Json) -> str:
    info = schema["info"]
    out = [
        "# HTTP API reference",
        "",
        "<!-- Generated by docs/gen_api.py from alertd's OpenAPI schema. Do not edit: run"
        " `.venv/bin/python docs/gen_api.py` after changing the API; tests/docs checks that it is current. -->",
        "",
        f"{info['title']} {info['version']}, OpenAPI {schema['openapi']}: every endpoint and model of the schema"
        " the service serves at `/openapi.json`. Authentication, the `Host` check, the JSON-only state changes,"
        " the limits and examples are in [the HTTP API](index.md).",
        "",
        "The schema's own description:",
        "",
    ]
    out += ["> " + line if line else ">" for line in info.get("description", "").strip().splitlines()]
    out.append("")
    by_tag: dict[str | None, list[tuple[str, str, Json]]] = {}
    for path, ops in schema["paths"].items():
        for method in METHODS:
            if method in ops:
                tag = (ops[method].get("tags") or [None])[0]
                by_tag.setdefault(tag, []).append((method, path, ops[method]))
    out += ["## Endpoints", "", "| method | path | tells |", "| --- | --- | --- |"]
    for ops_of_tag in by_tag.values():
        for method, path, op in ops_of_tag:
            first = (op.get("description") or op.get("summary", "")).strip().split("\n\n")[0]
            out.append(f"| {method.upper()} | `{path}` | {cell(first)} |")
    out.append("")
    for tag, ops_of_tag in by_tag.items():
        out += [f"## {TAGS.get(tag, tag)}", ""]
        for method, path, op in ops_of_tag:
            out += operation(method, path, op)
    out += ["## Models", ""]
    for name, spec in schema.get("components", {}).get("schemas", {}).items():
        out += model(name, spec)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the page; exit 1 when it differs")
    parser.add_argument("--output", type=Path, default=PAGE, help=f"the page (default: {PAGE})")
    ns = parser.parse_args(argv)
    page = render(openapi())
    if ns.check:
        current = ns.output.read_text() if ns.output.exists() else ""
        if current != page:
            print(f"{ns.output} is not what the schema makes: run .venv/bin/python docs/gen_api.py", file=sys.stderr)
            return 1
        print(f"{ns.output}: up to date")
        return 0
    ns.output.parent.mkdir(parents=True, exist_ok=True)
    ns.output.write_text(page)
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
