"""The MCP tools' result types: each gives its tool an output schema and structured content."""

from __future__ import annotations

from pydantic import BaseModel, Field

JsonCell = str | int | float | bool | None


class TableSummary(BaseModel):
    name: str = Field(description="table name as written in SQL")
    column_count: int
    row_count: int | None = Field(description="row count or the engine's estimate; null when unknown")
    description: str | None = Field(description="the table's comment, when it has one")


class TableList(BaseModel):
    tables: list[TableSummary]
    total: int = Field(description="tables matching the pattern, before the limit")
    truncated: bool = Field(description="true when more tables matched than were returned")


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
    foreign_keys: list[ForeignKeyDetail] = Field(description="this table's references to other tables")
    referenced_by: list[str] = Field(description="tables with a foreign key to this one")
    create_sql: str


class SchemaMatch(BaseModel):
    table: str
    column: str | None = Field(description="the matching column; null when the table itself matched")
    kind: str = Field(description="table or column")
    score: float = Field(description="relevance, higher is better")
    matched: list[str] = Field(description="the keywords this table or column matched")
    type: str | None = Field(default=None, description="the column's type")
    comment: str | None = None


class SchemaMatches(BaseModel):
    keywords: str
    matches: list[SchemaMatch]


class ValueMatch(BaseModel):
    table: str
    column: str
    match_type: str = Field(
        description="the best match in this column: exact, case_insensitive, partial, fuzzy"
    )
    score: float = Field(description="1.0 for an exact match, lower for weaker ones")
    values: list[str] = Field(description="the stored values that match, best first, exactly as stored")
    matching_values: int = Field(description="distinct matching values in the column")
    matching_rows: int = Field(description="rows holding one of them")
    complete: bool = Field(description="false when the column was only partly indexed")
    foreign_keys: list[str] = Field(
        default_factory=list, description="foreign keys from this column and into its table: how to join"
    )
    row_keys: dict[str, JsonCell] = Field(
        default_factory=dict,
        description="for an exact match naming one row of a small referenced table: that row's keys, "
        "the values that referencing columns hold (e.g. Germany -> iso_code 'DE')",
    )


class ValueMatches(BaseModel):
    text: str
    matches: list[ValueMatch]


class QueryRows(BaseModel):
    sql: str = Field(description="the statement that ran")
    columns: list[str]
    rows: list[list[JsonCell]]
    row_count: int = Field(description="rows returned")
    truncated: bool = Field(description="true when more rows exist than were returned; narrow the query")
    truncation: str | None = Field(
        default=None, description="why rows were left out, and how to narrow the query"
    )
    elapsed_ms: float


class AskAnswer(BaseModel):
    question: str
    sql: str | None = Field(description="the final SQL in the database's dialect; null when there is none")
    sql_dialect: str
    sql_sqlite: str | None = Field(
        default=None, description="the model's SQLite original, on other databases"
    )
    columns: list[str]
    rows: list[list[JsonCell]]
    row_count: int
    truncated: bool
    error: str | None = Field(description="the final SQL's error, when it failed to run")
    ending: str = Field(
        description="how the episode ended: submit_sql, answer, forced_answer, fallback, no_sql"
    )
    votes: list[dict] | None = Field(default=None, description="result groups and their votes, when sampling")
    trace: list[str] = Field(description="one line per tool call the model made, in order")
    metrics: dict = Field(description="the episode's counts: rounds, calls, tokens, time")
