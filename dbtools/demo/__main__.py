"""Command line of the demo database: `build` a SQLite file, `load-postgres`, `load-mysql` or `load-duckdb` it into
another engine."""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys

import configargparse
import duckdb
import psycopg
import pymysql

from dbtools.demo.build import build_demo
from dbtools.demo.cache import DEFAULT_SEED, default_demo_path
from dbtools.demo.duckdb_file import load_duckdb
from dbtools.demo.mysql import load_mysql
from dbtools.demo.postgres import load_postgres
from dbtools.errors import DatabaseToolError

# command -> (the loader, what its target is called, the variable naming the target)
_LOADERS = {
    "load-postgres": (
        load_postgres,
        "PostgreSQL URL or libpq string of the target database",
        "SQLSCOUT_DEMO_PG_DSN",
    ),
    "load-mysql": (load_mysql, "mysql://user:password@host:3306/database", "SQLSCOUT_DEMO_MYSQL_DSN"),
    "load-duckdb": (
        load_duckdb,
        "DuckDB database file to write (created when missing)",
        "SQLSCOUT_DEMO_DUCKDB_PATH",
    ),
}


def _positive_scale(text: str) -> float:
    try:
        scale = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if scale <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return scale


def build_parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser(prog="python -m dbtools.demo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="generate the demo SQLite database")
    build.add_argument(
        "--out",
        env_var="SQLSCOUT_DEMO_OUT",
        help="output file (default: the cached default demo database)",
    )
    build.add_argument(
        "--scale",
        type=_positive_scale,
        default=1.0,
        env_var="SQLSCOUT_DEMO_SCALE",
        help="multiplier of the fact tables' rows; 1 gives about 760k rows, 8 about 5M",
    )
    build.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        env_var="SQLSCOUT_DEMO_SEED",
        help="random seed; the same seed and scale give the same content",
    )
    for command, (_, target, variable) in _LOADERS.items():
        engine = command.removeprefix("load-")
        load = commands.add_parser(command, help=f"copy a demo SQLite database into {engine}")
        metavar = "PATH" if engine == "duckdb" else "DSN"
        load.add_argument("dsn", nargs="?", metavar=metavar, help=target)
        # A positional argument cannot read a variable: the option beside it does.
        load.add_argument(
            f"--{metavar.lower()}",
            dest="dsn_option",
            metavar=metavar,
            env_var=variable,
            help=f"the target, when {metavar} is not given",
        )
        load.add_argument(
            "--source",
            env_var="SQLSCOUT_DEMO_SOURCE",
            help="demo SQLite file to copy (default: the default demo database)",
        )
        load.add_argument(
            "--replace",
            action="store_true",
            env_var="SQLSCOUT_DEMO_REPLACE",
            help="drop demo tables that already exist in the target",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    try:
        if args.command == "build":
            if args.out is None and args.scale == 1.0 and args.seed == DEFAULT_SEED:
                print(default_demo_path())
                return 0
            if args.out is None:
                parser.error("--out is required with a non-default --scale or --seed")
            stats = build_demo(args.out, scale=args.scale, seed=args.seed)
            print(stats.path)
        else:
            load, _, variable = _LOADERS[args.command]
            dsn = args.dsn or args.dsn_option
            if not dsn:
                parser.error(f"give the target (or set {variable})")
            load(dsn, args.source or default_demo_path(), replace=args.replace)
    except (OSError, ValueError, DatabaseToolError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except sqlite3.Error as error:  # e.g. --out in a folder that does not exist
        print(f"error: cannot write {args.out}: {error}", file=sys.stderr)
        return 1
    except psycopg.Error as error:  # connection refused, bad credentials, missing privileges, ...
        print(f"error: PostgreSQL: {error}", file=sys.stderr)
        return 1
    except pymysql.Error as error:
        print(f"error: MySQL: {error.args[-1] if error.args else error}", file=sys.stderr)
        return 1
    except duckdb.Error as error:  # e.g. a file another process holds open
        print(f"error: DuckDB: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
