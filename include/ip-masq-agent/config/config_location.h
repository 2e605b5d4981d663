// SPDX-License-Identifier: Apache-2.0
// Where the config is (one file, or a directory of files merged) and the one path from its
// content to a LoadedConfig that every mode takes: the daemon, --once, --dry-run, --explain.
#pragma once

#include <string>
#include <vector>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// --config=FILE or --config-dir=DIR.
struct ConfigLocation {
	enum class Kind { file, directory };
	Kind kind = Kind::file;
	std::string path = kDefaultConfigPath;

	static ConfigLocation file(std::string path) { return {Kind::file, std::move(path)}; }
	static ConfigLocation directory(std::string path) { return {Kind::directory, std::move(path)}; }
	bool isDirectory() const { return kind == Kind::directory; }
	// The flag that names it, as the start-up log shows it: "--config=..." (escaped).
	std::string flag() const;
	bool operator==(const ConfigLocation &) const = default;
};

// One config file's bytes, and its path (which names it in every message).
struct ConfigFile {
	std::string path;
	std::string text;
	bool operator==(const ConfigFile &) const = default;
};

// The config as read: with --config one file, or none when it is absent; with
// --config-dir every matching file, in byte order of the names, or none (a missing or
// empty directory). No file means upstream's defaults.
struct ConfigContent {
	std::vector<ConfigFile> files;

	static ConfigContent absent() { return {}; }
	static ConfigContent single(std::string path, std::string text)
	{
		ConfigContent content;
		content.files.push_back({std::move(path), std::move(text)});
		return content;
	}
	bool operator==(const ConfigContent &) const = default;
};

// Read the location once, without the daemon's watch and write guard (--dry-run, --explain,
// --snat-usage; --once reads with the guard: ConfigSource::readSettled). A missing file or directory is no file; a directory is listed and bounded
// as config_dir.h says.
Result<ConfigContent> readConfigContent(const ConfigLocation &location);

// Parse every file, merge them (config_dir.h's rules; one file is taken as it is, none
// gives the defaults), then check the result as a whole (policy.h). The first bad file
// makes the whole config bad, and the error names it.
Result<LoadedConfig> loadConfigContent(const ConfigContent &content, const ConfigFlags &flags);

// readConfigContent + loadConfigContent: what --dry-run and --explain use.
Result<LoadedConfig> loadConfig(const ConfigLocation &location, const ConfigFlags &flags);

// Where a loaded config came from, for the logs and the dry-run header: the file, the
// directory with its files' names, or the built-in defaults and why.
std::string describeConfigOrigin(const ConfigLocation &location, const LoadedConfig &loaded);

} // namespace ipmasq
