#!/usr/bin/env bash
# System packages beyond pip, installed by `make install` where it can (root with apt-get):
#   bubblewrap       the math sandbox's strongest lane (without it: landlock/seccomp + rlimits,
#                    and the bubblewrap tests skip)
#   cmake, a C++ compiler   the alfworld extra builds parts of its engine
#   chromium         headless, for the episode viewer's browser tests (src/view.py; without it they skip)
# Elsewhere it says what is missing and how to get it, and carries on.
set -u
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(build-essential)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install: apt-get install ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; } \
      || echo "install: apt-get could not install ${need[*]}; install them by hand (see docs/environments/math_tool.md)"
  else
    echo "install: missing ${need[*]}; as root: apt-get install ${need[*]} (or your system's packages of the same name)." \
         "Without bubblewrap the math sandbox falls back to landlock/seccomp + rlimits and its bubblewrap tests skip."
  fi
fi
if command -v bwrap >/dev/null && ! bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all true 2>/dev/null; then
  echo "install: bwrap is installed but cannot create a sandbox here (user namespaces disabled?); the sandbox will fall back"
fi
exit 0
