"""The demo database: a deterministic, realistic multi-domain SQLite database (and its PostgreSQL loader)."""

from dbtools.demo.build import GENERATOR_VERSION, BuildStats, build_demo
from dbtools.demo.cache import cache_dir, default_demo_path

__all__ = ["GENERATOR_VERSION", "BuildStats", "build_demo", "cache_dir", "default_demo_path"]
