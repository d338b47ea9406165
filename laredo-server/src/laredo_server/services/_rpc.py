"""What every RPC shares: the token check and the mapping of exceptions to status codes.

``@rpc()`` wraps a unary method and ``@stream()`` a server-streaming one: both check the
caller's token (:attr:`ServerRuntime.access`: admin methods need the admin token when one is
configured, read-only ones the admin or read token with ``protect_reads``, and a wrong token
is refused on every method),
then turn an exception into ``context.abort`` with the code of
:func:`laredo.errors.grpc_status_name` (``KeyError`` is NOT_FOUND, ``ValueError``
INVALID_ARGUMENT, ...). The context may be a gRPC one or the HTTP+JSON gateway's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, Protocol, TypeVar, cast

import grpc
from laredo.auth import ADMIN_HINT, Refusal, token_matches
from laredo.errors import grpc_status_name
from laredo.secrets import mask_text

from ..runtime import ServerRuntime

logger = logging.getLogger(__name__)

__all__ = [
    "RpcStatusError",
    "abort",
    "authorize",
    "check_token",
    "is_admin",
    "long_call",
    "refuse",
    "rpc",
    "stream",
    "token_matches",
]

_ADMIN_ATTR = "laredo_admin"

F = TypeVar("F", bound=Callable[..., Any])


class Service(Protocol):
    """A servicer bound to a runtime."""

    rt: ServerRuntime


class RpcStatusError(Exception):
    """Raised inside an RPC to answer with a specific status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def abort(context: grpc.ServicerContext, exc: BaseException) -> NoReturn:
    """End the call with the status code for ``exc`` (``context.abort`` raises); the message
    goes out masked (:func:`laredo.secrets.mask_text`)."""
    if isinstance(exc, RpcStatusError):
        context.abort(exc.code, mask_text(str(exc)))
    code = getattr(grpc.StatusCode, grpc_status_name(exc), grpc.StatusCode.INTERNAL)
    msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    context.abort(code, mask_text(msg) or type(exc).__name__)
    raise exc  # pragma: no cover - abort raises


UNAUTHENTICATED_HINT = ADMIN_HINT


def refuse(context: grpc.ServicerContext, refusal: Refusal) -> NoReturn:
    """Abort the call with the refusal's status code and message."""
    context.abort(getattr(grpc.StatusCode, refusal.code), refusal.message)
    raise AssertionError("abort raises")  # pragma: no cover


def check_token(context: grpc.ServicerContext, token: str) -> None:
    """Abort with UNAUTHENTICATED unless the call carries ``authorization: Bearer <token>``
    (compared in constant time)."""
    ok = token_matches(context.invocation_metadata(), token)
    if ok:
        return
    if ok is False:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid token")
    context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_HINT)


def authorize(rt: ServerRuntime, context: grpc.ServicerContext, admin: bool) -> None:
    """Abort unless the runtime's :class:`~laredo.auth.Access` lets this call go on."""
    refusal = rt.access.check(context.invocation_metadata(), admin=admin)
    if refusal is not None:
        refuse(context, refusal)


def is_admin(method: object) -> bool:
    """The method was declared ``@rpc(admin=True)``; unknown methods count as admin."""
    return bool(getattr(method, _ADMIN_ATTR, True))


@contextlib.contextmanager
def long_call(rt: ServerRuntime) -> Iterator[None]:
    """Hold one of the ``grpc.max_streams`` slots for a long-lived call; RESOURCE_EXHAUSTED
    at once when none is free, so that long calls never take every worker thread."""
    if not rt.streams.acquire(blocking=False):
        raise RpcStatusError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{rt.max_streams} long-lived calls (streams, WaitForPosition) are already "
            "running, the most grpc.max_streams allows; retry later",
        )
    try:
        yield
    finally:
        rt.streams.release()


def rpc(admin: bool = False) -> Callable[[F], F]:
    """Token check and error mapping for a unary RPC method."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Service, request: Any, context: grpc.ServicerContext) -> Any:
            authorize(self.rt, context, admin)
            try:
                return fn(self, request, context)
            except grpc.RpcError:
                raise
            except Exception as exc:
                logger.debug("%s failed", fn.__name__, exc_info=True)
                abort(context, exc)

        setattr(wrapper, _ADMIN_ATTR, admin)
        return cast(F, wrapper)

    return deco


def stream(admin: bool = False) -> Callable[[F], F]:
    """Token check and error mapping for a server-streaming RPC method."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Service, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            authorize(self.rt, context, admin)
            try:
                with long_call(self.rt):
                    yield from fn(self, request, context)
            except grpc.RpcError:
                raise
            except Exception as exc:
                abort(context, exc)

        setattr(wrapper, _ADMIN_ATTR, admin)
        return cast(F, wrapper)

    return deco
