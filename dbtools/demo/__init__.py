"""The demo database: a deterministic, realistic multi-domain SQLite database (and its PostgreSQL loader)."""

from dbtools.demo.build import GENERATOR_VERSION, BuildStats, build_demo
from dbtools.demo.cache import default_demo_path

__all__ = ["GENERATOR_VERSION", "BuildStats", "build_demo", "default_demo_path"]
