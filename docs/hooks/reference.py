"""The generated reference: MkDocs writes these pages at build time from the code itself.

- `reference/cli.md`: every `testbed` command with its help, arguments and options,
  walked as click commands from the typer app (`cli_markdown`);
- `reference/http-api.md`: every path and method of the provider's OpenAPI document,
  with its parameters, request body and responses, then its schemas (`http_api_markdown`);
- `reference/stored-run.md`: the files of a stored run and the fields of results.json,
  history.jsonl, provider-records.jsonl and destination-records.jsonl, from their models'
  JSON Schemas (`stored_run_markdown`).

Registered in mkdocs.yml under `hooks:`; the functions are plain, so a test can call
them without a build (tests/unit/test_docs_reference.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

CLI_PAGE = "reference/cli.md"
STORED_PAGE = "reference/stored-run.md"
HTTP_PAGE = "reference/http-api.md"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


# --- the provider's OpenAPI document -------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The provider's OpenAPI document, as `GET /openapi.json` serves it from a provider
    with a token (so that its 401s and its security scheme are in it)."""
    from provider.openapi import document

    return document(protected=True)


# --- Markdown helpers ----------------------------------------------------------------

_SPECIAL = re.compile(r"([\\`*_\[\]|<>])")


def text(value: object) -> str:
    """Prose from the code, safe in Markdown and in a table cell: one line, nothing
    read as markup."""
    flat = " ".join(str(value).split())
    return _SPECIAL.sub(lambda m: {"<": "&lt;", ">": "&gt;"}.get(m[1], "\\" + m[1]), flat)


def code(value: object) -> str:
    """Inline code, in a table cell too."""
    inner = str(value).replace("|", "\\|")
    fence = "``" if "`" in inner else "`"
    return f"{fence}{inner}{fence}"


def slug(value: str) -> str:
    """An explicit anchor id (attr_list), the same for the same name on every build."""
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows), ""]


# --- the command line ----------------------------------------------------------------


def cli_command() -> Any:
    """`testbed` as a click group, every command registered (testbed.cli.app imports them all)."""
    import typer

    import testbed.cli.app  # noqa: F401  (registers every command on the app)
    from testbed.cli.base import app

    return typer.main.get_command(app)


def cli_commands() -> Iterator[tuple[str, Any, Any]]:
    """(name, command, its click context) for every command, in the order `testbed -h` lists them."""
    group = cli_command()
    # The command's own context class: typer carries its own click, whichever is installed beside it.
    root = group.context_class(group, info_name="testbed")
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        if command is not None and not command.hidden:
            yield name, command, command.context_class(command, info_name=name, parent=root)


def _names(param: Any) -> str:
    return ", ".join(sorted([*param.opts, *param.secondary_opts], key=lambda n: (n.startswith("--"), n)))


def _metavar(param: Any, context: Any) -> str:
    """The value's placeholder as `-h` prints it (`N`, `PATH`, `<int>`); empty for a flag."""
    record = param.get_help_record(context)
    if record is None:
        return ""
    head, names = record[0], _names(param)
    return head[len(names) :].strip() if head.startswith(names) else ""


def _default(param: Any) -> str:
    """The default as `-h` shows it, or empty where it shows none (flags, repeatable options)."""
    default = param.default
    if not param.show_default or callable(default) or default in (None, (), []):
        return ""
    if getattr(param, "is_flag", False):
        return ""
    return code(default)


def _epilog(epilog: str | None) -> list[str]:
    """A command's examples, kept as `-h` prints them."""
    if not epilog:
        return []
    lines = [line for line in epilog.splitlines() if line.strip() != "\b"]
    if lines and lines[0].strip().rstrip(":") == "Examples":
        lines = lines[1:]
    body = "\n".join(line[2:] if line.startswith("  ") else line for line in lines).strip("\n")
    return ["Examples:", "", "```sh", body, "```", ""] if body else []


