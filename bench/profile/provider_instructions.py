"""The provider's instructions per send, counted by callgrind: its own work, whatever else the machine does.

    python -m bench.profile.provider_instructions [--sends 300]

CPU time on a shared 2-core VM moves by half from one hour to the next
(`bench/profile/provider_cost.py`, the same tree run twice); the number of
instructions a program executes does not. The provider (`python -m provider`
on a unix socket, with a token, as a run starts it) runs twice under
`valgrind --tool=callgrind`: once with its ledger's contract and WARM sends,
once with --sends more; the difference, divided by --sends, is what one
unarmed keyed send costs it, on one keep-alive connection through the
work-horse's client. The first run's total is its start (imports, the app),
those few requests and its stop. A send's instructions are also given by
where they ran: the interpreter, SQLite, libc, each extension module.
Instructions are not time: a cache miss costs more than an instruction, and
a run's provider finds its caches cold at every send
(`python -m bench.profile.provider_cost --paced`). Needs valgrind (slow: a minute or two).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.support import callgrind
from bench.support.sides import ROOT

WARM = 20
TOKEN = "bench-token-bench-token"
BODY = {"recipient": "a@example.test", "message": "hello"}


def instructions(work: Path, sends: int) -> tuple[int, Counter[str]]:
    """Instructions the provider executed from its start to its exit, having answered
    its ledger's contract and WARM + `sends` sends: in all, and by object (`callgrind.counted_by_object`)."""
    import httpx

    from labcore.credentials import TOKEN_ENV
    from labcore.endpoints import unix_url
    from workers import client

    sock, out = work / "provider.sock", work / f"callgrind.{sends}"
    argv = [*callgrind.argv(str(out)), sys.executable, "-m", "provider", "--port", "0"]
    argv += ["--db", str(work / f"log.{sends}.sqlite3"), "--uds", str(sock)]
    env = {**os.environ, TOKEN_ENV: TOKEN}
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        transport, auth = httpx.HTTPTransport(uds=str(sock)), {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(transport=transport, base_url="http://localhost", headers=auth) as admin:
            deadline = time.monotonic() + 300
            while True:
                try:
                    admin.put("/ledgers/bench", json={}, timeout=60).raise_for_status()
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise SystemExit("the provider did not start under valgrind within 300 s") from None
                    time.sleep(0.2)
        base = unix_url(sock)
        for n in range(WARM + sends):
            reference = f"op-{n}"
            payload = {"reference": reference, **BODY}
            reply = client.send(base, "bench", payload, key=reference, attempt=1, chaos=None, timeout=60)
            if reply.status != 201:
                raise SystemExit(f"a send was answered {reply.status}")
        client.drop()
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    found = callgrind.counted_by_object(out)
    if found is None:
        raise SystemExit(f"no instruction count in {out}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=300)
    args = parser.parse_args()
    callgrind.require()
    from labcore.credentials import TOKEN_ENV

    os.environ[TOKEN_ENV] = TOKEN  # the work-horse's client reads it as it loads
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        start, start_by_object = instructions(work, 0)
        more, more_by_object = instructions(work, args.sends)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    send = (more - start) // args.sends
    print(f"the provider's start, contract, {WARM} sends and stop: {start:,} instructions")
    print(f"one unarmed keyed send: {send:,} instructions (over {args.sends} sends), by where they ran:")
    per_send = {name: (more_by_object[name] - start_by_object[name]) / args.sends for name in more_by_object}
    for name, count in sorted(per_send.items(), key=lambda item: -item[1]):
        if count >= send / 100:
            print(f"  {count:9,.0f}  {count / send:4.0%}  {name}")


if __name__ == "__main__":
    main()
