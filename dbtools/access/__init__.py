"""Hidden tables, columns and rows: the rules (rules.py), checked against the catalog (rule_check.py); each query
bound scope by scope (binder.py, names.py) and run over visible-only relations (visible_query.py), calling only
allow-listed functions (functions.py); plans shown by their shape (plan_shape.py); all of it behind one
Database-shaped view (guarded_database.py)."""
