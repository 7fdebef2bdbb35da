#!/usr/bin/env bash
# System packages the test suite needs beyond Python: a PostgreSQL server (the storage tests
# start one on loopback) and Chromium with its driver (the dashboard's browser tests).
# Idempotent: installs only what is missing. Needs root (or sudo) and Debian/Ubuntu's apt-get;
# elsewhere it says what to install and leaves the tests to skip with a reason.
set -euo pipefail

missing=()
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null; then
    missing+=(postgresql)
fi
if ! command -v chromium > /dev/null && ! command -v chromium-browser > /dev/null; then
    missing+=(chromium)
fi
if ! command -v chromedriver > /dev/null; then
    missing+=(chromium-driver)
fi
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

if ! command -v apt-get > /dev/null; then
    echo "system-deps: no apt-get here; install ${missing[*]} by hand (tests needing them skip)" >&2
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo > /dev/null; then
        sudo="sudo"
    else
        echo "system-deps: not root and no sudo; install ${missing[*]} by hand" >&2
        exit 0
    fi
fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" > /dev/null
