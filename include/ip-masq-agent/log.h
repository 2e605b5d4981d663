// SPDX-License-Identifier: Apache-2.0
// Logging to stderr: levels, -v verbosity, and journald priority prefixes under systemd.
#pragma once

#include <string>
#include <string_view>

#include <sys/stat.h>

#include <fmt/format.h>

namespace ipmasq::log {

enum class Level { error = 3, warning = 4, info = 6, debug = 7 };

// Debug messages appear from this verbosity on (-v / --v).
void setVerbosity(int verbosity);
bool debugEnabled();

// Writes one line per message, whatever the message holds: see sanitizeLine.
void write(Level level, std::string_view message);

// The message as one line of printable text: newlines, other control bytes, C1
// controls, the Unicode line separators and invalid UTF-8 become \n, \r, \t or \xNN.
// Values from outside are already escaped with quoted()/escaped() when a message is
// built; this is the sink's guarantee, so that no message can end its own line.
std::string sanitizeLine(std::string_view message);

// Whether stderr is the journal: systemd sets JOURNAL_STREAM to "device:inode" of the
// stream it connected, and only a matching stderr is that stream (systemd.exec(5));
// a child that inherited the variable but writes elsewhere is not. `journalStream` is
// the variable's value (nullptr when unset), `stderrStat` fstat() of stderr.
bool isJournalStream(const char *journalStream, const struct stat &stderrStat);

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
