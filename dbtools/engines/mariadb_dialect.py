"""MySQL's SQL as MariaDB reads it, for queries this program writes out: MariaDB has no REGEXP_LIKE(), which
sqlglot writes for MySQL's REGEXP operator."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.mysql import MySQL


def _regexp(generator, expression: exp.RegexpLike) -> str:
    if expression.args.get("flag"):
        return generator.function_fallback_sql(expression)
    return generator.binary(expression, "REGEXP")


class MariaDB(MySQL):
    class Generator(MySQL.Generator):
        TRANSFORMS = {**MySQL.Generator.TRANSFORMS, exp.RegexpLike: _regexp}
