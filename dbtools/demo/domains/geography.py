"""Geography: currencies, countries, languages, regions, real cities, time zones, postal codes."""

from __future__ import annotations

from dbtools.demo import vocabulary as v
from dbtools.demo.spec import TableSpec, table

TABLES: list[TableSpec] = [
    table(
        "currencies",
        0,
        "id INTEGER pk",
        "code CHAR(3) row:0 unique",
        "name VARCHAR(40) row:1",
        style="sqale",
        static=[(c, f"{c} currency") for c in v.CURRENCIES],
    ),
    table(
        "countries",
        0,
        "id INTEGER pk",
        "iso_code CHAR(2) row:0 unique # ISO 3166-1 alpha-2",
        "iso3_code CHAR(3) row:1 unique",
        "name VARCHAR(80) row:2",
        "continent VARCHAR(20) row:3",
        "currency_code CHAR(3) ->currencies.code row:4",
        "phone_prefix VARCHAR(6) row:5",
        style="sqale",
        static=v.COUNTRIES,
        comment="Countries with ISO 3166 codes",
    ),
    table(
        "languages",
        0,
        "id INTEGER pk",
        "iso_code CHAR(2) row:0 unique",
        "name VARCHAR(40) row:1",
        style="sqale",
        static=v.LANGUAGES,
    ),
    table(
        "country_languages",
        90,
        "id INTEGER pk",
        "country_id INTEGER ->countries skew=0.3",
        "language_id INTEGER ->languages",
        "is_official BOOLEAN bool:0.6",
        style="sqale",
    ),
    table(
        "regions",
        240,
        "id INTEGER pk",
        "country_id INTEGER ->countries skew=0.2",
        "name VARCHAR(60) region",
        "region_code VARCHAR(8) code:RG:4",
        style="sqale",
    ),
    table(
        "cities",
        0,
        "id INTEGER pk",
        "name VARCHAR(80) row:0",
        "country_code CHAR(2) ->countries.iso_code row:1",
        "population INTEGER row:2 # thousands of inhabitants",
        "latitude REAL lat",
        "longitude REAL lon",
        style="sqale",
        static=v.CITIES,
    ),
    table(
        "time_zones",
        40,
        "id INTEGER pk",
        "tz_name VARCHAR(40) tz",
        "utc_offset_minutes INTEGER int:-600:720",
        "country_id INTEGER ->countries",
        style="sqale",
    ),
    table(
        "postal_codes",
        3000,
        "id INTEGER pk",
        "postal_code VARCHAR(10) zip",
        "city_id INTEGER ->cities",
        "region_id INTEGER ->regions null=0.3",
        style="sqale",
    ),
]
