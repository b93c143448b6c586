#!/usr/bin/env bash
# Installs kiln's build dependencies through apt. Idempotent: packages already
# present are left alone, and nothing runs when all of them are there.
# Debian 12 carries LLVM/MLIR 22 in its archive (bookworm-security); on Ubuntu
# 24.04 the script adds apt.llvm.org's repository for them first.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ lld python3
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libfmt-dev libgtest-dev libgmock-dev zlib1g-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all build dependencies are installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
if ! apt-cache show llvm-22-dev >/dev/null 2>&1; then
  # Not in this distribution's archive (Ubuntu 24.04): use apt.llvm.org.
  . /etc/os-release
  codename="${VERSION_CODENAME:-}"
  [ -n "$codename" ] || { echo "setup: cannot tell the distribution's codename" >&2; exit 1; }
  $SUDO apt-get install -y -q ca-certificates wget gnupg
  wget -qO- https://apt.llvm.org/llvm-snapshot.gpg.key |
    $SUDO gpg --dearmor --yes -o /usr/share/keyrings/llvm-archive-keyring.gpg
  echo "deb [signed-by=/usr/share/keyrings/llvm-archive-keyring.gpg] http://apt.llvm.org/${codename}/ llvm-toolchain-${codename}-22 main" |
    $SUDO tee /etc/apt/sources.list.d/llvm-22.list >/dev/null
  $SUDO apt-get update -q
fi
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
