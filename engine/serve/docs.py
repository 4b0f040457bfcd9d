"""``GET /docs``: the API's reference as one self-contained HTML page, drawn from ``/openapi.json``.

FastAPI's own ``/docs`` loads Swagger UI's script and styles from a CDN, so offline (where a
retrieval server often runs) it is a blank page. This page needs nothing from outside: every
endpoint with its summary and answers, every model with its fields (type, bounds, description),
and a link to the schema itself for tools.
"""

from __future__ import annotations

from html import escape
from typing import Any

_STYLE = ("body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
          "code,td.t{font-family:ui-monospace,monospace;font-size:13px}table{border-collapse:collapse;width:100%}"
          "td,th{border-bottom:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}"
          "h3{margin-bottom:.3rem}.m{font-weight:bold;color:#05a}")


def _type(field: dict[str, Any]) -> str:
    if "$ref" in field:
        return field["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in field:
        return " | ".join(_type(f) for f in field["anyOf"])
    if "enum" in field:
        return " | ".join(repr(v) for v in field["enum"])
    if "const" in field:
        return repr(field["const"])
    if field.get("type") == "array":
        return f"list[{_type(field.get('items', {}))}]"
    return str(field.get("type", "any"))


def _bounds(field: dict[str, Any]) -> str:
    names = {"minimum": ">=", "maximum": "<=", "minLength": "length >=", "maxLength": "length <=",
             "minItems": "items >=", "maxItems": "items <="}
    found = [f"{op} {field[k]:,}" if isinstance(field[k], int) else f"{op} {field[k]}"
             for k, op in names.items() if k in field]
    for alt in field.get("anyOf", []):
        found += [b for b in [_bounds(alt)] if b]
    return ", ".join(found)


def docs_page(schema: dict[str, Any]) -> str:
    """The HTML of ``/docs`` for an OpenAPI ``schema``."""
    info = schema.get("info", {})
    out = [f"<!doctype html><meta charset=utf-8><title>{escape(info.get('title', 'API'))} API</title>",
           f"<style>{_STYLE}</style><h1>{escape(info.get('title', 'API'))} {escape(str(info.get('version', '')))}</h1>",
           f"<p>{escape(info.get('description', ''))}</p>",
           "<p>The machine-readable schema: <a href='/openapi.json'><code>/openapi.json</code></a>.</p><h2>Endpoints</h2>"]
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            answers = ", ".join(escape(code) for code in op.get("responses", {}))
            old = " (deprecated)" if op.get("deprecated") else ""
            out.append(f"<h3><span class=m>{method.upper()}</span> <code>{escape(path)}</code>{old}</h3>"
                       f"<p>{escape(op.get('summary', ''))}. Answers: {answers}.</p>")
    out.append("<h2>Models</h2>")
    for name, model in schema.get("components", {}).get("schemas", {}).items():
        rows = "".join(f"<tr><td class=t>{escape(f)}{'' if f not in model.get('required', []) else ' *'}</td>"
                       f"<td class=t>{escape(_type(spec))}</td><td>{escape(_bounds(spec))}</td>"
                       f"<td>{escape(spec.get('description', ''))}</td></tr>"
                       for f, spec in model.get("properties", {}).items())
        out.append(f"<h3 id='{escape(name)}'>{escape(name)}</h3><p>{escape(model.get('description', ''))}</p>"
                   f"<table><tr><th>field (* required)</th><th>type</th><th>bounds</th><th>meaning</th></tr>{rows}</table>")
    return "\n".join(out)
