"""What every RPC shares: its access class and the mapping of exceptions to status codes.

``@rpc(admin=...)`` wraps a unary method and ``@stream(admin=...)`` a server-streaming one:
both declare whether the method needs the admin token (:func:`is_admin`; the token itself is
checked once per call before the method runs, by the gRPC front end's token interceptor and
the Connect gateway, both through :attr:`ServerRuntime.access`: admin methods need the admin
token when one is configured, read-only ones the admin or read token with ``protect_reads``,
and a wrong token is refused on every method), then turn an exception into ``context.abort``
with the code of :func:`laredo.errors.grpc_status_name` (``KeyError`` is NOT_FOUND,
``ValueError`` INVALID_ARGUMENT, ...). The context may be a gRPC one or the HTTP+JSON
gateway's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, Protocol, TypeVar, cast

import grpc
from laredo.errors import grpc_status_name
from laredo.secrets import mask_text

from ..runtime import ServerRuntime

logger = logging.getLogger(__name__)

__all__ = [
    "RpcStatusError",
    "abort",
    "is_admin",
    "long_call",
    "rpc",
    "stream",
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
    """Access class and error mapping for a unary RPC method."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Service, request: Any, context: grpc.ServicerContext) -> Any:
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
    """Access class and error mapping for a server-streaming RPC method."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Service, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
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
