"""Quoting SQL names and literals (for messages, replication commands and catalog queries)."""

from __future__ import annotations

from laredo.types import TableIdentifier
from psycopg import sql

__all__ = ["quote_ident", "quote_literal", "table_sql"]


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def quote_ident(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def table_sql(table: TableIdentifier) -> sql.Composable:
    return sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.table))
