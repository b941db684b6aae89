"""Small dataset files in each evaluation format, written by the tests that need them."""

import json
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = {
    "schema_id": "shop_7",
    "full_schema": (
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);\n"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL, note TEXT, "
        "FOREIGN KEY (customer_id) REFERENCES customers(id));\n"
        "CREATE TABLE empty_table (id INTEGER);"
    ),
    "schema_content": {
        "customers": [
            {"id": 1, "name": "Ana; Lda", "city": "Lisbon"},
            {"id": 2, "name": "Bo", "city": "Oslo"},
        ],
        "orders": [
            {"id": 10, "customer_id": 1, "total": 9.5, "note": {"gift": True}},
            {"id": 11, "customer_id": 2, "total": 20.0, "note": None},
        ],
    },
}
OTHER_SCHEMA = {"schema_id": "unused", "full_schema": "CREATE TABLE x (a INT);", "schema_content": {}}
PHRASINGS = {"verbose": "Which customers live in Lisbon, by name?", "evidence_supported": "Names in Lisbon?"}
QUESTIONS = [
    {
        "question_id": 1,
        "schema_id": "shop_7",
        "sql": "SELECT name FROM customers WHERE city = 'Lisbon'",
        "difficulty": "easy",
        "questions": PHRASINGS,
        "relevant_tables": ["customers"],
        "execution_result": "[['Ana; Lda']]",
    },
    {
        "question_id": 2,
        "schema_id": "shop_7",
        "sql": "SELECT SUM(total) FROM orders",
        "difficulty": "medium",
        "questions": {
            "verbose": "What is the total of all orders?",
            "evidence_supported": "Sum of order totals?",
        },
        "relevant_tables": ["orders"],
        "execution_result": "[[29.5]]",
    },
]


def write_jsonl(path, records, encode_json_fields=()):
    with path.open("w") as out:
        for record in records:
            record = {k: json.dumps(v) if k in encode_json_fields else v for k, v in record.items()}
            out.write(json.dumps(record) + "\n")
    return path


def write_parquet(path, records, encode_json_fields=()):
    rows = [{k: json.dumps(v) if k in encode_json_fields else v for k, v in r.items()} for r in records]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def bird_folder(tmp_path):
    db_dir = tmp_path / "dev_databases" / "toys"
    db_dir.mkdir(parents=True)
    with sqlite3.connect(db_dir / "toys.sqlite") as conn:
        conn.execute("CREATE TABLE toy (name TEXT, price REAL)")
        conn.executemany("INSERT INTO toy VALUES (?, ?)", [("kite", 3.0), ("yoyo", 1.5)])
    entries = [
        {
            "question_id": 0,
            "db_id": "toys",
            "question": "Cheapest toy?",
            "evidence": "cheapest refers to MIN(price)",
            "SQL": "SELECT name FROM toy ORDER BY price LIMIT 1",
            "difficulty": "simple",
        },
        {
            "question_id": 1,
            "db_id": "toys",
            "question": "How many toys?",
            "evidence": "",
            "SQL": "SELECT COUNT(*) FROM toy",
            "difficulty": "moderate",
        },
    ]
    (tmp_path / "dev.json").write_text(json.dumps(entries))
    return tmp_path / "dev.json"
