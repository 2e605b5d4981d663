#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# meson install script: installs the example config as the live config, only when there
# is none yet, so that a reinstall never overwrites the administrator's edits.
# Usage: install-config.sh SOURCE_CONFIG CONFIG_DIR   (honours DESTDIR)
set -eu
src=$1
dir=${DESTDIR:-}$2
dest=$dir/config.yaml
if [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
	echo "Would install $src to $dest unless it exists"
	exit 0
fi
mkdir -p "$dir"
if [ -e "$dest" ] || [ -L "$dest" ]; then
	echo "Keeping existing $dest (the example is in the documentation directory)"
	exit 0
fi
install -m 0644 "$src" "$dest"
echo "Installing $src to $dest"
