"""An internal orders service, as a team might run one: `POST /orders` inserts an order
into PostgreSQL, and the table's `UNIQUE` constraint on the client's operation key is
what deduplicates (`pip install '.[destinations]'`; the database at `DATABASE_URL`):

    DATABASE_URL=postgresql://... python -m examples.own_service.service --port 8430

The body is `{"reference": ..., "amount": ...}`; the key, if any, is the request's
`Idempotency-Key` header. A new order is answered 201 with its row; a key already
stored is answered 200 with the first order's row, the insert left undone (a key sent
again with another reference or amount is refused, 422). Without a key every request
is an order. `GET /orders/{id}` reads one back; anything else is a 404.

Standard library and psycopg only: each request on its own thread and its own
connection, every insert committed at once (what survives a killed client).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id BIGSERIAL PRIMARY KEY,
    reference TEXT NOT NULL,
    amount BIGINT NOT NULL,
    operation_key TEXT UNIQUE
)
"""
# NULL keys never conflict: an order sent without a key is always a new one.
INSERT = (
    "INSERT INTO orders (reference, amount, operation_key) VALUES (%s, %s, %s) "
    "ON CONFLICT (operation_key) DO NOTHING RETURNING id, reference, amount"
)
BY_KEY = "SELECT id, reference, amount FROM orders WHERE operation_key = %s"
BY_ID = "SELECT id, reference, amount FROM orders WHERE id = %s"
MAX_BODY = 64 * 1024


@dataclass(frozen=True, slots=True)
class Order:
    id: int
    reference: str
    amount: int


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("the orders service needs DATABASE_URL (a PostgreSQL database)")
    return url


def place(url: str, reference: str, amount: int, key: str | None) -> tuple[HTTPStatus, Order]:
    """The order inserted (201), or the first one under this key (200); 422 if that one differs."""
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(INSERT, (reference, amount, key)).fetchone()
        if row is not None:
            return HTTPStatus.CREATED, Order(*row)
        # ON CONFLICT waited for the first insert to commit: its row is there.
        first = Order(*_one(db.execute(BY_KEY, (key,)).fetchone()))
    same = (first.reference, first.amount) == (reference, amount)
    return (HTTPStatus.OK if same else HTTPStatus.UNPROCESSABLE_ENTITY), first


def _one(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    assert row is not None, "a conflicting key's row is committed"
    return row


class _Orders(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are two writes: with Nagle on, the body waits for the client's delayed ACK.
    disable_nagle_algorithm = True
    url = ""  # the database's, set by `serve`

    def do_POST(self) -> None:
        if self.path != "/orders":
            return self._send(HTTPStatus.NOT_FOUND, {"error": "not found"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
        try:
            body = json.loads(self.rfile.read(length))
            reference, amount = str(body["reference"]), int(body["amount"])
        except (ValueError, KeyError, TypeError):
            return self._send(HTTPStatus.BAD_REQUEST, {"error": "a JSON body with a reference and an amount"})
        status, order = place(self.url, reference, amount, self.headers.get("Idempotency-Key"))
        self._send(status, asdict(order))

    def do_GET(self) -> None:
        head, _, order_id = self.path.rpartition("/")
        if head != "/orders" or not order_id.isdigit():
            return self._send(HTTPStatus.NOT_FOUND, {"error": "not found"})
        with psycopg.connect(self.url, autocommit=True) as db:
            row = db.execute(BY_ID, (int(order_id),)).fetchone()
        if row is None:
            return self._send(HTTPStatus.NOT_FOUND, {"error": "no such order"})
        self._send(HTTPStatus.OK, asdict(Order(*row)))

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a service's access log is not the lab's business."""


def serve(url: str, host: str, port: int) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(SCHEMA)
    _Orders.url = url
    with ThreadingHTTPServer((host, port), _Orders) as server:
        server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="An orders service that deduplicates on a UNIQUE constraint.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8430)
    args = parser.parse_args()
    serve(database_url(), args.host, args.port)


if __name__ == "__main__":
    main()