def cli_markdown() -> str:
    """The CLI reference page: every command, its help, its arguments and every option
    (names, value, default, environment variable, help)."""
    group = cli_command()
    out = [
        "# Command line",
        "",
        "Generated from the code at build time: the same text as `testbed -h` and",
        "`testbed COMMAND -h`.",
        "",
        text(group.help or ""),
        "",
    ]
    if group.epilog:
        out += [text(group.epilog), ""]
    out += table(
        ["command", "what it does"],
        [
            [f"[`testbed {name}`](#{slug('testbed ' + name)})", text(command.get_short_help_str(200))]
            for name, command, _ in cli_commands()
        ],
    )
    for name, command, context in cli_commands():
        out += [f"## testbed {name} {{#{slug('testbed ' + name)}}}", ""]
        usage = " ".join(["testbed", name, *command.collect_usage_pieces(context)])
        out += ["```", usage, "```", ""]
        out += [text(command.help or ""), ""]
        params = [p for p in command.get_params(context) if not getattr(p, "hidden", False)]
        arguments = [p for p in params if p.param_type_name == "argument"]
        options = [p for p in params if p.param_type_name == "option" and "--help" not in p.opts]
        if arguments:
            rows = []
            for p in arguments:
                extra = "required" if p.required else _default(p)
                rows.append([code(p.metavar or p.name.upper()), extra, text(getattr(p, "help", "") or "")])
            out += ["Arguments:", "", *table(["argument", "default", "description"], rows)]
        rows = []
        for p in options:
            metavar = _metavar(p, context)
            about = text(p.help or "")
            if p.envvar:
                about += f" Environment: {code(p.envvar)}."
            if p.required:
                about += " Required."
            rows.append([code(_names(p)), code(metavar) if metavar else "", _default(p), about.strip()])
        out += ["Options:", "", *table(["option", "value", "default", "description"], rows)]
        out += _epilog(command.epilog)
    return "\n".join(out)


