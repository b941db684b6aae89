"""Value search: which columns of which tables hold a literal (exact, case-insensitive, partial, fuzzy).

The distinct text values of every text column are indexed once into a side SQLite file (FTS5 trigram) in the
user cache directory (`store.py`); the user database is only read. Tables whose fingerprint changed are
re-indexed. Matches are found and ranked in `ranking.py` and tied to the schema's foreign keys in `links.py`.
"""

from __future__ import annotations

from dbtools.value_search.index import ValueIndex
from dbtools.value_search.ranking import ValueMatch
from dbtools.value_search.store import RefreshReport

__all__ = ["RefreshReport", "ValueIndex", "ValueMatch"]
