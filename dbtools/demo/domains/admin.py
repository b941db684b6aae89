"""Admin: the retired CRM's rows, ETL batches and data-quality issues, audit archive, app users, logins."""

from __future__ import annotations

from dbtools.demo.spec import TableSpec, table

TABLES: list[TableSpec] = [
    table(
        "legacy_customer_import",
        0,
        "id INTEGER pk",
        "raw_name VARCHAR(200) full_name",
        "raw_country VARCHAR(60) country",
        "imported_at DATETIME ts",
        "customer_id INTEGER ->customers",
        style="lower",
        comment="Rows from the retired CRM, kept for reference",
    ),
    table(
        "etl_batches",
        0,
        "batch_id INTEGER pk",
        "source_system VARCHAR(40) word",
        "started_at DATETIME ts",
        "finished_at DATETIME ts",
        "row_count INTEGER int:0:100000",
        style="lower",
    ),
    table(
        "audit_log_archive",
        0,
        "id INTEGER pk",
        "table_name VARCHAR(60) word",
        "record_id INTEGER int:1:1000000",
        "changed_by INTEGER ->Employees",
        "changed_at DATETIME ts",
        "change_json TEXT text:10",
        style="lower",
    ),
    table(
        "data_quality_issues",
        0,
        "issue_id INTEGER pk",
        "batch_id INTEGER ->etl_batches",
        "rule_name VARCHAR(80) word",
        "details TEXT text:10",
        style="lower",
    ),
    table(
        "app_users",
        400,
        "user_id INTEGER pk",
        "username VARCHAR(40) username unique",
        "employee_id INTEGER ->Employees null=0.2",
        "last_login_at DATETIME ts null=0.1",
        "is_admin BOOLEAN bool:0.05",
        style="lower",
    ),
    table("user_roles", 12, "role_id INTEGER pk", "role_nm VARCHAR(40) pick:APP_ROLES unique", style="lower"),
    table(
        "user_role_map",
        600,
        "map_id INTEGER pk",
        "user_id INTEGER ->app_users",
        "role_id INTEGER ->user_roles",
        style="lower",
    ),
    table(
        "login_events",
        12000,
        "event_id INTEGER pk",
        "user_id INTEGER ->app_users skew=1.1",
        "login_ts DATETIME ts",
        "ip_addr VARCHAR(15) ip",
        "success_flg BOOLEAN bool:0.93",
        style="lower",
        fact=True,
    ),
]