# --- the provider's HTTP API ---------------------------------------------------------


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def schema_text(schema: dict[str, Any] | None, anchor: str = "schema ") -> str:
    """A schema in a few words: a named schema as a link to its heading (whose anchor is
    `anchor` + its name), else its type and bounds."""
    if not schema:
        return "any"
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[{name}](#{slug(anchor + name)})"
    for combinator, word in (("anyOf", " or "), ("oneOf", " or "), ("allOf", " and ")):
        if combinator in schema:
            return word.join(schema_text(s, anchor) for s in schema[combinator])
    kind = schema.get("type", "object" if "properties" in schema else "any")
    if kind == "array":
        return f"array of {schema_text(schema.get('items'), anchor)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {schema_text(schema['additionalProperties'], anchor)}"
    if "const" in schema:
        return code(schema["const"])
    if "enum" in schema:
        return " or ".join(code(v) for v in schema["enum"])
    bounds = []
    for key, label in (
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minimum", "min"),
        ("maximum", "max"),
        ("exclusiveMinimum", "over"),
        ("exclusiveMaximum", "under"),
        ("pattern", "pattern"),
        ("format", "format"),
    ):
        if key in schema:
            bounds.append(f"{label} {code(schema[key])}")
    return code(kind) + (f" ({', '.join(bounds)})" if bounds else "")


def _content(content: dict[str, Any] | None) -> str:
    if not content:
        return ""
    return "; ".join(f"{schema_text(c.get('schema'))} ({code(media)})" for media, c in content.items())


def http_operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path, operation) for every operation of the document, in its order."""
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


def http_api_markdown(document: dict[str, Any] | None = None) -> str:
    """The HTTP API reference page: every path and method with its parameters, request
    body and responses, then every schema they name."""
    doc = openapi_document() if document is None else document
    info = doc.get("info", {})
    out = [
        "# HTTP API",
        "",
        "The provider's API, generated at build time from its OpenAPI document",
        f"(`GET /openapi.json` on a running provider; {text(info.get('title', ''))}, version",
        f"{text(info.get('version', ''))}, OpenAPI {text(doc.get('openapi', ''))}).",
        'A route marked "needs the bearer token" requires `Authorization: Bearer <token>`.',
        "",
        "Not in the document: the scoped API a user's job reaches under `/s/{token}/`,",
        "described in [Your own job](../how-to/your-own-job.md#the-provider-as-your-job-sees-it).",
        "",
    ]
    operations = list(http_operations(doc))
    out += table(
        ["method", "path", "what"],
        [
            [code(method), f"[{code(path)}](#{slug(method + ' ' + path)})", text(op.get("summary", ""))]
            for method, path, op in operations
        ],
    )
    for method, path, op in operations:
        out += [f"## {method} {text(path)} {{#{slug(method + ' ' + path)}}}", ""]
        if op.get("summary"):
            out += [f"**{text(op['summary'])}**", ""]
        if op.get("description"):
            out += [text(op["description"]), ""]
        parameters = op.get("parameters", [])
        if parameters:
            rows = []
            for p in parameters:
                schema = p.get("schema") or next(iter(p.get("content", {}).values()), {}).get("schema")
                rows.append(
                    [
                        code(p["name"]),
                        text(p.get("in", "")),
                        "yes" if p.get("required") else "no",
                        schema_text(schema),
                        text(p.get("description", "")),
                    ]
                )
            out += ["Parameters:", "", *table(["name", "in", "required", "schema", "description"], rows)]
        body = op.get("requestBody")
        if body:
            required = " (required)" if body.get("required") else ""
            out += [f"Request body{required}: {_content(body.get('content'))}", ""]
        rows = []
        for status, response in op.get("responses", {}).items():
            headers = ", ".join(code(h) for h in response.get("headers", {}))
            rows.append(
                [code(status), text(response.get("description", "")), _content(response.get("content")), headers]
            )
        out += ["Responses:", "", *table(["status", "meaning", "body", "headers"], rows)]
        if op.get("security"):
            out += ["Needs the bearer token.", ""]
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", "", *schema_tables(schemas, "###", "schema ")]
    security = doc.get("components", {}).get("securitySchemes", {})
    for name, scheme in security.items():
        out += [
            "## Authentication",
            "",
            f"{code(name)}: {text(scheme.get('type', ''))} {text(scheme.get('scheme', ''))}.",
            "",
        ]
    return "\n".join(out)


def schema_tables(schemas: dict[str, Any], level: str, anchor: str) -> list[str]:
    """Each named schema: a heading (its anchor `anchor` + name), its description, and a
    table of its fields (or, for one without fields, the schema in a line)."""
    out: list[str] = []
    for name, schema in schemas.items():
        out += [f"{level} {text(name)} {{#{slug(anchor + name)}}}", ""]
        if schema.get("description"):
            out += [text(schema["description"]), ""]
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        if properties:
            rows = [
                [
                    code(field),
                    "yes" if field in required else "no",
                    schema_text(sub, anchor),
                    text(sub.get("description", "")),
                ]
                for field, sub in properties.items()
            ]
            out += table(["field", "required", "schema", "description"], rows)
        else:
            out += [schema_text({k: v for k, v in schema.items() if k not in ("title", "$defs")}, anchor), ""]
    return out


# --- the stored run, from its models' JSON Schemas -----------------------------------


def stored_run_markdown() -> str:
    """The files of a stored run, then each JSON format's fields, from the schemas the
    records' models publish (docs/reference/*.schema.json holds the same schemas)."""
    from testbed.store.evidence import destination_records_schema
    from testbed.store.history import history_schema, provider_records_schema
    from testbed.store.layout import FILES
    from testbed.store.results import results_schema

    out = [
        "# The stored run",
        "",
        "Generated from the code: the files of `runs/<run-id>/` (`testbed.store.layout`), and the fields of",
        "each JSON format, from the JSON Schemas of the models that write and read it. `testbed check`",
        "validates a stored run against them before it judges it again, and refuses one that does not",
        "match with one line (exit 2).",
        "",
        "## Files {#files}",
        "",
        *table(
            ["file", "always", "what it holds"],
            [[code(f.name), "yes" if f.always else "no", text(f.holds)] for f in FILES],
        ),
    ]
    formats = [
        ("results.json", "results.schema.json", results_schema()),
        ("history.jsonl", "history.schema.json", history_schema()),
        ("provider-records.jsonl", "provider-records.schema.json", provider_records_schema()),
        ("destination-records.jsonl", "destination-records.schema.json", destination_records_schema()),
    ]
    for title, published, schema in formats:
        out += [f"## {title} {{#{slug(title)}}}", ""]
        if schema.get("description"):
            out += [text(schema["description"]), ""]
        out += [f"JSON Schema: [{published}]({published}).", ""]
        if "oneOf" in schema:
            kinds = ", ".join(code(_ref_name(ref["$ref"])) for ref in schema["oneOf"])
            out += [f"Each line is one of {kinds}.", ""]
        root = {k: v for k, v in schema.items() if k not in ("$defs", "oneOf", "discriminator")}
        named = ({title: root} if root.get("properties") else {}) | schema.get("$defs", {})
        out += schema_tables(named, "###", f"{title} ")
    return "\n".join(out)


# --- the MkDocs hook -----------------------------------------------------------------


def pages() -> dict[str, str]:
    """Every generated page: its path under docs/, its Markdown."""
    return {CLI_PAGE: cli_markdown(), HTTP_PAGE: http_api_markdown(), STORED_PAGE: stored_run_markdown()}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs' hook: the generated pages join the documentation's files before the nav is built."""
    from mkdocs.structure.files import File

    for path, content in pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files
