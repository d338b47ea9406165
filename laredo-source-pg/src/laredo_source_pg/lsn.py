"""PostgreSQL WAL positions (LSNs): ``int`` in memory, ``%X/%X`` as text (as ``pg_lsn`` prints)."""

from __future__ import annotations

__all__ = ["format_lsn", "parse_lsn"]

_MAX_PART = 0xFFFFFFFF
_FORM = (
    "expected a PostgreSQL LSN 'X/Y' (two hexadecimal numbers of up to 8 digits, as "
    "pg_current_wal_lsn() prints it, e.g. '16/B374D848')"
)


def format_lsn(lsn: int) -> str:
    """``0x1A2B3C4D5E`` -> ``"1A/2B3C4D5E"``."""
    if not isinstance(lsn, int) or isinstance(lsn, bool) or lsn < 0 or lsn >> 64:
        raise ValueError(f"invalid LSN {lsn!r}: expected an int in [0, 2**64)")
    return f"{lsn >> 32:X}/{lsn & _MAX_PART:X}"  # as PostgreSQL prints it: 0/1BEF0A8


def parse_lsn(text: str) -> int:
    """Parse ``"hi/lo"`` hex (either case, padding optional) into an int.

    Raises ``ValueError`` naming the input and the expected ``X/Y`` form for "", "noslash",
    "/", "/0", "0/", bad hex, or a part wider than 32 bits.
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid LSN {text!r}: {_FORM}")
    hi, sep, lo = text.strip().partition("/")
    if not sep or not hi or not lo or "/" in lo:
        raise ValueError(f"invalid LSN {text!r}: {_FORM}")
    if not all(c in "0123456789abcdefABCDEF" for c in hi + lo):
        raise ValueError(f"invalid LSN {text!r}: parts must be hexadecimal; {_FORM}")
    h, low = int(hi, 16), int(lo, 16)
    if h > _MAX_PART or low > _MAX_PART:
        raise ValueError(f"invalid LSN {text!r}: each part must fit in 32 bits; {_FORM}")
    return (h << 32) | low
