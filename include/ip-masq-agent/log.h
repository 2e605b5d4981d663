// SPDX-License-Identifier: Apache-2.0
// Logging to stderr: levels, -v verbosity, and journald priority prefixes under systemd.
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace ipmasq::log {

enum class Level { error = 3, warning = 4, info = 6, debug = 7 };

// Debug messages appear from this verbosity on (-v / --v).
void setVerbosity(int verbosity);
bool debugEnabled();

void write(Level level, std::string_view message);

template<typename... Args>
void error(fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::error, fmt::format(format, std::forward<Args>(args)...));
}

template<typename... Args>
void warning(fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::warning, fmt::format(format, std::forward<Args>(args)...));
}

template<typename... Args>
void info(fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::info, fmt::format(format, std::forward<Args>(args)...));
}

template<typename... Args>
void debug(fmt::format_string<Args...> format, Args &&...args)
{
	if (debugEnabled())
		write(Level::debug, fmt::format(format, std::forward<Args>(args)...));
}

} // namespace ipmasq::log
