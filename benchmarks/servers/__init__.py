"""Throwaway database and SSH servers that the tests and benchmarks start on loopback, from Debian's binaries: not
part of the installed package."""
