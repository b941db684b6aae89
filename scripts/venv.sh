# Sourced by serve.sh and test.sh: creates (once) and activates the project's virtual environment in .venv,
# then installs sqlscout with the given extras at the versions pinned in constraints.txt. The system
# interpreter is never written to (Debian refuses that anyway: externally-managed-environment).
# Usage: install_sqlscout EXTRAS "what the first install brings, and how long it usually takes"

say() { echo "sqlscout: $*" >&2; }

ensure_venv_module() {
    python3 -c 'import ensurepip, venv' 2>/dev/null && return
    # Debian ships venv and ensurepip apart from python3 itself.
    local apt=(apt-get)
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { say "python3 cannot create a virtual environment: run 'apt-get install python3-venv' as root"; exit 1; }
        apt=(sudo apt-get)
    fi
    say "installing Debian's python3-venv (python3 cannot create a virtual environment without it)"
    "${apt[@]}" update -qq
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq python3-venv >/dev/null
}

# Creates .venv with the pinned pip, once; later calls only activate it.
ensure_venv() {
    local first_run=$1
    if [ ! -x .venv/bin/python ]; then
        ensure_venv_module
        say "first run: creating the virtual environment .venv ($first_run)"
        python3 -m venv .venv
    fi
    local pip_pin
    pip_pin=$(grep '^pip==' constraints.txt)
    if [ "$(.venv/bin/python -m pip --version | cut -d' ' -f2)" != "${pip_pin#pip==}" ]; then
        say "installing $pip_pin into .venv"
        .venv/bin/python -m pip install -q --disable-pip-version-check "$pip_pin"
    fi
    export VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH"
}

install_sqlscout() {
    local extras=$1
    ensure_venv "then installing sqlscout${extras:+[$extras]} into it: $2"
    # Re-install only when the pins or the package metadata changed, or an extra is wanted that the last install
    # lacked; the extras installed before are kept, so serve.sh after test.sh installs nothing.
    local stamp=.venv/sqlscout-installed sum installed_sum="" installed_extras="" union
    sum=$(cat constraints.txt pyproject.toml | cksum | cut -d' ' -f1)
    [ -f "$stamp" ] && read -r installed_sum installed_extras <"$stamp"
    union=$extras
    if [ "$installed_sum" = "$sum" ]; then
        union=$(echo "$installed_extras,$extras" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -)
        [ "$union" = "$installed_extras" ] && return
    fi
    say "installing sqlscout${union:+[$union]} with the versions pinned in constraints.txt"
    python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".${union:+[$union]}" >&2
    echo "$sum $union" >"$stamp"
}
