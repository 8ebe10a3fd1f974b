"""The provider's OpenAPI document, rendered from its route table (`provider.routes`).

Every operation with its parameters, body and answers as the table declares
them, their shapes' schemas (`provider.shapes`) filed once each under
components; and the answers any request may get before its route reads it: 401
without the bearer token (where one is needed), 413 for a body over the cap, 431
for a head over its caps, 400 where something is read, 503 with Retry-After for a
job's request while the gate is closed. The server serves it at /openapi.json (with the bearer token); the
docs' HTTP reference is made from it.
"""

from __future__ import annotations

from typing import Any

from labcore.answers import REPLAYED, RETRY_AFTER
from provider.limits import MAX_HEAD, MAX_HEADERS
from provider.routes import ROUTES, Documented, Operation, Param, Resource, Source
from provider.shapes import JsonText, Object, Ref, Schema
from provider.wire import ERROR, MAX_BODY

_HEADERS = {
    REPLAYED: "present, `true`, on a replayed answer",
    "WWW-Authenticate": "the scheme the token goes in: `Bearer`",
    RETRY_AFTER: "seconds to wait before sending the same request again",
}
_BAD = Documented("malformed header, path, query or body", (ERROR,))
_UNAUTHORIZED = Documented("missing or wrong bearer token", (ERROR,), ("WWW-Authenticate",))
_TOO_LARGE = Documented(f"request body over {MAX_BODY} bytes", (ERROR,))
_HEAD_TOO_LARGE = Documented(f"request head over {MAX_HEAD} bytes or {MAX_HEADERS} headers", (ERROR,))
_TURNED_AWAY = Documented("turned away unprocessed (the provider is about to restart)", (ERROR,), (RETRY_AFTER,))


def document(protected: bool = True) -> dict[str, Any]:
    """The document of a provider with a bearer token (`protected`), or of one without."""
    schemas: dict[str, Schema] = {}
    filed: dict[str, Object[Any]] = {}

    def ref(obj: Object[Any]) -> Schema:
        if obj.name not in filed:
            filed[obj.name] = obj
            schemas[obj.name] = obj.definition(ref)
        assert filed[obj.name] is obj, f"two shapes named {obj.name}"
        return {"$ref": f"#/components/schemas/{obj.name}"}

    paths: dict[str, Any] = {}
    for resource in sorted(ROUTES.resources, key=lambda r: r.template):
        template = resource.template.replace(":path}", "}")
        paths[template] = {op.method.lower(): _operation(resource, op, protected, ref) for op in resource.operations}
    components: dict[str, Any] = {"schemas": dict(sorted(schemas.items()))}
    if protected:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "testbed provider", "version": "1"},
        "paths": paths,
        "components": components,
    }


def _operation(resource: Resource, op: Operation, protected: bool, ref: Ref) -> dict[str, Any]:
    doc: dict[str, Any] = {"summary": op.summary, "operationId": op.name}
    if op.params:
        doc["parameters"] = [_parameter(p, ref) for p in op.params]
    if op.body is not None:
        doc["requestBody"] = {"required": True, "content": {"application/json": {"schema": op.body.schema(ref)}}}
    elif op.raw_body:
        doc["requestBody"] = {"required": False, "content": {"application/json": {"schema": {}}}}
    answers = dict(op.answers)
    if op.params or op.body is not None:
        answers.setdefault(400, _BAD)
    if protected and not resource.open:
        answers[401] = _UNAUTHORIZED
        doc["security"] = [{"bearer": []}]
    answers.setdefault(413, _TOO_LARGE)  # a route with a cap of its own says it
    answers[431] = _HEAD_TOO_LARGE
    if resource.gated:
        answers.setdefault(503, _TURNED_AWAY)
    doc["responses"] = {str(status): _answer(answers[status], ref) for status in sorted(answers)}
    return doc


def _parameter(param: Param, ref: Ref) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": param.name, "in": param.source.value, "required": param.required}
    if param.description:
        doc["description"] = param.description
    if isinstance(param.shape, JsonText):  # JSON in a header: say so, with its schema
        doc["content"] = {"application/json": {"schema": param.shape.schema(ref)}}
    else:
        doc["schema"] = param.shape.schema(ref)
        if param.default is not None:
            doc["schema"]["default"] = param.default
    assert param.required or param.source is not Source.PATH, param.name
    return doc


def _answer(answer: Documented, ref: Ref) -> dict[str, Any]:
    doc: dict[str, Any] = {"description": answer.description}
    if answer.bodies:
        schemas = [body.schema(ref) for body in answer.bodies]
        doc["content"] = {"application/json": {"schema": schemas[0] if len(schemas) == 1 else {"anyOf": schemas}}}
    if answer.headers:
        doc["headers"] = {
            name: {"description": _HEADERS[name], "schema": {"type": "string"}} for name in answer.headers
        }
    return doc
