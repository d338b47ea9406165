"""The gRPC services, ``laredo.v1.LaredoOAMService`` and ``laredo.v1.LaredoQueryService``.

Both run against a :class:`~laredo_server.runtime.ServerRuntime`; the same servicer objects
serve gRPC and the HTTP+JSON gateway. Errors map to gRPC status codes with
:func:`laredo.errors.grpc_status_name`.
"""

from __future__ import annotations

from typing import Any

from ..runtime import ServerRuntime
from ._rpc import RpcStatusError
from .oam import OAM_SERVICE, OamService
from .query import QUERY_SERVICE, QueryService

__all__ = [
    "OAM_SERVICE",
    "QUERY_SERVICE",
    "OamService",
    "QueryService",
    "RpcStatusError",
    "make_servicers",
]


def make_servicers(rt: ServerRuntime) -> dict[str, Any]:
    """The servicers of ``rt`` by full service name."""
    return {OAM_SERVICE: OamService(rt), QUERY_SERVICE: QueryService(rt)}
