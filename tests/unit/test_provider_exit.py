"""When the provider's SIGTERM may end it at once: no request in progress.

A request's task leaves uvicorn's set of tasks by a done callback, which the
event loop runs after the callback that writes the request's answer: a client
woken by that write can stop the provider in between (a loaded CI machine did).
A finished task there is not a request in progress."""

import asyncio

import uvicorn

from provider.server import _Server


async def _app(scope: dict, receive: object, send: object) -> None:  # never called
    raise AssertionError("no request expected")


def test_a_finished_task_still_in_uvicorns_set_is_not_in_progress_and_a_running_one_is():
    server = _Server(uvicorn.Config(_app, log_level="warning"), close=lambda: None)
    tasks = server.server_state.tasks

    async def scenario() -> list[bool]:
        finished = asyncio.get_running_loop().create_task(asyncio.sleep(0))
        await finished
        tasks.add(finished)  # its done callback (tasks.discard) has not run yet
        seen = [server._in_progress()]
        running = asyncio.get_running_loop().create_task(asyncio.sleep(10))
        tasks.add(running)
        seen.append(server._in_progress())
        running.cancel()
        return seen

    assert asyncio.run(scenario()) == [False, True]
