"""The MCP tools' result types: each gives its tool an output schema and structured content."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

JsonCell = (
    Any  # a JSON scalar (text, number, boolean or null): its schema is left open to keep the tool list short
)


class SourceSummary(BaseModel):
    name: str
    engine: str
    description: str
    table_count: int | None = Field(description="null when the source cannot be reached now")
    reachable: bool
    error: str | None = Field(description="why it cannot be reached")
    warning: str | None = Field(description="a rule the database itself does not enforce")


class SourceList(BaseModel):
    sources: list[SourceSummary]
    model: str  # the model behind ask_database: ready, loading, or why it is not


class TableSummary(BaseModel):
    name: str
    column_count: int
    row_count: int | None = Field(description="or the engine's estimate; null when unknown")
    description: str | None


class TableList(BaseModel):
    tables: list[TableSummary]
    total: int = Field(description="matches before the limit")
    truncated: bool


class ColumnDetail(BaseModel):
    name: str
    type: str
    nullable: bool
    primary_key: bool
    comment: str | None = None


class ForeignKeyDetail(BaseModel):
    columns: list[str]
    ref_table: str
    ref_columns: list[str]


class TableDescription(BaseModel):
    name: str
    description: str | None
    row_count: int | None
    columns: list[ColumnDetail]
    foreign_keys: list[ForeignKeyDetail]
    referenced_by: list[str] = Field(description="tables with a foreign key to this one")
    create_sql: str


class SchemaMatch(BaseModel):
    table: str
    column: str | None = Field(description="null when the table itself matched")
    matched: list[str] = Field(description="keywords matched")
    type: str | None = None
    comment: str | None = None


class SchemaMatches(BaseModel):
    keywords: str
    matches: list[SchemaMatch]


class ValueMatch(BaseModel):
    table: str
    column: str
    match_type: str = Field(description="exact, case_insensitive, partial or fuzzy")
    values: list[str] = Field(description="matching values exactly as stored, best first")
    matching_values: int
    matching_rows: int
    complete: bool = Field(description="false when the column was only partly indexed")
    foreign_keys: list[str] = Field(default_factory=list, description="how to join this column's table")
    row_keys: dict[str, JsonCell] = Field(
        default_factory=dict,
        description="the keys of the one matching row that other tables reference (Germany -> iso_code 'DE')",
    )


class ValueMatches(BaseModel):
    text: str
    matches: list[ValueMatch]


class QueryRows(BaseModel):
    columns: list[str]
    column_types: list[str | None] = Field(description="per column; null when the engine does not say")
    rows: list[list[JsonCell]]
    row_count: int = Field(description="rows returned")
    truncated: bool = Field(description="more rows exist than were returned")
    truncation: str | None = Field(default=None, description="how many rows were left out, how to get them")
    elapsed_ms: float


class QueryPlan(BaseModel):
    sql: str
    plan: str = Field(description="the engine's EXPLAIN, one step per line")


class AskAnswer(BaseModel):
    sql: str | None = Field(description="the final SQL in the database's dialect")
    sql_dialect: str
    sql_sqlite: str | None = Field(default=None, description="the model's SQLite original")
    columns: list[str]
    rows: list[list[JsonCell]]
    row_count: int
    truncated: bool
    error: str | None = Field(description="the final SQL's error")
    ending: str = Field(description="submit_sql, answer, forced_answer, fallback or no_sql")
    votes: list[dict] | None = None
    trace: list[str] = Field(description="the model's tool calls, in order")
    metrics: dict
