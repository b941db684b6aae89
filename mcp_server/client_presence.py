"""A tool call's work on a worker thread stops once nobody waits for its result: when the call is cancelled,
and over HTTP when the client's connection for the call closes, which the SDK does not count as a cancel
(it keeps the call running and drops its result)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import anyio
from mcp.server.mcpserver import Context
from starlette.requests import Request

Result = TypeVar("Result")
# How often a call in progress checks that its HTTP client is still connected.
DISCONNECT_POLL_S = 0.25


class ClientLeft(Exception):
    """The HTTP client disconnected before the call's result was ready."""


async def run_while_client_waits(
    ctx: Context,
    work: Callable[[], Result],
    cancel: threading.Event,
    limiter: anyio.CapacityLimiter | None = None,
) -> Result:
    """`work()` on a worker thread, taken from `limiter` (default: AnyIO's shared one) in order of arrival.
    When the call is cancelled, or its HTTP client disconnects (then ClientLeft is raised), also while it
    waits for a thread, `cancel` is set and this returns at once: the thread stops at its next look at
    `cancel`."""
    request = ctx.request_context.request
    left = False

    async def watch(request: Request, scope: anyio.CancelScope) -> None:
        nonlocal left
        while not await request.is_disconnected():
            await anyio.sleep(DISCONNECT_POLL_S)
        left = True
        scope.cancel()

    async with anyio.create_task_group() as group:
        if isinstance(request, Request):  # over stdio the session ends with its client, cancelling the call
            group.start_soon(watch, request, group.cancel_scope)
        try:
            # The work's error comes back as a value: raised here, the task group would wrap it in a group.
            result, error = await anyio.to_thread.run_sync(
                partial(_outcome, work), abandon_on_cancel=True, limiter=limiter
            )
        except anyio.get_cancelled_exc_class():
            cancel.set()
            raise
        group.cancel_scope.cancel()
    if left:
        raise ClientLeft("the client disconnected")
    if error is not None:
        raise error
    return result


def _outcome(work: Callable[[], Result]) -> tuple[Result | None, Exception | None]:
    try:
        return work(), None
    except Exception as error:
        return None, error
