#!/usr/bin/env bash
# Installs everything the tests need (PostgreSQL, MariaDB and OpenSSH server binaries, clang and the aarch64 cross
# compiler that the C++ kernels are compiled with, sqlscout with the local engine and the test extra into .venv,
# pinned by constraints.txt), then runs lint and the whole test suite
# (`--fast`: only the fast tier, `-m "not slow"`; other arguments go to pytest). The suite starts and stops
# its own throwaway PostgreSQL, MariaDB and OpenSSH servers.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    echo "sqlscout: installing PostgreSQL server binaries (Debian package postgresql, about 30 s)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
    echo "sqlscout: installing MariaDB server binaries (Debian package mariadb-server, about a minute)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server mariadb-client >/dev/null
fi
if [ ! -x /usr/sbin/sshd ]; then
    echo "sqlscout: installing the OpenSSH server (Debian package openssh-server, about 20 s)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
fi
if ! command -v clang++ >/dev/null; then
    echo "sqlscout: installing clang, to check the C++ kernels compile with it (Debian packages clang and libomp-dev, about 20 s)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang libomp-dev >/dev/null
fi
if ! command -v aarch64-linux-gnu-g++ >/dev/null; then
    echo "sqlscout: installing the aarch64 cross compiler, to check the C++ kernels' Arm path compiles (Debian package g++-aarch64-linux-gnu, about 20 s)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu >/dev/null
fi

source scripts/venv.sh
install_sqlscout "local,test" "about 5 GB with the CUDA build of PyTorch on Linux; usually 5-10 minutes"
python -m ruff check .
python -m ruff format --check .
pytest_args=()
for arg in "$@"; do
    if [ "$arg" = "--fast" ]; then
        pytest_args+=(-m "not slow")
    else
        pytest_args+=("$arg")
    fi
done
python -m pytest ${pytest_args[@]+"${pytest_args[@]}"}
