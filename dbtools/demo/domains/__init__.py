"""Every table of the demo database: one module per business domain, assembled in creation order."""

from __future__ import annotations

from dbtools.demo.domains import (
    admin,
    catalog,
    crm,
    finance,
    geography,
    hr,
    logistics,
    manufacturing,
    marketing,
    projects,
    support,
)
from dbtools.demo.spec import TableSpec

# Creation order: a domain's foreign keys point only into itself and the domains before it.
DOMAINS = (
    geography,
    catalog,
    hr,
    crm,
    support,
    finance,
    logistics,
    marketing,
    projects,
    manufacturing,
    admin,
)

TABLES: list[TableSpec] = [table for domain in DOMAINS for table in domain.TABLES]
TABLES_BY_NAME: dict[str, TableSpec] = {t.name: t for t in TABLES}
